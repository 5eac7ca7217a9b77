// DeviceSpec: the presets are valid devices with the figures their comments cite, and a spec no
// device could have is refused by Device::modeled with InvalidArgument naming the field.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/files.hpp"
#include "support/memory.hpp"
#include "support/temp_dir.hpp"

namespace test_spec {

namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(Spec, PresetsAreValidAndCarryTheirFigures) {
  for (const ferry::DeviceSpec& spec :
       {ferry::specs::pcie_accelerator(), ferry::specs::mesh_accelerator(), ferry::specs::tiny(),
        ferry::specs::host_cpu()}) {
    EXPECT_NO_THROW((void)ferry::Device::modeled(spec)) << spec.name;
  }
  const ferry::DeviceSpec pcie = ferry::specs::pcie_accelerator();
  EXPECT_EQ(pcie.compute_units, 114);
  EXPECT_DOUBLE_EQ(pcie.unit_flops_per_second.bfloat16 * 114, 756e12);
  EXPECT_DOUBLE_EQ(pcie.dram_bytes_per_second, 2.0e12);
  EXPECT_EQ(pcie.dram_bytes, std::int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(pcie.h2d_bytes_per_second, 64e9);
  const ferry::DeviceSpec mesh = ferry::specs::mesh_accelerator();
  EXPECT_EQ(mesh.compute_units, 72);
  EXPECT_DOUBLE_EQ(mesh.dram_bytes_per_second, 288e9);
  EXPECT_GT(mesh.l1_bytes, pcie.l1_bytes);  // large on-chip SRAM is what it is about
  EXPECT_EQ(ferry::specs::tiny().policy, ferry::SchedulePolicy::fifo);
  EXPECT_EQ(ferry::Device().spec().name, "pcie_accelerator");  // the default device
  EXPECT_EQ(ferry::Device::cpu().spec().name, "host_cpu");
}

TEST(Spec, ModeledDevicesUseTheirSpec) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.compute_units = 8;
  ferry::Device dev = ferry::Device::modeled(spec);
  EXPECT_EQ(dev.spec().compute_units, 8);
  EXPECT_EQ(dev.stats().engines.size(), 3u + 8u);
  EXPECT_EQ(dev.stats().engines.back().name, "compute 7");
}

void expect_refused(const std::function<void(ferry::DeviceSpec&)>& breaks,
                    const std::string& message) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  breaks(spec);
  try {
    (void)ferry::Device::modeled(spec);
    ADD_FAILURE() << "expected InvalidArgument: " << message;
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(Spec, ImpossibleSpecsAreRefusedNamingTheField) {
  expect_refused([](auto& s) { s.compute_units = 0; },
                 "[Device::modeled] spec 'tiny': compute_units must be positive, got 0");
  expect_refused([](auto& s) { s.compute_units = -2; },
                 "[Device::modeled] spec 'tiny': compute_units must be positive, got -2");
  expect_refused(
      [](auto& s) { s.unit_flops_per_second.float64 = 0; },
      "[Device::modeled] spec 'tiny': unit_flops_per_second.float64 must be positive, got 0");
  expect_refused([](auto& s) { s.dram_bytes = -1; },
                 "[Device::modeled] spec 'tiny': dram_bytes must be positive, got -1");
  expect_refused([](auto& s) { s.l1_bytes = 0; },
                 "[Device::modeled] spec 'tiny': l1_bytes must be positive, got 0");
  expect_refused(
      [](auto& s) { s.h2d_bytes_per_second = -5e9; },
      "[Device::modeled] spec 'tiny': h2d_bytes_per_second must be positive, got -5e+09");
  expect_refused([](auto& s) { s.d2d_bytes_per_second = std::numeric_limits<double>::infinity(); },
                 "[Device::modeled] spec 'tiny': d2d_bytes_per_second must be positive, got inf");
  expect_refused(
      [](auto& s) { s.dram_bytes_per_second = std::numeric_limits<double>::quiet_NaN(); },
      "[Device::modeled] spec 'tiny': dram_bytes_per_second must be positive, got nan");
  expect_refused([](auto& s) { s.h2d_latency = nanoseconds(-1); },
                 "[Device::modeled] spec 'tiny': h2d_latency must not be negative, got -1 ns");
  expect_refused(
      [](auto& s) { s.launch_overhead = microseconds(-3); },
      "[Device::modeled] spec 'tiny': launch_overhead must not be negative, got -3000 ns");
  expect_refused([](auto& s) { s.trace_steps = -1; },
                 "[Device::modeled] spec 'tiny': trace_steps must not be negative, got -1");
  // What a 64-bit count of nanoseconds could not add up, an enumeration's unknown value, a
  // tile the model cannot cut, and more units than any chip (each unit is a track and a slot).
  expect_refused([](auto& s) { s.dram_bytes_per_second = 1e-300; },
                 "[Device::modeled] spec 'tiny': dram_bytes_per_second must be at least 1 per "
                 "second, got 1e-300");
  expect_refused([](auto& s) { s.launch_overhead = nanoseconds((std::int64_t{1} << 53) + 1); },
                 "[Device::modeled] spec 'tiny': launch_overhead must be at most 2^53 ns (about "
                 "104 days), got 9007199254740993 ns");
  expect_refused([](auto& s) { s.policy = static_cast<ferry::SchedulePolicy>(7); },
                 "[Device::modeled] spec 'tiny': policy must be fifo or critical_path, got 7");
  expect_refused([](auto& s) { s.fallback = static_cast<ferry::Fallback>(9); },
                 "[Device::modeled] spec 'tiny': fallback must be none or host, got 9");
  expect_refused([](auto& s) { s.matmul_tile = 1; },
                 "[Device::modeled] spec 'tiny': matmul_tile must be in [16, 2^18], got 1");
  // Past 2^18 the model's 15 powers of two no longer reach 16 (2^30 made one tile of a whole
  // 1024 x 1024 product, twice the time of 128 or 2^18).
  expect_refused([](auto& s) { s.matmul_tile = (1 << 18) + 1; },
                 "[Device::modeled] spec 'tiny': matmul_tile must be in [16, 2^18], got 262145");
  // 0 is "no limit of its own"; anything else is a rate (0.5 B/s made unit_time negative).
  expect_refused([](auto& s) { s.kernel_rates.elementwise.unit_bytes_per_second = 0.5; },
                 "[Device::modeled] spec 'tiny': kernel_rates.elementwise.unit_bytes_per_second "
                 "must be at least 1 per second, got 0.5");
  expect_refused([](auto& s) { s.kernel_rates.layout.unit_bytes_per_second = -1; },
                 "[Device::modeled] spec 'tiny': kernel_rates.layout.unit_bytes_per_second must "
                 "be positive, got -1");
  expect_refused([](auto& s) { s.compute_units = 1'000'000; },
                 "[Device::modeled] spec 'tiny': compute_units must be at most 65536, got "
                 "1000000");
  ferry::DeviceSpec edges = ferry::specs::tiny();
  edges.compute_units = 65536;
  edges.matmul_tile = 16;
  edges.dram_bytes_per_second = 1;
  edges.kernel_rates.reduction.unit_bytes_per_second = 1;
  edges.launch_overhead = nanoseconds(std::int64_t{1} << 53);
  EXPECT_NO_THROW((void)ferry::Device::modeled(edges));
  edges.matmul_tile = 1 << 18;
  EXPECT_NO_THROW((void)ferry::Device::modeled(edges));
  // Zero latencies and overheads are fine: tiny has no launch overhead.
  ferry::DeviceSpec zero = ferry::specs::tiny();
  zero.kernel_latency = zero.h2d_latency = zero.d2h_latency = zero.d2d_latency = nanoseconds(0);
  EXPECT_NO_THROW((void)ferry::Device::modeled(zero));
}

/// A built-in op whose step would take longer than the model times one step (2^53 ns) on a
/// valid spec: its times once saturated at 2^62 ns and the busy sums overflowed (a compute
/// unit busy -9.2e18 ns). It fails typed, through its future, as custom refuses such a cost at
/// the call, and the figures stay whole.
TEST(Spec, AStepLongerThanTheModelTimesFailsAndLeavesTheFiguresWhole) {
  ferry::DeviceSpec slow = ferry::specs::tiny();
  slow.dram_bytes_per_second = 1;
  slow.dram_bytes = std::int64_t{1} << 50;
  ferry::Device dev = ferry::Device::modeled(slow, ferry::model_only);
  // The failed step's output and its failed reader give their memory back.
  ferry_test::expect_balanced_after(dev, [&] {
    const auto one = ferry::to_device(dev, std::vector<float>{1.0f}, ferry::Shape{1});
    const auto y = ferry::exp(ferry::broadcast_to(one, ferry::Shape{std::int64_t{1} << 31}));
    const auto reader = y + 1.0f;
    EXPECT_THROW(ferry::wait(reader), ferry::InvalidArgument);
    try {
      ferry::wait(y);
      ADD_FAILURE() << "no error";
    } catch (const ferry::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("[exp] step ", 0), 0u) << what;
      EXPECT_NE(what.find("longer than the model times one step (2^53 ns, about 104 days)"),
                std::string::npos)
          << what;
    }
  });
  const ferry::DeviceStats st = dev.stats();
  EXPECT_GE(st.busy("compute 0").count(), 0);
  EXPECT_GE(st.unit_time.count(), 0);
  EXPECT_LT(st.makespan.count(), std::int64_t{1} << 53);
  // The trace, with the failed step in it, is strict JSON.
  const ferry_test::TempDir dir("ferry_spec");
  dev.write_trace(dir.file("trace.json"));
  ferry_test::expect_strict_json("the trace", ferry_test::read_text(dir.file("trace.json")));
  // The device goes on: a step that fits runs.
  const auto one = ferry::to_device(dev, std::vector<float>{1.0f}, ferry::Shape{1});
  EXPECT_NO_THROW(ferry::wait(ferry::exp(one)));
}

/// Steps of the longest a spec allows, one after another: a chain of 2^53 ns steps, or
/// launches of a 2^53 ns launch overhead. About a thousand of them once passed the 2^63 ns of
/// the model's 64-bit clock (a signed overflow: undefined; UBSan stops there). The first step
/// that would end past 2^62 ns fails typed, naming itself, through its future, as do the
/// steps after it; what ended by then keeps its values and times, and memory returns.
TEST(Spec, StepsThatWouldEndPastTheEndOfModeledTimeFailTyped) {
  const nanoseconds longest(std::int64_t{1} << 53);
  // `end`: where the message says the step would end, when the test knows it.
  const auto past_the_end = [](const std::string& what, const std::string& op,
                               std::int64_t end = -1) {
    EXPECT_EQ(what.rfind("[" + op + "] step ", 0), 0u) << what;
    const std::string at = end < 0 ? "" : " would end at " + std::to_string(end);
    EXPECT_NE(what.find(at + " ns, past the end of modeled time (2^62 ns, about 146 years)"),
              std::string::npos)
        << what;
  };
  const auto error_of = [](const auto& array) {
    try {
      ferry::wait(array);
    } catch (const ferry::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  ferry::Device chained = ferry::Device::modeled(ferry::specs::tiny());
  ferry_test::expect_balanced_after(chained, [&] {
    const auto one = [](ferry::KernelArgs<float> args) { args.output[0] = 1.0f; };
    std::vector<ferry::DeviceArray<float>> chain;
    for (int i = 0; i < 1100; ++i) {
      std::vector<ferry::DeviceArray<float>> in;
      if (i > 0) in.push_back(chain.back());
      chain.push_back(ferry::custom<float>(chained, "link", in, ferry::Shape{1}, one,
                                           ferry::Cost::fixed(longest)));
    }
    // 512 steps end at 2^62 ns exactly; the 513th would end 2^53 ns later. (Reading a value
    // back would take a step past the end too.)
    EXPECT_NO_THROW(ferry::wait(chain[511]));
    past_the_end(error_of(chain[512]), "link", 513 * longest.count());
    past_the_end(error_of(chain.back()), "link", 513 * longest.count());
  });
  const ferry::DeviceStats s = chained.stats();
  EXPECT_EQ(s.makespan, 512 * longest);
  EXPECT_EQ(s.unit_time, 512 * longest);
  EXPECT_LE(s.lower_bound, s.makespan);

  ferry::DeviceSpec slow_host = ferry::specs::tiny();
  slow_host.launch_overhead = longest;
  ferry::Device launched = ferry::Device::modeled(slow_host);
  ferry_test::expect_balanced_after(launched, [&] {
    std::vector<ferry::DeviceArray<float>> arrays;
    for (int i = 0; i < 1100; ++i) arrays.push_back(ferry::zeros<float>(launched, ferry::Shape{1}));
    EXPECT_NO_THROW(ferry::wait(arrays[510]));  // launched at 511 x 2^53 ns
    // Launched at 2^62 ns, it would end a little later; the host's clock stops there.
    past_the_end(error_of(arrays[511]), "zeros");
    past_the_end(error_of(arrays.back()), "zeros");
  });
}

TEST(Spec, TheCostModelIsARoofline) {
  // Kernels take the longer of compute and memory time, plus the kernel latency.
  const ferry::DeviceSpec t = ferry::specs::tiny();
  using ferry::detail::StepKind;
  const auto d = [&](ferry::Cost c, ferry::DType type = ferry::DType::float32) {
    return ferry::detail::step_duration(t, StepKind::compute, c, type);
  };
  EXPECT_EQ(d({.flops = 1000, .bytes_read = 100, .bytes_written = 100}), nanoseconds(10 + 1000));
  EXPECT_EQ(d({.flops = 100, .bytes_read = 600, .bytes_written = 400}), nanoseconds(10 + 1000));
  EXPECT_EQ(d({.flops = 0.5}), nanoseconds(10 + 1));  // rounds up to a whole nanosecond
  EXPECT_EQ(d(ferry::Cost::fixed(microseconds(2))), microseconds(2));  // no latency added
  ferry::DeviceSpec fast_bf16 = t;
  fast_bf16.unit_flops_per_second.bfloat16 = 4e9;
  EXPECT_EQ(ferry::detail::step_duration(fast_bf16, StepKind::compute, {.flops = 1000},
                                         ferry::DType::bfloat16),
            nanoseconds(10 + 250));
  // float16 runs on the 16-bit floating units, at bfloat16's rate; the narrow integers at the
  // integer rate.
  EXPECT_EQ(ferry::detail::step_duration(fast_bf16, StepKind::compute, {.flops = 1000},
                                         ferry::DType::float16),
            nanoseconds(10 + 250));
  ferry::DeviceSpec fast_int = t;
  fast_int.unit_flops_per_second.integer = 2e9;
  for (const ferry::DType type : {ferry::DType::int8, ferry::DType::uint8, ferry::DType::int16}) {
    EXPECT_EQ(ferry::detail::step_duration(fast_int, StepKind::compute, {.flops = 1000}, type),
              nanoseconds(10 + 500));
  }
  EXPECT_EQ(
      ferry::detail::step_duration(t, StepKind::copy_in, {.bytes_read = 64, .bytes_written = 64},
                                   ferry::DType::float32),
      nanoseconds(100 + 64));
  EXPECT_EQ(ferry::detail::step_duration(t, StepKind::view, {.flops = 1e9}, ferry::DType::float32),
            nanoseconds(0));
}

TEST(Spec, TheModelCostsEachElementTypesOwnBytes) {
  // 1024 elements hold 2 KiB as float16 or int16, 1 KiB as int8 or uint8, in the modeled DRAM.
  EXPECT_EQ(ferry::size_of(ferry::DType::float16), 2u);
  EXPECT_EQ(ferry::size_of(ferry::DType::int16), 2u);
  EXPECT_EQ(ferry::size_of(ferry::DType::int8), 1u);
  EXPECT_EQ(ferry::size_of(ferry::DType::uint8), 1u);
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const ferry::Shape shape{1024};
  std::uint64_t last = dev.stats().dram_bytes_in_use;
  // The DRAM the array that was just made added; every array stays alive to the end.
  const auto added = [&](const auto& array) {
    ferry::wait(array);
    const std::uint64_t now = dev.stats().dram_bytes_in_use;
    const std::uint64_t delta = now - last;
    last = now;
    return delta;
  };
  const auto h = ferry::zeros<ferry::float16>(dev, shape);
  EXPECT_EQ(added(h), 2048u);
  const auto s = ferry::zeros<std::int16_t>(dev, shape);
  EXPECT_EQ(added(s), 2048u);
  const auto b = ferry::zeros<std::int8_t>(dev, shape);
  EXPECT_EQ(added(b), 1024u);
  const auto u = ferry::zeros<std::uint8_t>(dev, shape);
  EXPECT_EQ(added(u), 1024u);
  const auto f = ferry::zeros<float>(dev, shape);
  EXPECT_EQ(added(f), 4096u);
}

}  // namespace

}  // namespace test_spec
