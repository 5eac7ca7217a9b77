#pragma once
// Statistics composed of reductions and elementwise ops: var, std, logsumexp and log_softmax.
// Each is differentiable through the ops it is made of, replays under jit for other sizes
// (var and std with ddof != 0 pin the reduced sizes: the correction n / (n - ddof) is a
// constant of the trace), and costs in the model what those ops cost: separate kernels eagerly,
// fused elementwise runs in a replayed program.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry {

namespace detail {

/// var, or its square root with `root` (std), its arguments checked under the name of the op
/// called. float16 and bfloat16 are computed in float, root included, and rounded once.
template <Floating T>
DeviceArray<T> var(std::string_view name, const DeviceArray<T>& a, const std::vector<int>& axes,
                   std::int64_t ddof, bool keepdims, bool root) {
  const CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  const std::array<bool, kMaxRank> flags = detail::reduced_axes(name, axes, s.shape().rank());
  if (ddof < 0) detail::fail<InvalidArgument>(name, "ddof must be >= 0, got ", ddof);
  if constexpr (HalfFloating<T>) {
    return var(name, a.template astype<float>(), axes, ddof, keepdims, root).template astype<T>();
  } else {
    DeviceArray<T> m = mean(square(a - mean(a, axes, true)), axes, keepdims);
    if (ddof != 0) {
      const Shape user = a.shape();
      std::int64_t n = 1;
      for (std::size_t d = 0; d < user.rank(); ++d) {
        if (flags[d]) n *= static_cast<std::int64_t>(user[d]);  // pins this size in a trace
      }
      const double left = static_cast<double>(n > ddof ? n - ddof : 0);
      m = std::move(m) * (static_cast<double>(n) / left);
    }
    return root ? sqrt(std::move(m)) : m;
  }
}

}  // namespace detail

/// The variance over `axes` (all when empty): sum((a - mean)^2) / (n - ddof), n the number of
/// values reduced, keeping reduced axes as size 1 with `keepdims`. Floating types only;
/// float16 and bfloat16 are computed in float and rounded once (in float16, (a - mean)^2 is inf
/// past 256). As in NumPy, n - ddof <= 0 gives inf (NaN where every deviation is 0) and an
/// empty extent NaN.
/// Throws InvalidArgument for a bad or repeated axis, a negative ddof or an empty handle.
template <Floating T>
DeviceArray<T> var(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                   std::int64_t ddof = 0, bool keepdims = false) {
  return detail::var("var", a, axes, ddof, keepdims, false);
}

/// The standard deviation, sqrt(var(a, axes, ddof, keepdims)); throws like var, naming std.
/// float16 and bfloat16 take the root in float too (a float16 std of 300 has a variance past
/// float16's range).
template <Floating T>
DeviceArray<T> std(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                   std::int64_t ddof = 0, bool keepdims = false) {
  return detail::var("std", a, axes, ddof, keepdims, true);
}

/// log(sum(exp(a))) over `axes` (all when empty), computed stably: the maximum is subtracted
/// first, so no exp overflows. -inf for an empty extent or where every value is -inf, +inf
/// where one is +inf, NaN where one is NaN (as scipy's logsumexp). Its gradient is
/// softmax(a). Throws InvalidArgument for a bad or repeated axis or an empty handle.
template <Floating T>
DeviceArray<T> logsumexp(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                         bool keepdims = false) {
  constexpr std::string_view name = "logsumexp";
  const detail::CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  const std::array<bool, kMaxRank> flags = detail::reduced_axes(name, axes, s.shape().rank());
  bool empty = false;
  for (std::size_t d = 0; d < s.shape().rank(); ++d)
    empty = empty || (flags[d] && s.shape().dims()[d] == 0);
  if (empty) return log(sum(exp(a), axes, keepdims));  // log 0 = -inf, and max has no identity
  // An infinite maximum would make a - m NaN: shift by 0 there, which leaves log(sum(exp(a)))
  // at the right infinity.
  const DeviceArray<T> m = max(a, axes, true);
  const DeviceArray<T> shift = where(isfinite(m), m, T(0));
  DeviceArray<T> kept = log(sum(exp(a - shift), axes, true)) + shift;
  return keepdims ? kept : reshape(kept, detail::reduced_rule(a.shape(), flags, false, false));
}

/// log(softmax(a)) along `axis`, as (a - m) - log(sum(exp(a - m))) with m the maximum along
/// `axis`: finite where softmax would underflow to 0, and as exact for large logits as for
/// small ones (a - logsumexp(a) would round logsumexp at the logits' magnitude first). Throws
/// InvalidArgument for a bad axis or an empty handle.
template <Floating T>
DeviceArray<T> log_softmax(const DeviceArray<T>& a, int axis) {
  constexpr std::string_view name = "log_softmax";
  const detail::CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  if (s.shape().dims()[d] == 0) return a - logsumexp(a, {axis}, true);  // max has no identity
  // Shifted as logsumexp is (by 0 where the maximum is infinite), but the shift is subtracted
  // from a before anything is rounded at its magnitude. a - shift is made twice rather than
  // kept: as in a - logsumexp(a), no array of a's size outlives exp, and the result takes over
  // the second one's buffer (as many kernels as a - logsumexp(a), whose + shift this replaces).
  const DeviceArray<T> m = max(a, {axis}, true);
  const DeviceArray<T> shift = where(isfinite(m), m, T(0));
  DeviceArray<T> lse = log(sum(exp(a - shift), {axis}, true));
  return (a - shift) - lse;
}

}  // namespace ferry
