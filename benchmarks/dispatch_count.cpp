// One run of one dispatch workload, for callgrind: `dispatch_count WORKLOAD N` runs WORKLOAD
// with N steps (or N calls) once and exits, so that the difference between two runs counts the
// instructions of N steps without Google Benchmark's own loop and calibration. The workloads are
// the ones benchmarks/dispatch and benchmarks/replay time; benchmarks/dispatch_count.sh runs
// them under callgrind and prints each beside its baseline from the same run.
//
//   chain        N dependent c = c + 1.0f on Device::cpu(), one export
//   fanout       N independent s + 1.0f from one source on Device::cpu(), one batched wait
//   chain_tbb    the chain as a oneTBB flow graph (one function_node a step)
//   fanout_tbb   the fan-out as a oneTBB flow graph (one function_node an element)
//   eager_mm     N/1000 calls of 1,000 8x8 matmul steps, eager (a ManualExecutor, modeled)
//   replay_mm    the same program replayed from a cache of one entry
//   lookup1      N calls of an empty program with 1 static entry
//   lookup100    the same with 100 entries, the one asked for traced last
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef FERRY_BENCH_HAVE_TBB
#include <deque>

#include <tbb/flow_graph.h>
#endif

#include <ferry/ferry.hpp>

namespace {

using ferry::DeviceArray;
using ferry::Shape;

int fail(const char* what) {
  std::fprintf(stderr, "dispatch_count: %s\n", what);
  return 1;
}

int chain(std::int64_t n) {
  const ferry::Device dev = ferry::Device::cpu();
  auto c = ferry::to_device(dev, {0.0f}, Shape{1});
  for (std::int64_t i = 0; i < n; ++i) c = c + 1.0f;
  return c.to_host()(0) == static_cast<float>(n) ? 0 : fail("wrong chain result");
}

int fanout(std::int64_t n) {
  const ferry::Device dev = ferry::Device::cpu();
  std::vector<DeviceArray<float>> out(static_cast<std::size_t>(n));
  const auto s = ferry::to_device(dev, {1.0f}, Shape{1});
  for (auto& o : out) o = s + 1.0f;
  ferry::wait(out);
  return 0;
}

#ifdef FERRY_BENCH_HAVE_TBB
int chain_tbb(std::int64_t n) {
  using node = tbb::flow::function_node<float, float>;
  tbb::flow::graph g;
  std::deque<node> steps;
  for (std::int64_t i = 0; i < n; ++i) {
    steps.emplace_back(g, tbb::flow::unlimited, [](float x) { return x + 1.0f; });
    if (i > 0) tbb::flow::make_edge(steps[steps.size() - 2], steps.back());
  }
  float result = 0;
  tbb::flow::function_node<float> sink(g, tbb::flow::serial, [&result](float x) {
    result = x;
    return tbb::flow::continue_msg{};
  });
  tbb::flow::make_edge(steps.back(), sink);
  steps.front().try_put(0.0f);
  g.wait_for_all();
  return result == static_cast<float>(n) ? 0 : fail("wrong chain result");
}

int fanout_tbb(std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  tbb::flow::graph g;
  tbb::flow::function_node<float, float> source(g, tbb::flow::serial, [](float x) { return x; });
  std::deque<tbb::flow::function_node<float>> steps;
  for (std::int64_t i = 0; i < n; ++i) {
    steps.emplace_back(g, tbb::flow::unlimited, [&out, i](float x) {
      out[static_cast<std::size_t>(i)] = x + 1.0f;
      return tbb::flow::continue_msg{};
    });
    tbb::flow::make_edge(source, steps.back());
  }
  source.try_put(1.0f);
  g.wait_for_all();
  return 0;
}
#endif

DeviceArray<float> ramp(const ferry::Device& dev, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) / 13.0f;
  return ferry::to_device(dev, v, Shape{rows, cols});
}

/// benchmarks/replay's program: 1,000 matmuls of 8x8 matrices, each reading the one before.
DeviceArray<float> matmul_program(DeviceArray<float> x, DeviceArray<float> w) {
  DeviceArray<float> v = x;
  for (int i = 0; i < 1000; ++i) v = ferry::matmul(v, w);
  return v;
}

int matmul_steps(std::int64_t n, bool replay) {
  ferry::Device dev(ferry::ManualExecutor{});
  const auto x = ramp(dev, 8, 8);
  const auto w = ramp(dev, 8, 8);
  auto f = ferry::jit(matmul_program);
  ferry::wait(f(x, w));  // the trace, in both runs, so that the difference holds no trace
  for (std::int64_t call = 0; call < n / 1000; ++call) {
    ferry::wait(replay ? f(x, w) : matmul_program(x, w));
    dev.reset_stats();
  }
  return f.cache_misses() == 1 ? 0 : fail("the program traced more than once");
}

int lookup(std::int64_t n, std::int64_t entries) {
  ferry::Device dev(ferry::ManualExecutor{});
  auto f = ferry::jit([](DeviceArray<float> x) { return x; }, ferry::CacheMode::static_shapes);
  DeviceArray<float> last;
  for (std::int64_t rows = 1; rows <= entries; ++rows) {
    last = ramp(dev, rows, 1);
    (void)f(last);
  }
  for (std::int64_t i = 0; i < n; ++i) (void)f(last);
  return static_cast<std::int64_t>(f.cache_size()) == entries ? 0 : fail("wrong entry count");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: dispatch_count WORKLOAD N");
  const std::string what = argv[1];
  const std::int64_t n = std::strtoll(argv[2], nullptr, 10);
  if (what == "chain") return chain(n);
  if (what == "fanout") return fanout(n);
#ifdef FERRY_BENCH_HAVE_TBB
  if (what == "chain_tbb") return chain_tbb(n);
  if (what == "fanout_tbb") return fanout_tbb(n);
#endif
  if (what == "eager_mm") return matmul_steps(n, false);
  if (what == "replay_mm") return matmul_steps(n, true);
  if (what == "lookup1") return lookup(n, 1);
  if (what == "lookup100") return lookup(n, 100);
  return fail("unknown workload (or oneTBB not found)");
}
