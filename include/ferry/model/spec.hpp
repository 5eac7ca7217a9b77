#pragma once
// DeviceSpec: the numbers that describe a modeled accelerator, and presets with public figures.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "ferry/core/cost.hpp"
#include "ferry/core/error.hpp"
#include "ferry/model/faults.hpp"

namespace ferry {

/// How the model picks the next ready command for a free engine.
enum class SchedulePolicy : std::uint8_t {
  fifo,           // submission order
  critical_path,  // the longest remaining path first (on the graph known at that moment)
};

/// Peak operations per second of ONE compute unit, per class of element type.
struct UnitRates {
  double bfloat16 = 0;  // and float16
  double float32 = 0;
  double float64 = 0;
  double integer = 0;  // int8, uint8, int16, int32, int64 and bool
};

/// What real kernels of one class reach of the device's peaks.
struct KernelClassRates {
  /// The fraction of a unit's peak flops that a unit running such a kernel sustains.
  double compute_efficiency = 1;
  /// The most memory traffic one unit running such a kernel moves per second: its access
  /// pattern and the loads it keeps in flight limit it. 0: only its share of memory limits it;
  /// else at least 1 per second.
  double unit_bytes_per_second = 0;
  /// What each tile costs beyond its work (loading its first operands, storing its result):
  /// every wave of the kernel pays it once.
  Duration tile_overhead{};
};

/// Achievable rates per class of kernel (Cost::work).
struct KernelRates {
  KernelClassRates elementwise;
  KernelClassRates reduction;
  KernelClassRates layout;
  KernelClassRates matmul;
};

/// A modeled accelerator. Units are in the names; times are std::chrono durations. Every rate
/// and capacity must be positive and every time non-negative (Device::modeled checks).
struct DeviceSpec {
  std::string name = "custom";
  /// Compute units. A kernel's tiles spread over the units free when it starts (in waves when
  /// it has more tiles than units); the units it does not take run other kernels meanwhile.
  std::int64_t compute_units = 1;
  UnitRates unit_flops_per_second;
  /// What kernels reach of those peaks, per class.
  KernelRates kernel_rates;
  /// Bytes of operands one tile of a streaming kernel (elementwise, reduction, layout) covers:
  /// a kernel moving B bytes has ceil(B / tile_bytes) tiles.
  std::int64_t tile_bytes = std::int64_t{1} << 20;
  /// The largest edge of a matmul's output tile (16 to 2^18). The model picks edges from it down
  /// to 16, and splits k, to make the product fastest, as tuned libraries do.
  std::int64_t matmul_tile = 128;
  /// A unit computing an output tile of `a` elements sustains a / (a + matmul_tile_half_area)
  /// of its matmul rate: small tiles reuse less of what they load. 0: no loss.
  double matmul_tile_half_area = 0;
  /// Of the tilings within this fraction of the fastest, a matmul takes the one holding the
  /// fewest units for the least time, leaving units to kernels beside it.
  double matmul_tile_slack = 0;

  std::int64_t dram_bytes = 0;
  /// DRAM bandwidth, shared by the kernels and device-to-device copies running at once.
  double dram_bytes_per_second = 0;
  /// The fraction of dram_bytes_per_second that running work reaches together.
  double dram_efficiency = 1;
  /// A cache in front of DRAM: a kernel whose bytes fit in it moves them at
  /// l2_bytes_per_second (shared by the kernels that do) instead of DRAM's. 0 bytes: none.
  std::int64_t l2_bytes = 0;
  double l2_bytes_per_second = 0;
  /// The whole device's on-chip memory.
  std::int64_t l1_bytes = 0;
  double l1_bytes_per_second = 0;

  /// Host to device and device to host are separate engines, so the directions overlap. A copy
  /// takes its latency, then its bytes at the rate; and at least its minimum duration (the
  /// completion a runtime signals, which small transfers finish under).
  double h2d_bytes_per_second = 0;
  Duration h2d_latency{};
  Duration h2d_min_duration{};
  double d2h_bytes_per_second = 0;
  Duration d2h_latency{};
  Duration d2h_min_duration{};
  /// The link to other devices.
  double d2d_bytes_per_second = 0;
  Duration d2d_latency{};

  /// Device-side cost of starting one kernel, added to its roofline time.
  Duration kernel_latency{};
  /// Host-side cost of submitting one step: the modeled host clock advances by it per call.
  Duration launch_overhead{};

  SchedulePolicy policy = SchedulePolicy::critical_path;
  /// How many of the most recent slices the timeline trace keeps: a step's, its spills' and
  /// fills', and each of the host's waits count one (older ones are dropped; 0 keeps none).
  /// Each takes about 130 bytes.
  std::int64_t trace_steps = 10'000;

  /// Failures to inject (none by default), and what the device does with a step it rejects.
  FaultPlan faults;
  Fallback fallback = Fallback::none;
};

namespace specs {

/// Shaped like an NVIDIA H100 PCIe card. From its product brief (PB-11133-001) and datasheet:
/// 114 SMs; 756 TFLOPS dense BF16 tensor, 51.2 TFLOPS FP32, 25.6 TFLOPS FP64; INT32 at half the
/// FP32 rate (the Hopper whitepaper's ratio); 80 GiB HBM2e at 2.0 TB/s; PCIe Gen5 x16, 128 GB/s
/// both ways together; NVLink bridge 600 GB/s both ways together. L1: 256 KiB per SM, read at
/// 128 bytes per clock per SM at the 1.755 GHz boost clock. Not on the datasheet, and so the
/// typical order of magnitude measured for CUDA instead: ~2 us of latency per PCIe or NVLink
/// copy, ~3 us from launch to kernel start, ~4 us of host time per launch.
inline DeviceSpec pcie_accelerator() {
  constexpr double kSms = 114;
  DeviceSpec s;
  s.name = "pcie_accelerator";
  s.compute_units = 114;
  s.unit_flops_per_second = {756e12 / kSms, 51.2e12 / kSms, 25.6e12 / kSms, 25.6e12 / kSms};
  s.dram_bytes = std::int64_t{80} << 30;
  s.dram_bytes_per_second = 2.0e12;
  s.l1_bytes = 114 * (std::int64_t{256} << 10);
  s.l1_bytes_per_second = 128 * 1.755e9 * kSms;
  s.h2d_bytes_per_second = 64e9;
  s.h2d_latency = std::chrono::microseconds(2);
  s.d2h_bytes_per_second = 64e9;
  s.d2h_latency = std::chrono::microseconds(2);
  s.d2d_bytes_per_second = 300e9;
  s.d2d_latency = std::chrono::microseconds(2);
  s.kernel_latency = std::chrono::microseconds(3);
  s.launch_overhead = std::chrono::microseconds(4);
  // The same architecture as h100_sxm(): its 50 MB L2 and the rates fitted there, the per-unit
  // bandwidths scaled by the DRAM bandwidth per SM.
  s.l2_bytes = 50'000'000;
  s.l2_bytes_per_second = 6.13e12 * kSms / 132;
  s.dram_efficiency = 0.900;
  s.tile_bytes = std::int64_t{64} << 10;
  const double per_sm = (2.0e12 / kSms) / (3.35e12 / 132);
  s.kernel_rates.elementwise = {1, 642.8e9 * per_sm, {}};
  s.kernel_rates.reduction = {1, 18.37e9 * per_sm, {}};
  s.kernel_rates.layout = {1, 7.56e9 * per_sm, {}};
  s.kernel_rates.matmul = {0.927, 0, std::chrono::nanoseconds(801)};
  s.matmul_tile_half_area = 4458;
  s.matmul_tile_slack = 0.3;
  return s;
}

/// Shaped like a Tenstorrent Wormhole n150: a mesh of many cores, each with large SRAM, and
/// GDDR. From Tenstorrent's published card specification: 72 Tensix cores at 1 GHz; 108 MB SRAM
/// (1.5 MB per core); 12 GB GDDR6 at 288 GB/s; 74 TFLOPS FP16 (taken for BF16); PCIe 4.0 x16
/// (16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s each way); two 400 GbE ports (100 GB/s each way).
/// Assumed, as the card's page does not give them: FP32 at a quarter of the FP16 rate, FP64
/// (emulated) at an eighth of FP32, integers at the FP32 rate; SRAM read at 64 bytes per clock
/// per core; 2 us per copy over PCIe or Ethernet, 1 us from launch to kernel start, 2 us of host
/// time per launch.
inline DeviceSpec mesh_accelerator() {
  constexpr double kCores = 72;
  DeviceSpec s;
  s.name = "mesh_accelerator";
  s.compute_units = 72;
  const double bf16 = 74e12 / kCores;
  s.unit_flops_per_second = {bf16, bf16 / 4, bf16 / 32, bf16 / 4};
  s.dram_bytes = std::int64_t{12} << 30;
  s.dram_bytes_per_second = 288e9;
  s.l1_bytes = 72 * (std::int64_t{3} << 19);  // 1.5 MiB a core
  s.l1_bytes_per_second = 64 * 1e9 * kCores;
  s.h2d_bytes_per_second = 31.5e9;
  s.h2d_latency = std::chrono::microseconds(2);
  s.d2h_bytes_per_second = 31.5e9;
  s.d2h_latency = std::chrono::microseconds(2);
  s.d2d_bytes_per_second = 100e9;
  s.d2d_latency = std::chrono::microseconds(2);
  s.kernel_latency = std::chrono::microseconds(1);
  s.launch_overhead = std::chrono::microseconds(2);
  // Not measured: the fractions of peak fitted on h100_sxm() (DRAM, matmul), with 32 KiB tiles.
  s.dram_efficiency = 0.900;
  s.tile_bytes = std::int64_t{32} << 10;
  s.kernel_rates.matmul = {0.927, 0, std::chrono::nanoseconds(801)};
  s.matmul_tile_half_area = 4458;
  s.matmul_tile_slack = 0.3;
  return s;
}

/// An NVIDIA H100 SXM5 80GB (HBM3). From the data sheet: 132 SMs; 989.4 TFLOPS dense BF16
/// tensor, 66.9 TFLOPS FP32, 33.5 TFLOPS FP64 (and INT32, at half the FP32 rate); 80 GB of HBM3
/// at 3.35 TB/s; 50 MB of L2; 256 KB of L1 per SM, read at 128 bytes per clock at the
/// 1.98 GHz boost clock; PCIe Gen5 x16, 64 GB/s each way; NVLink 4, 450 GB/s each way.
/// Calibrated by ferry::calibrate on measurements of that device (shared/data/devices/
/// h100_sxm.csv: PyTorch 2.11, CUDA graphs): every latency, the achievable fraction of DRAM
/// bandwidth, the L2's rate, each kernel class's efficiency and per-unit bandwidth, the cost of
/// small matmul tiles, the copy rates, and the host's launch overhead. What each came to is in
/// the body, next to its data-sheet value.
inline DeviceSpec h100_sxm() {
  constexpr double kSms = 132;
  DeviceSpec s;
  s.name = "h100_sxm";
  s.compute_units = 132;
  s.unit_flops_per_second = {989.4e12 / kSms, 66.9e12 / kSms, 33.5e12 / kSms, 33.5e12 / kSms};
  s.dram_bytes = 80'000'000'000;
  s.dram_bytes_per_second = 3.35e12;
  s.l2_bytes = 50'000'000;
  s.l1_bytes = 132 * (std::int64_t{256} << 10);
  s.l1_bytes_per_second = 128 * 1.98e9 * kSms;
  s.d2d_bytes_per_second = 450e9;
  s.d2d_latency = std::chrono::microseconds(2);
  s.tile_bytes = std::int64_t{64} << 10;
  s.matmul_tile = 128;
  // Calibrated (ferry::calibrate on h100_sxm.csv; data-sheet figures or none in brackets):
  s.h2d_bytes_per_second = 53.1e9;                      // [64e9]
  s.h2d_latency = std::chrono::nanoseconds(4947);       // [none]
  s.h2d_min_duration = std::chrono::nanoseconds(9411);  // [none]
  s.d2h_bytes_per_second = 54.7e9;                      // [64e9]
  s.d2h_latency = std::chrono::nanoseconds(2590);
  s.d2h_min_duration = std::chrono::nanoseconds(7871);
  s.kernel_latency = std::chrono::nanoseconds(1414);    // [none]
  s.launch_overhead = std::chrono::nanoseconds(12555);  // the eager host time of a small op
  s.dram_efficiency = 0.900;                            // [1]
  s.l2_bytes_per_second = 6.13e12;                      // [none]
  s.kernel_rates.elementwise = {1, 642.8e9, {}};        // [no per-unit limits]
  s.kernel_rates.reduction = {1, 18.37e9, {}};
  s.kernel_rates.layout = {1, 7.56e9, {}};
  s.kernel_rates.matmul = {0.927, 0, std::chrono::nanoseconds(801)};  // [1, 0, 0]
  s.matmul_tile_half_area = 4458;                       // [0]
  // Not in the table (no row runs kernels side by side): set so that 16 independent 256^3
  // fp32 matmuls take the 36 us measured with concurrent streams.
  s.matmul_tile_slack = 0.3;
  return s;
}

/// Small round numbers for timelines worked out by hand: two compute units doing one operation
/// per nanosecond each; every memory and link moving one byte per nanosecond (L1: four);
/// 100 ns of latency per copy, 10 ns per kernel, no host launch overhead; 1 MiB of DRAM and
/// 64 KiB of L1; first-in first-out scheduling.
inline DeviceSpec tiny() {
  DeviceSpec s;
  s.name = "tiny";
  s.compute_units = 2;
  s.unit_flops_per_second = {1e9, 1e9, 1e9, 1e9};
  s.dram_bytes = std::int64_t{1} << 20;
  s.dram_bytes_per_second = 1e9;
  s.l1_bytes = std::int64_t{64} << 10;
  s.l1_bytes_per_second = 4e9;
  s.h2d_bytes_per_second = 1e9;
  s.h2d_latency = std::chrono::nanoseconds(100);
  s.d2h_bytes_per_second = 1e9;
  s.d2h_latency = std::chrono::nanoseconds(100);
  s.d2d_bytes_per_second = 1e9;
  s.d2d_latency = std::chrono::nanoseconds(100);
  s.kernel_latency = std::chrono::nanoseconds(10);
  s.launch_overhead = std::chrono::nanoseconds(0);
  s.policy = SchedulePolicy::fifo;
  return s;
}

/// The host CPU seen as a device (what Device::cpu() uses): no transfer cost beyond a memcpy.
/// Assumed figures for a current server core: two 256-bit FMA units at 2 GHz, so 64 GFLOPS per
/// core in FP32 (and BF16, computed in FP32) and 32 in FP64 and integers; 8 cores; 64 GiB at
/// 50 GB/s; copies at memcpy speed, 10 GB/s, with no latency; 1 MiB of cache per core as "L1";
/// no launch overhead.
inline DeviceSpec host_cpu() {
  DeviceSpec s;
  s.name = "host_cpu";
  s.compute_units = 8;
  s.unit_flops_per_second = {64e9, 64e9, 32e9, 32e9};
  s.dram_bytes = std::int64_t{64} << 30;
  s.dram_bytes_per_second = 50e9;
  s.l1_bytes = std::int64_t{8} << 20;
  s.l1_bytes_per_second = 400e9;
  s.h2d_bytes_per_second = 10e9;
  s.d2h_bytes_per_second = 10e9;
  s.d2d_bytes_per_second = 10e9;
  return s;
}

}  // namespace specs

namespace detail {

/// The most compute units a spec may have (an H100 has 132 SMs, a Wormhole 80 Tensix cores).
inline constexpr std::int64_t kMostComputeUnits = std::int64_t{1} << 16;

/// Throws InvalidArgument, as `op`, naming the first field of `s` that no device could have.
inline void validate(const DeviceSpec& s, std::string_view op = "Device::modeled") {
  const auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v)) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field, " must be positive, got ", v);
    }
  };
  // A time or a rate the model's 64-bit nanoseconds could not add up: a step at most 2^53 ns
  // (custom's bound, core/cost.hpp), a rate at least one per second.
  const auto non_negative = [&](Duration d, const char* field) {
    if (d < Duration::zero()) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field, " must not be negative, got ",
                            d.count(), " ns");
    }
    if (d > kLongestStep) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field,
                            " must be at most 2^53 ns (about 104 days), got ", d.count(), " ns");
    }
  };
  const auto rate = [&](double v, const char* field) {
    positive(v, field);
    if (v < 1) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field,
                            " must be at least 1 per second, got ", v);
    }
  };
  positive(static_cast<double>(s.compute_units), "compute_units");
  // The model keeps a track and a slot per unit: more than any chip has is a typo, not a chip.
  if (s.compute_units > kMostComputeUnits) {
    fail<InvalidArgument>(op, "spec '", s.name, "': compute_units must be at most ",
                          kMostComputeUnits, ", got ", s.compute_units);
  }
  rate(s.unit_flops_per_second.bfloat16, "unit_flops_per_second.bfloat16");
  rate(s.unit_flops_per_second.float32, "unit_flops_per_second.float32");
  rate(s.unit_flops_per_second.float64, "unit_flops_per_second.float64");
  rate(s.unit_flops_per_second.integer, "unit_flops_per_second.integer");
  positive(static_cast<double>(s.dram_bytes), "dram_bytes");
  rate(s.dram_bytes_per_second, "dram_bytes_per_second");
  positive(static_cast<double>(s.l1_bytes), "l1_bytes");
  rate(s.l1_bytes_per_second, "l1_bytes_per_second");
  rate(s.h2d_bytes_per_second, "h2d_bytes_per_second");
  rate(s.d2h_bytes_per_second, "d2h_bytes_per_second");
  rate(s.d2d_bytes_per_second, "d2d_bytes_per_second");
  if (s.policy != SchedulePolicy::fifo && s.policy != SchedulePolicy::critical_path) {
    fail<InvalidArgument>(op, "spec '", s.name, "': policy must be fifo or critical_path, got ",
                          static_cast<int>(s.policy));
  }
  if (s.fallback != Fallback::none && s.fallback != Fallback::host) {
    fail<InvalidArgument>(op, "spec '", s.name, "': fallback must be none or host, got ",
                          static_cast<int>(s.fallback));
  }
  if (s.trace_steps < 0) {
    fail<InvalidArgument>(op, "spec '", s.name, "': trace_steps must not be negative, got ",
                          s.trace_steps);
  }
  non_negative(s.h2d_latency, "h2d_latency");
  non_negative(s.d2h_latency, "d2h_latency");
  const auto fraction = [&](double v, const char* field) {
    if (!(v > 0 && v <= 1)) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field, " must be in (0, 1], got ", v);
    }
  };
  const auto not_negative = [&](double v, const char* field) {
    if (!(v >= 0) || !std::isfinite(v)) {
      fail<InvalidArgument>(op, "spec '", s.name, "': ", field, " must not be negative, got ", v);
    }
  };
  positive(static_cast<double>(s.tile_bytes), "tile_bytes");
  // The model picks edges from it down to 16, 15 powers of two at most (cost_model.hpp).
  if (s.matmul_tile < 16 || s.matmul_tile > (std::int64_t{1} << 18)) {
    fail<InvalidArgument>(op, "spec '", s.name, "': matmul_tile must be in [16, 2^18], got ",
                          s.matmul_tile);
  }
  not_negative(s.matmul_tile_half_area, "matmul_tile_half_area");
  not_negative(s.matmul_tile_slack, "matmul_tile_slack");
  fraction(s.dram_efficiency, "dram_efficiency");
  not_negative(static_cast<double>(s.l2_bytes), "l2_bytes");
  if (s.l2_bytes > 0) rate(s.l2_bytes_per_second, "l2_bytes_per_second");
  const std::pair<const KernelClassRates*, const char*> classes[] = {
      {&s.kernel_rates.elementwise, "kernel_rates.elementwise"},
      {&s.kernel_rates.reduction, "kernel_rates.reduction"},
      {&s.kernel_rates.layout, "kernel_rates.layout"},
      {&s.kernel_rates.matmul, "kernel_rates.matmul"}};
  for (const auto& [rates, name] : classes) {
    const std::string field(name);
    fraction(rates->compute_efficiency, (field + ".compute_efficiency").c_str());
    // 0: no limit of its own; else a rate.
    if (rates->unit_bytes_per_second != 0) {
      rate(rates->unit_bytes_per_second, (field + ".unit_bytes_per_second").c_str());
    }
    non_negative(rates->tile_overhead, (field + ".tile_overhead").c_str());
  }
  non_negative(s.h2d_min_duration, "h2d_min_duration");
  non_negative(s.d2h_min_duration, "d2h_min_duration");
  non_negative(s.d2d_latency, "d2d_latency");
  non_negative(s.kernel_latency, "kernel_latency");
  non_negative(s.launch_overhead, "launch_overhead");
  validate(s.faults, op, s.name);
}

}  // namespace detail
}  // namespace ferry
