#pragma once
// Cost: the work a step does, which the device model turns into a modeled duration.

#include <chrono>
#include <optional>

#include "ferry/core/error.hpp"

namespace ferry {

/// Modeled time: whole nanoseconds, so a timeline never accumulates rounding drift.
using Duration = std::chrono::nanoseconds;

/// What one step costs: operations and the bytes it reads and writes in device memory, which
/// the model divides by the device's rates (a roofline); or, with `Cost::fixed`, an exact time.
struct Cost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  /// Set by Cost::fixed: the step then takes exactly this long on a compute unit.
  std::optional<Duration> fixed_duration = std::nullopt;

  /// A step that takes exactly `d` on a compute unit, whatever the device's rates. Any
  /// std::chrono duration; fractions of a nanosecond round up. Throws InvalidArgument when
  /// `d` is negative.
  template <class Rep, class Period>
  static Cost fixed(std::chrono::duration<Rep, Period> d) {
    const auto ns = std::chrono::ceil<Duration>(d);
    if (ns < Duration::zero()) {
      detail::fail<InvalidArgument>("Cost::fixed", "negative duration of ", ns.count(), " ns");
    }
    Cost c;
    c.fixed_duration = ns;
    return c;
  }
};

}  // namespace ferry
