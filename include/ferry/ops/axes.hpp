#pragma once
// squeeze, unsqueeze and swapaxes: reshapes and a permute under NumPy's names, so their shape
// rules in a trace and their gradients are those of reshape and permute.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry {

namespace detail {

/// `in` with a size-1 dimension inserted at position `at` (0..rank).
inline Shape insert_unit_dim(const Shape& in, std::size_t at) {
  std::array<SymInt, kMaxRank> dims{};
  std::size_t n = 0;
  for (std::size_t i = 0; i <= in.rank(); ++i) {
    if (i == at) dims[n++] = 1;
    if (i < in.rank()) dims[n++] = in[i];
  }
  return Shape(std::span<const SymInt>(dims.data(), n));
}

/// unsqueeze under the name of the op that asked for it: stack reports its own errors, and its
/// views carry its name.
template <Element T>
DeviceArray<T> unsqueeze(std::string_view name, const DeviceArray<T>& a, int axis) {
  const Shape in = user_shape(step_of(name, a));
  if (in.rank() >= kMaxRank) {
    fail<InvalidArgument>(name, "cannot add a dimension to ", in, ": rank ", kMaxRank,
                          " is the maximum");
  }
  const std::size_t at = normalize_axis(name, axis, in.rank() + 1);
  return reshape(name, a, insert_unit_dim(in, at));
}

}  // namespace detail

/// `a` without its size-1 dimensions (a scalar when every size is 1), like `np.squeeze(a)`; no
/// copy (a reshape). In a traced program each "size is 1" decision is guarded, so a replay
/// whose sizes become 1 (or stop being 1) traces again. Throws InvalidArgument for an empty
/// handle.
template <Element T>
DeviceArray<T> squeeze(const DeviceArray<T>& a) {
  constexpr std::string_view name = "squeeze";
  const Shape in = detail::user_shape(detail::step_of(name, a));
  std::array<SymInt, kMaxRank> dims{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < in.rank(); ++i) {
    if (!(in[i] == 1)) dims[n++] = in[i];
  }
  return detail::reshape(name, a, Shape(std::span<const SymInt>(dims.data(), n)));
}

/// `a` without dimension `axis` (negative counts from the end), which must have size 1: like
/// `np.squeeze(a, axis)`, while PyTorch's `squeeze(dim)` silently keeps a dimension that is not
/// 1. No copy. Throws InvalidArgument for a bad axis or an empty handle, ShapeError when that
/// dimension's size is not 1.
template <Element T>
DeviceArray<T> squeeze(const DeviceArray<T>& a, int axis) {
  constexpr std::string_view name = "squeeze";
  const Shape in = detail::user_shape(detail::step_of(name, a));
  const std::size_t d = detail::normalize_axis(name, axis, in.rank());
  if (!(in[d] == 1)) {
    detail::fail<ShapeError>(name, "axis ", axis, " of ", in, " has size ", in[d], ", not 1");
  }
  std::array<SymInt, kMaxRank> dims{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < in.rank(); ++i) {
    if (i != d) dims[n++] = in[i];
  }
  return detail::reshape(name, a, Shape(std::span<const SymInt>(dims.data(), n)));
}

/// `a` with a new size-1 dimension at position `axis` of the result: axis in [-rank-1, rank],
/// -1 appending it last (`np.expand_dims`, `torch.unsqueeze`). No copy. Throws InvalidArgument
/// for an axis outside that range, an array already of rank kMaxRank, or an empty handle.
template <Element T>
DeviceArray<T> unsqueeze(const DeviceArray<T>& a, int axis) {
  return detail::unsqueeze("unsqueeze", a, axis);
}

/// `a` with dimensions `a1` and `a2` exchanged (negative counts from the end), like
/// `np.swapaxes` / `torch.transpose(a, a1, a2)`; `a` itself when they name the same dimension.
/// A permute: a copy. Throws InvalidArgument for a bad axis or an empty handle.
template <Element T>
DeviceArray<T> swapaxes(const DeviceArray<T>& a, int a1, int a2) {
  constexpr std::string_view name = "swapaxes";
  const std::size_t rank = detail::step_of(name, a).shape().rank();
  const std::size_t d1 = detail::normalize_axis(name, a1, rank);
  const std::size_t d2 = detail::normalize_axis(name, a2, rank);
  std::vector<int> axes(rank);
  for (std::size_t i = 0; i < rank; ++i) axes[i] = static_cast<int>(i);
  std::swap(axes[d1], axes[d2]);
  return detail::permute(name, a, axes);
}

}  // namespace ferry
