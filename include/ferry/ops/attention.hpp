#pragma once
// scaled_dot_product_attention as one op: one kernel that never holds the Lq x Lk scores
// (kernels/attention.hpp), costed in the model as such a fused kernel is, reading q, k, v and
// the mask and writing the output, with none of the scores' traffic.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/attention.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

/// What scaled_dot_product_attention takes besides q, k and v.
template <Floating T>
struct AttentionOptions {
  /// Added to the scores before the softmax (-inf hides a key); broadcasts to (..., Lq, Lk).
  /// Absent when empty.
  DeviceArray<T> mask{};
  /// Query i sees keys j <= i only (PyTorch's is_causal: the mask aligned to the top left).
  bool causal = false;
  /// The factor of q k^T; 1 / sqrt(D) when absent.
  std::optional<double> scale{};
};

namespace detail {

/// Throws ShapeError naming `op` unless `mask` broadcasts to `scores` without growing them (a
/// mask is added to the scores, so it cannot make more of them): "the mask's (3, 4) does not
/// broadcast to the scores' (N, num_heads, L, S) (2, 2, 3, 3)", where `axes`, when given,
/// names the scores' dims as the caller documents them.
inline void check_mask_fits_scores(std::string_view op, const Shape& mask, const Shape& scores,
                                   std::string_view axes = {}) {
  if (broadcasts(mask, scores) && broadcast_shapes(op, mask, scores) == scores) return;
  fail<ShapeError>(op, "the mask's ", mask, " does not broadcast to the scores' ", axes,
                   axes.empty() ? "" : " ", scores);
}

/// The mask's strides over the scores (..., Lq, Lk), by flattened batch index.
inline kernels::AttentionMask attention_mask_view(const Shape& mask, const Shape& scores) {
  const Strides st = broadcast_strides(mask, scores);
  const std::size_t rank = scores.rank();
  kernels::AttentionMask mv;
  mv.row = st[rank - 2];
  mv.col = st[rank - 1];
  std::int64_t batch = 1;
  for (std::size_t d = 0; d + 2 < rank; ++d) batch *= scores.dims()[d];
  mv.batch.resize(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) {  // unravel b over the leading dimensions
    std::int64_t rest = b;
    std::int64_t offset = 0;
    for (std::size_t d = rank - 2; d-- > 0;) {
      offset += (rest % scores.dims()[d]) * st[d];
      rest /= scores.dims()[d];
    }
    mv.batch[static_cast<std::size_t>(b)] = offset;
  }
  return mv;
}

}  // namespace detail

/// softmax(scale * q k^T + mask) v over the last two dimensions: q (..., Lq, D), k (..., Lk, D),
/// v (..., Lk, Dv) with equal leading dimensions (PyTorch also broadcasts them), giving
/// (..., Lq, Dv). One kernel, holding the scores of one block of keys per query row at a time;
/// the model costs it as a fused attention kernel (flops of both products, bytes of q, k, v,
/// mask and output only). `causal` and `mask` may be combined (PyTorch refuses both). A query
/// whose keys are all masked out gets NaN, as PyTorch's reference path; with no keys (Lk = 0)
/// the output is zeros, a sum over no keys, as PyTorch's. Differentiable (the
/// backward pass recomputes the probabilities with ops). Throws ShapeError for ranks below 2,
/// mismatched sizes or a mask that does not broadcast to the scores, DeviceMismatch,
/// InvalidArgument for an empty handle or a scale that is not finite.
template <Floating T>
DeviceArray<T> scaled_dot_product_attention(
    const DeviceArray<T>& q, const DeviceArray<T>& k, const DeviceArray<T>& v,
    const std::type_identity_t<AttentionOptions<T>>& options = {}) {
  constexpr std::string_view name = "scaled_dot_product_attention";
  detail::RecordScope scope;
  detail::Step& sq = detail::step_of(name, q);
  detail::Step& sk = detail::step_of(name, k);
  detail::Step& sv = detail::step_of(name, v);
  const bool has_mask = options.mask.valid();
  std::array<detail::Step*, 4> all{&sq, &sk, &sv,
                                   has_mask ? &detail::step_of(name, options.mask) : nullptr};
  const std::span<detail::Step* const> inputs(all.data(), has_mask ? 4 : 3);
  const auto& dev = detail::common_device(name, inputs);
  const Shape& qs = sq.shape();
  const Shape& ks = sk.shape();
  const Shape& vs = sv.shape();
  const std::size_t rank = qs.rank();
  const auto lead_equal = [&](const Shape& s) {
    if (s.rank() != rank) return false;
    for (std::size_t d = 0; d + 2 < rank; ++d) {
      if (s.dims()[d] != qs.dims()[d]) return false;
    }
    return true;
  };
  if (rank < 2 || !lead_equal(ks) || !lead_equal(vs) ||
      ks.dims()[rank - 1] != qs.dims()[rank - 1] || vs.dims()[rank - 2] != ks.dims()[rank - 2]) {
    detail::fail<ShapeError>(name,
                             "needs q (..., Lq, D), k (..., Lk, D) and v (..., Lk, Dv) with equal "
                             "leading dimensions, got q ",
                             qs, ", k ", ks, ", v ", vs);
  }
  std::int64_t batch = 1;
  for (std::size_t d = 0; d + 2 < rank; ++d) batch *= qs.dims()[d];
  const kernels::AttentionShape shape{batch, qs.dims()[rank - 2], ks.dims()[rank - 2],
                                      qs.dims()[rank - 1], vs.dims()[rank - 1]};
  const double scale = options.scale.value_or(
      1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(shape.d, 1))));
  if (!std::isfinite(scale))
    detail::fail<InvalidArgument>(name, "scale must be finite, got ", scale);
  std::array<std::int64_t, kMaxRank> score_dims{};
  for (std::size_t d = 0; d < rank; ++d) score_dims[d] = qs.dims()[d];
  score_dims[rank - 1] = shape.lk;
  const Shape scores(std::span<const std::int64_t>(score_dims.data(), rank));
  kernels::AttentionMask mv;
  if (has_mask) {
    const Shape& ms = all[3]->shape();
    detail::check_mask_fits_scores(name, ms, scores);
    mv = detail::attention_mask_view(ms, scores);
  }
  const Shape out = [&] {
    std::array<std::int64_t, kMaxRank> dims{};
    for (std::size_t d = 0; d < rank; ++d) dims[d] = qs.dims()[d];
    dims[rank - 1] = shape.dv;
    return Shape(std::span<const std::int64_t>(dims.data(), rank));
  }();
  // Both products, each over the keys a query sees (about half of them when causal).
  Cost cost = Cost::matmul(shape.batch, shape.lq, shape.lk, shape.dv, sizeof(T));
  const double pairs = static_cast<double>(shape.batch) * static_cast<double>(shape.lq) *
                       static_cast<double>(shape.lk) * (options.causal ? 0.5 : 1.0);
  cost.flops = 2 * pairs * static_cast<double>(shape.d + shape.dv);
  cost.bytes_read = 0;
  for (const detail::Step* s : inputs) cost.bytes_read += detail::bytes_of(*s);
  cost.bytes_written = static_cast<double>(out.numel()) * sizeof(T);
  const bool causal = options.causal;
  DeviceArray<T> result = detail::launch<T>(
      dev, {detail::StepKind::compute, name, cost}, out, inputs,
      [shape, mv, scale, causal, has_mask](const detail::Step& st) {
        kernels::attention(st.in<T>(0), st.in<T>(1), st.in<T>(2), has_mask ? st.in<T>(3) : nullptr,
                           mv, st.out<T>(), shape, scale, causal, st.runner());
      });
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(*tape, inputs, *detail::ArrayAccess::step(result),
                           [scale, causal, has_mask](auto t, detail::GradCall& c) {
                             detail::attention_backward(t, c, scale, causal, has_mask);
                           });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    const Shape uq = rec->shape_of(sq);
    const Shape uv = rec->shape_of(sv);
    detail::record(*rec,
                   {name, std::vector<detail::Step*>(inputs.begin(), inputs.end()), {},
                    [causal, given_scale = options.scale](std::span<detail::Step* const> in,
                                                          std::span<const std::int64_t>) {
                      AttentionOptions<T> o{{}, causal, given_scale};
                      if (in.size() == 4) o.mask = detail::as_array<T>(in[3]);
                      return detail::handle_of(scaled_dot_product_attention(
                          detail::as_array<T>(in[0]), detail::as_array<T>(in[1]),
                          detail::as_array<T>(in[2]), o));
                    }},
                   result, detail::with_sym_dim(uq, uq.rank() - 1, uv[uv.rank() - 1]));
  }
  return result;
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(DeviceArray<float> scaled_dot_product_attention<float>(
    const DeviceArray<float>&, const DeviceArray<float>&, const DeviceArray<float>&,
    const AttentionOptions<float>&))

}  // namespace ferry
