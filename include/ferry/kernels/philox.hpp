#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. Four 32-bit words of output are a pure function of a 128-bit counter
// and a 64-bit key, so element i of a random array is computed from (i, key) alone: the same
// key gives the same numbers on any runner, thread count or device. The kernels below give each
// element its own counter, so chunks never share state.

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

using PhiloxWords = std::array<std::uint32_t, 4>;

/// The ten rounds of Philox4x32 on `counter` under key (k0, k1).
constexpr PhiloxWords philox(PhiloxWords c, std::uint32_t k0, std::uint32_t k1) noexcept {
  constexpr std::uint64_t kM0 = 0xD2511F53;
  constexpr std::uint64_t kM1 = 0xCD9E8D57;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = kM0 * c[0];
    const std::uint64_t p1 = kM1 * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
    k0 += 0x9E3779B9;  // the key schedule: Weyl sequences of the golden ratio and sqrt(3) - 1
    k1 += 0xBB67AE85;
  }
  return c;
}

/// What a random array holds, each element from the words of its own counter.
enum class Distribution : std::uint8_t { uniform, normal };

/// The words of element `i` of a stream `domain` (0 for values, 1 for split keys).
constexpr PhiloxWords element_words(std::uint64_t i, std::uint32_t domain, std::uint32_t k0,
                                    std::uint32_t k1) noexcept {
  return philox({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), domain, 0}, k0,
                k1);
}

/// A uniform double in [0, 1) from 53 bits of two words.
constexpr double unit_double(std::uint32_t hi, std::uint32_t lo) noexcept {
  return static_cast<double>((static_cast<std::uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1p-53;
}

/// The floating T just below `t` (toward -inf).
template <class T>
T next_down(T t) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(t, -std::numeric_limits<T>::infinity());
  } else {  // float16, bfloat16: a sign bit and a magnitude of 15 bits
    if ((t.bits & 0x7fffU) == 0) return T::from_bits(0x8001U);  // below +-0
    return T::from_bits(static_cast<std::uint16_t>((t.bits & 0x8000U) != 0 ? t.bits + 1U
                                                                             : t.bits - 1U));
  }
}

/// The floating T just above `t` (toward +inf).
template <class T>
T next_up(T t) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(t, std::numeric_limits<T>::infinity());
  } else {
    if ((t.bits & 0x7fffU) == 0) return T::from_bits(0x0001U);  // above +-0
    return T::from_bits(static_cast<std::uint16_t>((t.bits & 0x8000U) != 0 ? t.bits - 1U
                                                                             : t.bits + 1U));
  }
}

/// The largest T below `hi`: uniform's bound, since rounding a draw to T (or lo + (hi - lo) * u
/// in double) can reach hi (float16 in [0, 1) gave 1.0 once in 4096 draws).
template <class T>
T largest_below(double hi) noexcept {
  T t = convert_value<T>(hi);
  while (!(static_cast<double>(t) < hi)) t = next_down(t);
  return t;
}

/// The smallest T at or above `lo` (finite): uniform's other bound, since rounding a draw to T
/// can fall below a lo that T cannot hold (float16's 0.1 is 0.0999755859375). Infinity when
/// `lo` is past T's largest value.
template <class T>
T smallest_at_least(double lo) noexcept {
  T t = convert_value<T>(lo);
  while (static_cast<double>(t) < lo) t = next_up(t);
  return t;
}

/// out[i] for i < n: uniform in [lo, hi) or normal with mean `lo` and deviation `hi` (Box-Muller
/// on the element's own words), computed in double and rounded once to T.
template <class T>
void random_fill(T* out, std::int64_t n, std::uint32_t k0, std::uint32_t k1, Distribution d,
                 double lo, double hi, const ChunkRunner& runner = inline_runner()) {
  const bool uniform = d == Distribution::uniform;
  // Bounds past half of double's range: hi - lo overflows, so lo (1 - u) + hi u there.
  const bool wide = uniform && !std::isfinite(hi - lo);
  // uniform() refused a range that holds no T, so bottom <= top.
  const T top = uniform && lo < hi ? largest_below<T>(hi) : T{};
  const T bottom = uniform && lo < hi ? smallest_at_least<T>(lo) : T{};
  parallel_for(
      runner, n, chunk_elements(sizeof(T)) / 8 + 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const PhiloxWords w = element_words(static_cast<std::uint64_t>(i), 0, k0, k1);
          if (uniform) {
            const double u = unit_double(w[0], w[1]);
            const T t = convert_value<T>(wide ? lo * (1 - u) + hi * u : lo + (hi - lo) * u);
            const double v = static_cast<double>(t);
            out[i] = lo < hi && !(v < hi) ? top : lo < hi && v < lo ? bottom : t;
          } else {
            const double u1 = 1.0 - unit_double(w[0], w[1]);  // (0, 1]: the log is finite
            const double u2 = unit_double(w[2], w[3]);
            out[i] = convert_value<T>(
                lo + hi * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
          }
        }
      });
}

}  // namespace ferry::kernels
