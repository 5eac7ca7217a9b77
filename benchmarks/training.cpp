// Training: the forward pass against forward + backward + update, for an MLP (nn::Sequential,
// cross-entropy) and a transformer-style block (layer norm, four-head causal self-attention, a
// GELU MLP, residuals; written with ops), in modeled time on specs::h100_sxm() and in wall time
// on this machine. The backward pass does about twice the forward's flops (each matmul's two
// operand gradients are matmuls of the same size), so a step should model at about 3x the
// forward: the figures say what ferry gets.
// Modeled times come first (deterministic: one run each; the makespan, which pays the H100's
// 12.6 us launch overhead per op, and the kernels' busy time alone), then Google Benchmark's
// wall times, each step as a ratio to its forward pass measured in the same run.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

#include <ferry/ferry.hpp>

#include "ratio_reporter.hpp"

namespace {

using A = ferry::DeviceArray<float>;
using ferry::Shape;
namespace nn = ferry::nn;

A ramp(const ferry::Device& dev, Shape shape, float scale) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * (static_cast<float>(i % 17) / 17.0f - 0.5f);
  return ferry::to_device(dev, std::move(v), shape);
}

// ---- the MLP: 256 -> 512 -> 512 -> 10, batch 128 ----

struct Mlp {
  nn::Sequential model;
  A x;
  ferry::DeviceArray<std::int64_t> y;
  ferry::optim::SGD sgd{{.lr = 1e-3}};

  explicit Mlp(const ferry::Device& dev)
      : model(nn::Linear(256, 512, dev, {.seed = 1}), nn::ReLU(),
              nn::Linear(512, 512, dev, {.seed = 2}), nn::ReLU(),
              nn::Linear(512, 10, dev, {.seed = 3})),
        x(ramp(dev, Shape{128, 256}, 1.0f)) {
    std::vector<std::int64_t> labels(128);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
    y = ferry::to_device(dev, labels, Shape{128});
  }
  A loss() const { return nn::cross_entropy(model(x), y); }
  std::vector<A> backward() {
    auto [l, grads] =
        nn::value_and_grad(model, [&](const A& xs) { return nn::cross_entropy(model(xs), y); })(x);
    std::vector<A> out{l};
    for (auto& g : grads) out.push_back(g.second);
    return out;
  }
  std::vector<A> step() {
    auto [l, grads] =
        nn::value_and_grad(model, [&](const A& xs) { return nn::cross_entropy(model(xs), y); })(x);
    sgd.step(model, grads);
    std::vector<A> out{l};
    for (const A& p : model.parameters()) out.push_back(p);
    return out;
  }
};

// ---- the block: batch 2, sequence 64, width 128, 4 heads, MLP 512 ----

constexpr std::int64_t kB = 2, kS = 64, kD = 128, kH = 4, kF = 512;

A layer_norm(const A& x, const A& gain, const A& bias) {
  const A centred = x - ferry::mean(x, {-1}, true);
  const A var = ferry::mean(centred * centred, {-1}, true);
  return centred / ferry::sqrt(var + 1e-5f) * gain + bias;
}

/// (B, S, D) to (B, H, S, D / H).
A heads(const A& t) {
  return ferry::permute(ferry::reshape(t, Shape{kB, kS, kH, kD / kH}), {0, 2, 1, 3});
}

/// params: wq, wk, wv, wo, w1, w2, ln1 gain, ln1 bias, ln2 gain, ln2 bias; then x and the mask.
A block_loss(const std::vector<A>& p, const A& x, const ferry::DeviceArray<bool>& causal) {
  const A h = layer_norm(x, p[6], p[7]);
  const A q = heads(ferry::matmul(h, p[0]));
  const A k = heads(ferry::matmul(h, p[1]));
  const A v = heads(ferry::matmul(h, p[2]));
  const A scores =
      ferry::matmul(q, ferry::permute(k, {0, 1, 3, 2})) * (1.0f / std::sqrt(float{kD / kH}));
  const A attn = ferry::softmax(ferry::where(causal, scores, -1e9f), -1);
  const A mixed =
      ferry::reshape(ferry::permute(ferry::matmul(attn, v), {0, 2, 1, 3}), Shape{kB, kS, kD});
  const A x2 = x + ferry::matmul(mixed, p[3]);
  const A out =
      x2 + ferry::matmul(ferry::gelu(ferry::matmul(layer_norm(x2, p[8], p[9]), p[4])), p[5]);
  return ferry::mean(out * out);
}

struct Block {
  std::vector<A> params;
  A x;
  ferry::DeviceArray<bool> causal;
  ferry::optim::SGD sgd{{.lr = 1e-3}};

  explicit Block(const ferry::Device& dev) : x(ramp(dev, Shape{kB, kS, kD}, 1.0f)) {
    for (Shape s : {Shape{kD, kD}, Shape{kD, kD}, Shape{kD, kD}, Shape{kD, kD}, Shape{kD, kF},
                    Shape{kF, kD}}) {
      params.push_back(ramp(dev, s, 0.1f));
    }
    for (int i = 0; i < 2; ++i) {
      params.push_back(ferry::ones<float>(dev, Shape{kD}));
      params.push_back(ferry::zeros<float>(dev, Shape{kD}));
    }
    std::vector<bool> mask(static_cast<std::size_t>(kS * kS));
    for (std::int64_t i = 0; i < kS; ++i) {
      for (std::int64_t j = 0; j < kS; ++j) mask[static_cast<std::size_t>(i * kS + j)] = j <= i;
    }
    causal = ferry::to_device(dev, mask, Shape{kS, kS});
  }
  A loss() const { return block_loss(params, x, causal); }
  std::vector<A> backward() {
    auto f = [&](const A& wq, const A& wk, const A& wv, const A& wo, const A& w1, const A& w2,
                 const A& g1, const A& b1, const A& g2, const A& b2) {
      return block_loss({wq, wk, wv, wo, w1, w2, g1, b1, g2, b2}, x, causal);
    };
    auto [l, g] = ferry::value_and_grad(f, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})(
        params[0], params[1], params[2], params[3], params[4], params[5], params[6], params[7],
        params[8], params[9]);
    g.insert(g.begin(), l);
    return g;
  }
  std::vector<A> step() {
    std::vector<A> g = backward();
    sgd.step(params, std::span<const A>(g).subspan(1));
    std::vector<A> out{g[0]};
    out.insert(out.end(), params.begin(), params.end());
    return out;
  }
};

/// What the model says of `run`'s work on a fresh window of `dev`: the makespan (with the
/// host's launch overhead of every op, as eager dispatch pays it) and the compute engines' busy
/// time (the kernels alone), in microseconds.
struct Modeled {
  double makespan_us = 0;
  double kernels_us = 0;
};

template <class Run>
Modeled modeled(ferry::Device& dev, Run run) {
  dev.reset_stats();
  ferry::wait(run());
  const ferry::DeviceStats s = dev.stats();
  Modeled m{static_cast<double>(s.makespan.count()) / 1e3, 0};
  for (const auto& e : s.engines) {
    if (e.name.rfind("compute", 0) == 0) m.kernels_us += static_cast<double>(e.busy.count()) / 1e3;
  }
  return m;
}

template <class Model>
void report_modeled(const char* name) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::h100_sxm());
  Model m(dev);
  ferry::wait(m.step());  // the optimizer's state exists from here on, as in a training loop
  const Modeled fwd = modeled(dev, [&] { return std::vector<A>{m.loss()}; });
  const Modeled bwd = modeled(dev, [&] { return m.backward(); });
  const Modeled step = modeled(dev, [&] { return m.step(); });
  std::printf("%-6s modeled on h100_sxm, makespan: forward %7.1f us, +backward %7.1f us (backward "
              "%.2fx the forward), +update %7.1f us (%.2fx the forward)\n",
              name, fwd.makespan_us, bwd.makespan_us,
              (bwd.makespan_us - fwd.makespan_us) / fwd.makespan_us, step.makespan_us,
              step.makespan_us / fwd.makespan_us);
  std::printf("%-6s modeled on h100_sxm, kernels:  forward %7.1f us, +backward %7.1f us (backward "
              "%.2fx the forward), +update %7.1f us (%.2fx the forward)\n",
              name, fwd.kernels_us, bwd.kernels_us,
              (bwd.kernels_us - fwd.kernels_us) / fwd.kernels_us, step.kernels_us,
              step.kernels_us / fwd.kernels_us);
}

template <class Model, bool kTrain>
void wall(benchmark::State& state) {
  ferry::Device dev = ferry::Device::cpu();
  Model m(dev);
  ferry::wait(m.step());
  for (auto _ : state) {
    if constexpr (kTrain) {
      ferry::wait(m.step());
    } else {
      ferry::wait(m.loss());
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void runs(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
}

BENCHMARK(wall<Mlp, false>)->Name("mlp_forward")->Apply(runs);
BENCHMARK(wall<Mlp, true>)->Name("mlp_train_step")->Apply(runs);
BENCHMARK(wall<Block, false>)->Name("block_forward")->Apply(runs);
BENCHMARK(wall<Block, true>)->Name("block_train_step")->Apply(runs);

}  // namespace

int main(int argc, char** argv) {
  report_modeled<Mlp>("mlp");
  report_modeled<Block>("block");
  return ferry_bench::run_with_ratios(argc, argv,
                                      {{"mlp_train_step", "mlp_forward"},
                                       {"block_train_step", "block_forward"}});
}
