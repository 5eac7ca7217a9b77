// The modeled timeline is part of ferry's contract: work that makes the model cheaper must not
// move a single event. Each program here writes its trace and compares it, byte for byte, with
// the trace the same program wrote before that work (tests/golden/*.json). Together the
// programs reach every path of the scheduler: chains and fan-outs on the host's spec, the
// critical-path and fifo policies, matmul tilings, shared bandwidth and units that free up,
// views, donation, asynchronous exports, L1 and tiled layouts, spills and memory waits, a
// second device, injected faults with and without the host fallback; and a mesh's trace
// (Mesh::write_trace: every device's tracks and one per link and direction), its collectives
// on the links while the devices compute.
//
// Every trace is also strict JSON (RFC 8259, read by ferry's own reader, which refuses trailing
// commas, NaN and Infinity, bad escapes and anything after the value): each golden file, every
// trace a test here writes, before any rewriting. Each shipped preset's trace after a small
// program is checked the same way in test_model_trace (devices) and test_mesh (meshes).
//
// To write the files anew (only when a change is meant to move the timeline, and say so in
// its commit): FERRY_WRITE_GOLDEN=1 ./test_trace_golden, which writes every file, the mesh's
// included (tests/golden/ring_collectives.json). The test then checks what it wrote.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/io/json.hpp>

#include "support/files.hpp"
#include "support/meshes.hpp"

namespace test_trace_golden {

namespace {

using ferry::DeviceArray;
using ferry::Shape;

DeviceArray<float> ramp(const ferry::Device& dev, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) / 17.0f;
  return ferry::to_device(dev, std::span<const float>(v), Shape{rows, cols});
}

/// Compares `trace` with tests/golden/<name>.json, byte for byte (or writes the file first,
/// under FERRY_WRITE_GOLDEN).
void expect_same_as_golden(const std::string& name, const std::string& trace) {
  const std::filesystem::path golden = std::filesystem::path(FERRY_GOLDEN_DIR) / (name + ".json");
  // Writing anew, the comparison below then checks what was written.
  if (std::getenv("FERRY_WRITE_GOLDEN") != nullptr)
    std::ofstream(golden, std::ios::binary) << trace;
  const std::string expected = ferry_test::read_text(golden.string());
  ASSERT_FALSE(expected.empty()) << "no golden trace at " << golden;
  ASSERT_EQ(trace.size(), expected.size()) << name;
  // The first difference, with a little context, rather than two whole traces.
  std::size_t at = 0;
  while (at < trace.size() && trace[at] == expected[at]) ++at;
  EXPECT_EQ(at, trace.size()) << name << " differs at byte " << at << ":\n  got      "
                              << trace.substr(at > 80 ? at - 80 : 0, 160) << "\n  expected "
                              << expected.substr(at > 80 ? at - 80 : 0, 160);
}

/// Runs `program` on a fresh device of `spec` and compares its trace with tests/golden/<name>.json.
void expect_golden(const std::string& name, ferry::DeviceSpec spec,
                   const std::function<void(const ferry::Device&)>& program) {
  ferry::Device dev = ferry::Device::modeled(std::move(spec), ferry::ManualExecutor());
  program(dev);
  const auto written = std::filesystem::temp_directory_path() / ("ferry_golden_" + name + ".json");
  dev.write_trace(written);
  const std::string trace = ferry_test::read_text(written.string());
  std::filesystem::remove(written);
  ferry_test::expect_strict_json(name + "'s trace", trace);
  expect_same_as_golden(name, trace);
}

/// Runs `program` on a fresh mesh of `spec` and compares its trace (Mesh::write_trace) with
/// tests/golden/<name>.json: byte for byte, whatever meshes the process made before (the trace
/// names a device by the spec and its coordinate, "ring(0)"). Once the program's arrays are
/// gone, every device's memory must be back where it was, and no schedule shorter than its
/// lower bound: a trace that matches byte for byte says nothing of the memory the mesh still
/// holds.
void expect_golden_mesh(const std::string& name, ferry::MeshSpec spec,
                        const std::function<void(const ferry::Mesh&)>& program) {
  const ferry::Mesh mesh = ferry::Mesh::modeled(spec, ferry::ManualExecutor());
  ferry_test::expect_balanced_after(mesh, [&] { program(mesh); });
  const auto written = std::filesystem::temp_directory_path() / ("ferry_golden_" + name + ".json");
  mesh.write_trace(written.string());
  const std::string trace = ferry_test::read_text(written.string());
  std::filesystem::remove(written);
  ferry_test::expect_strict_json(name + "'s trace", trace);
  expect_same_as_golden(name, trace);
}

TEST(TraceGolden, EveryGoldenFileIsStrictJson) {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FERRY_GOLDEN_DIR)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string text = ferry_test::read_text(entry.path().string());
    EXPECT_FALSE(text.empty()) << entry.path();
    ferry_test::expect_strict_json(entry.path().filename().string(), text);
  }
  EXPECT_GT(files, 0u) << "no golden traces in " << FERRY_GOLDEN_DIR;
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

TEST(TraceGolden, MixedProgramOnH100CriticalPath) {
  expect_golden("h100_mixed", ferry::specs::h100_sxm(), mixed);
}

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
  ferry::Device other =
      ferry::Device::modeled(ferry::specs::pcie_accelerator(), ferry::ManualExecutor());
  expect_golden("pcie_two_devices", ferry::specs::pcie_accelerator(),
                [&](const ferry::Device& dev) {
                  auto x = ramp(other, 128, 128);
                  auto y = ferry::matmul(x, x).to(dev);
                  auto z = ferry::softmax(y * 0.001f, -1);
                  auto back = (z + 1.0f).to(other);
                  (void)ferry::to_host(back, z);
                });
}

/// On a ring of 4 tiny devices (links of 1 byte a nanosecond, 100 ns a hop): an all-gather, a
/// reduce-scatter of its result and an all-reduce, while every device runs a matmul that reads
/// nothing a collective writes, so the links carry messages while the compute units work; then
/// a kernel on each device reads both.
TEST(TraceGolden, CollectivesOnARingOverlapCompute) {
  expect_golden_mesh("ring_collectives", ferry_test::ring(4), [](const ferry::Mesh& mesh) {
    std::vector<DeviceArray<float>> xs;
    std::vector<DeviceArray<float>> ws;
    for (std::int64_t i = 0; i < mesh.size(); ++i) {
      xs.push_back(ramp(mesh.device(i), 16, 32) * static_cast<float>(i + 1));
      ws.push_back(ramp(mesh.device(i), 32, 32));
    }
    std::vector<DeviceArray<float>> products;
    for (const DeviceArray<float>& w : ws) products.push_back(ferry::matmul(w, w));
    const auto x = ferry::MeshArray<float>::from_shards(mesh, xs);
    const auto gathered = ferry::all_gather(x, 0);              // (64, 32) on every device
    const auto scattered = ferry::reduce_scatter(gathered, 0);  // (16, 32): its rows, summed
    const auto reduced = ferry::all_reduce(x);                  // (16, 32)
    for (std::int64_t i = 0; i < mesh.size(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      const DeviceArray<float> out =
          ferry::matmul(reduced.shard(i), products[k]) + scattered.shard(i);
      (void)out.to_host();
    }
  });
}

/// Every preset, device and mesh: a program of a matmul, an elementwise op and an export (on a
/// mesh, an all_reduce and an all_gather too) leaves the model's books balanced (memory back to
/// where it was, lower_bound <= makespan) and a trace of strict JSON.
TEST(TraceGolden, EveryPresetBalancesItsBooksAndWritesStrictJson) {
  const std::vector<ferry::DeviceSpec> devices = {
      ferry::specs::host_cpu(),         ferry::specs::tiny(),
      ferry::specs::pcie_accelerator(), ferry::specs::mesh_accelerator(),
      ferry::specs::h100_sxm(),         ferry::specs::wormhole_b0()};
  for (const ferry::DeviceSpec& spec : devices) {
    SCOPED_TRACE(spec.name);
    const ferry::Device dev = ferry::Device::modeled(spec);
    ferry_test::expect_balanced_after(dev, [&] {
      const auto x = ramp(dev, 16, 16);
      (void)(ferry::matmul(x, x) + 1.0f).to_host();
    });
    const auto path = std::filesystem::temp_directory_path() / ("ferry_preset_" + spec.name +
                                                                ".json");
    dev.write_trace(path.string());
    ferry_test::expect_strict_json(spec.name + "'s trace", ferry_test::read_text(path.string()));
    std::filesystem::remove(path);
  }
  const std::vector<ferry::MeshSpec> meshes = {ferry::specs::t3000(), ferry::specs::galaxy(),
                                               ferry::specs::dgx_h100()};
  for (const ferry::MeshSpec& spec : meshes) {
    SCOPED_TRACE(spec.name);
    const ferry::Mesh mesh = ferry::Mesh::modeled(spec);
    ferry_test::expect_balanced_after(mesh, [&] {
      std::vector<DeviceArray<float>> xs;
      for (std::int64_t i = 0; i < mesh.size(); ++i) xs.push_back(ramp(mesh.device(i), 8, 8));
      const auto x = ferry::MeshArray<float>::from_shards(mesh, xs);
      const auto reduced = ferry::all_reduce(x);
      const auto gathered = ferry::all_gather(x, 0);
      for (std::int64_t i = 0; i < mesh.size(); ++i) {
        (void)(ferry::matmul(reduced.shard(i), x.shard(i)) + 1.0f).to_host();
        (void)gathered.shard(i).to_host();
      }
    });
    const auto path = std::filesystem::temp_directory_path() / ("ferry_preset_" + spec.name +
                                                                ".json");
    mesh.write_trace(path.string());
    ferry_test::expect_strict_json(spec.name + "'s trace", ferry_test::read_text(path.string()));
    std::filesystem::remove(path);
  }
}

}  // namespace

}  // namespace test_trace_golden
