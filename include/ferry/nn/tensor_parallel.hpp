#pragma once
// nn::ColumnParallelLinear and nn::RowParallelLinear: Megatron-LM's tensor-parallel linear layers
// along one axis of a mesh, built on the mesh ops (mesh/mesh_ops.hpp) and redistribute. A
// column-parallel layer keeps its weight's columns cut across the axis and needs no
// communication; a row-parallel layer keeps its rows cut, takes activations cut along their last
// dim (the column-parallel layer's output) and sums the partial products with one all-reduce.
// Column then row is Megatron's MLP: one all-reduce forward. nn::ParallelSelfAttention is
// Megatron's attention block the same way: column-parallel query, key and value projections (each
// device whole heads), attention per device, a row-parallel output projection.
//
// And nn::value_and_grad over mesh-array parameters: the gradient of each, placed as the
// parameter is. A Replicate axis's copies are one value, so their gradients add (Replicate
// transposes into Partial(sum)): each is all-reduced along its Replicate axes, which keeps the
// copies equal under any optimizer.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/grad.hpp"
#include "ferry/core/error.hpp"
#include "ferry/host_array.hpp"
#include "ferry/mesh/distribute.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_ops.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/linear.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/attention.hpp"

namespace ferry::nn {

namespace detail {

/// A tensor-parallel layer's parts on the host: the weight (in, out), the transpose of the
/// (out, in) weight nn::Linear(in, out, device, options) starts with, and its bias (out), drawn
/// from the same stream in the same order, so both layers start as one.
struct ParallelInit {
  HostArray<float> weight;
  HostArray<float> bias;
};

inline ParallelInit parallel_init(std::string_view op, std::int64_t in, std::int64_t out,
                                  const LinearOptions& options) {
  if (in < 0 || out < 0) {
    ferry::detail::fail<InvalidArgument>(op, "sizes must not be negative, got in_features ", in,
                                         " and out_features ", out);
  }
  const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
  SplitMix64 gen(options.seed ? *options.seed : next_seed());
  std::vector<float> w;  // (out, in), as Linear draws it
  append_uniform(w, static_cast<std::size_t>(in * out), -bound, bound, gen);
  ParallelInit init{HostArray<float>(Shape{in, out}), HostArray<float>(Shape{out})};
  auto t = init.weight.data();
  for (std::int64_t o = 0; o < out; ++o) {
    for (std::int64_t i = 0; i < in; ++i) {
      t[static_cast<std::size_t>(i * out + o)] = w[static_cast<std::size_t>(o * in + i)];
    }
  }
  if (options.bias) {
    std::vector<float> b;
    append_uniform(b, static_cast<std::size_t>(out), -bound, bound, gen);
    std::copy(b.begin(), b.end(), init.bias.data().begin());
  }
  return init;
}

/// Throws InvalidArgument, as `op`, unless `axis` is an axis of `mesh`.
inline void check_parallel_axis(std::string_view op, const Mesh& mesh, int axis) {
  const auto rank = static_cast<int>(mesh.shape().rank());
  if (axis < 0 || axis >= rank) {
    ferry::detail::fail<InvalidArgument>(op, "axis ", axis, " is not an axis of mesh ",
                                         mesh.spec().name, " ", mesh.shape().to_string(),
                                         " (give 0..", rank - 1, ")");
  }
}

/// One placement per mesh axis: `p` along `axis`, Replicate along the others.
inline Placements along_axis(const Mesh& mesh, int axis, const ferry::Placement& p) {
  Placements ps(mesh.shape().rank(), Replicate{});
  ps[static_cast<std::size_t>(axis)] = p;
  return ps;
}

/// The layers' shared part: sizes, mesh and axis, the weight and the bias as mesh arrays.
class ParallelLinear {
 public:
  /// The sizes, whether there is a bias, the mesh and the axis the layer is cut along; never
  /// throw.
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  bool has_bias() const noexcept { return bias_.valid(); }
  const Mesh& mesh() const noexcept { return mesh_; }
  int axis() const noexcept { return axis_; }
  /// The weight, (in_features, out_features), placed as the layer says. Never throws.
  const MeshArray<float>& weight() const noexcept { return weight_; }
  /// The bias, (out_features). Throws InvalidArgument naming the layer for one made without.
  const MeshArray<float>& bias() const {
    if (!bias_.valid()) ferry::detail::fail<InvalidArgument>(name_, "this layer has no bias");
    return bias_;
  }
  /// The weight, then the bias when there is one: handles to the layer's own shards, what
  /// nn::value_and_grad(params, loss_fn) differentiates. Never throws but std::bad_alloc.
  std::vector<MeshArray<float>> parameters() const {
    std::vector<MeshArray<float>> out{weight_};
    if (bias_.valid()) out.push_back(bias_);
    return out;
  }

 protected:
  ParallelLinear(std::string_view name, std::int64_t in, std::int64_t out, const Mesh& mesh,
                 int axis, const LinearOptions& options, const ferry::Placement& weight_placement,
                 const ferry::Placement& bias_placement)
      : name_(name), in_(in), out_(out), mesh_(mesh), axis_(axis) {
    check_parallel_axis(name, mesh, axis);
    ParallelInit init = parallel_init(name, in, out, options);
    weight_ = ferry::distribute(init.weight, mesh, along_axis(mesh, axis, weight_placement));
    if (options.bias)
      bias_ = ferry::distribute(init.bias, mesh, along_axis(mesh, axis, bias_placement));
  }

  /// A layer of given parameters: `weight` (in, out) and, when given, `bias` (out). Throws
  /// InvalidArgument, as `name`, for an axis the mesh lacks; ShapeError for a weight not of rank
  /// 2 or a bias not of (out).
  ParallelLinear(std::string_view name, const HostArray<float>& weight,
                 const std::optional<HostArray<float>>& bias, const Mesh& mesh, int axis,
                 const ferry::Placement& weight_placement, const ferry::Placement& bias_placement)
      : name_(name), mesh_(mesh), axis_(axis) {
    check_parallel_axis(name, mesh, axis);
    const Shape& ws = weight.shape();
    if (ws.rank() != 2) {
      ferry::detail::fail<ShapeError>(name, "weight ", ws, " is not (in_features, out_features)");
    }
    in_ = ws.dims()[0];
    out_ = ws.dims()[1];
    if (bias && !(bias->shape() == Shape{out_})) {
      ferry::detail::fail<ShapeError>(name, "bias ", bias->shape(), " is not (out_features) of ",
                                      "weight ", ws);
    }
    weight_ = ferry::distribute(weight, mesh, along_axis(mesh, axis, weight_placement));
    if (bias) bias_ = ferry::distribute(*bias, mesh, along_axis(mesh, axis, bias_placement));
  }

  /// Throws, as the layer: InvalidArgument for an empty or unplaced x or one on another mesh,
  /// ShapeError for a rank below 2 or a last dim other than in_features, PlacementError when x
  /// is not placed `want` along the layer's axis (naming the redistribute that makes it so).
  void check_input(const MeshArray<float>& x, const ferry::Placement& want,
                   std::string_view role) const {
    if (!x.valid()) ferry::detail::fail<InvalidArgument>(name_, "got an empty mesh array");
    if (!x.placed()) {
      ferry::detail::fail<InvalidArgument>(
          name_,
          "the input has no global view (a collective's result, or from_shards without "
          "placements): give it placements with MeshArray::from_shards(mesh, shards, "
          "global_shape, placements)");
    }
    const Mesh other = x.mesh();
    if (!(other == mesh_)) {
      ferry::detail::fail<InvalidArgument>(
          name_, "the input lives on mesh ", other.spec().name, " ", other.shape().to_string(),
          ", the parameters on mesh ", mesh_.spec().name, " ", mesh_.shape().to_string());
    }
    const Shape& s = x.global_shape();
    if (s.rank() < 2 || s.dims()[s.rank() - 1] != in_) {
      ferry::detail::fail<ShapeError>(name_, "input ", s, " is not of rank >= 2 ending in ",
                                      "in_features ", in_, " (weight ", weight_.global_shape(),
                                      ")");
    }
    Placements want_all = x.placements();
    ferry::Placement normalized = want;
    if (auto* sh = std::get_if<Shard>(&normalized); sh != nullptr && sh->dim < 0) {
      sh->dim += static_cast<int>(s.rank());
    }
    const auto a = static_cast<std::size_t>(axis_);
    if (want_all[a] != normalized) {
      want_all[a] = normalized;
      ferry::detail::fail<PlacementError>(
          name_, "the input is placed ", ferry::detail::placements_text(x.placements()),
          "; along mesh axis ", axis_, " it must be ", ferry::detail::placement_text(want), " (",
          role, "): call redistribute(x, ", ferry::detail::placements_text(want_all), ") first");
    }
  }

  /// `y` with the bias shard of each device added to its shard (placements kept).
  MeshArray<float> with_bias(const MeshArray<float>& y) const {
    if (!bias_.valid()) return y;
    std::vector<DeviceArray<float>> out;
    out.reserve(static_cast<std::size_t>(y.size()));
    for (std::int64_t i = 0; i < y.size(); ++i) out.push_back(y.shard(i) + bias_.shard(i));
    return MeshArray<float>::from_shards(mesh_, std::move(out), y.global_shape(), y.placements());
  }

  std::string_view name_;
  std::int64_t in_ = 0;
  std::int64_t out_ = 0;
  Mesh mesh_;
  int axis_;
  MeshArray<float> weight_;
  MeshArray<float> bias_;
};

}  // namespace detail

/// Megatron's column-parallel linear layer along mesh axis `axis`: y = x W + b with W (in, out)
/// placed Shard(1) along the axis (each device holds (in, out/n) of its columns, array_split's
/// sizes when out does not divide) and b (out) Shard(0), Replicate along the other mesh axes.
/// Starts as nn::Linear(in, out, device, options) does, W being the transpose of Linear's (out,
/// in) weight, so both compute one function. x Replicate along the axis gives y Shard(-1) along
/// it, with no communication. Movable and copyable (copies share the parameters' buffers).
class ColumnParallelLinear : public detail::ParallelLinear {
 public:
  /// Draws the parameters on the host and imports each device's block over its own host link.
  /// Throws InvalidArgument naming ColumnParallelLinear for a negative size or an axis the mesh
  /// lacks, and what distribute throws.
  ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features, const Mesh& mesh,
                       int axis = 0, LinearOptions options = {})
      : ParallelLinear("ColumnParallelLinear", in_features, out_features, mesh, axis, options,
                       Shard{1}, Shard{0}) {}

  /// A layer of given parameters (a checkpoint's, or another layer's): `weight` (in_features,
  /// out_features), `bias` (out_features) or none, placed as above, each device importing its
  /// own block. Throws InvalidArgument naming ColumnParallelLinear for an axis the mesh lacks,
  /// ShapeError naming it for a weight not of rank 2 or a bias not of (out_features), and what
  /// distribute throws.
  ColumnParallelLinear(const HostArray<float>& weight, const std::optional<HostArray<float>>& bias,
                       const Mesh& mesh, int axis = 0)
      : ParallelLinear("ColumnParallelLinear", weight, bias, mesh, axis, Shard{1}, Shard{0}) {}

  /// x (..., in_features), Replicate along the axis, times each device's columns of W, plus its
  /// part of b: (..., out_features), Shard(-1) along the axis (other axes as matmul places
  /// them). Throws, at the call: InvalidArgument for an empty or unplaced x or one on another
  /// mesh; ShapeError for a rank below 2 or another last size; PlacementError when x is not
  /// Replicate along the axis, or matmul's PlacementError for another axis.
  MeshArray<float> operator()(const MeshArray<float>& x) const {
    check_input(x, Replicate{}, "the input of a column-parallel layer");
    return with_bias(ferry::matmul(x, weight_));
  }
};

/// Megatron's row-parallel linear layer along mesh axis `axis`: y = x W + b with W (in, out)
/// placed Shard(0) along the axis (each device holds (in/n, out) of its rows) and b (out)
/// Replicate. Starts as nn::Linear(in, out, device, options) does (W transposed). x Shard(-1)
/// along the axis (a column-parallel layer's output) gives the partial products, Partial(sum),
/// which one all-reduce along the axis (redistribute) makes Replicate; then b is added on each
/// device. Movable and copyable (copies share the parameters' buffers).
class RowParallelLinear : public detail::ParallelLinear {
 public:
  /// Throws like ColumnParallelLinear's constructor, naming RowParallelLinear.
  RowParallelLinear(std::int64_t in_features, std::int64_t out_features, const Mesh& mesh,
                    int axis = 0, LinearOptions options = {})
      : ParallelLinear("RowParallelLinear", in_features, out_features, mesh, axis, options,
                       Shard{0}, Replicate{}) {}

  /// A layer of given parameters; throws like ColumnParallelLinear's, naming
  /// RowParallelLinear.
  RowParallelLinear(const HostArray<float>& weight, const std::optional<HostArray<float>>& bias,
                    const Mesh& mesh, int axis = 0)
      : ParallelLinear("RowParallelLinear", weight, bias, mesh, axis, Shard{0}, Replicate{}) {}

  /// x (..., in_features), Shard(-1) along the axis, times each device's rows of W, summed by
  /// one all-reduce along the axis, plus b: (..., out_features), Replicate along the axis.
  /// Returns at once. Throws like ColumnParallelLinear's, PlacementError when x is not
  /// Shard(-1) along the axis.
  MeshArray<float> operator()(const MeshArray<float>& x) const {
    check_input(x, Shard{-1}, "the output of a column-parallel layer");
    const MeshArray<float> partial = ferry::matmul(x, weight_);
    Placements reduced = partial.placements();
    reduced[static_cast<std::size_t>(axis_)] = Replicate{};
    return with_bias(ferry::redistribute(partial, std::move(reduced)));
  }
};

/// How a ParallelSelfAttention is made besides its sizes, mesh and axis.
struct ParallelSelfAttentionOptions {
  /// Whether the projections have biases.
  bool bias = true;
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// Megatron's tensor-parallel self-attention along mesh axis `axis` of n devices: the query,
/// key and value projections "q_proj", "k_proj", "v_proj" are ColumnParallelLinear (embed_dim,
/// embed_dim) layers, so each device computes num_heads / n whole heads (its columns of each);
/// scaled_dot_product_attention runs per device on its heads; the output projection
/// "out_proj" is a RowParallelLinear, whose one all-reduce along the axis is the forward's only
/// communication. Starts as nn::MultiheadAttention(embed_dim, num_heads, device, {.bias, .seed})
/// does with the same seed (q_proj's weight the transpose of rows [0, E) of its
/// in_proj_weight, k_proj's of [E, 2E), v_proj's of [2E, 3E), out_proj's the transpose of its
/// out_proj.weight, biases zeros), so both compute one function. Inputs and output are batch
/// first, (N, L, E). Movable and copyable (copies share the parameters' buffers).
class ParallelSelfAttention {
 public:
  /// Draws the parameters on the host and imports each device's block over its own host link.
  /// Throws InvalidArgument naming ParallelSelfAttention for an embed_dim below 1, num_heads
  /// below 1 or not dividing embed_dim, an axis the mesh lacks, or num_heads not dividing by the
  /// axis's devices (a device holds whole heads); and what distribute throws.
  ParallelSelfAttention(std::int64_t embed_dim, std::int64_t num_heads, const Mesh& mesh,
                        int axis = 0, ParallelSelfAttentionOptions options = {})
      : ParallelSelfAttention(drawn(embed_dim, num_heads, mesh, axis, options), mesh, axis) {}

  /// The sizes, the mesh and the axis; never throw.
  std::int64_t embed_dim() const noexcept { return embed_; }
  std::int64_t num_heads() const noexcept { return heads_; }
  std::int64_t head_dim() const noexcept { return embed_ / heads_; }
  const Mesh& mesh() const noexcept { return q_proj_.mesh(); }
  int axis() const noexcept { return q_proj_.axis(); }
  /// The projections. Never throw.
  const ColumnParallelLinear& q_proj() const noexcept { return q_proj_; }
  const ColumnParallelLinear& k_proj() const noexcept { return k_proj_; }
  const ColumnParallelLinear& v_proj() const noexcept { return v_proj_; }
  const RowParallelLinear& out_proj() const noexcept { return out_proj_; }

  /// q_proj's, k_proj's, v_proj's, then out_proj's parameters (weight, then bias when there
  /// is one): what nn::value_and_grad(params, loss_fn) differentiates. Never throws but
  /// std::bad_alloc.
  std::vector<MeshArray<float>> parameters() const {
    std::vector<MeshArray<float>> out;
    const detail::ParallelLinear* layers[] = {&q_proj_, &k_proj_, &v_proj_, &out_proj_};
    for (const detail::ParallelLinear* l : layers) {
      for (MeshArray<float>& p : l->parameters()) out.push_back(std::move(p));
    }
    return out;
  }

  /// Self-attention of x (N, L, embed_dim), Replicate along the layer's axis and Replicate or
  /// Shard(0) (the batch) along the others: (N, L, embed_dim), placed as x. `options.causal`
  /// and `options.scale` apply to every head (scale 1/sqrt(head_dim) when absent). Returns at
  /// once. Throws, at the call: InvalidArgument naming ParallelSelfAttention for an empty or
  /// unplaced x, one on another mesh, or a mask (it would live on one device; the heads are
  /// on n); ShapeError naming it for x not (N, L, embed_dim); PlacementError naming it for x
  /// placed otherwise (attention needs each device to hold whole sequences and every feature),
  /// with the redistribute that makes it work.
  MeshArray<float> operator()(const MeshArray<float>& x,
                              const AttentionOptions<float>& options = {}) const {
    check_input(x, options);
    const MeshArray<float> q = split_heads(q_proj_(x));
    const MeshArray<float> k = split_heads(k_proj_(x));
    const MeshArray<float> v = split_heads(v_proj_(x));
    // Each device's heads attend on their own: q, k and v are cut alike, along the heads.
    std::vector<DeviceArray<float>> heads;
    heads.reserve(static_cast<std::size_t>(q.size()));
    for (std::int64_t i = 0; i < q.size(); ++i) {
      heads.push_back(ferry::scaled_dot_product_attention(q.shard(i), k.shard(i), v.shard(i),
                                                          options));
    }
    const MeshArray<float> att =
        MeshArray<float>::from_shards(q.mesh(), std::move(heads), q.global_shape(), q.placements());
    return out_proj_(merge_heads(att));
  }

 private:
  static constexpr std::string_view kName = "ParallelSelfAttention";

  /// The four layers' parameters on the host, drawn as nn::MultiheadAttention draws its own.
  struct Drawn {
    std::int64_t embed;
    std::int64_t heads;
    HostArray<float> q, k, v, out;  // (in, out) each
    std::optional<HostArray<float>> bias;  // zeros (embed), shared by the four, when biased
  };

  static Drawn drawn(std::int64_t embed, std::int64_t heads, const Mesh& mesh, int axis,
                     const ParallelSelfAttentionOptions& options) {
    if (embed < 1 || heads < 1 || embed % heads != 0) {
      ferry::detail::fail<InvalidArgument>(
          kName, "needs embed_dim >= 1 divisible by num_heads >= 1, got ", embed, " and ", heads);
    }
    detail::check_parallel_axis(kName, mesh, axis);
    const std::int64_t n = mesh.shape().sizes()[static_cast<std::size_t>(axis)];
    if (heads % n != 0) {
      ferry::detail::fail<InvalidArgument>(kName, "num_heads ", heads, " does not divide by the ",
                                           n, " devices of mesh axis ", axis, " of mesh ",
                                           mesh.spec().name, " ", mesh.shape().to_string(),
                                           "; each device computes whole heads");
    }
    // MultiheadAttention's stream: in_proj_weight (3E, E) xavier-uniform, then out_proj's seed.
    detail::SplitMix64 gen(options.seed ? *options.seed : next_seed());
    const double bound = std::sqrt(6.0 / static_cast<double>(4 * embed));
    std::vector<float> w;
    detail::append_uniform(w, static_cast<std::size_t>(3 * embed * embed), -bound, bound, gen);
    // Rows [part E, (part + 1) E) of the (3E, E) stack, transposed to (in, out).
    const auto part = [&](std::int64_t p) {
      HostArray<float> t(Shape{embed, embed});
      for (std::int64_t o = 0; o < embed; ++o) {
        for (std::int64_t i = 0; i < embed; ++i) {
          t.data()[static_cast<std::size_t>(i * embed + o)] =
              w[static_cast<std::size_t>((p * embed + o) * embed + i)];
        }
      }
      return t;
    };
    detail::ParallelInit out = detail::parallel_init(kName, embed, embed, {.bias = false, .seed = gen.next()});
    std::optional<HostArray<float>> bias;
    if (options.bias) bias = HostArray<float>(Shape{embed});  // zeros, as PyTorch starts them
    return {embed, heads, part(0), part(1), part(2), std::move(out.weight), std::move(bias)};
  }

  ParallelSelfAttention(const Drawn& d, const Mesh& mesh, int axis)
      : embed_(d.embed),
        heads_(d.heads),
        q_proj_(d.q, d.bias, mesh, axis),
        k_proj_(d.k, d.bias, mesh, axis),
        v_proj_(d.v, d.bias, mesh, axis),
        out_proj_(d.out, d.bias, mesh, axis) {}

  void check_input(const MeshArray<float>& x, const AttentionOptions<float>& options) const {
    if (!x.valid()) ferry::detail::fail<InvalidArgument>(kName, "got an empty mesh array");
    if (!x.placed()) {
      ferry::detail::fail<InvalidArgument>(
          kName,
          "the input has no global view (a collective's result, or from_shards without "
          "placements): give it placements with MeshArray::from_shards(mesh, shards, "
          "global_shape, placements)");
    }
    const Mesh other = x.mesh();
    if (!(other == mesh())) {
      ferry::detail::fail<InvalidArgument>(
          kName, "the input lives on mesh ", other.spec().name, " ", other.shape().to_string(),
          ", the parameters on mesh ", mesh().spec().name, " ", mesh().shape().to_string());
    }
    if (options.mask.valid()) {
      ferry::detail::fail<InvalidArgument>(
          kName, "takes no mask: it would live on one device, the heads on ",
          mesh().shape().sizes()[static_cast<std::size_t>(axis())],
          "; use options.causal, or nn::MultiheadAttention on one device");
    }
    const Shape& s = x.global_shape();
    if (s.rank() != 3 || s.dims()[2] != embed_) {
      ferry::detail::fail<ShapeError>(kName, "input ", s, " is not (N, L, embed_dim ", embed_,
                                      ")");
    }
    const Placements& ps = x.placements();
    Placements fix = ps;
    bool bad = false;
    for (std::size_t a = 0; a < ps.size(); ++a) {
      const bool ok = a == static_cast<std::size_t>(axis())
                          ? std::holds_alternative<Replicate>(ps[a])
                          : std::holds_alternative<Replicate>(ps[a]) || ps[a] == ferry::Placement{Shard{0}};
      if (!ok) {
        fix[a] = Replicate{};
        bad = true;
      }
    }
    if (bad) {
      ferry::detail::fail<PlacementError>(
          kName, "the input is placed ", ferry::detail::placements_text(ps),
          "; it must be Replicate along the layer's mesh axis ", axis(),
          " and Replicate or Shard(0) (the batch) along the others, so each device holds whole "
          "sequences of every feature: call redistribute(x, ",
          ferry::detail::placements_text(fix), ") first");
    }
  }

  /// (N, L, E) Shard(2) along the axis to (N, num_heads, L, head_dim) Shard(1): each device's
  /// columns are whole heads, so the reshape runs shard by shard.
  MeshArray<float> split_heads(const MeshArray<float>& y) const {
    const Shape& s = y.global_shape();
    return ferry::transpose(
        ferry::reshape(y, Shape{s.dims()[0], s.dims()[1], heads_, embed_ / heads_}), {0, 2, 1, 3});
  }

  /// The inverse of split_heads: (N, L, E) Shard(2), the row-parallel layer's input.
  MeshArray<float> merge_heads(const MeshArray<float>& y) const {
    const Shape& s = y.global_shape();
    return ferry::reshape(ferry::transpose(y, {0, 2, 1, 3}), Shape{s.dims()[0], s.dims()[2], embed_});
  }

  std::int64_t embed_;
  std::int64_t heads_;
  ColumnParallelLinear q_proj_;
  ColumnParallelLinear k_proj_;
  ColumnParallelLinear v_proj_;
  RowParallelLinear out_proj_;
};

/// nn::value_and_grad(params, loss_fn) as a callable: see nn::value_and_grad (mesh parameters).
template <class LossFn>
class MeshValueAndGrad {
 public:
  MeshValueAndGrad(std::vector<MeshArray<float>> params, LossFn loss_fn)
      : params_(std::move(params)), loss_fn_(std::move(loss_fn)) {
    constexpr std::string_view op = "nn::value_and_grad(mesh parameters)";
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const MeshArray<float>& p = params_[k];
      if (!p.valid()) ferry::detail::fail<InvalidArgument>(op, "parameter ", k, " is empty");
      if (!p.placed()) {
        ferry::detail::fail<InvalidArgument>(op, "parameter ", k,
                                             " has no global view (placements); give it some "
                                             "with MeshArray::from_shards or distribute");
      }
      for (std::size_t x = 0; x < p.placements().size(); ++x) {
        if (ferry::detail::is_partial(p.placements()[x])) {
          ferry::detail::fail<InvalidArgument>(
              op, "parameter ", k, " is placed ", ferry::detail::placements_text(p.placements()),
              "; a parameter is Shard or Replicate on each mesh axis, not ",
              ferry::detail::placement_text(p.placements()[x]), " (mesh axis ", x, ")");
        }
      }
    }
  }

  /// loss_fn(args...)'s value and one gradient per parameter: see nn::value_and_grad.
  template <class... Args>
  std::pair<DeviceArray<float>, std::vector<MeshArray<float>>> operator()(
      const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad(mesh parameters)";
    std::vector<ferry::detail::Step*> vars;
    for (const MeshArray<float>& p : params_) {
      for (const DeviceArray<float>& s : p.shards()) vars.push_back(&ferry::detail::step_of(op, s));
    }
    auto d = ferry::detail::differentiate(
        op, std::move(vars), [&] { return loss_fn_(args...); }, nullptr);
    std::vector<MeshArray<float>> grads;
    grads.reserve(params_.size());
    std::size_t next = 0;
    for (const MeshArray<float>& p : params_) {
      std::vector<DeviceArray<float>> shards;
      shards.reserve(static_cast<std::size_t>(p.size()));
      Placements summed = p.placements();
      bool replicated = false;
      for (auto& pl : summed) {
        if (std::holds_alternative<Replicate>(pl)) {
          pl = Partial{};
          replicated = true;
        }
      }
      for (std::int64_t i = 0; i < p.size(); ++i, ++next) {
        shards.push_back(
            ferry::detail::gradient_for<float>(*d.vars[next], std::move(d.grads[next])));
      }
      MeshArray<float> g =
          MeshArray<float>::from_shards(p.mesh(), std::move(shards), p.global_shape(), summed);
      grads.push_back(replicated ? ferry::redistribute(g, p.placements()) : std::move(g));
    }
    return {std::move(d.value), std::move(grads)};
  }

 private:
  std::vector<MeshArray<float>> params_;
  LossFn loss_fn_;
};

/// A callable that returns `loss_fn`'s value and its gradient with respect to the global value
/// of each of `params` (mesh arrays placed Shard or Replicate on every axis: a tensor-parallel
/// layer's parameters(), or any placed array `loss_fn` uses, an input among them): called with
/// loss_fn's arguments, it runs loss_fn (which uses the arrays as `params` holds them: the
/// layers, held by reference, must not change their parameters in between) and returns
/// std::pair{the value (rank 0, on the device loss_fn put it), one gradient per parameter,
/// placed as the parameter is}. A Shard axis's gradient shards are the gradients of the shards;
/// along a Replicate axis the copies are one value, so their gradients are summed by an
/// all-reduce along that axis (Replicate's transpose is Partial(sum), made Replicate again), and
/// every copy gets the same gradient. Returns at once. Throws, at the construction,
/// InvalidArgument naming nn::value_and_grad(mesh parameters) for an empty or unplaced parameter
/// or one with a Partial axis; at the call what ferry::value_and_grad throws (InvalidArgument for
/// a value that is not a scalar) and what loss_fn throws.
template <class LossFn>
MeshValueAndGrad<std::decay_t<LossFn>> value_and_grad(std::vector<MeshArray<float>> params,
                                                      LossFn&& loss_fn) {
  return MeshValueAndGrad<std::decay_t<LossFn>>(std::move(params), std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
