#pragma once
// reshape, transpose and permute. A row-major array is contiguous, so a reshape never copies:
// it is a view step whose output borrows its source's buffer (a tiled one is converted first).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/ops/binary.hpp"

namespace ferry {

/// The same values with `shape` (row-major order), without copying them. Throws ShapeError
/// when the element counts differ, InvalidArgument for an empty handle.
template <Element T>
DeviceArray<T> reshape(const DeviceArray<T>& a, Shape shape) {
  constexpr std::string_view name = "reshape";
  detail::Step& s = detail::step_of(name, a);
  if (s.shape().numel() != shape.numel()) {
    detail::fail<ShapeError>(name, "cannot reshape ", s.shape(), " of ", s.shape().numel(),
                             " elements into ", shape, " of ", shape.numel());
  }
  if (shape == s.shape()) return a;
  return detail::launch_view<T>(name, s, shape, 0);
}

/// The array with its dimensions reordered: dimension i of the result is dimension axes[i] of
/// `a` (axes may be negative). Throws InvalidArgument unless `axes` is a permutation of the
/// dimensions.
template <Element T>
DeviceArray<T> permute(const DeviceArray<T>& a, const std::vector<int>& axes) {
  constexpr std::string_view name = "permute";
  detail::Step& s = detail::step_of(name, a);
  const Shape& in = s.shape();
  if (axes.size() != in.rank()) {
    detail::fail<InvalidArgument>(name, axes.size(), " axes given for an array of rank ", in.rank());
  }
  std::array<bool, kMaxRank> seen{};
  std::array<std::int64_t, kMaxRank> dims{};
  const detail::Strides own = detail::row_major_strides(in);
  detail::Strides from{};  // input stride along each output dimension
  bool identity = true;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const std::size_t d = detail::normalize_axis(name, axes[i], in.rank());
    if (seen[d]) detail::fail<InvalidArgument>(name, "axis ", axes[i], " is given twice");
    seen[d] = true;
    identity = identity && d == i;
    dims[i] = in.dims()[d];
    from[i] = own[d];
  }
  if (identity) return a;
  const Shape out(std::span<const std::int64_t>(dims.data(), in.rank()));
  detail::Step* inputs[] = {&s};
  return detail::launch<T>(s.device(),
                           {detail::StepKind::compute, std::string(name),
                            {0, detail::bytes_of(s), detail::bytes_of(s)}},
                           out, inputs, [out, from](const detail::Step& st) {
                             kernels::gather(st.in<T>(0), st.out<T>(), out, from);
                           });
}

/// The array with its dimensions reversed (the matrix transpose for rank 2).
template <Element T>
DeviceArray<T> transpose(const DeviceArray<T>& a) {
  const std::size_t rank = detail::step_of("transpose", a).shape().rank();
  std::vector<int> axes(rank);
  for (std::size_t i = 0; i < rank; ++i) axes[i] = static_cast<int>(rank - 1 - i);
  return permute(a, axes);
}

}  // namespace ferry
