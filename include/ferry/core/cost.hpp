#pragma once
// Cost: the work a step does, which the device model turns into a modeled duration.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ratio>

#include "ferry/core/error.hpp"

namespace ferry {

/// Modeled time: whole nanoseconds, so a timeline never accumulates rounding drift.
using Duration = std::chrono::nanoseconds;

/// The class of a kernel, which says how much of the device's peak it reaches (see
/// DeviceSpec::kernel_rates) and how its work divides into tiles.
enum class Work : std::uint8_t {
  elementwise,  // streams its operands once: tiles of DeviceSpec::tile_bytes
  reduction,    // reduces rows (sum, softmax): tiles of tile_bytes
  layout,  // moves elements to other places (transpose, layout conversions): tiles of tile_bytes
  matmul,  // a (batched) matrix product: output tiles chosen by the model, see `grid`
};

/// What one step costs: operations and the bytes it reads and writes in device memory, which
/// the model turns into a duration with the device's rates; or, with `Cost::fixed`, an exact time.
struct Cost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  /// Set by Cost::fixed: the step then takes exactly this long on one compute unit.
  std::optional<Duration> fixed_duration = std::nullopt;
  Work work = Work::elementwise;
  /// Independent tiles the kernel's work divides into, each run by one compute unit; 0 lets the
  /// model derive them (from the bytes, or from `grid` for a matmul). 1 keeps the kernel on
  /// exactly one unit.
  std::int64_t tiles = 0;
  /// For Work::matmul: {batch, m, k, n}.
  std::array<std::int64_t, 4> grid{};

  /// Field by field (the model's plan memo asks whether a step costs what the last one did, at
  /// every submission): the grid element by element, where the defaulted comparison called
  /// memcmp for its 32 bytes.
  bool operator==(const Cost& o) const noexcept {
    return flops == o.flops && bytes_read == o.bytes_read && bytes_written == o.bytes_written &&
           fixed_duration == o.fixed_duration && work == o.work && tiles == o.tiles &&
           grid[0] == o.grid[0] && grid[1] == o.grid[1] && grid[2] == o.grid[2] &&
           grid[3] == o.grid[3];
  }

  /// The cost of `batch` products of (m x k) by (k x n) matrices with elements of `element_bytes`.
  static Cost matmul(std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                     double element_bytes) {
    Cost c;
    const auto b = static_cast<double>(batch);
    c.flops = 2.0 * b * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    c.bytes_read = b * static_cast<double>(m * k + k * n) * element_bytes;
    c.bytes_written = b * static_cast<double>(m * n) * element_bytes;
    c.work = Work::matmul;
    c.grid = {batch, m, k, n};
    return c;
  }

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
    if (exact < 0)
      detail::fail<InvalidArgument>("Cost::fixed", "negative duration of ", exact, " ns");
    Cost c;
    c.fixed_duration = std::chrono::ceil<Duration>(d);
    c.tiles = 1;
    return c;
  }
};

namespace detail {
/// The longest a modeled step may take: 2^53 ns (about 104 days). custom refuses a cost that
/// takes longer alone on its device, so that sums of a program's times stay far inside a
/// Duration (2^63 ns).
inline constexpr Duration kLongestStep{std::int64_t{1} << 53};
}  // namespace detail

}  // namespace ferry
