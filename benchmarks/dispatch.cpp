// Dispatch cost: nanoseconds per step for a long dependent chain (exported once) and for a wide
// fan-out (one batched wait, no copies) of 1-element arrays on Device::cpu(), each built and run,
// beside baselines from the same run: the arithmetic done inline (the floor), one std::async per
// step, and (when oneTBB is found) one node of a tbb::flow graph per step, the task library a user
// would pick instead.
#include <benchmark/benchmark.h>

#include <future>
#include <vector>

#ifdef FERRY_BENCH_HAVE_TBB
#include <deque>

#include <tbb/flow_graph.h>
#endif

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
  const ferry::Device dev = ferry::Device::cpu();
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
      x = std::async(std::launch::async,
                     [prev = std::move(x)]() mutable { return prev.get() + 1.0f; });
    }
    if (x.get() != static_cast<float>(n)) state.SkipWithError("wrong chain result");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

#ifdef FERRY_BENCH_HAVE_TBB
// The flow graph is built inside the timed loop, as ferry builds its graph at every iteration:
// what is compared is the cost of submitting a step against that of making and scheduling a
// node, not only of running a graph made once. Nodes live in a deque (which never moves them)
// declared after the graph, so that they go before it: a node unregisters from its graph.

void chain_tbb(benchmark::State& state) {
  const auto n = state.range(0);
  using node = tbb::flow::function_node<float, float>;
  for (auto _ : state) {
    tbb::flow::graph g;
    std::deque<node> steps;
    for (std::int64_t i = 0; i < n; ++i) {
      steps.emplace_back(g, tbb::flow::unlimited, [](float x) { return x + 1.0f; });
      if (i > 0) tbb::flow::make_edge(steps[steps.size() - 2], steps.back());
    }
    // The sink stands for ferry's export: the value leaves the graph for the caller.
    float result = 0;
    tbb::flow::function_node<float> sink(g, tbb::flow::serial, [&result](float x) {
      result = x;
      return tbb::flow::continue_msg{};
    });
    tbb::flow::make_edge(steps.back(), sink);
    steps.front().try_put(0.0f);
    g.wait_for_all();
    if (result != static_cast<float>(n)) state.SkipWithError("wrong chain result");
  }
  state.SetItemsProcessed(state.iterations() * n);
}
#endif

// ---- a fan-out: n independent x + 1 from one input, then one wait for all of them ----

void fanout_inline(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    const float x = 1.0f;
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = x + 1.0f;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void fanout_ferry(benchmark::State& state) {
  const auto n = state.range(0);
  const ferry::Device dev = ferry::Device::cpu();
  std::vector<ferry::DeviceArray<float>> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    auto x = ferry::to_device(dev, {1.0f}, Shape{1});
    for (auto& o : out) o = x + 1.0f;
    ferry::wait(out);  // one batched wait: the results stay on the device, as oneTBB's in `out`
  }
  if (out.back().to_host()(0) != 2.0f) state.SkipWithError("wrong fan-out result");
  state.SetItemsProcessed(state.iterations() * n);
}

void fanout_async(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<std::future<float>> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    const float x = 1.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      out[static_cast<std::size_t>(i)] =
          std::async(std::launch::async, [x] { return x + 1.0f; });
    }
    float total = 0;
    for (auto& f : out) total += f.get();
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * n);
}

#ifdef FERRY_BENCH_HAVE_TBB
void fanout_tbb(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    tbb::flow::graph g;
    // The source stands for ferry's to_device: every step depends on the one input it passes on.
    tbb::flow::function_node<float, float> source(g, tbb::flow::serial, [](float x) { return x; });
    std::deque<tbb::flow::function_node<float>> steps;
    for (std::int64_t i = 0; i < n; ++i) {
      // Each step writes its own slot of `out`, the fan-out's gathered results.
      steps.emplace_back(g, tbb::flow::unlimited, [&out, i](float x) {
        out[static_cast<std::size_t>(i)] = x + 1.0f;
        return tbb::flow::continue_msg{};
      });
      tbb::flow::make_edge(source, steps.back());
    }
    source.try_put(1.0f);
    g.wait_for_all();
    float total = 0;
    for (const float v : out) total += v;
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
#endif

// The chain and fan-out lengths: long enough to amortize the export, short enough that the
// whole binary runs in a few seconds. std::async starts a thread per step, so it gets fewer;
// oneTBB gets ferry's lengths, so that the two compare per step on the same graphs.
// Wall-clock time throughout: the work happens on other threads than the benchmark's.
BENCHMARK(chain_inline)->Arg(100000)->UseRealTime();
BENCHMARK(chain_ferry)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(chain_async)->Arg(2000)->UseRealTime()->Unit(benchmark::kMillisecond);
#ifdef FERRY_BENCH_HAVE_TBB
BENCHMARK(chain_tbb)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(fanout_inline)->Arg(10000)->UseRealTime();
BENCHMARK(fanout_ferry)->Arg(10000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fanout_async)->Arg(2000)->UseRealTime()->Unit(benchmark::kMillisecond);
#ifdef FERRY_BENCH_HAVE_TBB
BENCHMARK(fanout_tbb)->Arg(10000)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

int main(int argc, char** argv) {
  // ferry's line gives its time per step over each baseline's; oneTBB's line gives its own.
  // (A group whose baseline did not run prints no ratio.)
  return ferry_bench::run_with_ratios(
      argc, argv, {{"chain_", "chain_inline/"}, {"chain_", "chain_async/"},
                   {"chain_ferry/", "chain_tbb/"}, {"fanout_", "fanout_inline/"},
                   {"fanout_", "fanout_async/"}, {"fanout_ferry/", "fanout_tbb/"}});
}
