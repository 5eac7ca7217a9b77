// A training step far too large to compute, modeled: a 32-layer MLP stack of width 4096 (the
// shape of a 7B transformer's feed-forward half) over a model-only Galaxy (8x4 Wormhole chips,
// data-parallel along the 8, tensor-parallel along the 4). Each layer's forward is a
// column-parallel and a row-parallel matmul and an all-reduce of the activations along "tp";
// its backward two matmuls per weight and a reduce-scatter of the weight gradients along "dp"
// (each data-parallel rank keeps an eighth of the mean, as ZeRO does).
// Prints the modeled commands per second of host time, the modeled step time, and the host
// memory ferry kept (cached_bytes: 0, no kernel computes). The baseline, in the same run: the
// same per-chip program on one model-only device, without collectives.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

using ferry::DeviceArray;
using ferry::MeshArray;
using ferry::Shape;

constexpr int kLayers = 32;
constexpr std::int64_t kWidth = 4096;
constexpr std::int64_t kTokens = 2048;  // a chip's share of the batch

/// Every chip's array of `shape`, zeros.
MeshArray<float> on_every_chip(const ferry::Mesh& mesh, Shape shape) {
  std::vector<DeviceArray<float>> parts;
  for (const ferry::Device& d : mesh.devices()) parts.push_back(ferry::zeros<float>(d, shape));
  return MeshArray<float>::from_shards(mesh, parts);
}

/// One chip's part of a layer, forward and backward, without the collectives: what a single
/// device runs.
std::vector<DeviceArray<float>> layer_steps(const DeviceArray<float>& x,
                                            const DeviceArray<float>& w1,
                                            const DeviceArray<float>& w2) {
  const auto h = ferry::gelu(ferry::matmul(x, w1));
  const auto y = ferry::matmul(h, w2);
  const auto dh = ferry::matmul(y, ferry::transpose(w2));
  const auto dw2 = ferry::matmul(ferry::transpose(h), y);
  const auto dw1 = ferry::matmul(ferry::transpose(x), dh);
  return {y, dw1, dw2};
}

std::uint64_t commands_of(const ferry::Mesh& mesh) {
  std::uint64_t n = 0;
  for (const ferry::Device& d : mesh.devices()) n += d.stats().steps;
  return n;
}

void BM_GalaxyTrainingStepModelOnly(benchmark::State& state) {
  std::uint64_t commands = 0;
  double modeled_ms = 0;
  std::uint64_t cached = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ferry::MeshSpec spec = ferry::specs::galaxy();
    spec.axis_names = {"dp", "tp"};
    ferry::Mesh mesh = ferry::Mesh::modeled(spec, ferry::model_only);
    const int tp = mesh.axis("tp");
    const int dp = mesh.axis("dp");
    std::vector<MeshArray<float>> w1;
    std::vector<MeshArray<float>> w2;
    for (int l = 0; l < kLayers; ++l) {
      w1.push_back(on_every_chip(mesh, Shape{kWidth, 4 * kWidth / 4}));  // column-parallel shard
      w2.push_back(on_every_chip(mesh, Shape{4 * kWidth / 4, kWidth}));  // row-parallel shard
    }
    MeshArray<float> x = on_every_chip(mesh, Shape{kTokens, kWidth});
    for (const auto& w : w1) ferry::wait(w);
    for (const auto& w : w2) ferry::wait(w);
    ferry::wait(x);
    mesh.reset_stats();
    state.ResumeTiming();

    std::vector<MeshArray<float>> grads;
    for (int l = 0; l < kLayers; ++l) {
      std::vector<DeviceArray<float>> partial;
      std::vector<DeviceArray<float>> dw1;
      std::vector<DeviceArray<float>> dw2;
      for (std::int64_t c = 0; c < mesh.size(); ++c) {
        auto steps = layer_steps(x.shard(c), w1[static_cast<std::size_t>(l)].shard(c),
                                 w2[static_cast<std::size_t>(l)].shard(c));
        partial.push_back(steps[0]);
        dw1.push_back(steps[1]);
        dw2.push_back(steps[2]);
      }
      x = ferry::all_reduce(MeshArray<float>::from_shards(mesh, partial), ferry::ReduceOp::sum, tp);
      // ZeRO-style: each data-parallel rank keeps an eighth of the mean gradient.
      grads.push_back(ferry::reduce_scatter(MeshArray<float>::from_shards(mesh, dw1), 0,
                                            ferry::ReduceOp::mean, dp));
      grads.push_back(ferry::reduce_scatter(MeshArray<float>::from_shards(mesh, dw2), 0,
                                            ferry::ReduceOp::mean, dp));
    }
    for (const auto& g : grads) ferry::wait(g);
    ferry::wait(x);

    state.PauseTiming();
    commands = commands_of(mesh);
    const ferry::MeshStats s = mesh.stats();
    modeled_ms = static_cast<double>(s.makespan.count()) / 1e6;
    cached = 0;
    for (const ferry::Device& d : mesh.devices()) cached += d.stats().cached_bytes;
    state.ResumeTiming();
  }
  state.counters["commands"] = static_cast<double>(commands);
  state.counters["commands_per_s"] =
      benchmark::Counter(static_cast<double>(commands) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["modeled_step_ms"] = modeled_ms;
  state.counters["host_cached_bytes"] = static_cast<double>(cached);
}
BENCHMARK(BM_GalaxyTrainingStepModelOnly)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();

void BM_OneChipSameStepsModelOnly(benchmark::State& state) {
  std::uint64_t commands = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ferry::Device chip = ferry::Device::modeled(ferry::specs::wormhole_b0(), ferry::model_only);
    std::vector<DeviceArray<float>> w1;
    std::vector<DeviceArray<float>> w2;
    for (int l = 0; l < kLayers; ++l) {
      w1.push_back(ferry::zeros<float>(chip, Shape{kWidth, kWidth}));
      w2.push_back(ferry::zeros<float>(chip, Shape{kWidth, kWidth}));
    }
    DeviceArray<float> x = ferry::zeros<float>(chip, Shape{kTokens, kWidth});
    ferry::wait(w1);
    ferry::wait(w2);
    chip.reset_stats();
    state.ResumeTiming();
    std::vector<DeviceArray<float>> grads;
    for (int l = 0; l < kLayers; ++l) {
      auto steps = layer_steps(x, w1[static_cast<std::size_t>(l)], w2[static_cast<std::size_t>(l)]);
      x = steps[0];
      grads.push_back(steps[1]);
      grads.push_back(steps[2]);
    }
    ferry::wait(grads);
    ferry::wait(x);
    state.PauseTiming();
    commands = chip.stats().steps;
    state.ResumeTiming();
  }
  state.counters["commands"] = static_cast<double>(commands);
  state.counters["commands_per_s"] =
      benchmark::Counter(static_cast<double>(commands) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_OneChipSameStepsModelOnly)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
