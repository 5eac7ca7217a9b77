#pragma once
// predict() and calibrate(): a DeviceSpec against measurements of a real device.
//
// predict runs each measured primitive as a program on a modeled device of the spec (the
// model alone: the kernels' values are not computed) and reads how long its step took on the
// device. calibrate fits the spec's free parameters, the ones a data sheet does not give, to
// the measurements: latencies, copy rates, the fraction of DRAM bandwidth reached, the L2's
// rate and useful size, each kernel class's efficiency and per-unit bandwidth, the cost of small
// matmul tiles; and the host's launch overhead from the eager host times. It minimizes the sum
// of squared log ratios by coordinate descent from the given spec: deterministic, same input,
// same spec. The data-sheet figures (units, peaks, capacities) are kept.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string_view>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/model/measurements.hpp"
#include "ferry/model/simulator.hpp"
#include "ferry/model/spec.hpp"

namespace ferry {

/// What the model predicts for one measured row, beside what was measured (device time).
struct Prediction {
  Measurement row;
  Duration predicted{};
  Duration measured{};
  /// predicted / measured.
  double ratio() const {
    return static_cast<double>(predicted.count()) /
           static_cast<double>(std::max<Duration::rep>(measured.count(), 1));
  }
};

namespace detail {

/// The step a row measures, with the cost ferry's op for it states (see ops/): its kind, its
/// cost and the element type it computes on.
struct RowStep {
  StepKind kind = StepKind::compute;
  Cost cost;
  DType dtype = DType::float32;
};

inline RowStep step_of_row(const Measurement& r) {
  RowStep s;
  s.dtype = r.dtype;
  const auto eb = static_cast<double>(size_of(r.dtype));
  const auto bytes = static_cast<double>(r.bytes);
  const auto mn = static_cast<double>(r.m) * static_cast<double>(r.n);
  const auto elements = static_cast<double>(r.elements);
  if (r.op == "h2d") {
    s.kind = StepKind::copy_in;
    s.cost = {0, bytes, bytes};
  } else if (r.op == "d2h") {
    s.kind = StepKind::copy_out;
    s.cost = {0, bytes, bytes};
  } else if (r.op == "d2d") {
    // A copy within one device: a kernel streaming the bytes in and out.
    s.dtype = DType::float32;
    s.cost = {0, bytes, bytes};
  } else if (r.op == "matmul") {
    s.cost = Cost::matmul(1, r.m, r.k, r.n, eb);
  } else if (r.op == "add" || r.op == "small_op") {
    s.cost = {elements, 2 * elements * eb, elements * eb};  // ops/binary.hpp
  } else if (r.op == "exp") {
    s.cost = {elements, elements * eb, elements * eb};  // ops/unary.hpp
  } else if (r.op == "sum_last") {
    s.cost = {mn, mn * eb, static_cast<double>(r.m) * eb, {}, Work::reduction};  // ops/reduce.hpp
  } else if (r.op == "softmax_last") {
    s.cost = {4 * mn, mn * eb, mn * eb, {}, Work::reduction};  // ops/softmax.hpp
  } else if (r.op == "transpose") {
    s.cost = {0, mn * eb, mn * eb, {}, Work::layout};  // ops/reshape.hpp
  }
  return s;
}

/// How long each row's step takes on a modeled device of `spec`, from its start to its end:
/// one device, each row submitted when the one before is done, so each runs alone. Throws
/// InvalidArgument, as `op`, for a row the model cannot time (longer than kLongestStep).
inline std::vector<Duration> modeled_times(std::string_view op, const DeviceSpec& spec,
                                           const Measurements& rows) {
  DeviceSpec quiet = spec;
  quiet.trace_steps = 0;
  quiet.faults = {};
  Simulator sim(quiet);
  std::vector<Duration> out;
  out.reserve(rows.size());
  for (const Measurement& r : rows.rows()) {
    const RowStep s = step_of_row(r);
    CommandDesc d;
    d.kind = s.kind;
    d.plan = plan_step(quiet, s.kind, s.cost, s.dtype);
    d.bytes_moved = s.cost.bytes_read;
    d.has_handle = true;  // held until its failure, if any, is read: its slot is not reused
    d.name = r.op;
    const std::uint64_t slots[] = {sim.submit(d)};
    std::exception_ptr errors[1];
    const Duration released = sim.host_time();
    sim.sync(slots, errors, "wait");
    sim.drop_handle(slots[0]);
    if (errors[0]) {
      try {
        std::rethrow_exception(errors[0]);
      } catch (const std::exception& e) {
        fail<InvalidArgument>(op, "line ", r.line, " (", r.label(), "): ", e.what());
      }
    }
    out.push_back(sim.host_time() - released);
  }
  return out;
}

inline double to_us(Duration d) { return static_cast<double>(d.count()) / 1e3; }

}  // namespace detail

/// One Prediction per row of `measured`: each row's program run on a modeled device of
/// `spec` (see Measurements for what each op is). Throws InvalidArgument naming predict for
/// an invalid spec (as Device::modeled would) and for a row that would take longer than the
/// model times one step (2^53 ns).
inline std::vector<Prediction> predict(const DeviceSpec& spec, const Measurements& measured) {
  detail::validate(spec, "predict");
  std::vector<Prediction> out;
  out.reserve(measured.size());
  const std::vector<Duration> times = detail::modeled_times("predict", spec, measured);
  for (std::size_t i = 0; i < times.size(); ++i) {
    const Measurement& r = measured.rows()[i];
    out.push_back({r, times[i], detail::ns_up(r.device_us * 1e3)});
  }
  return out;
}

/// `spec` with its free parameters fitted to `measured` (see the top of this file). Rows of
/// ops the table lacks leave their parameters as they are: a parameter no row's time depends
/// on keeps its value (0 included). Deterministic. Throws InvalidArgument naming calibrate for
/// an invalid spec, a table with no rows, or a row longer than the model times one step.
inline DeviceSpec calibrate(const DeviceSpec& spec, const Measurements& measured) {
  detail::validate(spec, "calibrate");
  if (measured.size() == 0) detail::fail<InvalidArgument>("calibrate", "the table has no rows");
  DeviceSpec s = spec;
  // The host's launch overhead is measured directly: the median of the eager host times.
  std::vector<double> host;
  for (const Measurement& r : measured.rows()) {
    if (r.host_us) host.push_back(*r.host_us);
  }
  if (!host.empty()) {
    std::sort(host.begin(), host.end());
    s.launch_overhead = detail::ns_up(host[host.size() / 2] * 1e3);
  }

  // Which parameters the rows' times depend on: copies in and out their links, kernels (a d2d
  // copy is one) the kernel latency, DRAM and L2, each class its own rates.
  const auto measures = [&](detail::MeasuredPart part) {
    return std::ranges::any_of(measured.rows(), [&](const Measurement& r) {
      const detail::MeasuredOp* o = detail::measured_op(r.op);
      return o != nullptr && o->part == part;
    });
  };
  const bool h2d = measures(detail::MeasuredPart::h2d);
  const bool d2h = measures(detail::MeasuredPart::d2h);
  const bool matmul = measures(detail::MeasuredPart::matmul);
  const bool elementwise = measures(detail::MeasuredPart::elementwise);
  const bool reduction = measures(detail::MeasuredPart::reduction);
  const bool layout = measures(detail::MeasuredPart::layout);
  const bool kernels = matmul || elementwise || reduction || layout;

  // Each free parameter as a value to scale, within bounds, fitted where a row depends on it.
  struct Param {
    std::function<double&(DeviceSpec&)> value;
    double lo, hi;
    bool fitted;
  };
  // Times in ns. A copy's latency is fitted as a share of its minimum duration (it cannot
  // exceed it, and moving one without the other is what the fit needs to do).
  const auto ns = [](Duration d) { return static_cast<double>(d.count()); };
  const auto to_ns = [](double v) { return Duration(static_cast<Duration::rep>(std::llround(v))); };
  double h2d_floor = std::max(ns(s.h2d_min_duration), ns(s.h2d_latency));
  double d2h_floor = std::max(ns(s.d2h_min_duration), ns(s.d2h_latency));
  double h2d_share = h2d_floor > 0 ? ns(s.h2d_latency) / h2d_floor : 1;
  double d2h_share = d2h_floor > 0 ? ns(s.d2h_latency) / d2h_floor : 1;
  double kernel_latency = ns(s.kernel_latency);
  double tile_overhead = ns(s.kernel_rates.matmul.tile_overhead);
  const auto apply_latencies = [&](DeviceSpec& d) {
    if (h2d) {
      d.h2d_min_duration = to_ns(h2d_floor);
      d.h2d_latency = to_ns(h2d_floor * h2d_share);
    }
    if (d2h) {
      d.d2h_min_duration = to_ns(d2h_floor);
      d.d2h_latency = to_ns(d2h_floor * d2h_share);
    }
    if (kernels) d.kernel_latency = to_ns(kernel_latency);
    if (matmul) d.kernel_rates.matmul.tile_overhead = to_ns(tile_overhead);
  };
  const double l2 = static_cast<double>(s.l2_bytes);
  double l2_size = l2;
  std::vector<Param> params = {
      {[&](DeviceSpec&) -> double& { return h2d_floor; }, 1, 1e6, h2d},
      {[&](DeviceSpec&) -> double& { return d2h_floor; }, 1, 1e6, d2h},
      {[&](DeviceSpec&) -> double& { return h2d_share; }, 0.01, 1, h2d},
      {[&](DeviceSpec&) -> double& { return d2h_share; }, 0.01, 1, d2h},
      {[&](DeviceSpec&) -> double& { return kernel_latency; }, 1, 1e6, kernels},
      {[&](DeviceSpec&) -> double& { return tile_overhead; }, 1, 1e6, matmul},
      {[](DeviceSpec& d) -> double& { return d.h2d_bytes_per_second; }, 1e6, 1e15, h2d},
      {[](DeviceSpec& d) -> double& { return d.d2h_bytes_per_second; }, 1e6, 1e15, d2h},
      {[](DeviceSpec& d) -> double& { return d.dram_efficiency; }, 0.05, 1, kernels},
      {[](DeviceSpec& d) -> double& { return d.kernel_rates.matmul.compute_efficiency; }, 0.05, 1,
       matmul},
      {[](DeviceSpec& d) -> double& { return d.matmul_tile_half_area; }, 1, 1e6, matmul},
      {[](DeviceSpec& d) -> double& { return d.kernel_rates.elementwise.unit_bytes_per_second; },
       1e6, 1e15, elementwise},
      {[](DeviceSpec& d) -> double& { return d.kernel_rates.reduction.unit_bytes_per_second; }, 1e6,
       1e15, reduction},
      {[](DeviceSpec& d) -> double& { return d.kernel_rates.layout.unit_bytes_per_second; }, 1e6,
       1e15, layout},
      {[](DeviceSpec& d) -> double& { return d.l2_bytes_per_second; }, 1e6, 1e16,
       kernels && l2 > 0},
      {[&](DeviceSpec&) -> double& { return l2_size; }, l2 * 0.1, l2, kernels && l2 > 0},
  };
  std::erase_if(params, [](const Param& p) { return !p.fitted; });
  // Parameters start where the spec has them, or at a neutral guess where it has none.
  for (Param& p : params) {
    double& v = p.value(s);
    if (!(v > 0)) v = p.lo > 0 && p.hi < 1e12 ? std::sqrt(p.lo * p.hi) : std::max(p.lo, 1e9);
    v = std::clamp(v, p.lo, p.hi);
  }
  const auto error = [&](DeviceSpec& d) {
    apply_latencies(d);
    // The spec's own size while the fit keeps it: the double of a size near INT64_MAX rounds
    // to 2^63, which no int64 holds (the cast would be undefined); every smaller one fits.
    d.l2_bytes = l2_size < l2 ? static_cast<std::int64_t>(l2_size) : spec.l2_bytes;
    double sum = 0;
    const std::vector<Duration> times = detail::modeled_times("calibrate", d, measured);
    for (std::size_t i = 0; i < times.size(); ++i) {
      // Squared log ratios, and more for rows off by over 20%: the worst row matters too.
      const double e = std::abs(std::log(detail::to_us(times[i]) / measured.rows()[i].device_us));
      sum += e * e + (e > 0.2 ? 4 * (e - 0.2) * (e - 0.2) : 0);
    }
    return sum;
  };
  double best = error(s);
  for (double step = 16.0; step > 1.001; step = std::sqrt(step)) {
    for (int sweep = 0; sweep < 8; ++sweep) {
      bool moved = false;
      for (Param& p : params) {
        for (const double factor : {step, 1 / step}) {
          double& v = p.value(s);
          const double old = v;
          const double next = std::clamp(old * factor, p.lo, p.hi);
          if (next == old) continue;
          v = next;
          const double e = error(s);
          if (e < best) {
            best = e;
            moved = true;
          } else {
            p.value(s) = old;
          }
        }
      }
      if (!moved) break;
    }
  }
  error(s);  // leaves the best values applied
  return s;
}

}  // namespace ferry
