#pragma once
// nn::ParallelSelfAttention: Megatron-LM's tensor-parallel attention block along one axis of a
// mesh. Column-parallel query, key and value projections give each device whole heads,
// attention runs per device on its own heads, and a row-parallel output projection sums the
// parts with the forward's one all-reduce. It is its own file because it is a layer built from
// the linear layers of nn/tensor_parallel.hpp, not one of them: it adds head splitting and the
// per-device attention, and starts as nn::MultiheadAttention does.

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
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_ops.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/tensor_parallel.hpp"
#include "ferry/ops/attention.hpp"

namespace ferry::nn {

/// How a ParallelSelfAttention is made besides its sizes, mesh and axis.
struct ParallelSelfAttentionOptions {
  /// Whether the projections have biases.
  bool bias = true;
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// What a ParallelSelfAttention call takes besides its inputs: AttentionOptions, with the mask a
/// mesh array on the layer's mesh.
struct ParallelAttentionOptions {
  /// Added to the scores (N, num_heads, L, S) it broadcasts to, as nn::MultiheadAttention adds
  /// its options.mask: (L, S) or (N, 1, 1, S) (-inf: PyTorch's key_padding_mask) for every
  /// head, (num_heads, L, S) or (N, num_heads, L, S) per head. Placed, along the layer's axis,
  /// Shard on its head dim when it has one of size num_heads (each device adds its heads' part)
  /// and Replicate otherwise; along another axis Shard(0) where that axis cuts the batch and the
  /// mask has one of size N, Replicate otherwise. Absent when empty.
  MeshArray<float> mask{};
  /// Query i sees keys j <= i only (the mask aligned to the top left, as AttentionOptions).
  bool causal = false;
  /// The factor of q k^T; 1 / sqrt(head_dim) when absent.
  std::optional<double> scale{};
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
/// first, (N, L, E); called as `attn(x)`, `attn(x, {.mask = m, .causal = true})` or, for
/// cross-attention, `attn(query, key, value, options)`, as nn::MultiheadAttention is. Movable
/// and copyable (copies share the parameters' buffers).
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

  /// The four layers' own parameter arrays, in parameters() order: what an optimizer steps in
  /// place (`opt.step(attn.parameter_slots(), grads)`). Pointers into the block: valid while it
  /// lives and is not moved. Never throws but std::bad_alloc.
  std::vector<MeshArray<float>*> parameter_slots() {
    std::vector<MeshArray<float>*> out;
    detail::ParallelLinear* layers[] = {&q_proj_, &k_proj_, &v_proj_, &out_proj_};
    for (detail::ParallelLinear* l : layers) {
      for (MeshArray<float>* p : l->parameter_slots()) out.push_back(p);
    }
    return out;
  }

  /// Self-attention of x (N, L, embed_dim): the three-input call with x as query, key and
  /// value. Throws like it, naming x "the input".
  MeshArray<float> operator()(const MeshArray<float>& x,
                              const ParallelAttentionOptions& options = {}) const {
    return attend(x, x, x, options, true);
  }

  /// Attention of query (N, L, embed_dim) over key and value (N, S, embed_dim): (N, L,
  /// embed_dim), placed as the query. Each input is Replicate along the layer's axis and
  /// Replicate or Shard(0) (the batch) along the others, key and value placed as the query.
  /// `options.mask`, `causal` and `scale` mean what nn::MultiheadAttention's do (scale
  /// 1/sqrt(head_dim) when absent); the mask is placed as ParallelAttentionOptions says, so
  /// each device adds its own block to its heads' scores and the forward's one all-reduce stays
  /// its only communication. Returns at once. Throws, at the call: InvalidArgument naming
  /// ParallelSelfAttention for a block moved from, an empty or unplaced input or mask, or one
  /// on another mesh;
  /// ShapeError naming it for inputs not (N, L, embed_dim) and (N, S, embed_dim) of one batch,
  /// key and value of two lengths, or a mask that does not broadcast to the scores (N,
  /// num_heads, L, S); PlacementError naming it for an input placed otherwise (attention needs
  /// each device to hold whole sequences and every feature), a key or value placed unlike the
  /// query, or a mask placed otherwise, each with the redistribute that makes it work.
  MeshArray<float> operator()(const MeshArray<float>& query, const MeshArray<float>& key,
                              const MeshArray<float>& value,
                              const ParallelAttentionOptions& options = {}) const {
    return attend(query, key, value, options, false);
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
    detail::ParallelInit out =
        detail::parallel_init(kName, embed, embed, {.bias = false, .seed = gen.next()});
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

  MeshArray<float> attend(const MeshArray<float>& query, const MeshArray<float>& key,
                          const MeshArray<float>& value, const ParallelAttentionOptions& options,
                          bool self) const {
    if (moved_.moved_from()) {  // its layers went with it
      ferry::detail::fail<InvalidArgument>(kName, "was moved from: call the block it was moved "
                                                  "into");
    }
    check_input(query, self ? "input" : "query", self ? "x" : "query");
    if (!self) {
      check_input(key, "key", "key");
      check_input(value, "value", "value");
      check_cross(query, key, value);
    }
    check_mask(options.mask, query, key.global_shape().dims()[1]);
    const MeshArray<float> q = split_heads(q_proj_(query));
    const MeshArray<float> k = split_heads(k_proj_(key));
    const MeshArray<float> v = split_heads(v_proj_(value));
    // Each device's heads attend on their own: q, k and v are cut alike, along the heads, and
    // the mask's block is the one of those heads (and of the device's batch).
    std::vector<DeviceArray<float>> heads;
    heads.reserve(static_cast<std::size_t>(q.size()));
    for (std::int64_t i = 0; i < q.size(); ++i) {
      AttentionOptions<float> o{{}, options.causal, options.scale};
      if (options.mask.valid()) o.mask = options.mask.shard(i);
      heads.push_back(ferry::scaled_dot_product_attention(q.shard(i), k.shard(i), v.shard(i), o));
    }
    const MeshArray<float> att =
        MeshArray<float>::from_shards(q.mesh(), std::move(heads), q.global_shape(), q.placements());
    return out_proj_(merge_heads(att));
  }

  /// Throws InvalidArgument, as the layer, for an empty or unplaced `a` (`what` names it) or
  /// one on another mesh than the parameters.
  void check_mesh(const MeshArray<float>& a, std::string_view what) const {
    if (!a.valid())
      ferry::detail::fail<InvalidArgument>(kName, "the ", what, " is an empty mesh array");
    if (!a.placed()) {
      ferry::detail::fail<InvalidArgument>(
          kName, "the ", what,
          " has no global view (a collective's result, or from_shards without placements): give "
          "it placements with MeshArray::from_shards(mesh, shards, global_shape, placements)");
    }
    const Mesh other = a.mesh();
    if (!(other == mesh())) {
      ferry::detail::fail<InvalidArgument>(
          kName, "the ", what, " lives on mesh ", other.spec().name, " ", other.shape().to_string(),
          ", the parameters on mesh ", mesh().spec().name, " ", mesh().shape().to_string());
    }
  }

  /// One input (`what`, called `var` in the redistribute it suggests): placed, on the layer's
  /// mesh, (N, L, embed_dim), Replicate along the axis, Replicate or Shard(0) along the others.
  void check_input(const MeshArray<float>& x, std::string_view what, std::string_view var) const {
    check_mesh(x, what);
    const Shape& s = x.global_shape();
    if (s.rank() != 3 || s.dims()[2] != embed_) {
      ferry::detail::fail<ShapeError>(kName, what, " ", s, " is not (N, ",
                                      what == "key" || what == "value" ? "S" : "L", ", embed_dim ",
                                      embed_, ")");
    }
    const Placements& ps = x.placements();
    Placements fix = ps;
    bool bad = false;
    for (std::size_t a = 0; a < ps.size(); ++a) {
      const bool ok =
          a == static_cast<std::size_t>(axis())
              ? std::holds_alternative<Replicate>(ps[a])
              : std::holds_alternative<Replicate>(ps[a]) || ps[a] == ferry::Placement{Shard{0}};
      if (!ok) {
        fix[a] = Replicate{};
        bad = true;
      }
    }
    if (bad) {
      ferry::detail::fail<PlacementError>(
          kName, "the ", what, " is placed ", ferry::detail::placements_text(ps),
          "; it must be Replicate along the layer's mesh axis ", axis(),
          " and Replicate or Shard(0) (the batch) along the others, so each device holds whole "
          "sequences of every feature: call redistribute(", var, ", ",
          ferry::detail::placements_text(fix), ") first");
    }
  }

  /// Cross-attention's inputs together: one batch, key and value of one length, and key and
  /// value placed as the query (each device attends its own batch rows' queries to theirs).
  void check_cross(const MeshArray<float>& q, const MeshArray<float>& k,
                   const MeshArray<float>& v) const {
    const Shape& qs = q.global_shape();
    const Shape& ks = k.global_shape();
    const Shape& vs = v.global_shape();
    if (ks.dims()[0] != qs.dims()[0] || vs.dims()[0] != qs.dims()[0] ||
        ks.dims()[1] != vs.dims()[1]) {
      ferry::detail::fail<ShapeError>(
          kName, "needs a key and value of one length and the query's batch: query ", qs,
          ", key ", ks, ", value ", vs);
    }
    const std::pair<const MeshArray<float>*, std::string_view> kv[] = {{&k, "key"}, {&v, "value"}};
    for (const auto& [a, what] : kv) {
      if (a->placements() != q.placements()) {
        ferry::detail::fail<PlacementError>(
            kName, "the ", what, " is placed ", ferry::detail::placements_text(a->placements()),
            " and the query ", ferry::detail::placements_text(q.placements()),
            "; key and value must be placed as the query, so each device holds the keys of its "
            "queries' batch: call redistribute(",
            what, ", ", ferry::detail::placements_text(q.placements()), ") first");
      }
    }
  }

  /// The mask, when given: on the layer's mesh, broadcasting to the scores (N, num_heads, L,
  /// S), and placed so that each device's block is that of its heads and batch rows.
  void check_mask(const MeshArray<float>& mask, const MeshArray<float>& query,
                  std::int64_t keys) const {
    if (!mask.valid()) return;
    check_mesh(mask, "mask");
    const Shape& qs = query.global_shape();
    const Shape scores{qs.dims()[0], heads_, qs.dims()[1], keys};
    const Shape& ms = mask.global_shape();
    ferry::detail::check_mask_fits_scores(kName, ms, scores, "(N, num_heads, L, S)");
    const std::size_t rank = ms.rank();
    // The dims the devices cut: the heads along the layer's axis, the batch along the others
    // where the query's is cut. A mask lacking the dim (or of size 1 there) broadcasts over it
    // on each device as it is.
    const Placements& qp = query.placements();
    Placements want(qp.size(), Replicate{});
    for (std::size_t a = 0; a < qp.size(); ++a) {
      if (a == static_cast<std::size_t>(axis())) {
        if (rank >= 3 && ms.dims()[rank - 3] != 1) want[a] = Shard{static_cast<int>(rank) - 3};
      } else if (qp[a] == ferry::Placement{Shard{0}} && rank == 4 && ms.dims()[0] != 1) {
        want[a] = Shard{0};
      }
    }
    if (mask.placements() != want) {
      ferry::detail::fail<PlacementError>(
          kName, "the mask ", ms, " is placed ", ferry::detail::placements_text(mask.placements()),
          "; with the query placed ", ferry::detail::placements_text(qp),
          " it must be placed ", ferry::detail::placements_text(want),
          " (Shard of its head dim along the layer's mesh axis ", axis(),
          " when it has one, Shard(0) along an axis that cuts the batch when it has one, "
          "Replicate elsewhere): call redistribute(mask, ",
          ferry::detail::placements_text(want), ") first");
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
    return ferry::reshape(ferry::transpose(y, {0, 2, 1, 3}),
                          Shape{s.dims()[0], s.dims()[2], embed_});
  }

  std::int64_t embed_;
  std::int64_t heads_;
  ColumnParallelLinear q_proj_;
  ColumnParallelLinear k_proj_;
  ColumnParallelLinear v_proj_;
  RowParallelLinear out_proj_;
  ferry::detail::MovedFromMark moved_;
};

}  // namespace ferry::nn
