#pragma once
// stack: arrays of one shape joined along a new axis, as an unsqueeze of each and a concat,
// so that its trace rule and its gradient (a slice of the cotangent per input) are concat's.

#include <cstddef>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry {

/// The arrays, all of one shape, joined along a new dimension at position `axis` of the result
/// (axis in [-rank-1, rank], like `np.stack` / `torch.stack`): element i of the result along
/// `axis` is arrays[i]. One copy; a single input is only reshaped (no copy). Throws
/// InvalidArgument for an empty list, an empty handle, an axis outside that range or inputs
/// already of rank kMaxRank; ShapeError when two shapes differ; DeviceMismatch for arrays on two
/// devices.
template <Element T>
DeviceArray<T> stack(const std::vector<DeviceArray<T>>& arrays, int axis) {
  constexpr std::string_view name = "stack";
  if (arrays.empty()) detail::fail<InvalidArgument>(name, "needs at least one array");
  std::vector<detail::Step*> steps;
  steps.reserve(arrays.size());
  for (const DeviceArray<T>& a : arrays) steps.push_back(&detail::step_of(name, a));
  static_cast<void>(detail::common_device(name, steps));
  const Shape& first = steps.front()->shape();
  for (std::size_t i = 1; i < steps.size(); ++i) {
    if (!(steps[i]->shape() == first)) {
      detail::fail<ShapeError>(name, "array ", i, " has shape ", steps[i]->shape(),
                               ", array 0 has ", first);
    }
  }
  if (first.rank() >= kMaxRank) {
    detail::fail<InvalidArgument>(name, "cannot add a dimension to ", first, ": rank ", kMaxRank,
                                  " is the maximum");
  }
  const std::size_t at = detail::normalize_axis(name, axis, first.rank() + 1);
  std::vector<DeviceArray<T>> parts;
  parts.reserve(arrays.size());
  for (const DeviceArray<T>& a : arrays) parts.push_back(detail::unsqueeze(name, a, axis));
  return detail::concat(name, parts, static_cast<int>(at));
}

/// stack of a braced list: `stack({a, b}, 0)`. Throws like the std::vector overload.
template <Element T>
DeviceArray<T> stack(std::initializer_list<DeviceArray<T>> arrays, int axis) {
  return stack(std::vector<DeviceArray<T>>(arrays), axis);
}

}  // namespace ferry
