#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. Four 32-bit words of output are a pure function of a 128-bit counter
// and a 64-bit key, so element i of a random array is computed from (i, key) alone: the same
// key gives the same numbers on any runner, thread count or device. The kernels below give each
// element its own counter, so chunks never share state.

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

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

/// out[i] for i < n: uniform in [lo, hi) or normal with mean `lo` and deviation `hi` (Box-Muller
/// on the element's own words), computed in double and rounded once to T.
template <class T>
void random_fill(T* out, std::int64_t n, std::uint32_t k0, std::uint32_t k1, Distribution d,
                 double lo, double hi, const ChunkRunner& runner = inline_runner()) {
  parallel_for(
      runner, n, chunk_elements(sizeof(T)) / 8 + 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const PhiloxWords w = element_words(static_cast<std::uint64_t>(i), 0, k0, k1);
          double v = 0;
          if (d == Distribution::uniform) {
            v = lo + (hi - lo) * unit_double(w[0], w[1]);
          } else {
            const double u1 = 1.0 - unit_double(w[0], w[1]);  // (0, 1]: the log is finite
            const double u2 = unit_double(w[2], w[3]);
            v = lo + hi * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
          }
          out[i] = convert_value<T>(v);
        }
      });
}

}  // namespace ferry::kernels
