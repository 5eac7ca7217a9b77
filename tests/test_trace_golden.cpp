// The modeled timeline is part of ferry's contract: work that makes the model cheaper must not
// move a single event. Each program here writes its trace and compares it, byte for byte, with
// the trace the same program wrote before that work (tests/golden/*.json). Together the
// programs reach every path of the scheduler: chains and fan-outs on the host's spec, the
// critical-path and fifo policies, matmul tilings, shared bandwidth and units that free up,
// views, donation, asynchronous exports, L1 and tiled layouts, spills and memory waits, a
// second device, injected faults with and without the host fallback.
//
// To write the files anew (only when a change is meant to move the timeline, and say so in
// its commit): FERRY_WRITE_GOLDEN=1 ./test_trace_golden
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

using ferry::DeviceArray;
using ferry::Shape;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

DeviceArray<float> ramp(const ferry::Device& dev, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) / 17.0f;
  return ferry::to_device(dev, std::span<const float>(v), Shape{rows, cols});
}

/// Runs `program` on a fresh device of `spec` and compares its trace with tests/golden/<name>.json.
void expect_golden(const std::string& name, ferry::DeviceSpec spec,
                   const std::function<void(const ferry::Device&)>& program) {
  ferry::Device dev = ferry::Device::modeled(std::move(spec), ferry::ManualExecutor());
  program(dev);
  const auto written = std::filesystem::temp_directory_path() / ("ferry_golden_" + name + ".json");
  dev.write_trace(written);
  const std::string trace = read_file(written);
  std::filesystem::remove(written);
  const std::filesystem::path golden = std::filesystem::path(FERRY_GOLDEN_DIR) / (name + ".json");
  // Writing anew, the comparison below then checks what was written.
  if (std::getenv("FERRY_WRITE_GOLDEN") != nullptr) std::ofstream(golden, std::ios::binary) << trace;
  const std::string expected = read_file(golden);
  ASSERT_FALSE(expected.empty()) << "no golden trace at " << golden;
  ASSERT_EQ(trace.size(), expected.size()) << name;
  // The first difference, with a little context, rather than two whole traces.
  std::size_t at = 0;
  while (at < trace.size() && trace[at] == expected[at]) ++at;
  EXPECT_EQ(at, trace.size()) << name << " differs at byte " << at << ":\n  got      "
                              << trace.substr(at > 80 ? at - 80 : 0, 160) << "\n  expected "
                              << expected.substr(at > 80 ? at - 80 : 0, 160);
}

TEST(TraceGolden, ChainAndFanOutOnTheHostSpec) {
  expect_golden("host_chain_fanout", ferry::specs::host_cpu(), [](const ferry::Device& dev) {
    auto x = ferry::to_device(dev, {0.0f}, Shape{1});
    for (int i = 0; i < 300; ++i) x = x + 1.0f;
    EXPECT_EQ(x.to_host()(0), 300.0f);
    std::vector<DeviceArray<float>> out;
    for (int i = 0; i < 200; ++i) out.push_back(x * static_cast<float>(i));
    (void)ferry::to_host(out);
  });
}

/// Matmuls of several sizes side by side and in chains, elementwise runs, reductions, softmax,
/// views, a donation, handles dropped early, an asynchronous export and a batched one.
void mixed(const ferry::Device& dev) {
  auto x = ramp(dev, 256, 256);
  auto w = ramp(dev, 256, 256);
  std::vector<DeviceArray<float>> side;
  for (int i = 0; i < 12; ++i) side.push_back(ferry::matmul(x, w) * static_cast<float>(i));
  auto big = ramp(dev, 512, 128);
  auto wb = ramp(dev, 128, 512);
  auto h = ferry::relu(ferry::matmul(big, wb) - 3.0f);  // 512 x 512
  auto pending = ferry::to_host_async(ferry::sum(h));
  for (int i = 0; i < 4; ++i) h = ferry::tanh(ferry::matmul(ferry::matmul(h, big), wb) * 0.01f);
  auto s = ferry::softmax(h, -1);
  auto flat = ferry::reshape(s, Shape{512 * 512});
  auto acc = ferry::zeros<float>(dev, Shape{256, 256});
  for (const auto& m : side) acc = std::move(acc) + m;  // donated each time
  side.clear();
  // One statement each: the order of a call's arguments is the compiler's choice.
  auto total = ferry::sum(flat);
  auto mean = ferry::mean(h);
  (void)ferry::to_host(total, mean, acc);
  (void)pending.get();
}

TEST(TraceGolden, MixedProgramOnH100CriticalPath) { expect_golden("h100_mixed", ferry::specs::h100_sxm(), mixed); }

TEST(TraceGolden, MixedProgramOnH100WithoutLaunchOverhead) {
  // Kernels released at once run side by side: units shared, freed and regrown, DRAM and L2
  // bandwidth shared between flows.
  ferry::DeviceSpec spec = ferry::specs::h100_sxm();
  spec.launch_overhead = {};
  expect_golden("h100_side_by_side", spec, mixed);
}

TEST(TraceGolden, MixedProgramOnPcieFifo) {
  ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
  spec.policy = ferry::SchedulePolicy::fifo;
  expect_golden("pcie_fifo_mixed", spec, mixed);
}

TEST(TraceGolden, MemoryPressureL1AndTiles) {
  // 1 MiB of DRAM and 64 KiB of L1: imports wait for memory, L1 buffers spill and come back.
  expect_golden("tiny_pressure", ferry::specs::tiny(), [](const ferry::Device& dev) {
    const ferry::Layout l1_tiled{ferry::MemorySpace::l1, ferry::Order::tiled};
    std::vector<DeviceArray<float>> held;
    for (int i = 0; i < 3; ++i) held.push_back(ferry::to_layout(ramp(dev, 64, 64), l1_tiled));
    auto y = held[0];
    for (std::size_t i = 1; i < held.size(); ++i) y = ferry::matmul(y, held[i]) * 0.5f;
    held.clear();
    std::vector<DeviceArray<float>> big;
    for (int i = 0; i < 5; ++i) big.push_back(ramp(dev, 128, 256) + static_cast<float>(i));
    auto z = big[0];
    for (std::size_t i = 1; i < big.size(); ++i) z = z + big[i];
    big.clear();
    auto row_major = ferry::to_layout(z, ferry::Layout{});
    (void)ferry::to_host(y, row_major);
  });
}

TEST(TraceGolden, FaultsFallBackToTheHost) {
  ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
  spec.faults.seed = 7;
  spec.faults.kernel_failure_rate = 0.2;
  spec.fallback = ferry::Fallback::host;
  expect_golden("pcie_faults_fallback", spec, [](const ferry::Device& dev) {
    auto x = ramp(dev, 64, 64);
    for (int i = 0; i < 40; ++i) x = ferry::relu(ferry::matmul(x, x) * 0.01f);
    (void)x.to_host();
  });
}

TEST(TraceGolden, FaultsFailTheirDependents) {
  ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
  spec.faults.fail_steps = {5, 9};
  expect_golden("pcie_faults_fail", spec, [](const ferry::Device& dev) {
    std::vector<DeviceArray<float>> out;
    auto x = ramp(dev, 32, 32);
    for (int i = 0; i < 12; ++i) out.push_back(ferry::exp(x * static_cast<float>(i)));
    for (const auto& o : out) {
      try {
        (void)o.to_host();
      } catch (const ferry::DeviceFault&) {
      }
    }
  });
}

TEST(TraceGolden, ArraysMoveBetweenDevices) {
  ferry::Device other = ferry::Device::modeled(ferry::specs::pcie_accelerator(), ferry::ManualExecutor());
  expect_golden("pcie_two_devices", ferry::specs::pcie_accelerator(), [&](const ferry::Device& dev) {
    auto x = ramp(other, 128, 128);
    auto y = ferry::matmul(x, x).to(dev);
    auto z = ferry::softmax(y * 0.001f, -1);
    auto back = (z + 1.0f).to(other);
    (void)ferry::to_host(back, z);
  });
}

}  // namespace
