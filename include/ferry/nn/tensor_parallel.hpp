#pragma once
// nn::ColumnParallelLinear and nn::RowParallelLinear: Megatron-LM's tensor-parallel linear layers
// along one axis of a mesh, built on the mesh ops (mesh/mesh_ops.hpp) and redistribute. A
// column-parallel layer keeps its weight's columns cut across the axis and needs no
// communication; a row-parallel layer keeps its rows cut, takes activations cut along their last
// dim (the column-parallel layer's output) and sums the partial products with one all-reduce.
// Column then row is Megatron's MLP: one all-reduce forward. Megatron's attention block built
// from them is nn::ParallelSelfAttention (nn/parallel_attention.hpp); the gradients of their
// parameters come from nn::value_and_grad over mesh arrays (nn/mesh_grad.hpp).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/moved_from.hpp"
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
  /// The layer's own parameter arrays, in parameters() order: what an optimizer overwrites in
  /// place with their gradients (`opt.step(layer.parameter_slots(), grads)`, see
  /// optim::Optimizer's mesh step). Pointers into the layer: valid while it lives and is not
  /// moved. Never throws but std::bad_alloc.
  std::vector<MeshArray<float>*> parameter_slots() {
    std::vector<MeshArray<float>*> out{&weight_};
    if (bias_.valid()) out.push_back(&bias_);
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

  /// Throws, as the layer: InvalidArgument for a layer moved from, an empty or unplaced x or
  /// one on another mesh, ShapeError for a rank below 2 or a last dim other than in_features,
  /// PlacementError when x is not placed `want` along the layer's axis (naming the
  /// redistribute that makes it so).
  void check_input(const MeshArray<float>& x, const ferry::Placement& want,
                   std::string_view role) const {
    if (moved_.moved_from()) {  // its mesh and parameters went with it
      ferry::detail::fail<InvalidArgument>(name_, "was moved from: call the layer it was moved "
                                                  "into");
    }
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
  ferry::detail::MovedFromMark moved_;
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
  /// them). Throws, at the call: InvalidArgument for a layer moved from, an empty or unplaced
  /// x or one on another mesh; ShapeError for a rank below 2 or another last size;
  /// PlacementError when x is not Replicate along the axis, or matmul's PlacementError for
  /// another axis.
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

}  // namespace ferry::nn
