// A training step far too large to compute, modeled: a 32-layer MLP stack of width 4096 (the
// shape of a 7B transformer's feed-forward half) over a model-only Galaxy (8x4 Wormhole chips,
// data-parallel along the 8, tensor-parallel along the 4). Each layer's forward is a
// column-parallel and a row-parallel matmul and an all-reduce of the activations along "tp";
// its backward two matmuls per weight and a reduce-scatter of the weight gradients along "dp"
// (each data-parallel rank keeps an eighth of the mean, as ZeRO does).
// Prints the modeled commands per second of host time, the modeled step time, and the host
// memory ferry kept (cached_bytes: 0, no kernel computes), for a step on a new mesh and for
// steps one after another on one mesh. The baseline, in the same run: the same per-chip program
// on one model-only device, without collectives.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <tuple>
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

/// The galaxy's model-only mesh, its axes named "dp" and "tp".
ferry::Mesh galaxy_mesh() {
  ferry::MeshSpec spec = ferry::specs::galaxy();
  spec.axis_names = {"dp", "tp"};
  return ferry::Mesh::modeled(spec, ferry::model_only);
}

/// Each layer's weights on every chip, and the input, made and waited for.
struct Model {
  std::vector<MeshArray<float>> w1;
  std::vector<MeshArray<float>> w2;
  MeshArray<float> x;
};
Model make_model(const ferry::Mesh& mesh) {
  Model m;
  for (int l = 0; l < kLayers; ++l) {
    m.w1.push_back(on_every_chip(mesh, Shape{kWidth, 4 * kWidth / 4}));  // column-parallel shard
    m.w2.push_back(on_every_chip(mesh, Shape{4 * kWidth / 4, kWidth}));  // row-parallel shard
  }
  m.x = on_every_chip(mesh, Shape{kTokens, kWidth});
  for (const auto& w : m.w1) ferry::wait(w);
  for (const auto& w : m.w2) ferry::wait(w);
  ferry::wait(m.x);
  return m;
}

/// One training step of `m` on `mesh`, submitted and waited for.
void training_step(const ferry::Mesh& mesh, const Model& m) {
  const int tp = mesh.axis("tp");
  const int dp = mesh.axis("dp");
  MeshArray<float> x = m.x;
  std::vector<MeshArray<float>> grads;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<DeviceArray<float>> partial;
    std::vector<DeviceArray<float>> dw1;
    std::vector<DeviceArray<float>> dw2;
    for (std::int64_t c = 0; c < mesh.size(); ++c) {
      auto steps = layer_steps(x.shard(c), m.w1[static_cast<std::size_t>(l)].shard(c),
                               m.w2[static_cast<std::size_t>(l)].shard(c));
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
}

/// The figures of a benchmark whose last step modeled `commands`, `modeled_ms` and kept
/// `cached` bytes of host memory.
void report(benchmark::State& state, std::uint64_t commands, double modeled_ms,
            std::uint64_t cached) {
  state.counters["commands"] = static_cast<double>(commands);
  state.counters["commands_per_s"] =
      benchmark::Counter(static_cast<double>(commands) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["modeled_step_ms"] = modeled_ms;
  state.counters["host_cached_bytes"] = static_cast<double>(cached);
}

/// The step's figures from `mesh`'s window: {commands, modeled ms, host bytes cached}.
std::tuple<std::uint64_t, double, std::uint64_t> figures(const ferry::Mesh& mesh) {
  const ferry::MeshStats s = mesh.stats();
  std::uint64_t cached = 0;
  for (const ferry::Device& d : mesh.devices()) cached += d.stats().cached_bytes;
  return {commands_of(mesh), static_cast<double>(s.makespan.count()) / 1e6, cached};
}

/// Each step on a new mesh: the step's host time includes each device's first use of its
/// model (its command slots, queues and trace grown from nothing). The mesh and the weights
/// are made, and let go of, outside the timed step.
void BM_GalaxyTrainingStepModelOnly(benchmark::State& state) {
  std::tuple<std::uint64_t, double, std::uint64_t> last;
  for (auto _ : state) {
    state.PauseTiming();
    auto mesh = std::make_unique<ferry::Mesh>(galaxy_mesh());
    auto m = std::make_unique<Model>(make_model(*mesh));
    mesh->reset_stats();
    state.ResumeTiming();
    training_step(*mesh, *m);
    state.PauseTiming();
    last = figures(*mesh);
    m.reset();
    mesh.reset();
    state.ResumeTiming();
  }
  report(state, std::get<0>(last), std::get<1>(last), std::get<2>(last));
}
BENCHMARK(BM_GalaxyTrainingStepModelOnly)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();

/// Step after step on one mesh, as a training loop runs them: the mesh and the weights made
/// once, one step untimed first. What a step costs once each device's model has grown to the
/// program's size, which a new mesh for every step (above) never measures.
void BM_GalaxyStepsOnOneMesh(benchmark::State& state) {
  ferry::Mesh mesh = galaxy_mesh();
  const Model m = make_model(mesh);
  training_step(mesh, m);
  std::tuple<std::uint64_t, double, std::uint64_t> last;
  for (auto _ : state) {
    state.PauseTiming();
    mesh.reset_stats();
    state.ResumeTiming();
    training_step(mesh, m);
    state.PauseTiming();
    last = figures(mesh);
    state.ResumeTiming();
  }
  report(state, std::get<0>(last), std::get<1>(last), std::get<2>(last));
}
BENCHMARK(BM_GalaxyStepsOnOneMesh)->Unit(benchmark::kMillisecond)->Iterations(5)->UseRealTime();

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
