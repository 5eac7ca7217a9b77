// 09 · A convolutional network: conv2d, pooling and a classifier trained on the accelerator.
//
// Synthetic 8 x 8 images hold one bar, horizontal, vertical or diagonal, at a random place, in
// noise. A small CNN (conv 3x3 -> relu -> max pool -> conv 3x3 -> relu -> global average pool
// -> linear) learns to tell the three apart. Every parameter is a plain DeviceArray resident on a
// modeled H100; `ferry::value_and_grad` differentiates the whole forward pass (the convolutions'
// windows fold back through col2im), and plain SGD updates each weight in place by donation.
// Then the same forward pass goes through `ferry::jit`: one trace serves a batch of any size.
#include <ferry/ferry.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <tuple>
#include <vector>

namespace {

using F = ferry::DeviceArray<float>;
using ferry::Shape;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

constexpr std::int64_t kSide = 8;
constexpr std::int64_t kClasses = 3;

struct Images {
  std::vector<float> pixels;  // (n, 1, 8, 8)
  std::vector<std::int64_t> labels;
};

/// n images, each a bar of length 4 of one of three directions at a random place, plus noise.
Images bars(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> place(0, kSide - 4);
  std::normal_distribution<float> noise(0, 0.1f);
  Images d;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>(i % kClasses);
    std::vector<float> img(kSide * kSide);
    for (float& p : img) p = noise(rng);
    const int r = place(rng);
    const int c = place(rng);
    for (int t = 0; t < 4; ++t) {
      const int y = label == 0 ? r : r + t;  // 0: horizontal, 1: vertical, 2: diagonal
      const int x = label == 1 ? c : c + t;
      img[static_cast<std::size_t>(y * kSide + x)] += 1;
    }
    d.pixels.insert(d.pixels.end(), img.begin(), img.end());
    d.labels.push_back(label);
  }
  return d;
}

/// He-initialized weights of `shape`, fan_in inputs per output.
F weights(const ferry::Device& dev, Shape shape, std::int64_t fan_in, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, std::sqrt(2.0f / static_cast<float>(fan_in)));
  std::vector<float> w(static_cast<std::size_t>(shape.numel()));
  for (float& x : w) x = normal(rng);
  return ferry::to_device(dev, std::move(w), shape);
}

/// The network's logits (N, 3) for images (N, 1, 8, 8).
F forward(const F& x, const F& w1, const F& b1, const F& w2, const F& b2, const F& wo,
          const F& bo) {
  F h = ferry::relu(ferry::conv2d(x, w1, b1, {.padding = {1, 1}}));          // (N, 8, 8, 8)
  h = ferry::max_pool2d(h, {2, 2});                                           // (N, 8, 4, 4)
  h = ferry::relu(ferry::conv2d(h, w2, b2, {.padding = {1, 1}}));            // (N, 16, 4, 4)
  h = ferry::avg_pool2d(h, {4, 4});                                           // (N, 16, 1, 1)
  return ferry::matmul(ferry::reshape(h, {-1, 16}), wo) + bo;                // (N, 3)
}

double accuracy(const F& logits, const ferry::DeviceArray<std::int64_t>& y) {
  return ferry::mean(ferry::equal(ferry::argmax(logits, 1), y).astype<float>()).to_host().data()[0];
}

}  // namespace

int main() {
  const ferry::Device gpu = ferry::Device::modeled(ferry::specs::h100_sxm());
  const std::int64_t n = 96;
  const Images train = bars(n, 1);
  const auto x = ferry::to_device(gpu, train.pixels, Shape{n, 1, kSide, kSide});
  const auto y = ferry::to_device(gpu, train.labels, Shape{n});

  F w1 = weights(gpu, Shape{8, 1, 3, 3}, 9, 11);
  F b1 = ferry::zeros<float>(gpu, Shape{8});
  F w2 = weights(gpu, Shape{16, 8, 3, 3}, 72, 12);
  F b2 = ferry::zeros<float>(gpu, Shape{16});
  F wo = weights(gpu, Shape{16, kClasses}, 16, 13);
  F bo = ferry::zeros<float>(gpu, Shape{kClasses});

  auto loss_fn = [&](const F& a1, const F& c1, const F& a2, const F& c2, const F& ao, const F& co) {
    return ferry::nn::cross_entropy(forward(x, a1, c1, a2, c2, ao, co), y);
  };
  const float lr = 0.1f;
  float first = 0;
  float last = 0;
  for (int step = 0; step < 200; ++step) {
    auto [loss, g1, gb1, g2, gb2, go, gbo] = ferry::value_and_grad(loss_fn)(w1, b1, w2, b2, wo, bo);
    // Given away, each weight's buffer takes its update in place.
    w1 = std::move(w1) - g1 * lr;
    b1 = std::move(b1) - gb1 * lr;
    w2 = std::move(w2) - g2 * lr;
    b2 = std::move(b2) - gb2 * lr;
    wo = std::move(wo) - go * lr;
    bo = std::move(bo) - gbo * lr;
    if (step % 40 == 0 || step == 199) {
      last = loss.to_host().data()[0];
      if (step == 0) first = last;
      std::printf("  step %3d  loss %.4f\n", step, static_cast<double>(last));
    }
  }
  const double train_acc = accuracy(forward(x, w1, b1, w2, b2, wo, bo), y);
  const Images test = bars(60, 2);
  const auto tx = ferry::to_device(gpu, test.pixels, Shape{60, 1, kSide, kSide});
  const auto ty = ferry::to_device(gpu, test.labels, Shape{60});
  const double test_acc = accuracy(forward(tx, w1, b1, w2, b2, wo, bo), ty);
  std::printf("accuracy: %.1f%% on the training images, %.1f%% on 60 new ones\n", 100 * train_acc,
              100 * test_acc);

  // Inference as a program: one trace, replayed for batches of 60, 7 and 96 images.
  auto infer = ferry::jit(
      [&](F images) { return ferry::argmax(forward(images, w1, b1, w2, b2, wo, bo), 1); });
  const auto eager = ferry::argmax(forward(tx, w1, b1, w2, b2, wo, bo), 1).to_host();
  const auto traced = infer(tx).to_host();
  (void)infer(ferry::slice(tx, 0, 0, 7));
  (void)infer(x);

  const ferry::DeviceStats stats = gpu.stats();
  std::printf(
      "modeled on the H100: makespan %.1f us, %llu steps, %llu bytes in, peak DRAM %llu bytes, "
      "%llu donations\n",
      static_cast<double>(stats.makespan.count()) / 1e3,
      static_cast<unsigned long long>(stats.steps),
      static_cast<unsigned long long>(stats.bytes_h2d),
      static_cast<unsigned long long>(stats.peak_dram_bytes),
      static_cast<unsigned long long>(stats.donations));

  check(last < first / 4, "the loss fell to under a quarter of where it started");
  check(train_acc > 0.95,
        "the network tells the three bars apart (over 95% of the training images)");
  check(test_acc > 0.9, "and over 90% of images it never saw");
  check(eager == traced, "the traced program classifies exactly as the eager forward pass");
  check(infer.cache_size() == 1, "one trace served batches of 60, 7 and 96 images");
  check(stats.donations > 0, "the SGD updates reused the weights' buffers");
  return 0;
}
