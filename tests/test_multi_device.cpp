// Several devices: a.to(other) copies over the modeled link (or as an import from the cpu),
// asynchronously; the receiving device's model places the copy once the sending device's model
// has the data. Ops never mix devices.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/timeline.hpp"

namespace {

using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;

class MultiDevice : public ferry_test::OnEachExecutor {
 protected:
  ferry::Device tiny() { return ferry::Device::modeled(ferry::specs::tiny(), dev.executor()); }
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
