// 03 · Resident weights: push the weights once, keep them on the device, and update them in
// place.
//
// An inference loop that re-sends its weights with every batch spends its link on them; one
// that keeps them resident only moves each batch's activations. A training loop that writes
// `w = std::move(w) - lr * grad` gives its old weights away, so the update overwrites them in
// place: the device never holds two copies, and its memory stays flat however long it trains.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr std::int64_t kIn = 784, kHidden = 256, kOut = 10, kBatch = 64;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

std::vector<float> values(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3);
  return v;
}

/// A 3-layer MLP's parameters: a plain struct of arrays.
struct Mlp {
  ferry::DeviceArray<float> w1, w2, w3;
  ferry::DeviceArray<float> operator()(const ferry::DeviceArray<float>& x) const {
    return ferry::matmul(ferry::relu(ferry::matmul(ferry::relu(ferry::matmul(x, w1)), w2)), w3);
  }
};

}  // namespace

int main() {
  const auto weight_bytes =
      static_cast<std::uint64_t>(kIn * kHidden + kHidden * kHidden + kHidden * kOut) * 4;
  const auto batch_bytes = static_cast<std::uint64_t>(kBatch * kIn) * 4;

  std::puts("1. Weights pushed once, then 100 batches through them.");
  ferry::Device dev = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  const Mlp mlp{
      ferry::to_device(dev, values(kIn * kHidden, 0.01f), ferry::Shape{kIn, kHidden}),
      ferry::to_device(dev, values(kHidden * kHidden, 0.01f), ferry::Shape{kHidden, kHidden}),
      ferry::to_device(dev, values(kHidden * kOut, 0.01f), ferry::Shape{kHidden, kOut})};
  for (int b = 0; b < 100; ++b) {
    auto x = ferry::to_device(dev, values(kBatch * kIn, 0.1f * static_cast<float>(b % 3 + 1)),
                              ferry::Shape{kBatch, kIn});
    (void)mlp(x).to_host();
  }
  const ferry::DeviceStats s = dev.stats();
  std::printf("  host to device: %llu bytes = %llu of weights + 100 x %llu of activations\n",
              static_cast<unsigned long long>(s.bytes_h2d),
              static_cast<unsigned long long>(weight_bytes),
              static_cast<unsigned long long>(batch_bytes));
  check(s.bytes_h2d == weight_bytes + 100 * batch_bytes, "the weights crossed the link once");

  std::puts(
      "2. Double-buffered inputs: batch b + 1 is imported before the host waits for batch b.");
  dev.reset_stats();
  auto next = ferry::to_device(dev, values(kBatch * kIn, 0.1f), ferry::Shape{kBatch, kIn});
  for (int b = 0; b < 16; ++b) {
    auto current = next;
    if (b + 1 < 16)
      next = ferry::to_device(dev, values(kBatch * kIn, 0.2f), ferry::Shape{kBatch, kIn});
    (void)mlp(current).to_host();
  }
  const ferry::DeviceStats db = dev.stats();
  std::printf("  imports overlapped kernels for %.1f us of %.1f us\n",
              static_cast<double>(db.overlap.count()) / 1000,
              static_cast<double>(db.makespan.count()) / 1000);
  check(db.overlap.count() > 0, "the next batch's import overlaps the current batch's compute");

  std::puts("3. Training: 50 steps of w = std::move(w) - lr * grad, updated in place.");
  ferry::Device trainer = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  auto x = ferry::to_device(trainer, values(kBatch * kIn, 0.01f), ferry::Shape{kBatch, kIn});
  auto y = ferry::to_device(trainer, values(kBatch * kOut, 0.1f), ferry::Shape{kBatch, kOut});
  auto w = ferry::zeros<float>(trainer, ferry::Shape{kIn, kOut});
  // Computed once: inside the loop, the transposes of later steps (which need nothing the loop
  // computes) would run ahead of the updates and hold memory of their own.
  const auto xt = ferry::transpose(x);
  std::uint64_t peak_after_two = 0;
  for (int step = 1; step <= 50; ++step) {
    auto grad = ferry::matmul(xt, ferry::matmul(x, w) - y) * (1.0f / kBatch);
    w = std::move(w) - 0.1f * grad;  // w's buffer is the update's output
    if (step == 2) peak_after_two = trainer.stats().peak_dram_bytes;
  }
  const float loss = ferry::mean(ferry::pow(ferry::matmul(x, w) - y, 2.0f)).to_host()();
  const ferry::DeviceStats t = trainer.stats();
  std::printf(
      "  loss after 50 steps %.4f; peak device memory %llu bytes after step 2 and after step 50; "
      "%llu buffers reused in place\n",
      static_cast<double>(loss), static_cast<unsigned long long>(t.peak_dram_bytes),
      static_cast<unsigned long long>(t.donations));
  check(t.peak_dram_bytes == peak_after_two, "device memory stays flat while training");
  check(t.donations >= 50, "every update wrote over the old weights");
  return 0;
}
