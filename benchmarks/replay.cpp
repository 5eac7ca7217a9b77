// Programs: the host time to submit a 1,000-step program by replaying a cached trace versus
// calling the same ops eagerly (elementwise steps a replay fuses, and matmul steps it submits
// one by one), the cost of a cache lookup with 1, 10 and 100 entries, and SymInt arithmetic
// outside a trace against the same arithmetic on int64.
// Submission is timed on a ManualExecutor, so no kernel runs while the clock does; each
// iteration then runs and exports its result with the clock stopped. The matmul steps are
// timed twice: on a modeled device, and on one whose model does nothing, which shows the part
// of a step that is the op's (or the replay's) own beside the runtime's.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <ferry/ferry.hpp>

#include "ratio_reporter.hpp"

namespace {

using ferry::DeviceArray;
using ferry::Shape;

constexpr int kSteps = 1000;

/// 1,000 elementwise steps: the shape of normalization and activation code.
DeviceArray<float> elementwise_program(DeviceArray<float> x) {
  DeviceArray<float> v = x;
  for (int i = 0; i < kSteps; i += 4) {
    v = v * 0.999f;
    v = v + x;
    v = ferry::relu(v);
    v = v - 0.5f;
  }
  return v;
}

/// 1,000 steps of which every tenth is a matmul: elementwise runs of nine between them.
DeviceArray<float> mixed_program(DeviceArray<float> x, DeviceArray<float> w) {
  DeviceArray<float> v = x;
  for (int i = 0; i < kSteps; i += 10) {
    v = ferry::matmul(v, w);
    for (int k = 0; k < 9; k += 3) {
      v = v * 0.5f;
      v = ferry::tanh(v);
      v = v + x;
    }
  }
  return v;
}

/// 1,000 matmuls of 8x8 matrices, each reading the one before: steps a replay cannot fuse.
DeviceArray<float> matmul_program(DeviceArray<float> x, DeviceArray<float> w) {
  DeviceArray<float> v = x;
  for (int i = 0; i < kSteps; ++i) v = ferry::matmul(v, w);
  return v;
}

ferry::Device manual_device() { return ferry::Device(ferry::ManualExecutor()); }

/// A model that records nothing and says nothing.
class NoModel final : public ferry::detail::StepObserver {
 public:
  void submitted(ferry::detail::Step&) override {}
  void host_sync(std::span<ferry::detail::Step* const>, std::span<std::exception_ptr>) override {}
};

/// A device on a ManualExecutor whose steps no model observes.
ferry::Device unmodeled_device() {
  return ferry::detail::DeviceAccess::make(ferry::ManualExecutor(), std::make_unique<NoModel>(),
                                           "unmodeled");
}

DeviceArray<float> ramp(const ferry::Device& dev, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) / 13.0f;
  return ferry::to_device(dev, v, Shape{rows, cols});
}

/// Times `submit()`, then waits for its result and (on a modeled device) starts a new model
/// window with the clock stopped.
template <class Submit>
void time_submission(benchmark::State& state, ferry::Device& dev, Submit submit,
                     bool modeled = true) {
  for (auto _ : state) {
    DeviceArray<float> y = submit();
    state.PauseTiming();
    ferry::wait(y);
    y = {};
    if (modeled) dev.reset_stats();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kSteps);
}

void eager_elementwise(benchmark::State& state) {
  ferry::Device dev = manual_device();
  const auto x = ramp(dev, 64, 64);
  time_submission(state, dev, [&] { return elementwise_program(x); });
}

void replay_elementwise(benchmark::State& state) {
  ferry::Device dev = manual_device();
  const auto x = ramp(dev, 64, 64);
  auto f = ferry::jit(elementwise_program);
  ferry::wait(f(x));  // the trace
  time_submission(state, dev, [&] { return f(x); });
  if (f.cache_misses() != 1) state.SkipWithError("the program traced more than once");
}

void eager_mixed(benchmark::State& state) {
  ferry::Device dev = manual_device();
  const auto x = ramp(dev, 64, 64);
  const auto w = ramp(dev, 64, 64);
  time_submission(state, dev, [&] { return mixed_program(x, w); });
}

void replay_mixed(benchmark::State& state) {
  ferry::Device dev = manual_device();
  const auto x = ramp(dev, 64, 64);
  const auto w = ramp(dev, 64, 64);
  auto f = ferry::jit(mixed_program);
  ferry::wait(f(x, w));
  time_submission(state, dev, [&] { return f(x, w); });
  if (f.cache_misses() != 1) state.SkipWithError("the program traced more than once");
}

template <bool kReplay>
void matmul_steps(benchmark::State& state, ferry::Device dev, bool modeled) {
  const auto x = ramp(dev, 8, 8);
  const auto w = ramp(dev, 8, 8);
  auto f = ferry::jit(matmul_program);
  ferry::wait(f(x, w));  // the trace
  time_submission(
      state, dev, [&] { return kReplay ? f(x, w) : matmul_program(x, w); }, modeled);
  if (f.cache_misses() != 1) state.SkipWithError("the program traced more than once");
}
void eager_matmul_modeled(benchmark::State& state) {
  matmul_steps<false>(state, manual_device(), true);
}
void replay_matmul_modeled(benchmark::State& state) {
  matmul_steps<true>(state, manual_device(), true);
}
void eager_matmul_unmodeled(benchmark::State& state) {
  matmul_steps<false>(state, unmodeled_device(), false);
}
void replay_matmul_unmodeled(benchmark::State& state) {
  matmul_steps<true>(state, unmodeled_device(), false);
}

// ---- cache lookup: a program of no steps, with `entries` static entries (one per size);
// every call asks for the size traced last. Entries are found by key: 100 cost what 1 does ----

void lookup(benchmark::State& state) {
  const auto entries = state.range(0);
  ferry::Device dev = manual_device();
  auto f = ferry::jit([](DeviceArray<float> x) { return x; }, ferry::CacheMode::static_shapes);
  DeviceArray<float> last;
  for (std::int64_t n = 1; n <= entries; ++n) {
    last = ramp(dev, n, 1);
    (void)f(last);
  }
  for (auto _ : state) benchmark::DoNotOptimize(f(last));
  state.SetItemsProcessed(state.iterations());
  if (static_cast<std::int64_t>(f.cache_size()) != entries)
    state.SkipWithError("wrong entry count");
}

/// The baseline of a lookup: submitting one eager step.
void eager_one_step(benchmark::State& state) {
  ferry::Device dev = manual_device();
  const auto x = ramp(dev, 1, 1);
  std::int64_t pending = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(x + 1.0f);
    if (++pending == 1000) {  // let the stepped executor drain now and then
      state.PauseTiming();
      ferry::wait(x);
      pending = 0;
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// ---- SymInt outside a trace: the same size arithmetic on int64 and on SymInt ----

template <class Int>
void size_arithmetic(benchmark::State& state) {
  Int n = 7;
  for (auto _ : state) {
    benchmark::DoNotOptimize(n);
    const Int rows = n * 3 + 1;
    const Int cols = rows - n / 2;
    n = rows * cols % 1000003;
    if (n > 1000) n = n - 999;
  }
  state.SetItemsProcessed(state.iterations());
}
void int64_sizes(benchmark::State& state) { size_arithmetic<std::int64_t>(state); }
void symint_sizes(benchmark::State& state) { size_arithmetic<ferry::SymInt>(state); }

// The clock stops while each program's steps run, which takes longer than submitting them:
// a fixed number of iterations keeps the whole run to a few seconds.
void program_runs(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->Iterations(100);
}
void short_runs(benchmark::internal::Benchmark* b) { b->UseRealTime()->MinTime(0.2); }

BENCHMARK(int64_sizes)->Apply(short_runs);
BENCHMARK(symint_sizes)->Apply(short_runs);
BENCHMARK(eager_elementwise)->Apply(program_runs);
BENCHMARK(replay_elementwise)->Apply(program_runs);
BENCHMARK(eager_mixed)->Apply(program_runs);
BENCHMARK(replay_mixed)->Apply(program_runs);
BENCHMARK(eager_matmul_modeled)->Apply(program_runs);
BENCHMARK(replay_matmul_modeled)->Apply(program_runs);
BENCHMARK(eager_matmul_unmodeled)->Apply(program_runs);
BENCHMARK(replay_matmul_unmodeled)->Apply(program_runs);
BENCHMARK(eager_one_step)->Apply(short_runs);
BENCHMARK(lookup)->Arg(1)->Arg(10)->Arg(100)->Apply(short_runs);

}  // namespace

int main(int argc, char** argv) {
  return ferry_bench::run_with_ratios(argc, argv,
                                      {{"replay_elementwise", "eager_elementwise"},
                                       {"replay_mixed", "eager_mixed"},
                                       {"replay_matmul_modeled", "eager_matmul_modeled"},
                                       {"replay_matmul_unmodeled", "eager_matmul_unmodeled"},
                                       {"lookup", "eager_one_step"},
                                       {"lookup/", "lookup/1/"},
                                       {"symint_sizes", "int64_sizes"}});
}
