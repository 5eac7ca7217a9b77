#pragma once
// to_layout: the same values stored in another memory space or order, as a new array.

#include "ferry/array.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

/// The values of `a` stored in `layout` (a modeled step named "to_layout"); `a` itself when it
/// already has that layout. Throws InvalidArgument for a layout no array of its shape can have
/// (a tiled scalar) or an empty handle.
template <Element T>
DeviceArray<T> to_layout(const DeviceArray<T>& a, Layout layout) {
  detail::RecordScope scope;
  detail::Step& s = detail::step_of("to_layout", a);
  detail::check_layout("to_layout", s.shape(), layout);
  if (s.layout() == layout) return a;
  DeviceArray<T> out = detail::ArrayAccess::wrap<T>(detail::convert_layout(s, layout));
  if (detail::Tape* tape = scope.tape()) {
    detail::Step* in[] = {&s};
    detail::record_grad<T>(*tape, in, *detail::ArrayAccess::step(out),
                           [](auto t, detail::GradCall& c) { detail::to_layout_backward(t, c); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {"to_layout", {&s}, {},
                    [layout](std::span<detail::Step* const> src, std::span<const std::int64_t>) {
                      return detail::handle_of(to_layout(detail::as_array<T>(src[0]), layout));
                    }},
                   out, rec->shape_of(s));
  }
  return out;
}

}  // namespace ferry
