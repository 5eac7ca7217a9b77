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
  /// `d` is negative, not a number, or longer than a Duration holds (about 292 years).
  template <class Rep, class Period>
  static Cost fixed(std::chrono::duration<Rep, Period> d) {
    // Checked in floating point first: converting such a value to integer nanoseconds is
    // undefined behaviour, not an error.
    const double exact = std::chrono::duration<double, std::nano>(d).count();
    if (!(exact < static_cast<double>(Duration::max().count()))) {
      detail::fail<InvalidArgument>("Cost::fixed", "duration of ", exact,
                                    " ns is not a number or longer than a Duration holds");
    }
    if (exact < 0) detail::fail<InvalidArgument>("Cost::fixed", "negative duration of ", exact, " ns");
    Cost c;
    c.fixed_duration = std::chrono::ceil<Duration>(d);
    return c;
  }
};

}  // namespace ferry
