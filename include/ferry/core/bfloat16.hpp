#pragma once
// bfloat16: the upper 16 bits of an IEEE float (8 exponent bits, 7 mantissa bits).

#include <bit>
#include <cstdint>
#include <limits>

namespace ferry {

/// A 16-bit brain floating-point number. Converts from `float` with round-to-nearest-even
/// (NaN stays NaN, overflow rounds to infinity) and to `float` exactly. It defines no
/// arithmetic of its own: `a + b` computes in `float`, and assigning the result back rounds
/// once, which is what the kernels do too.
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() noexcept = default;
  // Implicit both ways, like the built-in floating types, so `bfloat16 x = 1.5f;` works.
  constexpr bfloat16(float value) noexcept : bits(round_to_bits(value)) {}  // NOLINT
  constexpr operator float() const noexcept {                              // NOLINT
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }

  /// The bfloat16 whose bit pattern is `bits`, without rounding.
  static constexpr bfloat16 from_bits(std::uint16_t raw) noexcept {
    bfloat16 b;
    b.bits = raw;
    return b;
  }

  /// Round-to-nearest-even of the float's upper half: add 0x7fff plus the lowest kept bit, so
  /// an exact tie rounds toward the even neighbour; a carry out of the mantissa bumps the
  /// exponent, which is how the largest floats become infinity.
  static constexpr std::uint16_t round_to_bits(float value) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    if ((u & 0x7fffffffU) > 0x7f800000U) {  // NaN: keep the sign, force a quiet NaN
      return static_cast<std::uint16_t>((u >> 16) | 0x0040U);
    }
    const std::uint32_t lowest_kept = (u >> 16) & 1U;
    return static_cast<std::uint16_t>((u + 0x7fffU + lowest_kept) >> 16);
  }
};

}  // namespace ferry

namespace std {
// Every member the standard lists, so generic code (denorm_min, digits10...) compiles for
// bfloat16 as it does for float.
template <>
struct numeric_limits<ferry::bfloat16> {
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
  static constexpr bool is_iec559 = false;  // not an IEEE 754 interchange format
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -125;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bool traps = numeric_limits<float>::traps;
  static constexpr bool tinyness_before = numeric_limits<float>::tinyness_before;
  static constexpr ferry::bfloat16 min() noexcept { return ferry::bfloat16::from_bits(0x0080); }
  static constexpr ferry::bfloat16 max() noexcept { return ferry::bfloat16::from_bits(0x7f7f); }
  static constexpr ferry::bfloat16 lowest() noexcept { return ferry::bfloat16::from_bits(0xff7f); }
  static constexpr ferry::bfloat16 epsilon() noexcept { return ferry::bfloat16::from_bits(0x3c00); }
  static constexpr ferry::bfloat16 round_error() noexcept {
    return ferry::bfloat16::from_bits(0x3f00);  // 0.5
  }
  static constexpr ferry::bfloat16 infinity() noexcept {
    return ferry::bfloat16::from_bits(0x7f80);
  }
  static constexpr ferry::bfloat16 quiet_NaN() noexcept {
    return ferry::bfloat16::from_bits(0x7fc0);
  }
  static constexpr ferry::bfloat16 signaling_NaN() noexcept {
    return ferry::bfloat16::from_bits(0x7fa0);  // quiet bit clear, payload set: float's pattern
  }
  static constexpr ferry::bfloat16 denorm_min() noexcept {
    return ferry::bfloat16::from_bits(0x0001);  // 2^-133
  }
};
}  // namespace std
