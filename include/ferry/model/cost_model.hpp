#pragma once
// The cost model: how long a step takes on the device a DeviceSpec describes.
//   copies:  latency + bytes / bandwidth of the engine
//   kernels: kernel latency + max(flops / peak of the element class, bytes / memory bandwidth),
//            a roofline; or exactly Cost::fixed's duration
// Times round up to whole nanoseconds.

#include <algorithm>
#include <cmath>

#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// `seconds` as a Duration, rounded up to whole nanoseconds.
inline Duration to_duration(double seconds) {
  return Duration(static_cast<Duration::rep>(std::ceil(seconds * 1e9)));
}

/// The peak of one compute unit for kernels computing on `t`.
inline double unit_rate(const DeviceSpec& spec, DType t) {
  switch (t) {
    case DType::bfloat16: return spec.unit_flops_per_second.bfloat16;
    case DType::float32: return spec.unit_flops_per_second.float32;
    case DType::float64: return spec.unit_flops_per_second.float64;
    case DType::int32:
    case DType::int64:
    case DType::boolean: return spec.unit_flops_per_second.integer;
  }
  return spec.unit_flops_per_second.float32;
}

/// The modeled duration of a step of `kind` with `cost`, computing on `dtype`: a kernel's
/// memory traffic is charged at the bandwidth of where it is, `l1_share_read` of its reads and
/// all its writes (when `writes_l1`) at L1's, the rest at DRAM's.
inline Duration step_duration(const DeviceSpec& spec, StepKind kind, const Cost& cost, DType dtype,
                              double l1_share_read = 0, bool writes_l1 = false) {
  const double moved = cost.bytes_read;  // a copy reads as much as it writes
  switch (kind) {
    case StepKind::view: return Duration::zero();
    case StepKind::copy_in: return spec.h2d_latency + to_duration(moved / spec.h2d_bytes_per_second);
    case StepKind::copy_out: return spec.d2h_latency + to_duration(moved / spec.d2h_bytes_per_second);
    case StepKind::copy_d2d: return spec.d2d_latency + to_duration(moved / spec.d2d_bytes_per_second);
    case StepKind::compute: break;
  }
  if (cost.fixed_duration) return *cost.fixed_duration;
  const double compute = cost.flops / unit_rate(spec, dtype);
  const double l1_bytes = cost.bytes_read * l1_share_read + (writes_l1 ? cost.bytes_written : 0);
  const double dram_bytes = cost.bytes_read + cost.bytes_written - l1_bytes;
  const double memory = l1_bytes / spec.l1_bytes_per_second + dram_bytes / spec.dram_bytes_per_second;
  return spec.kernel_latency + to_duration(std::max(compute, memory));
}

/// How long a step the device rejected takes on the host instead (Fallback::host): the
/// `read_back` bytes of its device inputs over the d2h link, its kernel at the host CPU's rates
/// (specs::host_cpu), and the `send` bytes of its output over the h2d link. A copy does no host
/// work: a copy in is sent again, a copy out read again.
inline Duration fallback_duration(const DeviceSpec& spec, StepKind kind, const Cost& cost,
                                  DType dtype, double read_back, double send) {
  static const DeviceSpec host = specs::host_cpu();
  const auto link = [](double bytes, Duration latency, double rate) {
    return bytes > 0 ? latency + to_duration(bytes / rate) : Duration::zero();
  };
  const Duration work =
      kind == StepKind::compute ? step_duration(host, kind, cost, dtype) : Duration::zero();
  return link(read_back, spec.d2h_latency, spec.d2h_bytes_per_second) + work +
         link(send, spec.h2d_latency, spec.h2d_bytes_per_second);
}

}  // namespace ferry::detail
