// 06 · Faults: failure is an ordinary path.
//
// A modeled device can fail steps on purpose, deterministically from a seed. A failed step
// reaches exactly the exports that depend on it, as a DeviceFault naming the op, the step and
// the cause; everything else completes. With a host fallback, the rejected step runs on the
// host's CPU instead, with the same values, and the device counts it. Either way the device
// goes on, and its memory comes back.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

/// The same small model every part runs: a layer on x, and a separate statistic of x.
struct Outputs {
  ferry::DeviceArray<float> y;
  ferry::DeviceArray<float> mean;
};
Outputs model(const ferry::Device& dev) {
  std::vector<float> xs(64 * 32);
  std::vector<float> ws(32 * 8);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 13) / 13;
  for (std::size_t i = 0; i < ws.size(); ++i) ws[i] = static_cast<float>(i % 5) / 5 - 0.2f;
  auto x = ferry::to_device(dev, xs, ferry::Shape{64, 32});  // step 0
  auto w = ferry::to_device(dev, ws, ferry::Shape{32, 8});   // step 1
  auto y = ferry::relu(ferry::matmul(x, w));                 // steps 2 (matmul) and 3 (relu)
  auto mean = ferry::mean(x);                                // step 4: needs only x
  return {y, mean};
}
}  // namespace

int main() {
  std::puts("1. A clean device: the reference values.");
  const ferry::Device clean = ferry::Device::modeled(ferry::specs::tiny());
  const Outputs ref = model(clean);
  const ferry::HostArray<float> y_ref = ref.y.to_host();
  const float mean_ref = ref.mean.to_host()();
  std::printf("  y(1, 2) = %.4f, mean = %.4f\n", y_ref(1, 2), mean_ref);

  std::puts("2. Fail step 2 (the matmul): what depends on it throws, the rest completes.");
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.faults = ferry::FaultPlan{.seed = 7, .fail_steps = {2}};
  const ferry::Device failing = ferry::Device::modeled(spec);
  {
    const Outputs out = model(failing);
    bool threw = false;
    try {
      (void)out.y.to_host();
    } catch (const ferry::DeviceFault& e) {
      threw = true;
      std::printf("  y: %s\n", e.what());
      check(e.op() == "matmul" && e.step() == 2, "the fault names the op and the step");
    }
    check(threw, "the export of y, which depends on the matmul, throws DeviceFault");
    check(out.mean.to_host()() == mean_ref, "the mean, which does not, has its value");
  }

  std::puts("3. The same plan with Fallback::host: the matmul runs on the host instead.");
  spec.fallback = ferry::Fallback::host;
  const ferry::Device rescued = ferry::Device::modeled(spec);
  {
    const Outputs saved = model(rescued);
    const ferry::HostArray<float> y_saved = saved.y.to_host();
    (void)saved.mean.to_host();  // the same exports as on the clean device
    bool same = true;
    for (std::int64_t i = 0; i < 64; ++i) {
      for (std::int64_t j = 0; j < 8; ++j) same = same && y_saved(i, j) == y_ref(i, j);
    }
    check(same, "y is bit for bit the clean device's y");
    const ferry::DeviceStats stats = rescued.stats();
    std::printf("  fallbacks %llu, makespan %lld ns (clean: %lld ns)\n",
                static_cast<unsigned long long>(stats.fallbacks),
                static_cast<long long>(stats.makespan.count()),
                static_cast<long long>(clean.stats().makespan.count()));
    check(stats.fallbacks == 1, "one step moved to the host, and only that one");
    // tiny()'s compute units do 1 GFLOP/s, the host 64: even with x and w read back and y sent
    // over the links, the matmul ends sooner on the host.
    check(stats.makespan < clean.stats().makespan,
          "on tiny(), the host is the faster place for it");
    std::fputs(rescued.timeline_text().c_str(), stdout);
  }

  std::puts("4. Random faults: the same seed fails the same steps on every run.");
  spec = ferry::specs::tiny();
  spec.faults = ferry::FaultPlan{.seed = 3, .kernel_failure_rate = 0.5};
  std::vector<int> runs;
  for (int run = 0; run < 2; ++run) {
    const ferry::Device dev = ferry::Device::modeled(spec);
    auto x = ferry::to_device(dev, std::vector<float>{1, 2, 3}, ferry::Shape{3});
    int failed = 0;
    for (int i = 0; i < 20; ++i) {
      try {
        (void)(x * static_cast<float>(i)).to_host();
      } catch (const ferry::DeviceFault&) {
        ++failed;
      }
    }
    runs.push_back(failed);
    std::printf("  run %d: %d of 20 kernels failed\n", run, failed);
  }
  check(runs[0] == runs[1] && runs[0] > 0 && runs[0] < 20, "faults are a function of the seed");

  std::puts("5. After the failures, the device goes on and holds no memory.");
  auto z = ferry::to_device(failing, std::vector<float>{1, 2}, ferry::Shape{2}) * 2.0f;
  check(z.to_host()(1) == 4.0f, "later work on the failing device runs");
  z = {};
  check(failing.stats().dram_bytes_in_use == 0 && rescued.stats().dram_bytes_in_use == 0,
        "every byte of device memory came back");
  return 0;
}
