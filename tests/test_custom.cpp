// custom steps: user kernels with user costs, on every executor.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/timeline.hpp"

namespace test_custom {

namespace {

using ferry::Shape;
using ferry_test::OnEachExecutor;
using std::chrono::nanoseconds;

class Custom : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Custom);

TEST_P(Custom, TheKernelSeesItsInputsAndWritesItsOutput) {
  auto a = ferry::to_device(dev, {1.0, 2.0, 3.0}, Shape{3});
  auto b = ferry::to_device(dev, {10.0, 20.0, 30.0, 40.0}, Shape{2, 2});
  // out[i] = sum of all of a + b[i]: inputs of different shapes, each a flat span.
  auto out = ferry::custom<double>(
      dev, "mix", {a, b}, Shape{4},
      [](ferry::KernelArgs<double> args) {
        ASSERT_EQ(args.inputs.size(), 2u);
        ASSERT_EQ(args.inputs[0].size(), 3u);
        ASSERT_EQ(args.inputs[1].size(), 4u);
        ASSERT_EQ(args.output.size(), 4u);
        const double total = std::accumulate(args.inputs[0].begin(), args.inputs[0].end(), 0.0);
        for (std::size_t i = 0; i < 4; ++i) args.output[i] = total + args.inputs[1][i];
      },
      ferry::Cost{.flops = 7, .bytes_read = 56, .bytes_written = 32});
  const auto h = out.to_host();
  EXPECT_EQ(std::vector<double>(h.data().begin(), h.data().end()),
            (std::vector<double>{16, 26, 36, 46}));
  EXPECT_EQ(out.shape(), Shape{4});
}

TEST_P(Custom, AStepMayHaveNoInputsAndAStatefulKernel) {
  int calls = 0;
  auto seq = ferry::custom<std::int64_t>(
      dev, "iota", {}, Shape{5},
      [&calls](ferry::KernelArgs<std::int64_t> args) mutable {
        ++calls;
        std::iota(args.output.begin(), args.output.end(), std::int64_t{100});
      },
      ferry::Cost{});
  EXPECT_EQ(seq.to_host()(4), 104);
  EXPECT_EQ(calls, 1);
}

TEST_P(Custom, AThrowingKernelReachesTheExportsThatDependOnIt) {
  auto bad = ferry::custom<float>(dev, "bad", {}, Shape{2}, [](ferry::KernelArgs<float>) {
    throw std::runtime_error("custom kernel failed");
  }, ferry::Cost{});
  auto after = bad * 2.0f;
  try {
    (void)after.to_host();
    FAIL() << "expected the kernel's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "custom kernel failed");
  }
  EXPECT_EQ(ferry::ones<float>(dev, Shape{1}).to_host()(0), 1.0f);
}

TEST_P(Custom, BadCallsAreRefusedAtTheCall) {
  const auto nothing = [](ferry::KernelArgs<float>) {};
  EXPECT_THROW((void)ferry::custom<float>(dev, "", {}, Shape{1}, nothing, ferry::Cost{}),
               ferry::InvalidArgument);
  try {
    (void)ferry::custom<float>(dev, "k", {}, Shape{1}, nothing, ferry::Cost{.flops = -1});
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[k] negative cost: -1 flops, 0 bytes read, 0 bytes written");
  }
  try {
    (void)ferry::Cost::fixed(nanoseconds(-5));
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[Cost::fixed] negative duration of -5 ns");
  }
  ferry::Device other;
  auto elsewhere = ferry::ones<float>(other, Shape{1});
  try {
    (void)ferry::custom<float>(dev, "k", {elsewhere}, Shape{1}, nothing, ferry::Cost{});
    FAIL() << "expected DeviceMismatch";
  } catch (const ferry::DeviceMismatch& e) {
    EXPECT_EQ(std::string(e.what()),
              "[k] an input lives on " + other.name() + ", not on " + dev.name());
  }
  EXPECT_THROW((void)ferry::custom<float>(dev, "k", {ferry::DeviceArray<float>{}}, Shape{1},
                                          nothing, ferry::Cost{}),
               ferry::InvalidArgument);
}

TEST_P(Custom, AnEmptyKernelIsRefusedAtTheCall) {
  const std::function<void(ferry::KernelArgs<float>)> empty;
  try {
    (void)ferry::custom<float>(dev, "k", {}, Shape{1}, empty, ferry::Cost{});
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[k] got an empty kernel");
  }
  void (*null_kernel)(ferry::KernelArgs<float>) = nullptr;
  EXPECT_THROW((void)ferry::custom<float>(dev, "k", {}, Shape{1}, null_kernel, ferry::Cost{}),
               ferry::InvalidArgument);
  // A std::function that holds a kernel is as good as the kernel.
  const std::function<void(ferry::KernelArgs<float>)> seven = [](ferry::KernelArgs<float> args) {
    args.output[0] = 7.0f;
  };
  EXPECT_EQ(ferry::custom<float>(dev, "k", {}, Shape{1}, seven, ferry::Cost{}).to_host()(0), 7.0f);
}

TEST(CustomCost, FixedCostsTakeExactlyThatLongWhateverTheRates) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  auto k = ferry::custom<float>(dev, "k", {}, Shape{1}, [](ferry::KernelArgs<float>) {},
                                ferry::Cost::fixed(std::chrono::microseconds(7)));
  ferry::wait(k);
  const auto ks = ferry_test::named(ferry_test::slices_of(dev), "k");
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].end - ks[0].start, std::chrono::microseconds(7));
  // A fraction of a nanosecond rounds up.
  EXPECT_EQ(ferry::Cost::fixed(std::chrono::duration<double, std::nano>(2.25)).fixed_duration,
            nanoseconds(3));
}

/// The model counts whole nanoseconds in 64 bits: a cost that takes longer than 2^53 ns alone
/// on its device is refused at the call (1e19 flops on tiny's unit of 1 per ns; a fixed 200
/// years), where it overflowed the device's figures (a negative unit_time, a lower bound past
/// the makespan). Two steps just under the bound are modeled, and the figures add up.
TEST(CustomCost, ACostLongerThanTheModelTimesIsRefusedAtTheCall) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto one = [](ferry::KernelArgs<float> args) { args.output[0] = 1.0f; };
  const std::string bound = " alone on " + dev.name() +
                            ", longer than the model times one step (2^53 ns, about 104 days)";
  try {
    (void)ferry::custom<float>(dev, "big", {}, Shape{1}, one, ferry::Cost{.flops = 1e19});
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[big] the cost takes ", 0), 0u) << what;
    EXPECT_NE(what.find(bound), std::string::npos) << what;
  }
  EXPECT_THROW((void)ferry::custom<float>(dev, "old", {}, Shape{1}, one,
                                          ferry::Cost::fixed(std::chrono::hours(24 * 365 * 200))),
               ferry::InvalidArgument);
  const nanoseconds longest(std::int64_t{1} << 53);
  auto a = ferry::custom<float>(dev, "a", {}, Shape{1}, one, ferry::Cost::fixed(longest));
  auto b = ferry::custom<float>(dev, "b", {a}, Shape{1}, one, ferry::Cost::fixed(longest));
  EXPECT_EQ(b.to_host()(0), 1.0f);
  const ferry::DeviceStats s = dev.stats();
  EXPECT_GE(s.makespan, 2 * longest);
  EXPECT_LE(s.lower_bound, s.makespan);
  EXPECT_EQ(s.unit_time, 2 * longest);
}

/// A matmul's tiles are planned from its grid: one without a grid (or tiles) once took 10 ns for
/// any flops. It is refused, as are negative tiles and grid sizes and a Work past matmul.
TEST(CustomCost, AMatmulCostNeedsItsGridAndNoSizeIsNegative) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto one = [](ferry::KernelArgs<float> args) { args.output[0] = 1.0f; };
  const auto refused = [&](const ferry::Cost& cost) {
    try {
      (void)ferry::custom<float>(dev, "k", {}, Shape{1}, one, cost);
      ADD_FAILURE() << "expected InvalidArgument";
      return std::string();
    } catch (const ferry::InvalidArgument& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refused({.flops = 1e6, .work = ferry::Work::matmul}),
            "[k] Work::matmul of 1e+06 flops needs its grid {batch, m, k, n} (or tiles), got "
            "{0, 0, 0, 0}");
  EXPECT_EQ(refused({.flops = 1e6, .work = ferry::Work::matmul, .grid = {1, 100, 0, 100}}),
            "[k] Work::matmul of 1e+06 flops needs its grid {batch, m, k, n} (or tiles), got "
            "{1, 100, 0, 100}");
  EXPECT_EQ(refused({.flops = 1e6, .tiles = -3}), "[k] negative tiles -3 or grid {0, 0, 0, 0}");
  EXPECT_EQ(refused({.flops = 1e6, .work = ferry::Work::matmul, .grid = {1, -4, 8, 8}}),
            "[k] negative tiles 0 or grid {1, -4, 8, 8}");
  EXPECT_EQ(refused({.work = static_cast<ferry::Work>(9)}), "[k] unknown Work 9");
  // With tiles, or a whole grid, the flops take their time; without flops no grid is needed.
  const auto makespan = [&](const ferry::Cost& cost) {
    dev.reset_stats();
    ferry::wait(ferry::custom<float>(dev, "k", {}, Shape{1}, one, cost));
    return dev.stats().makespan.count();
  };
  EXPECT_EQ(makespan({.flops = 1e6, .work = ferry::Work::elementwise}), 1'000'010);
  EXPECT_EQ(makespan({.flops = 1e6, .work = ferry::Work::matmul, .tiles = 1}), 1'000'010);
  EXPECT_GE(makespan({.flops = 2e6, .work = ferry::Work::matmul, .grid = {1, 100, 100, 100}}),
            1'000'000);
  EXPECT_EQ(makespan({.work = ferry::Work::matmul}), 10);
}

/// Times are whole nanoseconds rounded up: a kernel of N flops on tiny (one unit of 1 per ns,
/// 10 ns a kernel) takes N + 10 ns however long, where the forgiveness of floating-point error
/// once cut long kernels short (1e15 flops: 1000 ns short).
TEST(CustomCost, LongKernelsRoundUpToTheNanosecond) {
  for (const double flops : {1e9, 1e12, 1e15}) {
    ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
    auto a = ferry::ones<float>(dev, Shape{4});
    ferry::wait(a);
    dev.reset_stats();
    auto c = ferry::custom<float>(
        dev, "k", {a}, Shape{4}, [](ferry::KernelArgs<float> args) { args.output[0] = 1.0f; },
        ferry::Cost{.flops = flops});
    ferry::wait(c);
    const ferry::DeviceStats s = dev.stats();
    EXPECT_EQ(s.makespan, nanoseconds(static_cast<std::int64_t>(flops) + 10)) << flops;
    EXPECT_LE(s.lower_bound, s.makespan) << flops;
  }
}

}  // namespace

}  // namespace test_custom
