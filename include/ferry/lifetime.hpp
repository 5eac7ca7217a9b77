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
/// submitted get their values). The buffer is freed in the device's model too. Views
/// (`reshape`, `slice`) share the buffer they were made of, so a forced free of an array or of
/// any view of it frees that one buffer, and any later use of any handle to it, views
/// included, throws UseAfterFree at the call. Throws InvalidArgument for an empty handle,
/// UseAfterFree if it was already freed.
template <Element T>
void deallocate(const DeviceArray<T>& a, Force) {
  detail::Step& s = detail::step_of("deallocate", a);
  detail::note_escape("deallocate(force)");
  detail::Step& owner = s.buffer_owner();
  owner.device()->force_free(owner);
}

}  // namespace ferry
