#pragma once
// nn::MultiheadAttention: PyTorch's nn.MultiheadAttention on scaled_dot_product_attention, with
// its parameter names and layouts ("in_proj_weight" (3E, E) holding the query, key and value
// projections stacked, "in_proj_bias", "out_proj.weight", "out_proj.bias") and initialization,
// so a PyTorch checkpoint loads as it is.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/linear.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/attention.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/transfer.hpp"

namespace ferry::nn {

/// How a MultiheadAttention is made besides its sizes and device.
struct MultiheadAttentionOptions {
  /// Whether the projections have biases ("in_proj_bias" and "out_proj.bias").
  bool bias = true;
  /// Inputs and output are (N, L, E), batch first, unless false: then (L, N, E), PyTorch's
  /// default layout (its batch_first=False). Unbatched (L, E) either way.
  bool batch_first = true;
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// Multi-head attention: the query, key and value projected by the rows of "in_proj_weight"
/// (3 * embed_dim, embed_dim) (plus "in_proj_bias"), split into num_heads heads of embed_dim /
/// num_heads, attended with scaled_dot_product_attention (scale 1/sqrt(head_dim)), merged and
/// projected by "out_proj" (a Linear). Initialized as PyTorch's: in_proj_weight xavier-uniform
/// (bound sqrt(6 / (4 embed_dim))), biases zeros, out_proj.weight as a Linear's. Called as
/// `mha(x)` (self-attention), `mha(x, {.causal = true})`, or `mha(query, key, value, {.mask})`;
/// it returns the output only (PyTorch also returns the attention weights, which the fused
/// kernel never holds). PyTorch's dropout on the weights, kdim/vdim, add_bias_kv and
/// add_zero_attn are not offered.
class MultiheadAttention : public Module {
 public:
  /// A layer on `device` (the host CPU device unless given). Throws InvalidArgument naming
  /// MultiheadAttention for an embed_dim below 1, num_heads below 1 or not dividing embed_dim;
  /// and what to_device throws.
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                     const Device& device = Device::cpu(), MultiheadAttentionOptions options = {})
      : embed_(embed_dim), heads_(num_heads), batch_first_(options.batch_first) {
    if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0) {
      ferry::detail::fail<InvalidArgument>("MultiheadAttention",
                                           "needs embed_dim >= 1 divisible by num_heads >= 1, got ",
                                           embed_dim, " and ", num_heads);
    }
    detail::SplitMix64 gen(options.seed ? *options.seed : next_seed());
    // xavier_uniform_ on (3E, E): fan_in E, fan_out 3E.
    const double bound = std::sqrt(6.0 / static_cast<double>(4 * embed_dim));
    std::vector<float> w;
    detail::append_uniform(w, static_cast<std::size_t>(3 * embed_dim * embed_dim), -bound, bound,
                           gen);
    in_weight_ = register_parameter(
        "in_proj_weight", to_device(device, std::move(w), Shape{3 * embed_dim, embed_dim}));
    if (options.bias)
      in_bias_ = register_parameter("in_proj_bias", zeros<float>(device, Shape{3 * embed_dim}));
    Linear& out = register_module("out_proj", Linear(embed_dim, embed_dim, device,
                                                     {.bias = options.bias, .seed = gen.next()}));
    if (options.bias)
      out.set_parameters(
          {{"weight", out.weight()}, {"bias", zeros<float>(device, Shape{embed_dim})}});
    out_ = &out;
  }

  std::string_view type_name() const override { return "MultiheadAttention"; }

  /// The sizes and the layout; never throw.
  std::int64_t embed_dim() const noexcept { return embed_; }
  std::int64_t num_heads() const noexcept { return heads_; }
  std::int64_t head_dim() const noexcept { return embed_ / heads_; }
  bool batch_first() const noexcept { return batch_first_; }

  /// The stacked projections (3 * embed_dim, embed_dim): rows [0, E) the query's, [E, 2E) the
  /// key's, [2E, 3E) the value's. The module's own handle. Never throws.
  const DeviceArray<float>& in_proj_weight() const { return parameter(in_weight_); }
  /// Their biases (3 * embed_dim). Throws InvalidArgument for a layer made without biases.
  const DeviceArray<float>& in_proj_bias() const {
    if (!in_bias_)
      ferry::detail::fail<InvalidArgument>("MultiheadAttention", "this layer has no biases");
    return parameter(*in_bias_);
  }
  /// The output projection. Never throws.
  const Linear& out_proj() const noexcept { return *out_; }

  using Module::operator();

  /// Self-attention of x with `options` (its mask, added to the (N, num_heads, L, L) scores,
  /// and causal; scale replaces 1/sqrt(head_dim)). Throws like the three-input call.
  DeviceArray<float> operator()(const DeviceArray<float>& x,
                                const AttentionOptions<float>& options) const {
    return (*this)(x, x, x, options);
  }

  /// Attention of query (N, L, E) over key (N, S, E) and value (N, S, E) (each (L, N, E) and
  /// (S, N, E) when not batch_first; (L, E) and (S, E) unbatched), returning (N, L, E) (or the
  /// query's layout). `options.mask` is added to the scores (N, num_heads, L, S) it broadcasts
  /// to: (L, S) for all, (N, 1, 1, S) -inf for PyTorch's key_padding_mask. Throws, before
  /// anything is submitted, InvalidArgument for an empty input, DeviceMismatch naming
  /// MultiheadAttention for one on another device, ShapeError naming it for inputs not of rank
  /// 2 or 3 with the same rank and batch, a last size other than embed_dim, a key and value
  /// of different lengths, or a mask that does not broadcast to the scores (N, num_heads, L,
  /// S), and DeviceMismatch naming it for a mask on another device.
  DeviceArray<float> operator()(const DeviceArray<float>& query, const DeviceArray<float>& key,
                                const DeviceArray<float>& value,
                                const AttentionOptions<float>& options = {}) const {
    // The layer always has parameters, so the device is there once the inputs passed.
    const Device own = *check_inputs<float>({&query, &key, &value});
    check_shapes(query.shape(), key.shape(), value.shape());
    if (options.mask.valid()) check_mask(options.mask, own, query.shape(), key.shape());
    return attend(query, key, value, options);
  }

 protected:
  /// Self-attention without a mask; throws like the three-input call. Module::operator() has
  /// checked x already, so only its shape is left.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    check_shapes(x.shape(), x.shape(), x.shape());
    return attend(x, x, x, {});
  }

 private:
  static bool same(const DeviceArray<float>& a, const DeviceArray<float>& b) {
    return ferry::detail::ArrayAccess::step(a) == ferry::detail::ArrayAccess::step(b);
  }

  /// The computation of a call whose inputs and mask were checked.
  DeviceArray<float> attend(const DeviceArray<float>& query, const DeviceArray<float>& key,
                            const DeviceArray<float>& value,
                            const AttentionOptions<float>& options) const {
    const bool self = same(query, key) && same(key, value);
    const bool unbatched = query.shape().rank() == 2;
    const DeviceArray<float> q = batched(query, unbatched);
    DeviceArray<float> qh;
    DeviceArray<float> kh;
    DeviceArray<float> vh;
    if (self) {  // one product for all three projections
      const std::vector<DeviceArray<float>> qkv =
          split(project(q, 0, 3), {embed_, embed_, embed_}, 2);
      qh = split_heads(qkv[0]);
      kh = split_heads(qkv[1]);
      vh = split_heads(qkv[2]);
    } else {
      qh = split_heads(project(q, 0, 1));
      kh = split_heads(project(batched(key, unbatched), 1, 1));
      vh = split_heads(project(batched(value, unbatched), 2, 1));
    }
    const DeviceArray<float> att = scaled_dot_product_attention(qh, kh, vh, options);
    DeviceArray<float> y = (*out_)(merge_heads(att));
    if (unbatched) return squeeze(y, 0);
    return batch_first_ ? y : swapaxes(y, 0, 1);
  }

  void check_shapes(const Shape& q, const Shape& k, const Shape& v) const {
    auto bad = [&](const char* why) {
      ferry::detail::fail<ShapeError>("MultiheadAttention", why, ": query ", q, ", key ", k,
                                      ", value ", v, " (embed_dim ", embed_, ")");
    };
    const std::size_t rank = q.rank();
    if ((rank != 2 && rank != 3) || k.rank() != rank || v.rank() != rank) {
      bad(batch_first_ ? "needs inputs (N, L, E), or (L, E) unbatched, all of one rank"
                       : "needs inputs (L, N, E), or (L, E) unbatched, all of one rank");
    }
    if (q[rank - 1] != embed_ || k[rank - 1] != embed_ || v[rank - 1] != embed_) {
      bad("the last size of each input must be embed_dim");
    }
    const std::size_t seq = rank == 3 && !batch_first_ ? 0 : rank - 2;
    if (k[seq] != v[seq]) bad("key and value must have the same length");
    if (rank == 3) {
      const std::size_t batch = batch_first_ ? 0 : 1;
      if (q[batch] != k[batch] || k[batch] != v[batch])
        bad("the inputs must have the same batch size");
    }
  }

  /// A mask the scores (N, num_heads, L, S) take, on the parameters' device `own`: checked
  /// here, as the module, rather than by the attention after the projections were submitted.
  void check_mask(const DeviceArray<float>& mask, const Device& own, const Shape& q,
                  const Shape& k) const {
    const Device on = mask.device();
    if (on != own) {
      ferry::detail::fail<DeviceMismatch>("MultiheadAttention", "the mask lives on ", on.name(),
                                          ", parameters on ", own.name());
    }
    const std::size_t rank = q.rank();
    const std::size_t seq = rank == 3 && !batch_first_ ? 0 : rank - 2;
    const std::int64_t n = rank == 3 ? q.dims()[batch_first_ ? 0 : 1] : 1;
    const Shape scores{n, heads_, q.dims()[seq], k.dims()[seq]};
    ferry::detail::check_mask_fits_scores("MultiheadAttention", mask.shape(), scores,
                                          "(N, num_heads, L, S)");
  }

  /// x as (N, L, E): the unbatched form gets a batch of 1, the sequence-first one is swapped.
  DeviceArray<float> batched(const DeviceArray<float>& x, bool unbatched) const {
    if (unbatched) return unsqueeze(x, 0);
    return batch_first_ ? x : swapaxes(x, 0, 1);
  }

  /// x (N, L, E) times rows [first E, (first + count) E) of in_proj_weight, transposed, plus
  /// those of in_proj_bias.
  DeviceArray<float> project(const DeviceArray<float>& x, std::int64_t first,
                             std::int64_t count) const {
    const std::int64_t begin = first * embed_;
    const std::int64_t end = (first + count) * embed_;
    const DeviceArray<float>& w = in_proj_weight();
    DeviceArray<float> y = matmul(x, transpose(count == 3 ? w : slice(w, 0, begin, end)));
    if (!in_bias_) return y;
    const DeviceArray<float>& b = parameter(*in_bias_);
    return std::move(y) + (count == 3 ? b : slice(b, 0, begin, end));
  }

  /// (N, L, E) -> (N, num_heads, L, head_dim): attention runs over the last two axes.
  DeviceArray<float> split_heads(const DeviceArray<float>& x) const {
    const Shape s = x.shape();
    return permute(reshape(x, Shape{s[0], s[1], SymInt(heads_), SymInt(head_dim())}), {0, 2, 1, 3});
  }

  /// The inverse of split_heads.
  DeviceArray<float> merge_heads(const DeviceArray<float>& x) const {
    const Shape s = x.shape();
    return reshape(permute(x, {0, 2, 1, 3}), Shape{s[0], s[2], SymInt(embed_)});
  }

  std::int64_t embed_;
  std::int64_t heads_;
  bool batch_first_;
  std::size_t in_weight_ = 0;
  std::optional<std::size_t> in_bias_;
  // Into the heap-held submodule: stable when the module moves.
  Linear* out_ = nullptr;
};

}  // namespace ferry::nn
