#pragma once
// Element types: the closed set a DeviceArray may hold, and the compile-time rules that keep
// them apart (mixing two element types without astype does not compile).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "ferry/core/bfloat16.hpp"
#include "ferry/core/float16.hpp"

namespace ferry {

/// The element type of an array, known at run time (for the model, traces and messages).
/// New types go at the end: a DType's number indexes per-type tables (the tape's sums).
enum class DType : std::uint8_t {
  float32, float64, int32, int64, bfloat16, boolean, float16, int8, uint8, int16
};

/// How many element types there are.
inline constexpr std::size_t kDTypeCount = 10;

/// A 16-bit floating type (bfloat16, float16): stored in two bytes, computed in float. Kernels
/// widen each element to float, which holds it exactly, and round once when they store.
template <class T>
concept HalfFloating = std::same_as<T, bfloat16> || std::same_as<T, float16>;

/// An integer element type. The narrow ones (int8, uint8, int16) hold values in their own
/// width, like int32 and int64: arithmetic wraps in that width, it is never widened.
template <class T>
concept IntegerElement = std::same_as<T, std::int8_t> || std::same_as<T, std::uint8_t> ||
                         std::same_as<T, std::int16_t> || std::same_as<T, std::int32_t> ||
                         std::same_as<T, std::int64_t>;

/// A type a DeviceArray can hold. `bool` is the element type of masks (`less`, `where`).
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, double> || HalfFloating<T> ||
                  IntegerElement<T> || std::same_as<T, bool>;

namespace detail {

/// ferry's one compile error for an op given arrays of two element types (no promotion).
template <class A, class B>
constexpr void check_same_element() {
  static_assert(std::is_same_v<A, B>,
                "ferry: the element types differ; convert one operand with astype<T>() first");
}

}  // namespace detail

/// An element type with arithmetic: every element type but `bool`.
template <class T>
concept Numeric = Element<T> && !std::same_as<T, bool>;

/// A floating-point element type: the ones `exp`, `mean` or `softmax` accept.
template <class T>
concept Floating = std::same_as<T, float> || std::same_as<T, double> || HalfFloating<T>;

/// A C++ scalar that may stand for an element of an array of `T` in `a + s`, `s * a`, `full`...
/// Integer scalars work with every numeric array; floating scalars only with floating arrays,
/// so `int_array * 0.5` is a compile error rather than a silent truncation.
template <class S, class T>
concept ScalarFor = Numeric<T> && !std::same_as<std::remove_cvref_t<S>, bool> &&
                    (std::is_arithmetic_v<std::remove_cvref_t<S>> ||
                     HalfFloating<std::remove_cvref_t<S>>) &&
                    (Floating<T> || std::is_integral_v<std::remove_cvref_t<S>>);

template <Element T>
inline constexpr DType dtype_of = std::same_as<T, float>          ? DType::float32
                                  : std::same_as<T, double>       ? DType::float64
                                  : std::same_as<T, std::int32_t> ? DType::int32
                                  : std::same_as<T, std::int64_t> ? DType::int64
                                  : std::same_as<T, bfloat16>     ? DType::bfloat16
                                  : std::same_as<T, float16>      ? DType::float16
                                  : std::same_as<T, std::int8_t>  ? DType::int8
                                  : std::same_as<T, std::uint8_t> ? DType::uint8
                                  : std::same_as<T, std::int16_t> ? DType::int16
                                                                  : DType::boolean;

/// Bytes one element of `t` takes.
constexpr std::size_t size_of(DType t) noexcept {
  switch (t) {
    case DType::float64:
    case DType::int64: return 8;
    case DType::float32:
    case DType::int32: return 4;
    case DType::bfloat16:
    case DType::float16:
    case DType::int16: return 2;
    case DType::int8:
    case DType::uint8:
    case DType::boolean: return 1;
  }
  return 0;
}

/// Whether `t` is a floating-point type: the element types gradients flow through.
constexpr bool is_floating(DType t) noexcept {
  return t == DType::float32 || t == DType::float64 || t == DType::bfloat16 || t == DType::float16;
}

/// The NumPy-style name of `t`: "float32", "float16", "uint8", "bfloat16", "bool"...
constexpr std::string_view name_of(DType t) noexcept {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::bfloat16: return "bfloat16";
    case DType::boolean: return "bool";
    case DType::float16: return "float16";
    case DType::int8: return "int8";
    case DType::uint8: return "uint8";
    case DType::int16: return "int16";
  }
  return "?";
}

/// The element type whose name_of is `name` ("float32", "bool", ...), or none: what a file or a
/// command line names a type by.
constexpr std::optional<DType> dtype_named(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kDTypeCount; ++i) {
    const auto t = static_cast<DType>(i);
    if (name_of(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace ferry
