#pragma once
// Initial values for parameters, drawn on the host by a generator of ferry's own and imported.
// The standard library's distributions may give other numbers on another standard library, so
// the same seed would not give the same model everywhere; this generator does.

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/transfer.hpp"

namespace ferry::nn {

namespace detail {

/// SplitMix64: tiny, fast, and statistically good enough to place initial weights; its whole
/// state is one integer, so a seed is a full description of the stream.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1) with 53 random bits: every value is exact in double.
  double next_unit() noexcept { return static_cast<double>(next() >> 11) * 0x1p-53; }

 private:
  std::uint64_t state_;
};

/// The stream that seeds parameters made without an explicit seed.
inline std::atomic<std::uint64_t>& default_seed_stream() noexcept {
  static std::atomic<std::uint64_t> next{0x5eed};
  return next;
}

/// Appends `n` values uniform in [low, high] to `out`, from `gen`. Computed in double and
/// rounded once, so a value never leaves the closed range.
inline void append_uniform(std::vector<float>& out, std::size_t n, double low, double high,
                           SplitMix64& gen) {
  out.reserve(out.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(static_cast<float>(low + (high - low) * gen.next_unit()));
  }
}

/// Appends `n` values drawn from N(mean, std^2) to `out`, from `gen`: Box-Muller in double,
/// both values of each pair used, rounded once. 1 - next_unit() lies in (0, 1], so the
/// logarithm is finite.
inline void append_normal(std::vector<float>& out, std::size_t n, double mean, double std_dev,
                          SplitMix64& gen) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  out.reserve(out.size() + n);
  for (std::size_t i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - gen.next_unit()));
    const double angle = kTwoPi * gen.next_unit();
    out.push_back(static_cast<float>(mean + std_dev * radius * std::cos(angle)));
    if (i + 1 < n) out.push_back(static_cast<float>(mean + std_dev * radius * std::sin(angle)));
  }
}

}  // namespace detail

/// A seed for a parameter made without one: each call returns the next value of one
/// process-wide stream, so the layers of a model differ from each other, and a program that
/// builds its layers in the same order after the same manual_seed() gets the same values.
/// Safe from any thread; never throws.
inline std::uint64_t next_seed() noexcept {
  return detail::SplitMix64(detail::default_seed_stream().fetch_add(1, std::memory_order_relaxed))
      .next();
}

/// Restarts the stream next_seed() draws from (as torch.manual_seed restarts PyTorch's
/// default generator). Never throws.
inline void manual_seed(std::uint64_t seed) noexcept {
  detail::default_seed_stream().store(seed, std::memory_order_relaxed);
}

/// An array of `shape` on `device` with values uniform in [low, high], the same for the same
/// seed on every platform. Throws InvalidArgument naming nn::uniform when low > high or a bound
/// is not finite, and what to_device throws.
inline DeviceArray<float> uniform(const Device& device, const Shape& shape, double low,
                                  double high, std::uint64_t seed) {
  if (!std::isfinite(low) || !std::isfinite(high) || low > high) {
    ferry::detail::fail<InvalidArgument>("nn::uniform", "needs finite bounds low <= high, got ",
                                         low, " and ", high);
  }
  std::vector<float> values;
  detail::SplitMix64 gen(seed);
  detail::append_uniform(values, static_cast<std::size_t>(shape.numel()), low, high, gen);
  return to_device(device, std::move(values), shape);
}

}  // namespace ferry::nn
