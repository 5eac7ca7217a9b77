// Dispatch cost: nanoseconds per step for a long dependent chain and for a wide fan-out of
// 1-element arrays, each built, run and exported, beside two baselines from the same run:
// the arithmetic done inline (the floor) and one std::async per step.
#include <benchmark/benchmark.h>

#include <future>
#include <vector>

#include <ferry/ferry.hpp>

#include "ratio_reporter.hpp"

namespace {

using ferry::Shape;

// ---- a dependent chain: x = x + 1, n times, then one export ----

void chain_inline(benchmark::State& state) {
  const auto n = state.range(0);
  for (auto _ : state) {
    float x = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      x += 1.0f;
      benchmark::DoNotOptimize(x);
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void chain_ferry(benchmark::State& state) {
  const auto n = state.range(0);
  ferry::Device dev;
  for (auto _ : state) {
    auto x = ferry::to_device(dev, {0.0f}, Shape{1});
    for (std::int64_t i = 0; i < n; ++i) x = x + 1.0f;
    const float v = x.to_host()(0);
    if (v != static_cast<float>(n)) state.SkipWithError("wrong chain result");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void chain_async(benchmark::State& state) {
  const auto n = state.range(0);
  for (auto _ : state) {
    std::future<float> x = std::async(std::launch::async, [] { return 0.0f; });
    for (std::int64_t i = 0; i < n; ++i) {
      x = std::async(std::launch::async, [prev = std::move(x)]() mutable { return prev.get() + 1.0f; });
    }
    if (x.get() != static_cast<float>(n)) state.SkipWithError("wrong chain result");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// ---- a fan-out: n independent x + i from one input, then all results exported at once ----

void fanout_inline(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    const float x = 1.0f;
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = x + static_cast<float>(i);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void fanout_ferry(benchmark::State& state) {
  const auto n = state.range(0);
  ferry::Device dev;
  std::vector<ferry::DeviceArray<float>> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    auto x = ferry::to_device(dev, {1.0f}, Shape{1});
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = x + static_cast<float>(i);
    float total = 0;
    for (const auto& h : ferry::to_host(out)) total += h(0);  // one batched export
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void fanout_async(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<std::future<float>> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    const float x = 1.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      out[static_cast<std::size_t>(i)] = std::async(std::launch::async, [x, i] { return x + static_cast<float>(i); });
    }
    float total = 0;
    for (auto& f : out) total += f.get();
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// The chain and fan-out lengths: long enough to amortize the export, short enough that the
// whole binary runs in a few seconds. std::async starts a thread per step, so it gets fewer.
// Wall-clock time throughout: the work happens on other threads than the benchmark's.
BENCHMARK(chain_inline)->Arg(100000)->UseRealTime();
BENCHMARK(chain_ferry)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(chain_async)->Arg(2000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fanout_inline)->Arg(10000)->UseRealTime();
BENCHMARK(fanout_ferry)->Arg(10000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fanout_async)->Arg(2000)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return ferry_bench::run_with_ratios(
      argc, argv, {{"chain_", "chain_inline/"}, {"chain_", "chain_async/"},
                   {"fanout_", "fanout_inline/"}, {"fanout_", "fanout_async/"}});
}
