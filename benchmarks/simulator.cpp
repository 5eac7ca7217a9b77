// The device model alone: modeled commands per second of wall time on a random DAG of 10^4,
// 10^5 and 10^6 steps, fed straight to the simulator (no kernels run). Cost per command must stay
// flat as n grows (n log n overall); the target is at least 1,000,000 commands per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/model/simulator.hpp>

#include "ratio_reporter.hpp"

namespace {

using ferry::detail::CommandDesc;
using ferry::detail::Simulator;
using ferry::detail::StepKind;

/// A random DAG in submission order: each step reads 1 to 3 of the last kWindow steps, mostly
/// recent ones (as programs do), and is a copy in, a kernel or a copy out; every 256th step is a
/// sync. A program holds the handles of the last kWindow steps and drops older ones.
constexpr std::int64_t kWindow = 256;
struct RandomProgram {
  struct Step {
    StepKind kind;
    std::vector<std::uint32_t> inputs;  // indices of earlier steps
    std::int64_t bytes;
    double flops;
    bool sync;
  };
  std::vector<Step> steps;

  explicit RandomProgram(std::int64_t n) {
    std::mt19937_64 gen(42);
    std::uniform_int_distribution<int> kind(0, 9);
    std::uniform_int_distribution<int> fan_in(1, 3);
    std::geometric_distribution<std::int64_t> back(0.05);
    steps.reserve(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      Step s{StepKind::compute, {}, 4096, 1e6, i % 256 == 255};
      const int k = kind(gen);
      if (i < 4 || k == 0) {
        s.kind = StepKind::copy_in;
      } else {
        s.kind = k == 9 ? StepKind::copy_out : StepKind::compute;
        const int reads = s.kind == StepKind::copy_out ? 1 : fan_in(gen);
        for (int r = 0; r < reads; ++r) {
          const std::int64_t from = i - 1 - std::min({back(gen), i - 1, kWindow - 1});
          s.inputs.push_back(static_cast<std::uint32_t>(from));
        }
      }
      steps.push_back(std::move(s));
    }
  }
};

void model_random_dag(benchmark::State& state, ferry::SchedulePolicy policy) {
  const RandomProgram program(state.range(0));
  ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
  spec.policy = policy;
  spec.trace_steps = 0;  // measure scheduling, not trace keeping
  for (auto _ : state) {
    Simulator sim(spec);
    std::vector<std::uint64_t> slots(program.steps.size());
    std::vector<std::uint64_t> inputs;
    std::exception_ptr error;
    std::uint64_t id = 0;
    for (const RandomProgram::Step& s : program.steps) {
      inputs.clear();
      for (std::uint32_t i : s.inputs) inputs.push_back(slots[i]);
      CommandDesc d;
      d.id = id++;
      d.kind = s.kind;
      d.plan = ferry::detail::plan_step(spec, s.kind, {s.flops, 4096, 4096}, ferry::DType::float32);
      d.out_bytes = s.kind == StepKind::copy_out ? 0 : static_cast<std::uint64_t>(s.bytes);
      d.inputs = inputs;
      d.bytes_moved = 8192;
      d.name = "step";
      const std::uint64_t slot = sim.submit(d);
      slots[d.id] = slot;
      if (d.id >= kWindow) sim.drop_handle(slots[d.id - kWindow]);
      if (s.sync) sim.sync(std::span(&slot, 1), std::span(&error, 1), "wait");
    }
    benchmark::DoNotOptimize(sim.stats().makespan);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void fifo(benchmark::State& state) { model_random_dag(state, ferry::SchedulePolicy::fifo); }
void critical_path(benchmark::State& state) {
  model_random_dag(state, ferry::SchedulePolicy::critical_path);
}

BENCHMARK(fifo)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->UseRealTime()->Unit(
    benchmark::kMillisecond);
BENCHMARK(critical_path)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // Each size is compared with the smallest run of its policy: flat ratios mean the cost per
  // command does not grow with n.
  return ferry_bench::run_with_ratios(
      argc, argv, {{"fifo/", "fifo/10000/"}, {"critical_path/", "critical_path/10000/"}});
}
