#pragma once
// The scalar semantics of every elementwise op, one functor each. They act on compute values
// (float for bfloat16 and float16) and define every case C++ leaves undefined:
// - integer +, -, *, neg and abs wrap around in two's complement (INT_MIN / -1 is INT_MIN),
//   in the element's own width: int8 127 + 1 is -128, uint8 0 - 1 is 255, -uint8 1 is 255;
// - integer division truncates toward zero, and division by zero throws InvalidArgument;
// - integer pow with a negative exponent throws InvalidArgument (as NumPy does);
// - maximum and minimum propagate NaN, as do relu, sign and the reductions;
// - round rounds half to even (NumPy's and the default floating-point environment's rule).

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

#include "ferry/core/error.hpp"

namespace ferry::kernels {

template <class C>
inline constexpr bool is_int_v = std::is_integral_v<C> && !std::is_same_v<C, bool>;

/// The unsigned type integer arithmetic on C wraps in: C's own unsigned type, but at least
/// unsigned int. A narrower one would be promoted to (signed) int, where uint16 65535 * 65535
/// overflows; modulo 2^32 the low 8 or 16 bits come out the same, and the cast back to C keeps
/// just those (C++20 defines that conversion as modular).
template <class C>
using wrap_t =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

template <class C>
constexpr C wrap_add(C a, C b) noexcept {
  using U = wrap_t<C>;
  return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
}
template <class C>
constexpr C wrap_sub(C a, C b) noexcept {
  using U = wrap_t<C>;
  return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
}
template <class C>
constexpr C wrap_mul(C a, C b) noexcept {
  using U = wrap_t<C>;
  return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
}

/// Whether a < 0, written so that an unsigned C asks nothing (no always-false comparison).
template <class C>
constexpr bool is_negative(C a) noexcept {
  if constexpr (std::is_signed_v<C> || !std::is_integral_v<C>) {
    return a < C(0);
  } else {
    static_cast<void>(a);
    return false;
  }
}

template <class C>
constexpr bool is_nan(C x) noexcept {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

struct Add {
  template <class C>
  C operator()(C a, C b) const noexcept {
    if constexpr (is_int_v<C>) return wrap_add(a, b);
    else return a + b;
  }
};

struct Subtract {
  template <class C>
  C operator()(C a, C b) const noexcept {
    if constexpr (is_int_v<C>) return wrap_sub(a, b);
    else return a - b;
  }
};

struct Multiply {
  template <class C>
  C operator()(C a, C b) const noexcept {
    if constexpr (is_int_v<C>) return wrap_mul(a, b);
    else return a * b;
  }
};

struct Divide {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (is_int_v<C>) {
      if (b == 0) detail::fail<InvalidArgument>("divide", "integer division by zero");
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return wrap_sub(C(0), a);  // INT_MIN / -1 overflows; wrap instead
      }
      return static_cast<C>(a / b);  // int8 and int16 divide as int: the quotient fits
    } else {
      return a / b;
    }
  }
};

struct Maximum {
  template <class C>
  C operator()(C a, C b) const noexcept {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? b : a;
  }
};

struct Minimum {
  template <class C>
  C operator()(C a, C b) const noexcept {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return b < a ? b : a;
  }
};

struct Pow {
  template <class C>
  C operator()(C base, C exponent) const {
    if constexpr (is_int_v<C>) {
      if (is_negative(exponent)) {
        detail::fail<InvalidArgument>("pow", "negative integer exponent ", +exponent);
      }
      C result = 1;
      while (exponent != 0) {  // exponentiation by squaring, wrapping like multiply
        if ((exponent & 1) != 0) result = wrap_mul(result, base);
        base = wrap_mul(base, base);
        exponent = static_cast<C>(exponent >> 1);
      }
      return result;
    } else {
      return std::pow(base, exponent);
    }
  }
};

struct Less {
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a < b;
  }
};

struct Greater {
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a > b;
  }
};

// Equality takes bool masks too (mask == mask), as NumPy's does; the orderings need numbers.
struct Equal {
  static constexpr bool kAnyElement = true;
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a == b;
  }
};

struct LessEqual {
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a <= b;
  }
};

struct GreaterEqual {
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a >= b;
  }
};

/// a != b: true where either is NaN (the negation of equal).
struct NotEqual {
  static constexpr bool kAnyElement = true;
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return !(a == b);
  }
};

// The logical ops take any element type by its truth (non-zero is true), as NumPy's do.
struct LogicalAnd {
  static constexpr bool kAnyElement = true;
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a != C(0) && b != C(0);
  }
};

struct LogicalOr {
  static constexpr bool kAnyElement = true;
  template <class C>
  bool operator()(C a, C b) const noexcept {
    return a != C(0) || b != C(0);
  }
};

struct LogicalNot {
  template <class C>
  bool operator()(C a) const noexcept {
    return a == C(0);
  }
};

struct IsNan {
  template <class C>
  bool operator()(C a) const noexcept {
    return is_nan(a);
  }
};

/// Neither infinite nor NaN (every integer is finite).
struct IsFinite {
  template <class C>
  bool operator()(C a) const noexcept {
    if constexpr (std::is_floating_point_v<C>) {
      return a - a == C(0);  // inf - inf and NaN - NaN are NaN
    } else {
      return true;
    }
  }
};

struct Negate {
  template <class C>
  C operator()(C a) const noexcept {
    if constexpr (is_int_v<C>) return wrap_sub(C(0), a);
    else return -a;
  }
};

struct Abs {
  template <class C>
  C operator()(C a) const noexcept {
    if constexpr (is_int_v<C>) return is_negative(a) ? wrap_sub(C(0), a) : a;
    else return std::abs(a);
  }
};

struct Relu {
  template <class C>
  C operator()(C a) const noexcept {
    return is_negative(a) ? C(0) : a;  // written so NaN stays NaN
  }
};

struct Exp {
  template <class C>
  C operator()(C a) const noexcept {
    return std::exp(a);
  }
};

struct Log {
  template <class C>
  C operator()(C a) const noexcept {
    return std::log(a);
  }
};

struct Sqrt {
  template <class C>
  C operator()(C a) const noexcept {
    return std::sqrt(a);
  }
};

struct Tanh {
  template <class C>
  C operator()(C a) const noexcept {
    return std::tanh(a);
  }
};

/// 1 / (1 + e^-x), in the form that cannot overflow for either sign of x.
struct Sigmoid {
  template <class C>
  C operator()(C a) const noexcept {
    if (a >= C(0)) return C(1) / (C(1) + std::exp(-a));
    const C e = std::exp(a);
    return e / (C(1) + e);
  }
};

/// The exact GELU, x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), not the tanh approximation.
struct Gelu {
  template <class C>
  C operator()(C a) const noexcept {
    if (a == -std::numeric_limits<C>::infinity()) return C(0);  // the limit, not -inf * 0
    // erfc(-a / sqrt 2), the same as 1 + erf(a / sqrt 2) but without its cancellation in the
    // negative tail (in float 1 + erf lost 4% of gelu(-5) and all of gelu(-10)).
    return C(0.5) * a * std::erfc(-a / std::numbers::sqrt2_v<C>);
  }
};

struct Sin {
  template <class C>
  C operator()(C a) const noexcept {
    return std::sin(a);
  }
};

struct Cos {
  template <class C>
  C operator()(C a) const noexcept {
    return std::cos(a);
  }
};

struct Erf {
  template <class C>
  C operator()(C a) const noexcept {
    return std::erf(a);
  }
};

struct Floor {
  template <class C>
  C operator()(C a) const noexcept {
    return std::floor(a);
  }
};

struct Ceil {
  template <class C>
  C operator()(C a) const noexcept {
    return std::ceil(a);
  }
};

/// To the nearest integer, halves to even (std::nearbyint in the default rounding mode, which
/// ferry never changes): round(2.5) is 2, round(-0.5) is -0.
struct Round {
  template <class C>
  C operator()(C a) const noexcept {
    return std::nearbyint(a);
  }
};

/// -1, 0 or 1 by the sign of a; 0 for both zeros, NaN for NaN.
struct Sign {
  template <class C>
  C operator()(C a) const noexcept {
    if (is_nan(a)) return a;
    return static_cast<C>((C(0) < a) - (is_negative(a) ? 1 : 0));
  }
};

struct Square {
  template <class C>
  C operator()(C a) const noexcept {
    if constexpr (is_int_v<C>) return wrap_mul(a, a);
    else return a * a;
  }
};

/// log(1 + a), exact for small a.
struct Log1p {
  template <class C>
  C operator()(C a) const noexcept {
    return std::log1p(a);
  }
};

/// e^a - 1, exact for small a.
struct Expm1 {
  template <class C>
  C operator()(C a) const noexcept {
    return std::expm1(a);
  }
};

/// 1 / sqrt(a): inf at 0, NaN below it.
struct Rsqrt {
  template <class C>
  C operator()(C a) const noexcept {
    return C(1) / std::sqrt(a);
  }
};

/// a * sigmoid(a) (swish).
struct Silu {
  template <class C>
  C operator()(C a) const noexcept {
    if (a == -std::numeric_limits<C>::infinity()) return C(0);  // the limit, as gelu's
    return a * Sigmoid{}(a);
  }
};

/// log(1 + e^a), as max(a, 0) + log1p(e^-|a|): no overflow for large a, no loss for small.
struct Softplus {
  template <class C>
  C operator()(C a) const noexcept {
    if (is_nan(a)) return a;
    return (a > C(0) ? a : C(0)) + std::log1p(std::exp(-std::abs(a)));
  }
};

/// The standard normal distribution function Phi(x) = (1 + erf(x / sqrt 2)) / 2: GELU's
/// gradient is Phi(x) + x phi(x).
struct NormalCdf {
  template <class C>
  C operator()(C a) const noexcept {
    return C(0.5) * (C(1) + std::erf(a / std::numbers::sqrt2_v<C>));
  }
};

}  // namespace ferry::kernels
