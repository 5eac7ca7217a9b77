#pragma once
// StepTally: the stand-in device model. It keeps no timeline, only totals of what the runtime
// submitted, which is enough to prove the model seam carries what a timing model needs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ferry/runtime/device_state.hpp"

namespace ferry::detail {

class StepTally final : public StepObserver {
 public:
  struct Totals {
    std::array<std::uint64_t, 5> steps{};  // indexed by StepKind
    double flops = 0;
    double bytes_read = 0;
    double bytes_written = 0;
    std::uint64_t host_syncs = 0;
  };

  void submitted(const Step& s) override {
    totals_.steps[static_cast<std::size_t>(s.info().kind)] += 1;
    totals_.flops += s.info().cost.flops;
    totals_.bytes_read += s.info().cost.bytes_read;
    totals_.bytes_written += s.info().cost.bytes_written;
  }
  void host_sync(std::span<Step* const>) override { totals_.host_syncs += 1; }

  const Totals& totals() const noexcept { return totals_; }

 private:
  Totals totals_;
};

}  // namespace ferry::detail
