#pragma once
// flip: the order of elements reversed along some axes. Its own step, a strided gather that
// reads the source from the far end (negative strides from a base offset); the gradient is
// the same flip of the cotangent.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/reduce.hpp"

namespace ferry {

/// `a` with the order of its elements reversed along each of `axes` (negative counts from the
/// end), like `np.flip(a, axes)` / `torch.flip(a, axes)`: a new array (one copy); `a` itself
/// for an empty list, as NumPy does for `axis=()`. Size-1 and empty dimensions may be flipped.
/// Throws InvalidArgument for a bad or repeated axis or an empty handle.
template <Element T>
DeviceArray<T> flip(const DeviceArray<T>& a, const std::vector<int>& axes) {
  constexpr std::string_view name = "flip";
  detail::RecordScope scope;
  detail::Step& s = detail::step_of(name, a);
  const Shape& in = s.shape();
  if (axes.empty()) return a;
  const std::array<bool, kMaxRank> flipped = detail::reduced_axes(name, axes, in.rank());
  // Read backwards along each flipped axis, starting from its last element.
  detail::Strides from = detail::row_major_strides(in);
  std::int64_t base = 0;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (!flipped[d]) continue;
    if (in.dims()[d] > 0) base += (in.dims()[d] - 1) * from[d];
    from[d] = -from[d];
  }
  const Shape out = in;
  const bool empty = in.numel() == 0;
  detail::Step* inputs[] = {&s};
  DeviceArray<T> result =
      detail::launch<T>(s.device(),
                        {detail::StepKind::compute,
                         name,
                         {0, detail::bytes_of(s), detail::bytes_of(s), {}, Work::layout}},
                        out, inputs, [out, from, base, empty](const detail::Step& st) {
                          // An empty array may have no buffer: offsetting a null pointer would be
                          // undefined.
                          if (empty) return;
                          kernels::gather(st.in<T>(0) + base, st.out<T>(), out, from, st.runner());
                        });
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(result),
        [axes](auto t, detail::GradCall& c) { detail::flip_backward(t, c, axes); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {name,
                    {&s},
                    {},
                    [axes](std::span<detail::Step* const> src, std::span<const std::int64_t>) {
                      return detail::handle_of(flip(detail::as_array<T>(src[0]), axes));
                    }},
                   result, rec->shape_of(s));
  }
  return result;
}

/// flip of a braced list of axes: `flip(a, {0, 2})`; `flip(a, {})` is `a` itself (without this
/// overload `{}` would read as axis 0). Throws like the std::vector overload.
template <Element T>
DeviceArray<T> flip(const DeviceArray<T>& a, std::initializer_list<int> axes) {
  return flip(a, std::vector<int>(axes));
}

/// `a` reversed along `axis` (negative counts from the end): `flip(a, {axis})`. Throws
/// InvalidArgument for a bad axis or an empty handle.
template <Element T>
DeviceArray<T> flip(const DeviceArray<T>& a, int axis) {
  return flip(a, std::vector<int>{axis});
}

/// `a` reversed along every axis, like `np.flip(a)` with no axis (`a` itself for a scalar).
/// Throws InvalidArgument for an empty handle.
template <Element T>
DeviceArray<T> flip(const DeviceArray<T>& a) {
  const std::size_t rank = detail::step_of("flip", a).shape().rank();
  std::vector<int> axes(rank);
  for (std::size_t i = 0; i < rank; ++i) axes[i] = static_cast<int>(i);
  return flip(a, axes);
}

}  // namespace ferry
