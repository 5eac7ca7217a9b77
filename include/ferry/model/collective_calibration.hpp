#pragma once
// Collectives measured on a real mesh, and a MeshSpec's link costs fitted to them: the sibling
// of Measurements/calibrate for devices.
//
// The CSV format: lines starting with '#' are comments; then the header
// `topology,devices,op,bytes,device_us`; then one row a line: the topology of the group (ring,
// line, fully_connected), its devices, the collective (all_gather, reduce_scatter, all_reduce,
// all_to_all), its bytes as nccl-tests counts them (CollectivePlan says which) and the measured
// device time of one call in microseconds.
//
// predict(spec, row) is ideal_time of the row's plan on the spec's link. calibrate fits the
// figures a data sheet does not give: efficiency, pair_rate_factor, hop_latency, step_overhead,
// call_overhead, one_shot_bytes and composite_all_reduce; bytes_per_second and links_per_pair
// stay. It minimizes the median plus the worst |log(predicted / measured)| (with a tenth of the
// mean as a tie-breaker): a fit judged by its typical and its worst row, not by a sum a few
// rows could dominate. The two discrete figures are tried at every value that changes a row's
// algorithm; the others by coordinate descent in log space, first on the mean squared log
// error (smooth, so the descent reaches the right basin) and then on the robust one. Where the
// rows cannot tell efficiency from pair_rate_factor (no groups of two, or only those), a small pull
// toward the spec's values decides. Deterministic: same input, same spec.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/core/csv_text.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/text_file.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/measurements.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

/// One measured collective: which, over what group, how many bytes, how long one call took.
struct CollectiveMeasurement {
  Topology topology = Topology::ring;
  std::int64_t devices = 2;
  Collective op = Collective::all_gather;
  std::int64_t bytes = 0;
  double device_us = 0;
  std::size_t line = 0;  // in the file it was read from (0: built in code)

  /// "ring 8 all_gather 16384 B": for tables.
  std::string label() const {
    return std::string(name_of(topology)) + " " + std::to_string(devices) + " " +
           std::string(name_of(op)) + " " + std::to_string(bytes) + " B";
  }
};

namespace detail {

/// The collectives a table of measurements holds.
inline constexpr std::array<Collective, 4> kMeasuredCollectives{
    Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce,
    Collective::all_to_all};

/// The fewest devices a measured group of `t` has: a ring of 3, a line or a switch of 2.
constexpr std::int64_t fewest_devices(Topology t) noexcept { return t == Topology::ring ? 3 : 2; }

/// The most devices a measured group may have: 256, a TPU v5e pod's chips, more than the
/// groups of one interconnect that measured tables hold (a Galaxy's 32, an NVL72's 72). A ring
/// or line all-to-all's plan grows with the cube of its group (n^2 pieces, each up to n/2
/// hops): 256 devices take seconds and ~600 MB to plan, 1024 some 40 GB.
inline constexpr std::int64_t kMostMeasuredDevices = 256;

/// "row 3 (ring 8 all_gather 16384 B)" (`index` -1: "row (...)"), for messages.
inline std::string row_text(const CollectiveMeasurement& r, std::int64_t index) {
  return (index < 0 ? std::string("row") : "row " + std::to_string(index)) + " (" + r.label() +
         ")";
}

/// Throws InvalidArgument, as `op` naming row `index` (row_text), unless a plan can serve `r`:
/// a group large enough for its topology (a ring of 3 at least, a line or a switch of 2) and
/// of at most kMostMeasuredDevices, one of the four collectives a table holds, and a size in
/// [1, 2^53] (kLargestMeasuredSize, as Measurements' sizes).
inline void check_row(std::string_view op, const CollectiveMeasurement& r, std::int64_t index) {
  if (r.devices < fewest_devices(r.topology)) {
    fail<InvalidArgument>(op, row_text(r, index), ": devices must be at least ",
                          fewest_devices(r.topology), " for a ", name_of(r.topology), ", got ",
                          r.devices);
  }
  if (r.devices > kMostMeasuredDevices) {
    fail<InvalidArgument>(op, row_text(r, index), ": devices must be at most ",
                          kMostMeasuredDevices, " (a plan grows with the cube of its group), got ",
                          r.devices);
  }
  if (std::ranges::find(kMeasuredCollectives, r.op) == kMeasuredCollectives.end()) {
    fail<InvalidArgument>(op, row_text(r, index),
                          ": op must be all_gather, reduce_scatter, all_reduce or all_to_all");
  }
  if (r.bytes <= 0) {
    fail<InvalidArgument>(op, row_text(r, index), ": bytes must be positive, got ", r.bytes);
  }
  if (r.bytes > kLargestMeasuredSize) {
    fail<InvalidArgument>(op, row_text(r, index), ": bytes must be at most 2^53, got ", r.bytes);
  }
}

}  // namespace detail

/// The rows of a table of measured collectives (the format is at the top of this file).
class CollectiveMeasurements {
 public:
  CollectiveMeasurements() = default;
  /// Rows built in code. Throws InvalidArgument, naming the row, for what read_csv refuses in
  /// a file: a group too small for its topology (a ring of 3 at least, a line or a switch of
  /// 2) or of more than 256 devices, a collective other than the four, a size outside
  /// [1, 2^53], a time that is not a positive number.
  explicit CollectiveMeasurements(std::vector<CollectiveMeasurement> rows)
      : rows_(std::move(rows)) {
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const auto index = static_cast<std::int64_t>(i);
      detail::check_row("CollectiveMeasurements", rows_[i], index);
      if (!(rows_[i].device_us > 0) || !(rows_[i].device_us < 1e300)) {
        detail::fail<InvalidArgument>("CollectiveMeasurements", detail::row_text(rows_[i], index),
                                      ": device_us must be a positive number, got ",
                                      rows_[i].device_us);
      }
    }
  }

  /// Reads the CSV at `path`. Throws InvalidArgument when the file cannot be read, has no
  /// header or another one, or a row is malformed: the message names the file, the line and
  /// the field (a wrong number of fields, an unknown topology or collective, a group too small
  /// for its topology or of more than 256 devices, a size or time that is not a positive
  /// number, a size past 2^53).
  static CollectiveMeasurements read_csv(const std::string& path) {
    return parse(detail::read_file<InvalidArgument>(kReadOp, path), path, kReadOp);
  }

  /// Parses CSV text as read_csv does a file; messages name `source` where read_csv names the
  /// path. Throws InvalidArgument as read_csv does.
  static CollectiveMeasurements parse_csv(std::string_view text,
                                          const std::string& source = "<text>") {
    return parse(text, source, "CollectiveMeasurements::parse_csv");
  }

  const std::vector<CollectiveMeasurement>& rows() const noexcept { return rows_; }
  std::size_t size() const noexcept { return rows_.size(); }

 private:
  static constexpr std::string_view kReadOp = "CollectiveMeasurements::read_csv";
  static constexpr std::string_view kHeader = "topology,devices,op,bytes,device_us";

  static CollectiveMeasurements parse(std::string_view all, const std::string& source,
                                      std::string_view op) {
    std::vector<CollectiveMeasurement> rows;
    detail::for_each_csv_row(all, kHeader, source, op,
                             [&](std::size_t line, const std::string& text) {
                               rows.push_back(parse_row(op, source, line, text));
                             });
    return CollectiveMeasurements(std::move(rows));
  }

  static CollectiveMeasurement parse_row(std::string_view op, const std::string& source,
                                         std::size_t line, const std::string& text) {
    const std::vector<std::string> f = detail::csv_fields(text);
    const auto bad = [&](const char* field, const auto&... why) {
      if (field == nullptr)
        detail::fail<InvalidArgument>(op, source, " line ", line, ": ", why..., " in '", text, "'");
      detail::fail<InvalidArgument>(op, source, " line ", line, ": ", field, " ", why..., " in '",
                                    text, "'");
    };
    if (f.size() != 5) bad(nullptr, "expected 5 fields, got ", f.size());
    CollectiveMeasurement r;
    r.line = line;
    if (f[0] == "ring") {
      r.topology = Topology::ring;
    } else if (f[0] == "line") {
      r.topology = Topology::line;
    } else if (f[0] == "fully_connected") {
      r.topology = Topology::fully_connected;
    } else {
      bad("topology", "is not ring, line or fully_connected: '", f[0], "'");
    }
    const auto integer = [&](const std::string& s, const char* field) {
      std::int64_t v = 0;
      std::size_t used = 0;
      try {
        v = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (s.empty() || used != s.size() || v <= 0)
        bad(field, "is not a positive integer: '", s, "'");
      return v;
    };
    r.devices = integer(f[1], "devices");
    if (r.devices < detail::fewest_devices(r.topology)) {
      bad("devices", "must be at least ", detail::fewest_devices(r.topology), " for a ",
          name_of(r.topology), ", got ", r.devices);
    }
    if (r.devices > detail::kMostMeasuredDevices) {
      bad("devices", "must be at most ", detail::kMostMeasuredDevices,
          " (a plan grows with the cube of its group), got ", r.devices);
    }
    bool known = false;
    for (const Collective c : detail::kMeasuredCollectives) {
      if (f[2] == name_of(c)) {
        r.op = c;
        known = true;
      }
    }
    if (!known)
      bad("op", "is not all_gather, reduce_scatter, all_reduce or all_to_all: '", f[2], "'");
    r.bytes = integer(f[3], "bytes");
    if (r.bytes > detail::kLargestMeasuredSize) {
      bad("bytes", "must be at most 2^53, got ", r.bytes);
    }
    std::size_t used = 0;
    try {
      r.device_us = std::stod(f[4], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (f[4].empty() || used != f[4].size() || !(r.device_us > 0) || !(r.device_us < 1e300)) {
      bad("device_us", "is not a positive number: '", f[4], "'");
    }
    return r;
  }

  std::vector<CollectiveMeasurement> rows_;
};

/// What the model predicts for one measured collective, beside what was measured.
struct CollectivePrediction {
  CollectiveMeasurement row;
  Duration predicted{};
  Duration measured{};
  /// predicted / measured.
  double ratio() const {
    return static_cast<double>(predicted.count()) /
           static_cast<double>(std::max<Duration::rep>(measured.count(), 1));
  }
};

/// How well predictions fit: the median of |predicted / measured - 1|, and the worst row as a
/// factor (max(ratio, 1 / ratio): 2 is a row off by 2x either way).
struct CollectiveFit {
  double median = 0;
  double worst = 1;
};

namespace detail {

inline CollectivePlan plan_of_row(const CollectiveMeasurement& r, const LinkSpec& link) {
  return plan_collective(r.op, r.topology, r.devices, r.bytes, link);
}

}  // namespace detail

/// The model's time for one measured collective: ideal_time of its plan (plan_collective of
/// its op, topology, devices and bytes) on `spec.link`. Throws InvalidArgument for a link no
/// mesh could have, a row no plan can serve, or one that would take longer than the model
/// times one step (2^53 ns, about 104 days).
inline Duration predict(const MeshSpec& spec, const CollectiveMeasurement& row) {
  detail::validate(spec.link, "predict", "");
  detail::check_row("predict", row, -1);
  return detail::ideal_time_as("predict", detail::plan_of_row(row, spec.link), spec.link);
}

/// One CollectivePrediction per row of `measured`, in order. Throws as predict of one row.
inline std::vector<CollectivePrediction> predict(const MeshSpec& spec,
                                                 const CollectiveMeasurements& measured) {
  std::vector<CollectivePrediction> out;
  out.reserve(measured.size());
  for (const CollectiveMeasurement& r : measured.rows()) {
    // Saturated as the device model's measured times are (ns_up): a device_us near 1e300
    // is past what llround can hold.
    const double measured_ns = std::min(r.device_us * 1e3, detail::kSaturatedNs);
    out.push_back({r, predict(spec, r), Duration(std::llround(measured_ns))});
  }
  return out;
}

/// The median and worst error of `predictions` (CollectiveFit). Throws InvalidArgument when
/// there are none.
inline CollectiveFit fit_of(const std::vector<CollectivePrediction>& predictions) {
  if (predictions.empty()) detail::fail<InvalidArgument>("fit_of", "no predictions");
  std::vector<double> errors;
  CollectiveFit fit;
  for (const CollectivePrediction& p : predictions) {
    const double r = std::max(p.ratio(), 1e-300);
    errors.push_back(std::abs(r - 1));
    fit.worst = std::max(fit.worst, std::max(r, 1 / r));
  }
  std::sort(errors.begin(), errors.end());
  const std::size_t n = errors.size();
  fit.median = n % 2 == 1 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  return fit;
}

namespace detail {

/// A row as the fit sees it: its plan's load under one choice of one_shot_bytes.
struct FitRow {
  PlanLoad load;
  bool as_pair = false;
  bool composite = false;  // a stepped all-reduce: two calls where the library composes it
  double log_measured_ns = 0;
};

/// The continuous figures calibrate moves, in the units it moves them in.
struct LinkFigures {
  std::array<double, 5> v{};  // efficiency, pair_rate_factor, hop, step and call overheads in ns

  static LinkFigures of(const LinkSpec& l) {
    const auto ns = [](Duration d) { return static_cast<double>(d.count()); };
    return {{l.efficiency, l.pair_rate_factor, ns(l.hop_latency), ns(l.step_overhead),
             ns(l.call_overhead)}};
  }
  void apply(LinkSpec& l) const {
    const auto to_ns = [](double x) { return Duration(std::llround(x)); };
    l.efficiency = v[0];
    l.pair_rate_factor = v[1];
    l.hop_latency = to_ns(v[2]);
    l.step_overhead = to_ns(v[3]);
    l.call_overhead = to_ns(v[4]);
  }
};

// Bounds: rates in [0.01, 1] of what they scale; costs in [1 ns, 10 ms].
inline constexpr std::array<double, 5> kFigureLow = {0.01, 0.01, 1, 1, 1};
inline constexpr std::array<double, 5> kFigureHigh = {1, 1, 1e7, 1e7, 1e7};

/// The least factor f in [low, 1] for which `rate` x f and `rate` x f x `then`, multiplied as
/// validate(LinkSpec) multiplies them, are at least 1 byte per second: on a slow link
/// (bytes_per_second under 10,000) the fit could otherwise reach a rate the mesh refuses.
inline double least_rate_factor(double rate, double then, double low) {
  double f = std::max(low, 1 / (rate * then));
  // 1 / (rate x then) may round below what the products need: a few ulps up.
  while (f < 1 && (rate * f < 1 || rate * f * then < 1)) f = std::nextafter(f, 2.0);
  return std::min(f, 1.0);
}

/// Figure `i`'s bounds where the others are `figures`: kFigureLow and kFigureHigh, and for the
/// two rates the least that keeps `link`'s rate times both at least 1 byte per second.
inline std::pair<double, double> figure_bounds(std::size_t i, const LinkFigures& figures,
                                               const LinkSpec& link) {
  const double bps = link.bytes_per_second;
  if (i == 0) return {least_rate_factor(bps, figures.v[1], kFigureLow[0]), kFigureHigh[0]};
  if (i == 1) return {least_rate_factor(bps * figures.v[0], 1, kFigureLow[1]), kFigureHigh[1]};
  return {kFigureLow[i], kFigureHigh[i]};
}

/// The error of `figures` on `rows`: robust (median + worst + mean / 10 of |log ratio|) or
/// smooth (mean squared log ratio), plus the pull of the two rates toward `start`.
inline double fit_error(const std::vector<FitRow>& rows, const LinkSpec& base,
                        const LinkFigures& figures, const LinkFigures& start, bool robust,
                        std::vector<double>& scratch) {
  LinkSpec l = base;
  figures.apply(l);  // the durations as the spec will hold them: whole ns
  const double rate = l.bytes_per_second * static_cast<double>(l.links_per_pair) * l.efficiency;
  scratch.clear();
  double sum = 0;
  for (const FitRow& r : rows) {
    const std::int64_t calls = r.composite && l.composite_all_reduce ? 2 : 1;
    const double ns =
        std::max(ideal_ns(r.load, calls, r.as_pair ? rate * l.pair_rate_factor : rate, l), 1.0);
    const double e = std::abs(std::log(ns) - r.log_measured_ns);
    scratch.push_back(e);
    sum += robust ? e : e * e;
  }
  const double mean = sum / static_cast<double>(rows.size());
  double pull = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    const double d = std::log(figures.v[i] / start.v[i]);
    pull += 0.01 * d * d;
  }
  if (!robust) return mean + pull;
  const auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(scratch.size() / 2);
  std::nth_element(scratch.begin(), mid, scratch.end());
  return *mid + *std::max_element(scratch.begin(), scratch.end()) + mean / 10 + pull;
}

/// Coordinate descent in log space from `figures`, by factors 16, 4, 2, ... down to 1.0002.
inline double descend(const std::vector<FitRow>& rows, const LinkSpec& base, LinkFigures& figures,
                      const LinkFigures& start, bool robust) {
  std::vector<double> scratch;
  double best = fit_error(rows, base, figures, start, robust, scratch);
  for (double step = 16.0; step > 1.0002; step = std::sqrt(step)) {
    for (int sweep = 0; sweep < 50; ++sweep) {
      bool moved = false;
      for (std::size_t i = 0; i < figures.v.size(); ++i) {
        for (const double factor : {step, 1 / step}) {
          LinkFigures next = figures;
          const auto [low, high] = figure_bounds(i, figures, base);
          next.v[i] = std::clamp(figures.v[i] * factor, low, high);
          if (next.v[i] == figures.v[i]) continue;
          const double e = fit_error(rows, base, next, start, robust, scratch);
          if (e < best) {
            best = e;
            figures = next;
            moved = true;
          }
        }
      }
      if (!moved) break;
    }
  }
  return best;
}

}  // namespace detail

/// `spec` with its link's library costs fitted to `measured` (see the top of this file): the
/// efficiency, pair_rate_factor, hop latency, call and step overheads, one_shot_bytes, and
/// composite_all_reduce where the table has an all-reduce on a ring or line. The line rate and
/// links per pair, the devices and the shape are kept. Deterministic. Throws InvalidArgument
/// for an impossible link, a table with no rows, or a row no plan can serve.
inline MeshSpec calibrate(const MeshSpec& spec, const CollectiveMeasurements& measured) {
  constexpr std::string_view op = "calibrate";
  detail::validate(spec.link, op, "");
  if (measured.size() == 0) detail::fail<InvalidArgument>(op, "the table has no rows");

  // The discrete choices, the spec's own first so that a tie keeps it: every threshold that
  // moves a row between algorithms (a row's size: rows below it take the one-shot), none, all.
  std::vector<std::int64_t> thresholds = {spec.link.one_shot_bytes, 0};
  bool composes = false;
  std::int64_t largest = 0;
  for (const CollectiveMeasurement& r : measured.rows()) {
    thresholds.push_back(r.bytes);
    largest = std::max(largest, r.bytes);
    composes =
        composes || (r.op == Collective::all_reduce && r.topology != Topology::fully_connected);
  }
  thresholds.push_back(largest + 1);
  std::sort(thresholds.begin() + 1, thresholds.end());
  thresholds.erase(std::unique(thresholds.begin() + 1, thresholds.end()), thresholds.end());
  std::vector<bool> compositions = {spec.link.composite_all_reduce};
  if (composes) compositions.push_back(!spec.link.composite_all_reduce);

  // The continuous figures start where the spec has them (a cost of 0, at 1 us: a ratio
  // needs a start above 0).
  detail::LinkFigures start = detail::LinkFigures::of(spec.link);
  for (std::size_t i = 0; i < start.v.size(); ++i) {
    if (i >= 2 && !(start.v[i] > 0)) start.v[i] = 1000;
    start.v[i] = std::clamp(start.v[i], detail::kFigureLow[i], detail::kFigureHigh[i]);
  }

  MeshSpec best = spec;
  double best_error = 0;
  bool found = false;
  std::vector<detail::FitRow> rows(measured.size());
  for (const std::int64_t threshold : thresholds) {
    LinkSpec link = spec.link;
    link.one_shot_bytes = threshold;
    if (threshold != thresholds.front() && threshold == spec.link.one_shot_bytes) continue;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const CollectiveMeasurement& r = measured.rows()[i];
      const CollectivePlan plan = detail::plan_of_row(r, link);
      if (plan.steps.empty())
        detail::fail<InvalidArgument>(op, "row '", r.label(), "' moves nothing");
      rows[i].load = detail::plan_load(plan);
      rows[i].as_pair = detail::runs_as_pair(plan);
      rows[i].composite =
          r.op == Collective::all_reduce && plan.algorithm != CollectiveAlgorithm::one_shot;
      rows[i].log_measured_ns = std::log(r.device_us * 1e3);
    }
    for (const bool composite : compositions) {
      link.composite_all_reduce = composite;
      detail::LinkFigures figures = start;
      detail::descend(rows, link, figures, start, false);
      const double error = detail::descend(rows, link, figures, start, true);
      if (!found || error < best_error) {
        found = true;
        best_error = error;
        best.link = link;
        figures.apply(best.link);
      }
    }
  }
  return best;
}

}  // namespace ferry
