// What fault injection costs: nanoseconds per step of a dependent chain on a clean modeled
// device (the baseline), on one whose FaultPlan draws a fault for every step at a 1% kernel rate
// with Fallback::host (1% of the steps then run on the host in the model), and on one where the
// chain's first kernel fails with Fallback::none, so the failure travels the whole chain to
// the export.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "ratio_reporter.hpp"

namespace {

using ferry::Shape;

void run_chain(benchmark::State& state, const ferry::DeviceSpec& spec, bool expect_fault) {
  const auto n = state.range(0);
  const ferry::Device dev = ferry::Device::modeled(spec);
  for (auto _ : state) {
    auto x = ferry::to_device(dev, {0.0f}, Shape{1});
    for (std::int64_t i = 0; i < n; ++i) x = x + 1.0f;
    try {
      const float v = x.to_host()(0);
      if (expect_fault || v != static_cast<float>(n)) state.SkipWithError("wrong chain result");
    } catch (const ferry::DeviceFault&) {
      if (!expect_fault) state.SkipWithError("unexpected fault");
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}

ferry::DeviceSpec clean() {
  ferry::DeviceSpec s = ferry::specs::pcie_accelerator();
  s.trace_steps = 0;  // the trace's cost is not what is measured here
  return s;
}

void chain_clean(benchmark::State& state) { run_chain(state, clean(), false); }

void chain_faults_fallback(benchmark::State& state) {
  ferry::DeviceSpec s = clean();
  s.faults = {.seed = 1, .kernel_failure_rate = 0.01};
  s.fallback = ferry::Fallback::host;
  run_chain(state, s, false);
}

void chain_faults_fail(benchmark::State& state) {
  ferry::DeviceSpec s = clean();
  // Each iteration submits n + 2 steps on the same device: fail the first kernel of every one.
  s.faults = {.seed = 1, .fail_steps = {}};
  for (std::uint64_t it = 0; it < 100'000; ++it) s.faults.fail_steps.push_back(it * 10'002 + 1);
  run_chain(state, s, true);
}

BENCHMARK(chain_clean)->Arg(10'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(chain_faults_fallback)->Arg(10'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(chain_faults_fail)->Arg(10'000)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  ferry_bench::RatioReporter reporter(
      std::vector<std::pair<std::string, std::string>>{{"chain_faults", "chain_clean"}});
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
