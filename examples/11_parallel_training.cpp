// 11 · Parallel training: data parallel on 1 to 8 H100s, data x tensor parallel on a T3000.
//
// Part 1 trains the decoder-only transformer of 08_transformer (written again here, its sizes a
// Config) data-parallel with nn::DataParallel on the first 1, 2, 4 and 8 GPUs of a DGX H100:
// each GPU takes its slice of the global batch, the gradients are averaged by all-reduces in
// buckets that start while the backward is still running, and Adam steps every replica in
// place. Two sizes, one program. At 08's size, with values, the loss curve on every mesh is the
// one-GPU curve. But a model that small is launch-bound (each GPU's host issues the same number
// of kernels whatever its share of the batch), so splitting its batch saves nothing; the same
// code at a size where compute outweighs the launches, on model-only meshes (the same timeline,
// no values, so it runs in no time on the host), shows the speed-up and how much of the
// all-reduce the backward hides.
//
// Part 2 is Megatron's MLP on a T3000's 2x4 chips, data-parallel along "dp" and tensor-parallel
// along "tp", written with the mesh ops: the first weight cut by columns (Shard{1}) and the
// second by rows (Shard{0}), so a layer's forward needs one all-reduce (the row-parallel
// product is Partial until redistribute makes it Replicate), its backward one more along "tp"
// and one per weight along "dp". nn::value_and_grad over the sharded weights writes that
// backward: each collective goes back as its transposed collective, one call, and the loss,
// which every chip holds (Replicate on both axes), is returned as that mesh array, so its
// cotangent starts on every chip and the last all-reduce goes back with nothing sent. At the
// large size the step is 103.3 ms modeled, 4.96x one chip's 512.4 ms (each all-reduce a
// reduce-scatter then an all-gather on the chips, as on the links, each part reduced while the
// all-gather half's messages fly; 104.2 ms when the reduction waited for the last message).
// Measured when an all-reduce
// still reduced every member's whole shard (104.8 ms then): with the loss read on chip (0,0)
// alone (`.shard(0)`), its cotangent was broadcast from there, 32 MiB to the other three chips
// of each dp group, and the step took 112.9 ms (all-reducing zeros instead of broadcasting,
// 116.5 ms; the cotangents carried as copies member to member, 125.3 ms); with the loss
// replicated but matmul's rule still computing the cotangent of the input data, which nothing
// asks for, 110.2 ms; with the elementwise rules still computing the cotangent of the target
// (the loss's subtrahend), 105.0 ms. A backward written out by hand took 100.3 ms in the same
// model: the same all-reduces, byte for byte, and a few elementwise steps fewer (about 1 ms of
// the difference; the rest is the two rows of chips taking turns to finish late: see
// Mesh::reset_stats and docs/concepts.md on each chip's host clock).
// SGD updates each chip's shards in place. The losses equal those of the same program on one
// chip, and the modeled step time shows what the Ethernet links cost.
#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace nn = ferry::nn;
using ferry::Device;
using ferry::DeviceArray;
using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Shape;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

double us(ferry::Duration d) { return static_cast<double>(d.count()) / 1000; }

/// The share of the window's communication that compute hid (0 without communication).
double hidden_share(const ferry::MeshStats& s) {
  return s.communication_time.count() == 0 ? 0.0
                                           : static_cast<double>(s.communication_overlap.count()) /
                                                 static_cast<double>(s.communication_time.count());
}

// ---- Part 1: the transformer, data parallel ----

/// A transformer's sizes and its training batch: each sequence repeats a random pattern of
/// `period` tokens, and only the labels from `period` on are scored (08_transformer's task).
struct Config {
  std::int64_t vocab, period, seq, dim, heads, layers;
  std::int64_t batch;  // sequences per step, over all devices
};

/// 08_transformer's sizes: computed, with values.
constexpr Config kSmall{
    .vocab = 8, .period = 4, .seq = 16, .dim = 32, .heads = 2, .layers = 2, .batch = 32};
/// A size at which a step's compute outweighs launching its kernels: modeled only.
constexpr Config kLarge{
    .vocab = 1024, .period = 4, .seq = 256, .dim = 512, .heads = 8, .layers = 4, .batch = 256};

/// 08's decoder-only transformer: token and learned position embeddings, pre-norm blocks of
/// causal multi-head attention and a silu MLP, a final norm and an output projection.
class Transformer : public nn::Module {
 public:
  Transformer(const Device& dev, const Config& c, std::uint64_t seed) : c_(c) {
    // Uniform in +-bound; zeros on a model-only device, whose arrays hold no values anyway.
    auto init = [&](Shape shape, double bound) {
      if (dev.is_model_only()) return ferry::zeros<float>(dev, shape);
      return nn::uniform(dev, shape, -bound, bound, seed++);
    };
    const double fan_in = 1.0 / std::sqrt(static_cast<double>(c.dim));
    const double fan_hidden = 1.0 / std::sqrt(static_cast<double>(4 * c.dim));
    auto ones = [&] { return ferry::ones<float>(dev, Shape{c.dim}); };
    tok_ = register_parameter("tok_emb", init(Shape{c.vocab, c.dim}, 1.0));
    pos_ = register_parameter("pos_emb", init(Shape{c.seq, c.dim}, 1.0));
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::string n = "block" + std::to_string(l) + "_";
      Block b{};
      b.norm1 = register_parameter(n + "norm1", ones());
      b.wq = register_parameter(n + "wq", init(Shape{c.dim, c.dim}, fan_in));
      b.wk = register_parameter(n + "wk", init(Shape{c.dim, c.dim}, fan_in));
      b.wv = register_parameter(n + "wv", init(Shape{c.dim, c.dim}, fan_in));
      b.wo = register_parameter(n + "wo", init(Shape{c.dim, c.dim}, fan_in));
      b.norm2 = register_parameter(n + "norm2", ones());
      b.w1 = register_parameter(n + "w1", init(Shape{c.dim, 4 * c.dim}, fan_in));
      b.w2 = register_parameter(n + "w2", init(Shape{4 * c.dim, c.dim}, fan_hidden));
      blocks_.push_back(b);
    }
    norm_f_ = register_parameter("norm_f", ones());
    head_ = register_parameter("head", init(Shape{c.dim, c.vocab}, fan_in));
  }

  std::string_view type_name() const override { return "Transformer"; }

  /// Token ids (B, T) to logits (B, T, vocab).
  DeviceArray<float> logits(const DeviceArray<std::int64_t>& ids) const {
    const std::int64_t t = ids.shape().dims()[1];
    return (*this)(ferry::take(p(tok_), ids, 0) + ferry::slice(p(pos_), 0, 0, t));
  }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x0) const override {
    DeviceArray<float> x = x0;
    for (const Block& b : blocks_) {
      const auto h = ferry::rms_norm(x, {.weight = p(b.norm1)});
      const auto att = ferry::scaled_dot_product_attention(
          heads(ferry::matmul(h, p(b.wq))), heads(ferry::matmul(h, p(b.wk))),
          heads(ferry::matmul(h, p(b.wv))), {.causal = true});
      x = x + ferry::matmul(merge(att), p(b.wo));
      const auto g = ferry::rms_norm(x, {.weight = p(b.norm2)});
      x = x + ferry::matmul(ferry::silu(ferry::matmul(g, p(b.w1))), p(b.w2));
    }
    return ferry::matmul(ferry::rms_norm(x, {.weight = p(norm_f_)}), p(head_));
  }

 private:
  struct Block {
    std::size_t norm1, wq, wk, wv, wo, norm2, w1, w2;
  };

  const DeviceArray<float>& p(std::size_t i) const { return parameter(i); }

  /// (B, T, dim) -> (B, heads, T, dim / heads).
  DeviceArray<float> heads(const DeviceArray<float>& x) const {
    const Shape s = x.shape();
    return ferry::permute(
        ferry::reshape(x, Shape{s.dims()[0], s.dims()[1], c_.heads, c_.dim / c_.heads}),
        {0, 2, 1, 3});
  }
  /// The inverse of heads().
  DeviceArray<float> merge(const DeviceArray<float>& x) const {
    const Shape s = x.shape();
    return ferry::reshape(ferry::permute(x, {0, 2, 1, 3}), Shape{s.dims()[0], s.dims()[2], c_.dim});
  }

  Config c_;
  std::vector<Block> blocks_;
  std::size_t tok_ = 0, pos_ = 0, norm_f_ = 0, head_ = 0;
};

/// The first `n` GPUs of a DGX H100: the same NVSwitch and links, fewer GPUs on it.
MeshSpec first_gpus_of_dgx(std::int64_t n) {
  MeshSpec m = ferry::specs::dgx_h100();
  m.name = "dgx_h100[0:" + std::to_string(n) + "]";
  m.devices.resize(static_cast<std::size_t>(n));
  m.shape = ferry::MeshShape{n};
  m.topology = {ferry::Topology::fully_connected};
  return m;
}

/// A batch of `c`: token ids (batch, seq) and the scored labels (batch, seq - period + 1), as
/// floats so that DataParallel hands each replica its rows (the loss converts them).
std::pair<HostArray<float>, HostArray<float>> make_batch(std::mt19937& rng, const Config& c) {
  std::uniform_int_distribution<std::int64_t> token(0, c.vocab - 1);
  std::vector<float> ids;
  std::vector<float> labels;
  std::vector<std::int64_t> pattern(static_cast<std::size_t>(c.period));
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (auto& t : pattern) t = token(rng);
    for (std::int64_t i = 0; i <= c.seq; ++i) {
      const auto t = static_cast<float>(pattern[static_cast<std::size_t>(i % c.period)]);
      if (i < c.seq) ids.push_back(t);
      if (i >= c.period) labels.push_back(t);
    }
  }
  return {HostArray<float>(Shape{c.batch, c.seq}, std::move(ids)),
          HostArray<float>(Shape{c.batch, c.seq - c.period + 1}, std::move(labels))};
}

/// Zeros of `shape` on every device of `mesh`: a model-only mesh's batch.
MeshArray<float> zeros_on_each(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<float>> parts;
  for (const Device& d : mesh.devices()) parts.push_back(ferry::zeros<float>(d, shape));
  return MeshArray<float>::from_shards(mesh, std::move(parts));
}

struct DataParallelRun {
  std::vector<float> losses;  // each step's loss over the global batch (with values)
  ferry::MeshStats last;      // the modeled figures of the last step
};

/// `steps` Adam steps of a Transformer of `c` data-parallel over every device of `mesh`.
DataParallelRun train_data_parallel(Mesh mesh, const Config& c, int steps,
                                    std::int64_t bucket_bytes) {
  // The module is built on device 0 and copied to the others; from here on DataParallel holds
  // every replica's parameters.
  nn::DataParallel dp(Transformer(mesh.device(0), c, 1), mesh, -1, {.bucket_bytes = bucket_bytes});
  // Each replica's loss is the mean over its own rows; the all-reduce averages the gradients,
  // which makes them those of the mean over the global batch.
  auto step = nn::value_and_grad(dp, [c](const nn::Module& m, const DeviceArray<float>& ids,
                                         const DeviceArray<float>& labels) {
    const auto& model = static_cast<const Transformer&>(m);
    const std::int64_t rows = ids.shape().dims()[0] * (c.seq - c.period + 1);
    const auto scored =
        ferry::slice(model.logits(ids.astype<std::int64_t>()), 1, c.period - 1, c.seq);
    return nn::cross_entropy(ferry::reshape(scored, Shape{rows, c.vocab}),
                             ferry::reshape(labels.astype<std::int64_t>(), Shape{rows}));
  });
  ferry::optim::Adam adam({.lr = 1e-2});
  const bool values = !mesh.device(0).is_model_only();
  const std::int64_t n = mesh.size();
  std::mt19937 rng(7);  // every mesh sees the same batches
  DataParallelRun run;
  for (int s = 0; s < steps; ++s) {
    MeshArray<float> ids;
    MeshArray<float> labels;
    if (values) {
      auto [host_ids, host_labels] = make_batch(rng, c);
      ids = ferry::distribute(host_ids, mesh, {ferry::Shard{0}});  // each GPU gets its rows
      labels = ferry::distribute(host_labels, mesh, {ferry::Shard{0}});
    } else {
      ids = zeros_on_each(mesh, Shape{c.batch / n, c.seq});
      labels = zeros_on_each(mesh, Shape{c.batch / n, c.seq - c.period + 1});
    }
    // The batch is on the GPUs before the step's window opens, as a prefetching loader has it.
    ferry::wait(ids);
    ferry::wait(labels);
    mesh.reset_stats();
    auto [losses, grads] = step(ids, labels);
    adam.step(dp.parameters(), grads);  // every replica's parameters, in place
    ferry::wait(losses);
    for (const DeviceArray<float>& p : dp.parameters()) ferry::wait(p);
    run.last = mesh.stats();
    if (values) {
      float sum = 0;  // the replicas' batches are equal in size: the mean of their means
      for (std::int64_t r = 0; r < n; ++r) sum += losses.shard(r).item();
      run.losses.push_back(sum / static_cast<float>(n));
    }
  }
  return run;
}

// ---- Part 2: Megatron's MLP, data x tensor parallel ----

/// A stack of residual MLP layers x = x + relu(x W1) W2 and its batch.
struct MlpConfig {
  std::int64_t tokens;  // rows of x, over all data-parallel ranks
  std::int64_t dim, hidden, layers;
};

constexpr MlpConfig kMlpSmall{.tokens = 64, .dim = 32, .hidden = 128, .layers = 2};
/// A 7B transformer's feed-forward width: modeled only.
constexpr MlpConfig kMlpLarge{.tokens = 4096, .dim = 4096, .hidden = 16384, .layers = 2};

/// An array of `shape` placed on `mesh`: smooth values scaled by `scale`, or zeros on a
/// model-only mesh (made on device 0 and sent out, as a checkpoint's load would).
MeshArray<float> place(const Mesh& mesh, const Shape& shape, const ferry::Placements& ps, int salt,
                       double scale) {
  if (mesh.device(0).is_model_only()) {
    return ferry::distribute(ferry::zeros<float>(mesh.device(0), shape), mesh, ps);
  }
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(scale * std::sin(0.37 * static_cast<double>(i) + salt));
  }
  return ferry::distribute(HostArray<float>(shape, std::move(v)), mesh, ps);
}

/// Megatron's MLP stack on a mesh with axes ("dp", "tp"). Activations (tokens, dim) are cut by
/// rows along dp and whole along tp; W1 (dim, hidden) is cut by columns along tp, W2 (hidden,
/// dim) by rows, both replicated along dp.
class MegatronMlp {
 public:
  MegatronMlp(const Mesh& mesh, const MlpConfig& c) {
    const ferry::Placements columns{ferry::Replicate{}, ferry::Shard{1}};
    const ferry::Placements rows{ferry::Replicate{}, ferry::Shard{0}};
    for (std::int64_t l = 0; l < c.layers; ++l) {  // W1 and W2 of each layer, in turn
      const int salt = 10 * static_cast<int>(l);
      weights_.push_back(place(mesh, Shape{c.dim, c.hidden}, columns, salt + 1,
                               0.5 / std::sqrt(static_cast<double>(c.dim))));
      weights_.push_back(place(mesh, Shape{c.hidden, c.dim}, rows, salt + 2,
                               0.5 / std::sqrt(static_cast<double>(c.hidden))));
    }
  }

  void wait() const {
    for (const auto& w : weights_) ferry::wait(w);
  }

  /// The stack applied to x: per layer, x + relu(x W1) W2.
  MeshArray<float> operator()(const MeshArray<float>& x0) const {
    const ferry::Placements activations{ferry::Shard{0}, ferry::Replicate{}};
    MeshArray<float> x = x0;
    for (std::size_t l = 0; l < weights_.size(); l += 2) {
      const auto a =
          ferry::matmul(x, weights_[l]);  // column-parallel: Shard{1} along tp, no traffic
      const auto partial = ferry::matmul(ferry::relu(a), weights_[l + 1]);  // row-parallel: Partial
      x = x + ferry::redistribute(partial, activations);  // the forward's one all-reduce ("tp")
    }
    return x;
  }

  /// One step of `opt` on mean((mlp(x) - target)^2); returns the loss (on the first chip).
  /// nn::value_and_grad writes the backward: the input's gradient is Partial along tp
  /// (row-parallel again), the backward's all-reduce there; each weight's is a sum over the rows,
  /// which dp cuts, so it is all-reduced along dp, where the weight is Replicate. The optimizer
  /// then updates each chip's shard of each weight on that chip, in place.
  DeviceArray<float> step(const MeshArray<float>& x, const MeshArray<float>& target,
                          ferry::optim::Optimizer& opt) {
    auto [loss, grads] = nn::value_and_grad(weights_, [&](const MeshArray<float>& in) {
      const auto diff = (*this)(in) - target;
      // Each dp rank's share of the mean over the global batch, Partial along dp, summed by an
      // all-reduce: every chip holds the loss, Replicate on both axes. Returned as the mesh
      // array it is, so its cotangent starts on every chip (not on the first one only).
      return ferry::redistribute(ferry::mean(diff * diff),
                                 {ferry::Replicate{}, ferry::Replicate{}});
    })(x);
    opt.step(weights_, grads);
    return loss.shard(0);
  }

 private:
  std::vector<MeshArray<float>> weights_;  // W1, W2 of layer 0, then of layer 1, ...
};

/// A T3000's chips as a (dp, tp) mesh of `dp` x `tp`: the whole T3000 for 2 x 4, one chip of
/// it for 1 x 1.
MeshSpec t3000_as(std::int64_t dp, std::int64_t tp) {
  MeshSpec m = ferry::specs::t3000();
  if (dp * tp != m.shape.size()) {
    m.name = "t3000[" + std::to_string(dp) + "x" + std::to_string(tp) + "]";
    m.devices.resize(static_cast<std::size_t>(dp * tp));
    m.shape = ferry::MeshShape{dp, tp};
  }
  m.axis_names = {"dp", "tp"};
  return m;
}

struct MlpRun {
  std::vector<float> losses;
  ferry::MeshStats last;
};

MlpRun train_megatron(Mesh mesh, const MlpConfig& c, int steps) {
  MegatronMlp mlp(mesh, c);
  ferry::optim::SGD sgd({.lr = 0.05});
  const ferry::Placements activations{ferry::Shard{0}, ferry::Replicate{}};
  const auto x = place(mesh, Shape{c.tokens, c.dim}, activations, 100, 1.0);
  const auto target = place(mesh, Shape{c.tokens, c.dim}, activations, 200, 1.0);
  mlp.wait();
  ferry::wait(x);
  ferry::wait(target);
  MlpRun run;
  for (int s = 0; s < steps; ++s) {
    mesh.reset_stats();
    const DeviceArray<float> loss = mlp.step(x, target, sgd);
    mlp.wait();
    ferry::wait(loss);
    run.last = mesh.stats();
    if (!mesh.device(0).is_model_only()) run.losses.push_back(loss.to_host()());
  }
  return run;
}

}  // namespace

int main() {
  std::puts(
      "1. The transformer of 08_transformer, data-parallel on the first 1, 2, 4, 8 GPUs of "
      "a DGX H100.");
  constexpr int kSteps = 10;
  const std::int64_t counts[] = {1, 2, 4, 8};
  std::vector<DataParallelRun> small;
  std::vector<DataParallelRun> large;
  for (const std::int64_t n : counts) {
    // Small buckets, so that the small model's gradients make several all-reduces.
    small.push_back(train_data_parallel(Mesh::modeled(first_gpus_of_dgx(n)), kSmall, kSteps,
                                        std::int64_t{16} << 10));
    // PyTorch's default bucket of 25 MiB.
    large.push_back(train_data_parallel(Mesh::modeled(first_gpus_of_dgx(n), ferry::model_only),
                                        kLarge, 2, std::int64_t{25} << 20));
  }
  std::printf("  the loss over the global batch of %lld sequences, step by step:\n",
              static_cast<long long>(kSmall.batch));
  std::printf("    step    1 GPU   2 GPUs   4 GPUs   8 GPUs\n");
  float worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    std::printf("    %4d", s);
    for (const DataParallelRun& r : small) {
      const auto i = static_cast<std::size_t>(s);
      std::printf(" %8.5f", static_cast<double>(r.losses[i]));
      worst = std::max(worst, std::fabs(r.losses[i] - small[0].losses[i]));
    }
    std::printf("\n");
  }
  std::printf("  largest difference from 1 GPU: %.2g\n", static_cast<double>(worst));
  // The replicas add their own rows and the all-reduce averages the partial means, where one
  // GPU adds all rows at once: float32 rounding, carried through Adam's steps.
  check(worst <= 1e-4f, "the loss curve on 2, 4 and 8 GPUs is the 1-GPU curve (within 1e-4)");
  check(small[0].losses.back() < small[0].losses.front(), "and it falls");

  std::printf(
      "  modeled time of one step (the last), and the share of the all-reduces' time "
      "that the backward hid:\n");
  std::printf(
      "    GPUs | 08's size: step    speed-up | %lld-layer, d=%lld, %lld x %lld tokens: "
      "step    speed-up  hidden\n",
      static_cast<long long>(kLarge.layers), static_cast<long long>(kLarge.dim),
      static_cast<long long>(kLarge.batch), static_cast<long long>(kLarge.seq));
  std::vector<double> speedup;
  for (std::size_t i = 0; i < large.size(); ++i) {
    const double ts = us(small[i].last.makespan);
    const double tl = us(large[i].last.makespan);
    speedup.push_back(us(large[0].last.makespan) / tl);
    std::printf("    %4lld | %10.0f us  %7.2fx | %32.0f us  %7.2fx  %5.0f%%\n",
                static_cast<long long>(counts[i]), ts, us(small[0].last.makespan) / ts, tl,
                speedup.back(), 100 * hidden_share(large[i].last));
  }
  check(us(small.back().last.makespan) > 0.8 * us(small[0].last.makespan),
        "at 08's size a step is launch-bound: 8 GPUs do not make it shorter");
  check(std::is_sorted(speedup.begin(), speedup.end()) && speedup.back() > 6,
        "at the larger size each doubling of the GPUs shortens the step, 8 GPUs over 6x");
  check(hidden_share(large.back().last) > 0.5,
        "the backward (and the updates) hide most of the bucketed all-reduces");

  std::puts("2. Megatron's MLP on a T3000, 2-way data parallel x 4-way tensor parallel.");
  const MlpRun one = train_megatron(Mesh::modeled(t3000_as(1, 1)), kMlpSmall, 3);
  const MlpRun sharded = train_megatron(Mesh::modeled(t3000_as(2, 4)), kMlpSmall, 3);
  float mlp_worst = 0;
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    std::printf("  step %zu: loss %.6f on one chip, %.6f on 2 x 4\n", s,
                static_cast<double>(one.losses[s]), static_cast<double>(sharded.losses[s]));
    mlp_worst = std::max(mlp_worst, std::fabs(one.losses[s] - sharded.losses[s]));
  }
  check(mlp_worst <= 1e-5f, "the sharded step is the one-chip step (losses within 1e-5)");
  check(one.losses.back() < one.losses.front(), "and the loss falls");
  const MlpRun big_one =
      train_megatron(Mesh::modeled(t3000_as(1, 1), ferry::model_only), kMlpLarge, 2);
  const MlpRun big_mesh =
      train_megatron(Mesh::modeled(t3000_as(2, 4), ferry::model_only), kMlpLarge, 2);
  std::printf("  modeled, %lld layers of %lld -> %lld -> %lld over %lld tokens:\n",
              static_cast<long long>(kMlpLarge.layers), static_cast<long long>(kMlpLarge.dim),
              static_cast<long long>(kMlpLarge.hidden), static_cast<long long>(kMlpLarge.dim),
              static_cast<long long>(kMlpLarge.tokens));
  std::printf("    one chip: step %.1f ms\n", us(big_one.last.makespan) / 1000);
  std::printf("    2 x 4   : step %.1f ms (%.2fx), links busy %.1f ms, %.0f%% of it hidden\n",
              us(big_mesh.last.makespan) / 1000,
              us(big_one.last.makespan) / us(big_mesh.last.makespan),
              us(big_mesh.last.communication_time) / 1000, 100 * hidden_share(big_mesh.last));
  check(big_mesh.last.makespan * 4 < big_one.last.makespan,
        "eight chips take a step over 4x faster than one");
  check(hidden_share(big_mesh.last) > 0.5, "most of the link time runs while the chips compute");
  return 0;
}
