#pragma once
// The end of modeled time, and sums that stop at a bound instead of overflowing.
//
// A step may last up to kLongestStep (2^53 ns), but about a thousand of them in a row, or a
// thousand launches of a spec's longest launch overhead, pass the 2^63 ns a Duration holds, and
// a signed overflow is undefined, not an error. So a device's model admits no step that would
// end past kHorizon (2^62 ns, about 146 years): it fails, typed, as a step too long does
// (model/simulator.hpp). The other half of the range is headroom: what the model adds to a
// time it reached (a step's work re-timed as units and bandwidth free up, its spills and
// fills, a link's message) stays inside a Duration. Figures that multiply times (unit time:
// time x units) or add up many of them (bytes over a link) are held at the largest value.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ferry/core/cost.hpp"

namespace ferry::detail {

/// The latest modeled time a step may end at: 2^62 ns, about 146 years.
inline constexpr Duration kHorizon{std::int64_t{1} << 62};

/// a + b for a, b >= 0, held at the largest int64. Throws nothing.
constexpr std::int64_t held_sum(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  return b > most - a ? most : a + b;
}

/// a x b for a, b >= 0, held at the largest int64. Throws nothing.
constexpr std::int64_t held_product(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  return b != 0 && a > most / b ? most : a * b;
}

/// t + d for t, d >= 0, held at the largest Duration. Throws nothing.
constexpr Duration held_sum(Duration t, Duration d) noexcept {
  return Duration(held_sum(t.count(), d.count()));
}

/// t + d for t, d >= 0, held at kHorizon (t itself where it is already past): a link's clock,
/// whose messages the devices then refuse to receive past the horizon. Throws nothing.
constexpr Duration until_horizon(Duration t, Duration d) noexcept {
  return t >= kHorizon || d >= kHorizon - t ? std::max(t, kHorizon) : t + d;
}

}  // namespace ferry::detail
