#pragma once
// any and all: reductions of truth values (non-zero is true), as counts of the true or false
// elements, so an empty extent gives false for any and true for all, as NumPy.

#include <concepts>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry {

/// Whether any element over `axes` (all when empty) is true (non-zero), as a bool mask; any
/// element type. Throws InvalidArgument for a bad or repeated axis or an empty handle.
template <Element T>
DeviceArray<bool> any(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                      bool keepdims = false) {
  constexpr std::string_view name = "any";
  const detail::CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  static_cast<void>(detail::reduced_axes(name, axes, s.shape().rank()));  // before any step
  DeviceArray<bool> truth;
  if constexpr (std::same_as<T, bool>) {
    truth = a;
  } else {
    truth = not_equal(a, T{});  // NaN is true, as NumPy
  }
  return greater(detail::reduce(name, kernels::ReduceOp::sum, truth.template astype<std::int64_t>(),
                                axes, keepdims),
                 0);
}

/// Whether every element over `axes` is true, like any.
template <Element T>
DeviceArray<bool> all(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                      bool keepdims = false) {
  constexpr std::string_view name = "all";
  const detail::CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  static_cast<void>(detail::reduced_axes(name, axes, s.shape().rank()));  // before any step
  return equal(detail::reduce(name, kernels::ReduceOp::sum,
                              logical_not(a).template astype<std::int64_t>(), axes, keepdims),
               0);
}

}  // namespace ferry
