// Modeled step time and scaling efficiency of a data-parallel and a tensor-parallel training
// step of a GPT-2-small-sized model on 1 to 32 H100s, on model-only meshes (the timeline of
// the computing devices, no values: the whole sweep runs in seconds on the host).
//
// The model: GPT-2 small's feed-forward stack, 12 residual layers x = x + gelu(x W1) W2 of
// width 768 and hidden width 3072 (56.6M parameters), on 8192 tokens (8 sequences of 1024) per
// model replica. Attention is left out: the MLP holds two thirds of each layer's weights. (At 1024
// tokens the kernels are too small for the modeled H100's 12.5 us of eager host time a launch and
// for the all-reduces: both strategies stop scaling early, docs/performance.md gives the figures.)
//
// - Data parallel (weak scaling): nn::DataParallel over n GPUs, 8192 tokens on each,
//   forward, backward with the gradients all-reduced in PyTorch's 25 MiB buckets as they
//   become ready, and an SGD update. Efficiency t1 / tn: each GPU does the one-GPU step's
//   work, so the ideal is a flat step time.
// - Tensor parallel (strong scaling): one replica of 8192 tokens with every weight cut n ways
//   (W1 by columns, W2 by rows, Megatron's MLP), forward and backward by hand: one all-reduce
//   of the activations per layer forward and one of their gradient backward, and an SGD
//   update. Efficiency t1 / (n tn): the ideal divides the step by n.
//
// The meshes are the DGX H100's NVSwitch and NVLink figures (specs::dgx_h100()) with n GPUs on
// the switch; beyond 8 that is an NVL32-like domain, every pair one hop. The baseline, in the
// same run, is 1 GPU. Prints a Markdown table; modeled figures are the same on every machine.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

namespace {

namespace nn = ferry::nn;
using ferry::Device;
using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Shape;

constexpr int kLayers = 12;
constexpr std::int64_t kDim = 768;
constexpr std::int64_t kHidden = 3072;
constexpr std::int64_t kTokens = 8192;
constexpr float kLr = 1e-3f;

/// n H100s on one NVSwitch, with the DGX H100's links.
ferry::MeshSpec h100s(std::int64_t n) {
  ferry::MeshSpec m = ferry::specs::dgx_h100();
  m.name = "h100_x" + std::to_string(n);
  m.devices.assign(static_cast<std::size_t>(n), ferry::specs::h100_sxm());
  m.shape = ferry::MeshShape{n};
  m.topology = {ferry::Topology::fully_connected};
  return m;
}

/// GPT-2 small's MLP stack, its weights zeros (a model-only device holds no values).
class MlpStack : public nn::Module {
 public:
  explicit MlpStack(const Device& d) {
    for (int l = 0; l < kLayers; ++l) {
      const std::string n = std::to_string(l);
      w1_.push_back(register_parameter("w1_" + n, ferry::zeros<float>(d, Shape{kDim, kHidden})));
      w2_.push_back(register_parameter("w2_" + n, ferry::zeros<float>(d, Shape{kHidden, kDim})));
    }
  }
  std::string_view type_name() const override { return "MlpStack"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x0) const override {
    DeviceArray<float> x = x0;
    for (std::size_t l = 0; l < w1_.size(); ++l) {
      x = x + ferry::matmul(ferry::gelu(ferry::matmul(x, parameter(w1_[l]))), parameter(w2_[l]));
    }
    return x;
  }

 private:
  std::vector<std::size_t> w1_;
  std::vector<std::size_t> w2_;
};

/// `shape` zeros on every device of `mesh`.
MeshArray<float> on_each(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<float>> parts;
  for (const Device& d : mesh.devices()) parts.push_back(ferry::zeros<float>(d, shape));
  return MeshArray<float>::from_shards(mesh, std::move(parts));
}

struct Step {
  ferry::MeshStats stats;
  std::uint64_t commands = 0;
};

Step measured(const Mesh& mesh) {
  Step s{mesh.stats(), 0};
  for (const ferry::DeviceStats& d : s.stats.devices) s.commands += d.steps;
  return s;
}

/// The second of two data-parallel steps on `n` GPUs (the first makes the buffers).
Step data_parallel_step(std::int64_t n) {
  Mesh mesh = Mesh::modeled(h100s(n), ferry::model_only);
  nn::DataParallel dp(MlpStack(mesh.device(0)), mesh);
  auto step =
      nn::value_and_grad(dp, [](const nn::Module& m, const DeviceArray<float>& x,
                                const DeviceArray<float>& y) { return nn::mse_loss(m(x), y); });
  ferry::optim::SGD sgd({.lr = kLr});
  const MeshArray<float> x = on_each(mesh, Shape{kTokens, kDim});
  const MeshArray<float> y = on_each(mesh, Shape{kTokens, kDim});
  Step out;
  for (int s = 0; s < 2; ++s) {
    ferry::wait(x);
    ferry::wait(y);
    for (const DeviceArray<float>& p : dp.parameters()) ferry::wait(p);
    mesh.reset_stats();
    auto [losses, grads] = step(x, y);
    sgd.step(dp.parameters(), grads);
    ferry::wait(losses);
    for (const DeviceArray<float>& p : dp.parameters()) ferry::wait(p);
    out = measured(mesh);
  }
  return out;
}

/// MeshArray of f(i) for every device i.
template <class F>
MeshArray<float> each(const Mesh& mesh, F&& f) {
  std::vector<DeviceArray<float>> parts;
  for (std::int64_t i = 0; i < mesh.size(); ++i) parts.push_back(f(i));
  return MeshArray<float>::from_shards(mesh, std::move(parts));
}

/// The second of two tensor-parallel steps on `n` GPUs.
Step tensor_parallel_step(std::int64_t n) {
  Mesh mesh = Mesh::modeled(h100s(n), ferry::model_only);
  std::vector<MeshArray<float>> w1;  // (kDim, kHidden / n) on each GPU: columns
  std::vector<MeshArray<float>> w2;  // (kHidden / n, kDim): rows
  for (int l = 0; l < kLayers; ++l) {
    w1.push_back(on_each(mesh, Shape{kDim, kHidden / n}));
    w2.push_back(on_each(mesh, Shape{kHidden / n, kDim}));
  }
  const MeshArray<float> x0 = on_each(mesh, Shape{kTokens, kDim});  // every GPU: the whole batch
  Step out;
  for (int s = 0; s < 2; ++s) {
    for (const auto& w : w1) ferry::wait(w);
    for (const auto& w : w2) ferry::wait(w);
    ferry::wait(x0);
    mesh.reset_stats();
    std::vector<MeshArray<float>> xs;
    std::vector<MeshArray<float>> as;
    std::vector<MeshArray<float>> hs;
    MeshArray<float> x = x0;
    for (std::size_t l = 0; l < w1.size(); ++l) {
      xs.push_back(x);
      as.push_back(
          each(mesh, [&](std::int64_t i) { return ferry::matmul(x.shard(i), w1[l].shard(i)); }));
      hs.push_back(each(mesh, [&](std::int64_t i) { return ferry::gelu(as[l].shard(i)); }));
      // Each GPU's product is a summand of the layer's output: one all-reduce.
      const MeshArray<float> y = ferry::all_reduce(each(
          mesh, [&](std::int64_t i) { return ferry::matmul(hs[l].shard(i), w2[l].shard(i)); }));
      x = each(mesh, [&](std::int64_t i) { return x.shard(i) + y.shard(i); });
    }
    // d mean((x - 0)^2) / dx, up to the constant.
    MeshArray<float> g = each(mesh, [&](std::int64_t i) { return x.shard(i) * 2.0f; });
    for (std::size_t l = w1.size(); l-- > 0;) {
      const MeshArray<float> dw2 = each(mesh, [&](std::int64_t i) {
        return ferry::matmul(ferry::transpose(hs[l].shard(i)), g.shard(i));
      });
      // dh * gelu'(a): the product with a stands in for gelu' (the same elementwise cost).
      const MeshArray<float> da = each(mesh, [&](std::int64_t i) {
        return ferry::matmul(g.shard(i), ferry::transpose(w2[l].shard(i))) * as[l].shard(i);
      });
      const MeshArray<float> dw1 = each(mesh, [&](std::int64_t i) {
        return ferry::matmul(ferry::transpose(xs[l].shard(i)), da.shard(i));
      });
      // The input's gradient is a summand on each GPU too: the backward's all-reduce.
      const MeshArray<float> dx = ferry::all_reduce(each(mesh, [&](std::int64_t i) {
        return ferry::matmul(da.shard(i), ferry::transpose(w1[l].shard(i)));
      }));
      g = each(mesh, [&](std::int64_t i) { return g.shard(i) + dx.shard(i); });
      // SGD: no communication, each GPU owns its part of every weight.
      w1[l] = each(mesh, [&](std::int64_t i) { return w1[l].shard(i) - dw1.shard(i) * kLr; });
      w2[l] = each(mesh, [&](std::int64_t i) { return w2[l].shard(i) - dw2.shard(i) * kLr; });
    }
    ferry::wait(g);
    for (const auto& w : w1) ferry::wait(w);
    for (const auto& w : w2) ferry::wait(w);
    out = measured(mesh);
  }
  return out;
}

double ms(ferry::Duration d) { return static_cast<double>(d.count()) / 1e6; }

double hidden(const ferry::MeshStats& s) {
  return s.communication_time.count() == 0 ? 0.0
                                           : static_cast<double>(s.communication_overlap.count()) /
                                                 static_cast<double>(s.communication_time.count());
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t counts[] = {1, 2, 4, 8, 16, 32};
  std::printf(
      "GPT-2-small MLP stack (%d layers, %lld -> %lld -> %lld), %lld tokens per replica, "
      "model-only H100s on one NVSwitch\n\n",
      kLayers, static_cast<long long>(kDim), static_cast<long long>(kHidden),
      static_cast<long long>(kDim), static_cast<long long>(kTokens));
  std::printf(
      "| GPUs | DP step (ms) | DP efficiency t1/tn | DP comm hidden | TP step (ms) | TP "
      "speed-up | TP efficiency t1/(n tn) | TP comm hidden |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double dp1 = 0;
  double tp1 = 0;
  std::uint64_t commands = 0;
  for (const std::int64_t n : counts) {
    const Step dp = data_parallel_step(n);
    const Step tp = tensor_parallel_step(n);
    commands += dp.commands + tp.commands;
    const double tdp = ms(dp.stats.makespan);
    const double ttp = ms(tp.stats.makespan);
    if (n == 1) {
      dp1 = tdp;
      tp1 = ttp;
    }
    const auto nd = static_cast<double>(n);
    std::printf("| %lld | %.2f | %.2f | %.0f%% | %.2f | %.2fx | %.2f | %.0f%% |\n",
                static_cast<long long>(n), tdp, dp1 / tdp, 100 * hidden(dp.stats), ttp, tp1 / ttp,
                tp1 / (nd * ttp), 100 * hidden(tp.stats));
  }
  const double host_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%llu device commands of timed steps; %.2f s of host time for the whole sweep\n",
              static_cast<unsigned long long>(commands), host_s);
  return 0;
}
