// 04 · Stitching: the output of one model is the input of the next, without the host.
//
// Model A (an encoder) and model B (a classifier) run back to back. Passing A's output to B as
// a DeviceArray keeps it on the device: the only traffic is the input going in and B's answer
// coming out, and the host waits once. Round-tripping A's output through the host gives the
// same numbers, two more transfers and a wait in the middle. The same arrays can also move to a
// second device with `.to()`: a struct of arrays moves member by member.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

std::vector<float> values(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * static_cast<float>(static_cast<int>(i % 11) - 5);
  return v;
}

struct Encoder {
  ferry::DeviceArray<float> w;
  ferry::DeviceArray<float> operator()(const ferry::DeviceArray<float>& x) const {
    return ferry::gelu(ferry::matmul(x, w));
  }
  Encoder to(const ferry::Device& d) const { return {w.to(d)}; }
};

struct Classifier {
  ferry::DeviceArray<float> w;
  ferry::DeviceArray<float> operator()(const ferry::DeviceArray<float>& h) const {
    return ferry::softmax(ferry::matmul(h, w), -1);
  }
  Classifier to(const ferry::Device& d) const { return {w.to(d)}; }
};

std::vector<float> flat(const ferry::HostArray<float>& h) {
  return {h.data().begin(), h.data().end()};
}

}  // namespace

int main() {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  const Encoder a{ferry::to_device(dev, values(512 * 256, 0.01f), ferry::Shape{512, 256})};
  const Classifier b{ferry::to_device(dev, values(256 * 16, 0.02f), ferry::Shape{256, 16})};
  const std::vector<float> input = values(128 * 512, 0.1f);
  ferry::wait(a.w, b.w);

  std::puts("1. Stitched: A's output goes straight into B.");
  dev.reset_stats();
  const auto stitched = b(a(ferry::to_device(dev, input, ferry::Shape{128, 512}))).to_host();
  const ferry::DeviceStats s = dev.stats();
  std::printf("  in %llu bytes, out %llu bytes, %llu host sync, makespan %.1f us\n",
              static_cast<unsigned long long>(s.bytes_h2d),
              static_cast<unsigned long long>(s.bytes_d2h),
              static_cast<unsigned long long>(s.host_syncs),
              static_cast<double>(s.makespan.count()) / 1000);
  check(s.bytes_h2d == 128 * 512 * 4 && s.bytes_d2h == 128 * 16 * 4,
        "only the input and the answer crossed");
  check(s.host_syncs == 1, "the host waited once");

  std::puts("2. Through the host: A's output comes back and goes out again.");
  dev.reset_stats();
  const auto middle = a(ferry::to_device(dev, input, ferry::Shape{128, 512})).to_host();
  const auto round_trip = b(ferry::to_device(dev, middle)).to_host();
  const ferry::DeviceStats r = dev.stats();
  std::printf("  in %llu bytes, out %llu bytes, %llu host syncs, makespan %.1f us\n",
              static_cast<unsigned long long>(r.bytes_h2d),
              static_cast<unsigned long long>(r.bytes_d2h),
              static_cast<unsigned long long>(r.host_syncs),
              static_cast<double>(r.makespan.count()) / 1000);
  check(flat(stitched) == flat(round_trip), "the same values either way");
  check(r.makespan > s.makespan, "stitching on the device is faster");

  std::puts("3. Both models moved to a second device with .to(); the input follows.");
  ferry::Device other = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  const Encoder a2 = a.to(other);
  const Classifier b2 = b.to(other);
  const auto moved =
      b2(a2(ferry::to_device(dev, input, ferry::Shape{128, 512}).to(other))).to_host();
  const ferry::DeviceStats o = other.stats();
  std::printf("  %llu bytes arrived over the device-to-device link\n",
              static_cast<unsigned long long>(o.bytes_d2d));
  check(flat(moved) == flat(stitched), "the same values on the second device");
  check(o.bytes_d2d == (512 * 256 + 256 * 16 + 128 * 512) * 4,
        "weights and input crossed the link once");
  return 0;
}
