#pragma once
// Freeing device memory before the handles that name it go out of scope.

#include "ferry/array.hpp"

namespace ferry {

/// The tag of deallocate's forced form.
struct Force {
  explicit Force() = default;
};
/// `ferry::deallocate(a, ferry::force)`.
inline constexpr Force force{};

/// Releases this handle's claim on its array now, leaving `a` empty (any later use of `a`
/// throws InvalidArgument). The buffer is freed once no other handle names it and its readers
/// have run, as when the last handle goes out of scope. An empty `a` is left as it is.
template <Element T>
void deallocate(DeviceArray<T>& a) noexcept {
  a = DeviceArray<T>{};
}

/// Frees the array's buffer now, even while other handles name it: at once if it is computed
/// and no submitted step still reads it, else as soon as those have run (steps already
/// submitted get their values). Any later use of any handle to it throws UseAfterFree at the
/// call. A view (reshape) of it shares its buffer, so it keeps the buffer while it lives.
/// Throws InvalidArgument for an empty handle, UseAfterFree if it was already freed.
template <Element T>
void deallocate(const DeviceArray<T>& a, Force) {
  detail::Step& s = detail::step_of("deallocate", a);
  detail::note_escape("deallocate(force)");
  s.device()->force_free(s);
}

}  // namespace ferry
