// 02 · Overlap: the same work, pipelined or in lockstep, on a modeled H100 (specs::h100_sxm(),
// calibrated on measurements of the real device).
//
// 16 batches of 1024 x 1024 floats go to the device, through a 1024^3 matmul with resident
// weights and a few kernels, and a small result comes back. In lockstep the host waits for each
// batch before sending the next, so the copy engines and the compute units take turns.
// Double-buffered, the host sends batch b + 1 before it waits for batch b - 1, and each result
// streams back with to_host_async as soon as it is computed: imports, kernels and exports of
// neighbouring batches overlap, and the busiest engine (here the host-to-device link) never waits.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

namespace {

constexpr int kBatches = 16;
constexpr std::int64_t kRows = 1024;
constexpr std::int64_t kCols = 1024;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

std::vector<float> batch(int b) {
  return std::vector<float>(kRows * kCols, 0.001f * static_cast<float>(b));
}

/// A matmul with resident weights, a few elementwise kernels and a row sum: 4 KiB out for
/// 4 MiB in.
ferry::DeviceArray<float> process(const ferry::DeviceArray<float>& x,
                                  const ferry::DeviceArray<float>& w) {
  auto y = ferry::relu(ferry::tanh(ferry::matmul(x, w) * 0.5f + 0.25f) - 0.1f);
  return ferry::sum(y * y, {1});
}

ferry::DeviceArray<float> weights(const ferry::Device& dev) {
  return ferry::to_device(dev, std::vector<float>(kCols * kCols, 0.001f),
                          ferry::Shape{kCols, kCols});
}

double lockstep(ferry::Device& dev) {
  const auto w = weights(dev);
  ferry::wait(w);
  dev.reset_stats();  // the weights are pushed once, before the loop
  double checksum = 0;
  for (int b = 0; b < kBatches; ++b) {
    auto x = ferry::to_device(dev, batch(b), ferry::Shape{kRows, kCols});
    checksum += process(x, w).to_host()(0);  // the host waits for every batch
  }
  return checksum;
}

double double_buffered(ferry::Device& dev) {
  const auto w = weights(dev);
  ferry::wait(w);
  dev.reset_stats();
  double checksum = 0;
  auto next = ferry::to_device(dev, batch(0), ferry::Shape{kRows, kCols});
  std::future<ferry::HostArray<float>> previous;
  for (int b = 0; b < kBatches; ++b) {
    auto current = next;
    if (b + 1 < kBatches) next = ferry::to_device(dev, batch(b + 1), ferry::Shape{kRows, kCols});
    // The export starts as soon as the result is computed, while the next batch runs; the
    // host waits only for batch b - 1's values.
    auto result = ferry::to_host_async(process(current, w));
    if (previous.valid()) checksum += previous.get()(0);
    previous = std::move(result);
  }
  return checksum + previous.get()(0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string trace = argc > 1 ? argv[1] : "02_overlap.json";
  ferry::Device a = ferry::Device::modeled(ferry::specs::h100_sxm());
  ferry::Device b = ferry::Device::modeled(ferry::specs::h100_sxm());

  std::puts("1. The same 16 batches, in lockstep and double-buffered, on h100_sxm.");
  const double sum_lockstep = lockstep(a);
  const double sum_pipelined = double_buffered(b);
  check(sum_lockstep == sum_pipelined, "both compute the same values");

  const ferry::DeviceStats slow = a.stats();
  const ferry::DeviceStats fast = b.stats();
  const auto us = [](ferry::Duration d) { return static_cast<double>(d.count()) / 1000; };
  std::printf("  lockstep:        makespan %8.1f us, efficiency %.3f, host stalled %8.1f us\n",
              us(slow.makespan), slow.efficiency(), us(slow.host_stall));
  std::printf("  double-buffered: makespan %8.1f us, efficiency %.3f, host stalled %8.1f us\n",
              us(fast.makespan), fast.efficiency(), us(fast.host_stall));
  std::printf("  speed-up %.2fx; copies and kernels overlapped for %.1f us\n",
              us(slow.makespan) / us(fast.makespan), us(fast.overlap));
  check(fast.makespan < slow.makespan, "double buffering is faster");
  check(fast.efficiency() >= 0.95, "double-buffered efficiency is at least 0.95");
  check(slow.overlap.count() == 0, "in lockstep nothing overlaps");

  std::puts("2. The double-buffered timeline (write_trace gives the full one):");
  std::fputs(b.timeline_text().c_str(), stdout);
  b.write_trace(trace);
  std::printf("  trace written to %s: open it in ui.perfetto.dev\n", trace.c_str());
  return 0;
}
