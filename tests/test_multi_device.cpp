// Several devices: a.to(other) copies over the modeled link, as an import from the cpu, or as
// the sending device's copy to the host when it goes to the cpu, asynchronously; the copy waits
// in the model until the sending device's model has the data. Ops never mix devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/timeline.hpp"

namespace test_multi_device {

namespace {

using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;

class MultiDevice : public ferry_test::OnEachExecutor {
 protected:
  ferry::Device tiny() { return ferry::Device::modeled(ferry::specs::tiny(), dev.executor()); }
  ferry::Device h100(ferry::DeviceSpec spec = ferry::specs::h100_sxm()) {
    return ferry::Device::modeled(std::move(spec), dev.executor());
  }
  static ferry::DeviceFault fault_of(const ferry::DeviceArray<float>& a) {
    try {
      (void)a.to_host();
    } catch (const ferry::DeviceFault& e) {
      return e;
    }
    ADD_FAILURE() << "expected a DeviceFault";
    return ferry::DeviceFault("none", 0, "none", "none");
  }
};
FERRY_SWEEP_EXECUTORS(MultiDevice);

// tiny: copies take 100 ns + 1 ns per byte on every engine; 4 floats are 16 bytes.
TEST_P(MultiDevice, ACopyToAnotherDeviceWaitsForTheDataThenCrossesTheLink) {
  ferry::Device a = tiny();
  ferry::Device b = tiny();
  auto x = ferry::to_device(a, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4}) * 2.0f;  // done at 116 + 42
  auto y = x.to(b);
  EXPECT_EQ(y.device(), b);
  EXPECT_EQ(y.shape(), (Shape{4}));
  auto z = y + 1.0f;
  EXPECT_EQ(z.to_host()(3), 9.0f);
  const auto on_b = slices_of(b);
  ASSERT_EQ(named(on_b, "to").size(), 1u);
  EXPECT_EQ(span_of(named(on_b, "to")[0]), (Span{158, 274}));
  EXPECT_EQ(named(on_b, "to")[0].track, ferry_test::track_of("d2d"));
  EXPECT_EQ(b.stats().bytes_d2d, 16u);
  EXPECT_EQ(b.stats().bytes_h2d, 0u);
  EXPECT_EQ(a.stats().bytes_d2h, 0u);  // nothing went through the host
  EXPECT_EQ(x.to(a).device(), a);      // already there: the same array
}

TEST_P(MultiDevice, TheCpuIsADeviceLikeAnyOther) {
  ferry::Device acc = tiny();
  const ferry::Device cpu = ferry::Device::cpu();
  auto h = ferry::to_device(cpu, {1.0f, -2.0f}, Shape{2});
  auto on_acc = h.to(acc);  // host memory to the device: an import
  auto back = ferry::relu(on_acc).to(cpu);
  EXPECT_EQ(back.device(), cpu);
  const auto v = back.to_host();
  EXPECT_EQ(v(0), 1.0f);
  EXPECT_EQ(v(1), 0.0f);
  EXPECT_EQ(acc.stats().bytes_h2d, 8u);
}

TEST_P(MultiDevice, AnOpOnArraysOfTwoDevicesNamesBoth) {
  ferry::Device a = tiny();
  ferry::Device b = tiny();
  auto x = ferry::to_device(a, {1.0f}, Shape{1});
  auto y = ferry::to_device(b, {1.0f}, Shape{1});
  try {
    (void)(x + y);
    FAIL() << "expected DeviceMismatch";
  } catch (const ferry::DeviceMismatch& e) {
    EXPECT_EQ(std::string(e.what()),
              "[add] arrays live on different devices: " + a.name() + " and " + b.name());
  }
  EXPECT_EQ((x + y.to(a)).to_host()(0), 2.0f);
}

TEST_P(MultiDevice, AFailureOnTheSendingDeviceReachesTheReceivingDevicesExports) {
  ferry::Device a = tiny();
  ferry::Device b = tiny();
  auto huge = ferry::ones<float>(a, Shape{300'000});  // larger than tiny's DRAM
  auto moved = huge.to(b) + 1.0f;
  EXPECT_THROW((void)moved.to_host(), ferry::OutOfDeviceMemory);
  EXPECT_EQ((ferry::ones<float>(b, Shape{2}) + 1.0f).to_host()(1), 2.0f);  // b still works
}

// To the cpu, the array leaves over the accelerator's own link to the host, as an export's copy
// would: h100_sxm's d2h link moves 54.7e9 bytes/s after 2590 ns of latency, so 16 MiB take
// 2590 + ceil(16777216 / 54.7) = 2590 + 306714 = 309304 ns on its d2h engine. The cpu only
// receives the values: it times no copy of its own, and its export of them is a memcpy at
// host_cpu's 10e9 bytes/s, ceil(16777216 / 10) = 1677722 ns.
TEST_P(MultiDevice, AMoveToTheCpuIsTheDevicesCopyToTheHost) {
  constexpr std::uint64_t kBytes = std::uint64_t{16} << 20;
  ferry::Device cpu = ferry::Device::cpu();
  ferry::Device acc = h100();
  cpu.reset_stats();
  const std::uint64_t cpu_held = cpu.stats().dram_bytes_in_use;
  {
    auto x = ferry::full(acc, Shape{4096, 1024}, 1.5f);
    auto moved = x.to(cpu);
    EXPECT_EQ(moved.device(), cpu);
    const auto v = moved.to_host();
    EXPECT_EQ(v(0, 0), 1.5f);
    EXPECT_EQ(v(4095, 1023), 1.5f);

    const auto on_acc = slices_of(acc);
    ASSERT_EQ(named(on_acc, "to").size(), 1u);
    const ferry_test::Slice copy = named(on_acc, "to")[0];
    EXPECT_EQ(copy.track, ferry_test::track_of("d2h"));
    EXPECT_EQ(copy.end - copy.start, std::chrono::nanoseconds(309'304));
    // As soon as the data is there and the host has launched it (its second call).
    EXPECT_EQ(copy.start, std::max(named(on_acc, "full")[0].end, 2 * acc.spec().launch_overhead));
    const ferry::DeviceStats a = acc.stats();
    EXPECT_EQ(a.bytes_d2h, kBytes);
    EXPECT_EQ(a.busy("d2h"), std::chrono::nanoseconds(309'304));
    EXPECT_EQ(a.bytes_d2d, 0u);
    EXPECT_EQ(a.makespan, copy.end);
    EXPECT_LE(a.lower_bound, a.makespan);
    EXPECT_EQ(a.host_syncs, 0u);  // the accelerator's host never waited

    const ferry::DeviceStats c = cpu.stats();
    EXPECT_TRUE(named(slices_of(cpu), "to").empty());
    EXPECT_EQ(c.bytes_d2d, 0u);
    EXPECT_EQ(c.bytes_h2d, 0u);
    EXPECT_EQ(c.busy("d2d"), std::chrono::nanoseconds(0));
    EXPECT_EQ(c.busy("h2d"), std::chrono::nanoseconds(0));
    EXPECT_EQ(c.bytes_d2h, kBytes);  // its export, once
    EXPECT_EQ(c.busy("d2h"), std::chrono::nanoseconds(1'677'722));
    ASSERT_EQ(named(slices_of(cpu), "to_host").size(), 1u);
    EXPECT_GE(named(slices_of(cpu), "to_host")[0].start, copy.end);  // the values came then
    EXPECT_LE(c.lower_bound, c.makespan);
    EXPECT_EQ(c.dram_bytes_in_use, cpu_held + kBytes);  // `moved` lives in host memory
    EXPECT_EQ(a.dram_bytes_in_use, kBytes);              // and `x` on the accelerator
  }
  EXPECT_EQ(acc.stats().dram_bytes_in_use, 0u);
  EXPECT_EQ(cpu.stats().dram_bytes_in_use, cpu_held);
}

TEST_P(MultiDevice, AFailureOnTheDeviceReachesTheCpuThroughItsCopyToTheHost) {
  ferry::DeviceSpec spec = ferry::specs::h100_sxm();
  spec.faults.fail_steps = {1};
  ferry::Device acc = h100(spec);
  const ferry::Device cpu = ferry::Device::cpu();
  auto x = ferry::to_device(acc, {1.0f, 2.0f}, Shape{2});  // step 0
  auto y = ferry::neg(x);                                  // step 1: fails
  const ferry::DeviceFault f = fault_of(y.to(cpu) + 1.0f);
  EXPECT_EQ(f.device(), acc.name());
  EXPECT_EQ(f.op(), "neg");
  EXPECT_EQ(acc.stats().bytes_d2h, 0u);  // nothing to copy
  EXPECT_EQ((x.to(cpu) * 2.0f).to_host()(1), 4.0f);
  EXPECT_EQ(acc.stats().bytes_d2h, 8u);
}

TEST_P(MultiDevice, TheCopyToTheCpuIsTheDevicesStepWithItsFaults) {
  ferry::DeviceSpec spec = ferry::specs::h100_sxm();
  spec.faults.fail_steps = {1};
  ferry::Device acc = h100(spec);
  auto x = ferry::to_device(acc, {1.0f, 2.0f}, Shape{2});  // step 0
  const ferry::DeviceFault f = fault_of(x.to(ferry::Device::cpu()));  // the copy is step 1
  EXPECT_EQ(f.device(), acc.name());
  EXPECT_EQ(f.op(), "to");
  EXPECT_EQ(f.step(), 1u);
  x = ferry::DeviceArray<float>();
  EXPECT_EQ(acc.stats().dram_bytes_in_use, 0u);
}

TEST_P(MultiDevice, UnderTheHostFallbackTheCpuGetsTheValuesOfARejectedStep) {
  const ferry::Device cpu = ferry::Device::cpu();
  ferry::DeviceSpec spec = ferry::specs::h100_sxm();
  spec.fallback = ferry::Fallback::host;
  spec.faults.fail_steps = {1};
  ferry::Device source_rejected = h100(spec);  // neg runs on the host, the copy on the device
  spec.faults.fail_steps = {2};
  ferry::Device copy_rejected = h100(spec);  // the copy runs on the host
  for (ferry::Device* acc : {&source_rejected, &copy_rejected}) {
    {
      auto y = ferry::neg(ferry::to_device(*acc, {1.0f, 2.0f}, Shape{2}));
      EXPECT_EQ((y.to(cpu) + 1.0f).to_host()(1), -1.0f);
    }
    const ferry::DeviceStats s = acc->stats();
    EXPECT_EQ(s.fallbacks, 1u);
    EXPECT_EQ(s.bytes_d2h, acc == &source_rejected ? 8u : 0u);
    EXPECT_EQ(s.dram_bytes_in_use, 0u);
  }
}

// The idiom for moving a model's parameters: a plain struct of arrays and a function that
// moves each one.
struct Mlp {
  ferry::DeviceArray<float> w1, b1, w2;
  Mlp to(const ferry::Device& d) const { return {w1.to(d), b1.to(d), w2.to(d)}; }
  ferry::DeviceArray<float> operator()(const ferry::DeviceArray<float>& x) const {
    return ferry::matmul(ferry::relu(ferry::matmul(x, w1) + b1), w2);
  }
};

TEST_P(MultiDevice, AStructOfArraysMovesWithTo) {
  ferry::Device a = tiny();
  ferry::Device b = tiny();
  const Mlp on_a{ferry::full(a, Shape{3, 4}, 0.5f), ferry::full(a, Shape{4}, 1.0f),
                 ferry::full(a, Shape{4, 2}, 2.0f)};
  const Mlp on_b = on_a.to(b);
  auto x = ferry::full(b, Shape{2, 3}, 1.0f);
  const auto y = on_b(x).to_host();
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y(1, 1), 4 * (3 * 0.5f + 1.0f) * 2.0f);
  EXPECT_EQ(on_a(x.to(a)).to_host()(0, 0), y(0, 0));
}

}  // namespace

}  // namespace test_multi_device
