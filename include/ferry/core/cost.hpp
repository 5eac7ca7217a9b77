#pragma once
// Cost: the work a step does, which the device model turns into a modeled duration.

namespace ferry {

/// What one step costs: floating-point (or integer) operations and the bytes it reads and
/// writes in device memory. Counts, not times: the model divides them by the device's rates.
struct Cost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
};

}  // namespace ferry
