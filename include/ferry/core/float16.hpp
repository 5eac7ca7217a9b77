#pragma once
// float16: IEEE 754 binary16 (1 sign bit, 5 exponent bits biased by 15, 10 mantissa bits), the
// "half" of fp16 checkpoints.

#include <bit>
#include <cstdint>
#include <limits>

namespace ferry {

/// A 16-bit IEEE half-precision number. Converts from `float` with round-to-nearest-even
/// (subnormals kept, overflow to infinity, NaN stays a NaN with its sign) and to `float`
/// exactly. Like bfloat16 it defines no arithmetic of its own: `a + b` computes in `float`,
/// and assigning the result back rounds once, which is what the kernels do too.
struct float16 {
  std::uint16_t bits = 0;

  constexpr float16() noexcept = default;
  // Implicit both ways, like the built-in floating types, so `float16 x = 1.5f;` works.
  constexpr float16(float value) noexcept : bits(round_to_bits(value)) {}  // NOLINT
  constexpr operator float() const noexcept {                              // NOLINT
    return std::bit_cast<float>(widen_bits(bits));
  }

  /// The float16 whose bit pattern is `bits`, without rounding.
  static constexpr float16 from_bits(std::uint16_t raw) noexcept {
    float16 h;
    h.bits = raw;
    return h;
  }

  /// The bits of the float equal to the half `h`. Every half is a float, so nothing rounds:
  /// a normal one moves its exponent from bias 15 to bias 127; a subnormal one (m * 2^-24)
  /// becomes a normal float once its leading mantissa bit is made the implicit one; infinity
  /// and NaN keep their payload in the float mantissa's top bits (so a quiet NaN stays quiet).
  static constexpr std::uint32_t widen_bits(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fU;
    const std::uint32_t mantissa = h & 0x3ffU;
    if (exponent == 0x1f) return sign | 0x7f800000U | (mantissa << 13);
    if (exponent != 0) return sign | ((exponent + 112) << 23) | (mantissa << 13);
    if (mantissa == 0) return sign;
    // m * 2^-24 with m's leading one at bit `top`: 2^(top - 24) times 1.fraction.
    const int top = 31 - std::countl_zero(mantissa);
    const std::uint32_t fraction = (mantissa << (23 - top)) & 0x7fffffU;
    return sign | (static_cast<std::uint32_t>(top + 103) << 23) | fraction;
  }

  /// Round-to-nearest-even of a float to the half grid. Three ranges, by magnitude:
  /// - at least 65520 (halfway from the largest half, 65504, to 2^16, taken by the tie rule
  ///   because 65504's mantissa is odd): infinity;
  /// - at least 2^-14, the smallest normal half: re-bias the exponent, then drop 13 mantissa
  ///   bits, adding 0xfff plus the lowest kept bit so an exact tie rounds to even; a carry out
  ///   of the mantissa bumps the exponent, as it should;
  /// - below: a subnormal, a multiple of 2^-24: the float's 24-bit significand shifted right
  ///   by its distance from that grid, rounded the same way (a carry to 0x400 is the smallest
  ///   normal, whose encoding it is).
  static constexpr std::uint16_t round_to_bits(float value) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000U);
    const std::uint32_t magnitude = u & 0x7fffffffU;
    if (magnitude > 0x7f800000U) {  // NaN: the payload's top bits, forced quiet
      return static_cast<std::uint16_t>(sign | 0x7e00U | ((magnitude >> 13) & 0x3ffU));
    }
    if (magnitude >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);
    if (magnitude >= 0x38800000U) {
      const std::uint32_t rebased = magnitude - (112U << 23);
      const std::uint32_t lowest_kept = (rebased >> 13) & 1U;
      return static_cast<std::uint16_t>(sign | ((rebased + 0xfffU + lowest_kept) >> 13));
    }
    const auto exponent = static_cast<int>(magnitude >> 23);
    if (exponent < 102) return sign;  // below 2^-25, under half the smallest subnormal
    const std::uint32_t significand = (magnitude & 0x7fffffU) | 0x800000U;
    const int shift = 126 - exponent;  // from 14 to 24
    const std::uint32_t kept = significand >> shift;
    const std::uint32_t rest = significand & ((1U << shift) - 1U);
    const std::uint32_t half = 1U << (shift - 1);
    const bool up = rest > half || (rest == half && (kept & 1U) != 0);
    return static_cast<std::uint16_t>(sign | (kept + (up ? 1U : 0U)));
  }
};

}  // namespace ferry

namespace std {
// Every member the standard lists, so generic code (denorm_min, digits10...) compiles for
// float16 as it does for float.
template <>
struct numeric_limits<ferry::float16> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = true;  // binary16 is an IEEE 754 interchange format
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 11;
  static constexpr int digits10 = 3;
  static constexpr int max_digits10 = 5;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr bool traps = numeric_limits<float>::traps;
  static constexpr bool tinyness_before = numeric_limits<float>::tinyness_before;
  static constexpr ferry::float16 min() noexcept { return ferry::float16::from_bits(0x0400); }
  static constexpr ferry::float16 max() noexcept { return ferry::float16::from_bits(0x7bff); }
  static constexpr ferry::float16 lowest() noexcept { return ferry::float16::from_bits(0xfbff); }
  static constexpr ferry::float16 epsilon() noexcept { return ferry::float16::from_bits(0x1400); }
  static constexpr ferry::float16 round_error() noexcept {
    return ferry::float16::from_bits(0x3800);  // 0.5
  }
  static constexpr ferry::float16 infinity() noexcept { return ferry::float16::from_bits(0x7c00); }
  static constexpr ferry::float16 quiet_NaN() noexcept { return ferry::float16::from_bits(0x7e00); }
  static constexpr ferry::float16 signaling_NaN() noexcept {
    return ferry::float16::from_bits(0x7d00);  // quiet bit clear, payload set: float's pattern
  }
  static constexpr ferry::float16 denorm_min() noexcept {
    return ferry::float16::from_bits(0x0001);  // 2^-24
  }
};
}  // namespace std
