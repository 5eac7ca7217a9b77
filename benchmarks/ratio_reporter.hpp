#pragma once
// Benchmarks on a shared, noisy machine are only meaningful as ratios to a baseline measured in
// the same run. RatioReporter prints Google Benchmark's usual table, then one line per
// benchmark: its time per item and its ratio to the baseline of its group.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ferry_bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  /// `groups`: (benchmark name prefix, baseline name prefix). Every benchmark whose name starts
  /// with the first is compared with the benchmark whose name starts with the second. Times must be
  /// per item (SetItemsProcessed) and wall-clock (UseRealTime) for the ratios to mean anything.
  explicit RatioReporter(std::vector<std::pair<std::string, std::string>> groups)
      : groups_(std::move(groups)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const auto it = r.counters.find("items_per_second");
      if (it == r.counters.end() || it->second.value <= 0) continue;
      ns_per_item_[r.benchmark_name()] = 1e9 / it->second.value;
      order_.push_back(r.benchmark_name());
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nper item, and as a ratio to the baseline measured in this run:\n");
    for (const std::string& name : order_) {
      const double ns = ns_per_item_[name];
      std::printf("  %-44s %12.1f ns", name.c_str(), ns);
      for (const auto& group : groups_) {
        const std::string& baseline = group.second;
        // A baseline is compared with the baselines of other groups it belongs to, not its own.
        if (name.rfind(baseline, 0) == 0 || name.rfind(group.first, 0) != 0) continue;
        const auto b = std::find_if(ns_per_item_.begin(), ns_per_item_.end(),
                                    [&](const auto& e) { return e.first.rfind(baseline, 0) == 0; });
        if (b == ns_per_item_.end()) continue;
        const double ratio = ns / b->second;
        if (ratio >= 1) {
          std::printf("   %8.1fx slower than %s", ratio, baseline.c_str());
        } else {
          std::printf("   %8.1fx faster than %s", 1 / ratio, baseline.c_str());
        }
      }
      std::printf("\n");
    }
  }

 private:
  std::vector<std::pair<std::string, std::string>> groups_;
  std::map<std::string, double> ns_per_item_;
  std::vector<std::string> order_;
};

/// main() for a benchmark binary whose summary compares each group to its baseline.
inline int run_with_ratios(int argc, char** argv,
                           std::vector<std::pair<std::string, std::string>> groups) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter(std::move(groups));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace ferry_bench
