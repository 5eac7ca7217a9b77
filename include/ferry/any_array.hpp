#pragma once
// AnyDeviceArray: a handle to a DeviceArray whose element type is known only at run time. A
// checkpoint holds float32 weights, bfloat16 activations and int64 step counters side by side;
// this is the one type a list of them can share. It is the same untyped handle a DeviceArray<T>
// holds, so converting either way copies a reference, never values.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/device.hpp"

namespace ferry {

namespace detail {
struct AnyArrayAccess;
}

/// A handle to a device array of any element type. Copies are cheap (a reference); the array
/// stays alive while any handle to it, typed or not, does. Get the typed array back with
/// `as<T>()`.
class AnyDeviceArray {
 public:
  /// An empty handle: valid() is false and every other use throws InvalidArgument.
  AnyDeviceArray() noexcept = default;

  /// A handle to `a`'s array (empty if `a` is). Implicit, so a DeviceArray<T> goes wherever an
  /// AnyDeviceArray is wanted: `NamedArrays{{"w", w}, {"step", step}}`.
  template <Element T>
  AnyDeviceArray(DeviceArray<T> a) noexcept  // NOLINT: implicit on purpose
      : handle_(detail::ArrayAccess::take(a)) {}

  /// False for a default-constructed or moved-from handle, or one made from an empty array.
  bool valid() const noexcept { return static_cast<bool>(handle_); }

  /// The element type, known at once. Throws InvalidArgument on an empty handle.
  DType dtype() const { return held("dtype").dtype(); }
  /// The shape, known at once (symbolic inside a traced program, as DeviceArray::shape()).
  /// Throws InvalidArgument on an empty handle, UseAfterFree once the buffer was freed by
  /// deallocate(force).
  Shape shape() const { return detail::user_shape(step("shape")); }
  /// The device the array lives on. Throws like shape().
  Device device() const { return detail::DeviceAccess::wrap(step("device").device()); }

  /// The array as a DeviceArray<T>: a new handle to the same values (like copying a
  /// DeviceArray, it works on a freed array too; using the result then throws UseAfterFree).
  /// Throws InvalidArgument naming "as" and both element types when the array does not hold
  /// `T`, and for an empty handle.
  template <Element T>
  DeviceArray<T> as() const {
    const DType stored = held("as").dtype();
    if (stored != dtype_of<T>) {
      detail::fail<InvalidArgument>("as", "the array holds ", name_of(stored), ", not ",
                                    name_of(dtype_of<T>));
    }
    return detail::ArrayAccess::wrap<T>(handle_);
  }

 private:
  // The step behind a handle that must not be empty; a freed step still knows its element type.
  detail::Step& held(std::string_view op) const {
    detail::Step* s = handle_.get();
    if (s == nullptr) {
      detail::fail<InvalidArgument>(op, "got an empty AnyDeviceArray (default-constructed, "
                                        "moved from, or made from an empty array)");
    }
    return *s;
  }
  // The checks DeviceArray's step_of makes, for a handle that is not a DeviceArray.
  detail::Step& step(std::string_view op) const {
    detail::Step& s = held(op);
    if (s.freed()) {
      detail::fail<UseAfterFree>(op, "the array of shape ", s.shape(), " made by '",
                                 s.info().name, "' was freed by deallocate(force)");
    }
    return s;
  }

  friend struct detail::AnyArrayAccess;
  detail::Handle handle_;
};

namespace detail {

struct AnyArrayAccess {
  /// The step behind `a`, or nullptr for an empty handle; no checks.
  static Step* step(const AnyDeviceArray& a) noexcept { return a.handle_.get(); }
};

}  // namespace detail

/// Arrays with names, in order: what a checkpoint holds (see save_safetensors). A vector of
/// (name, array) pairs, built with braces (`{{"w", w}, {"step", step}}`) and iterated as one,
/// that also finds an array by its name: `ckpt.at("w")`.
class NamedArrays : public std::vector<std::pair<std::string, AnyDeviceArray>> {
 public:
  using Pairs = std::vector<std::pair<std::string, AnyDeviceArray>>;
  using Pairs::Pairs;
  using Pairs::at;

  NamedArrays() noexcept = default;
  /// The pairs of `pairs`, taken over: a plain vector of pairs goes wherever NamedArrays is
  /// wanted, as it did when NamedArrays was that vector. Never throws.
  NamedArrays(Pairs pairs) noexcept : Pairs(std::move(pairs)) {}  // NOLINT: implicit on purpose

  /// The array named `name` (the first, if two are). A search in order: fine for the tens to
  /// thousands of arrays a checkpoint holds, once each. Throws InvalidArgument naming
  /// NamedArrays::at and `name` when no array is named so.
  const AnyDeviceArray& at(std::string_view name) const { return (*this)[find(name)].second; }
  AnyDeviceArray& at(std::string_view name) { return (*this)[find(name)].second; }

  /// Whether an array is named `name`. Never throws.
  bool contains(std::string_view name) const noexcept {
    for (const auto& entry : *this) {
      if (entry.first == name) return true;
    }
    return false;
  }

 private:
  size_type find(std::string_view name) const {
    for (size_type i = 0; i < size(); ++i) {
      if ((*this)[i].first == name) return i;
    }
    detail::fail<InvalidArgument>("NamedArrays::at", "no array is named '", name, "' (of ", size(),
                                  " arrays)");
  }
};

}  // namespace ferry
