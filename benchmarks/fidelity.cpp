// How well the model predicts a real device: calibrates specs::h100_sxm()'s data-sheet figures
// on a table of measured primitives, then prints every row's predicted and measured device time
// and the error figures. The table's path is the first argument, or FERRY_DEVICES_CSV (e.g.
// shared/data/devices/h100_sxm.csv). The timed part is calibrate() itself.
//
// Then the same for collectives, when a second table is given (the second argument, or
// FERRY_CCL_CSV: shared/data/devices/wormhole_ccl.csv): every measured collective against the
// shipped specs::t3000() and against a fresh calibration of its link costs.
//
//   fidelity path/to/h100_sxm.csv path/to/wormhole_ccl.csv
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

std::string g_path;

/// The preset with its calibrated fields set back to the data sheet's (or no) figures: what
/// calibrate starts from here.
ferry::DeviceSpec data_sheet() {
  ferry::DeviceSpec s = ferry::specs::h100_sxm();
  s.h2d_bytes_per_second = s.d2h_bytes_per_second = 64e9;
  s.h2d_latency = s.d2h_latency = std::chrono::microseconds(2);
  s.h2d_min_duration = s.d2h_min_duration = ferry::Duration::zero();
  s.kernel_latency = std::chrono::microseconds(1);
  s.dram_efficiency = 1;
  s.l2_bytes_per_second = 2 * s.dram_bytes_per_second;  // not on the data sheet: a first guess
  s.kernel_rates = {};
  s.matmul_tile_half_area = 0;  // matmul_tile_slack stays: no row measures kernels side by side
  return s;
}

void print_table(const char* title, const std::vector<ferry::Prediction>& p) {
  std::printf("\n%s\n%-34s %12s %12s %7s\n", title, "row", "predicted us", "measured us", "ratio");
  std::vector<double> errors;
  for (const ferry::Prediction& x : p) {
    std::printf("%-34s %12.2f %12.2f %7.3f\n", x.row.label().c_str(),
                static_cast<double>(x.predicted.count()) / 1e3,
                static_cast<double>(x.measured.count()) / 1e3, x.ratio());
    errors.push_back(std::abs(x.ratio() - 1));
  }
  std::sort(errors.begin(), errors.end());
  const auto at = [&](double q) {
    return errors[static_cast<std::size_t>(q * static_cast<double>(errors.size() - 1))];
  };
  std::printf(
      "|error|: median %.1f%%, 90th percentile %.1f%%, worst %.1f%% (targets 5%%, 15%%, 35%%)\n",
      100 * at(0.5), 100 * at(0.9), 100 * errors.back());
}

/// The starting point of a fresh calibration of the collectives: wormhole_ethernet()'s data-sheet
/// figures (line rate, hop latency) and round guesses for the rest, not the fitted ones.
ferry::MeshSpec collective_start() {
  ferry::MeshSpec m = ferry::specs::t3000();
  m.link.efficiency = 1;
  m.link.pair_rate_factor = 1;
  m.link.call_overhead = std::chrono::microseconds(1);
  m.link.step_overhead = std::chrono::microseconds(1);
  m.link.one_shot_bytes = 0;
  m.link.composite_all_reduce = false;
  return m;
}

void print_collectives(const char* title, const ferry::MeshSpec& spec,
                       const ferry::CollectiveMeasurements& m) {
  const std::vector<ferry::CollectivePrediction> p = ferry::predict(spec, m);
  const ferry::LinkSpec& l = spec.link;
  std::printf(
      "\n%s: efficiency %.3f, pair_rate_factor %.3f, hop %.2f us, step %.2f us, call %.2f us, "
      "one-shot below %lld B, composite all-reduce %s\n%-34s %12s %12s %7s\n",
      title, l.efficiency, l.pair_rate_factor, static_cast<double>(l.hop_latency.count()) / 1e3,
      static_cast<double>(l.step_overhead.count()) / 1e3,
      static_cast<double>(l.call_overhead.count()) / 1e3, static_cast<long long>(l.one_shot_bytes),
      l.composite_all_reduce ? "yes" : "no", "row", "predicted us", "measured us", "error");
  for (const ferry::CollectivePrediction& x : p) {
    std::printf("%-34s %12.2f %12.2f %+6.1f%%\n", x.row.label().c_str(),
                static_cast<double>(x.predicted.count()) / 1e3,
                static_cast<double>(x.measured.count()) / 1e3, 100 * (x.ratio() - 1));
  }
  const ferry::CollectiveFit fit = ferry::fit_of(p);
  std::printf("|error|: median %.1f%%, worst %.2fx (targets 15%%, 2x)\n", 100 * fit.median,
              fit.worst);
}

std::string g_ccl_path;

void BM_CalibrateCollectives(benchmark::State& state) {
  const ferry::CollectiveMeasurements m = ferry::CollectiveMeasurements::read_csv(g_ccl_path);
  for (auto _ : state) benchmark::DoNotOptimize(ferry::calibrate(collective_start(), m));
}

void BM_Calibrate(benchmark::State& state) {
  const ferry::Measurements m = ferry::Measurements::read_csv(g_path);
  for (auto _ : state) benchmark::DoNotOptimize(ferry::calibrate(data_sheet(), m));
}
BENCHMARK(BM_Calibrate)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1) {
    g_path = argv[1];
  } else if (const char* env = std::getenv("FERRY_DEVICES_CSV")) {
    g_path = env;
  } else {
    std::fprintf(stderr,
                 "usage: fidelity path/to/h100_sxm.csv [path/to/wormhole_ccl.csv] (or set "
                 "FERRY_DEVICES_CSV, FERRY_CCL_CSV)\n");
    return 2;
  }
  const ferry::Measurements m = ferry::Measurements::read_csv(g_path);
  print_table("specs::h100_sxm() (the shipped preset)",
              ferry::predict(ferry::specs::h100_sxm(), m));
  print_table("calibrate(data sheet, table)", ferry::predict(ferry::calibrate(data_sheet(), m), m));
  if (argc > 2) {
    g_ccl_path = argv[2];
  } else if (const char* env = std::getenv("FERRY_CCL_CSV")) {
    g_ccl_path = env;
  }
  if (g_ccl_path.empty()) {
    std::printf("\n(no table of measured collectives: give it second, or set FERRY_CCL_CSV)\n");
  } else {
    const ferry::CollectiveMeasurements c = ferry::CollectiveMeasurements::read_csv(g_ccl_path);
    print_collectives("specs::t3000() (the shipped preset)", ferry::specs::t3000(), c);
    print_collectives("calibrate(t3000 with round guesses, table)",
                      ferry::calibrate(collective_start(), c), c);
    benchmark::RegisterBenchmark("BM_CalibrateCollectives", BM_CalibrateCollectives)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1);
  }
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
