#pragma once
// to_layout: the same values stored in another memory space or order, as a new array.

#include "ferry/array.hpp"

namespace ferry {

/// The values of `a` stored in `layout` (a modeled step named "to_layout"); `a` itself when it
/// already has that layout. Throws InvalidArgument for a layout no array of its shape can have
/// (a tiled scalar) or an empty handle.
template <Element T>
DeviceArray<T> to_layout(const DeviceArray<T>& a, Layout layout) {
  detail::Step& s = detail::step_of("to_layout", a);
  detail::check_layout("to_layout", s.shape(), layout);
  if (s.layout() == layout) return a;
  return detail::ArrayAccess::wrap<T>(detail::convert_layout(s, layout));
}

}  // namespace ferry
