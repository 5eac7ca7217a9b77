// Errors: each type with its message at the call, and failures inside running steps, which
// reach exactly the exports that depend on them, as themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"

namespace test_errors {

namespace {

using ferry::Shape;
using ferry_test::OnEachExecutor;

static_assert(std::is_base_of_v<ferry::Error, ferry::ShapeError>);
static_assert(std::is_base_of_v<ferry::Error, ferry::DeviceMismatch>);
static_assert(std::is_base_of_v<ferry::Error, ferry::InvalidArgument>);
static_assert(std::is_base_of_v<ferry::Error, ferry::ExportInsideStep>);
static_assert(std::is_base_of_v<ferry::Error, ferry::OutOfHostMemory>);
static_assert(std::is_base_of_v<std::runtime_error, ferry::Error>);

/// An exception type of the user's own: it must arrive at the export as itself.
struct Boom : std::exception {
  explicit Boom(int serial) : serial(serial) {}
  const char* what() const noexcept override { return "boom"; }
  int serial;
};

/// A float array whose kernel throws Boom(serial).
ferry::DeviceArray<float> exploding(const ferry::Device& dev, int serial) {
  return ferry::detail::launch<float>(ferry::detail::DeviceAccess::state(dev),
                                      {ferry::detail::StepKind::compute, "exploding", {}},
                                      Shape{2}, {}, [serial](const ferry::detail::Step&) {
                                        throw Boom(serial);
                                      });
}

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const ferry::Error& e) {
    return e.what();
  }
  return "no error";
}

class Errors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Errors);

TEST_P(Errors, ShapeErrorsAreThrownAtTheCallWithOpAndShapes) {
  auto x = ferry::zeros<float>(dev, Shape{32, 784});
  auto w = ferry::zeros<float>(dev, Shape{785, 10});
  EXPECT_EQ(message_of([&] { (void)ferry::matmul(x, w); }),
            "[matmul] inner sizes differ: (32, 784) x (785, 10)");
  EXPECT_EQ(message_of([&] { (void)(x + w); }),
            "[add] shapes (32, 784) and (785, 10) do not broadcast");
  EXPECT_THROW((void)ferry::reshape(x, Shape{7, 7}), ferry::ShapeError);
}

TEST_P(Errors, DeviceMismatchNamesBothDevices) {
  ferry::Device other;
  auto a = ferry::ones<float>(dev, Shape{2});
  auto b = ferry::ones<float>(other, Shape{2});
  EXPECT_EQ(message_of([&] { (void)ferry::maximum(a, b); }),
            "[maximum] arrays live on different devices: " + dev.name() + " and " + other.name());
  EXPECT_THROW((void)ferry::concat({a, b}, 0), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::where(ferry::less(a, 1.0f), a, b), ferry::DeviceMismatch);
  auto host = ferry::ones<float>(ferry::Device::cpu(), Shape{2});
  EXPECT_THROW((void)ferry::matmul(a, host), ferry::DeviceMismatch);
}

TEST_P(Errors, InvalidArgumentsNameTheValue) {
  auto x = ferry::zeros<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of([&] { (void)ferry::sum(x, {2}); }),
            "[sum] axis 2 is out of range for rank 2");
  EXPECT_EQ(message_of([&] { (void)Shape(2, -1); }), "[Shape] negative size -1 in dimension 1");
  EXPECT_EQ(message_of([&] { (void)ferry::to_device(dev, {1.0f}, Shape{2}); }),
            "[to_device] 1 values for shape (2) of 2 elements");
  // 2^61 doubles: the byte count would wrap around to 0 if it were not checked.
  EXPECT_EQ(message_of([&] { (void)ferry::ones<double>(dev, Shape{std::int64_t{1} << 61}); }),
            "[ones] an array of shape (2305843009213693952) with 8-byte elements does not fit in "
            "memory");
  // Host memory the call takes itself: OutOfHostMemory, as HostArray(Shape) documents.
  EXPECT_THROW((void)ferry::HostArray<float>(Shape{std::int64_t{1} << 62}), ferry::OutOfHostMemory);
}

TEST_P(Errors, AKernelExceptionReachesEveryDependentExportAsItself) {
  auto bad = exploding(dev, 7);
  auto b = bad + 1.0f;
  auto c = ferry::exp(b) * 2.0f;
  auto good = ferry::ones<float>(dev, Shape{2});
  auto mixed = c + good;
  for (const auto* a : {&bad, &b, &c, &mixed}) {
    try {
      (void)a->to_host();
      ADD_FAILURE() << "expected Boom";
    } catch (const Boom& e) {
      EXPECT_EQ(e.serial, 7);
    }
  }
  // ...and nothing else: independent work completes.
  EXPECT_EQ(good.to_host()(1), 1.0f);
  EXPECT_EQ((good * 3.0f).to_host()(0), 3.0f);
}

TEST_P(Errors, BatchedExportsAndWaitsRethrowTheFirstFailureInArgumentOrder) {
  auto good = ferry::ones<float>(dev, Shape{2});
  auto first = exploding(dev, 1) + good;
  auto second = exploding(dev, 2);
  try {
    (void)ferry::to_host(good, second, first);
    ADD_FAILURE() << "expected Boom";
  } catch (const Boom& e) {
    EXPECT_EQ(e.serial, 2);
  }
  try {
    ferry::wait(first, second);
    ADD_FAILURE() << "expected Boom";
  } catch (const Boom& e) {
    EXPECT_EQ(e.serial, 1);
  }
  EXPECT_NO_THROW(ferry::wait(good));
  EXPECT_TRUE(first.ready());  // a failed array is ready: its error is available
}

TEST_P(Errors, IntegerFaultsInsideKernelsReachTheExport) {
  auto a = ferry::to_device(dev, {4, 5}, Shape{2});
  auto zero = ferry::to_device(dev, {2, 0}, Shape{2});
  auto q = a / zero;  // the call succeeds: only the kernel can see the zero
  EXPECT_EQ(message_of([&] { (void)q.to_host(); }), "[divide] integer division by zero");
  EXPECT_EQ(message_of([&] { (void)ferry::pow(a, -1).to_host(); }),
            "[pow] negative integer exponent -1");
}

TEST_P(Errors, TheDeviceKeepsWorkingAfterFailures) {
  for (int i = 0; i < 20; ++i) {
    auto bad = exploding(dev, i) * 2.0f;
    EXPECT_THROW((void)bad.to_host(), Boom);
    auto fine = ferry::arange<float>(dev, 4) + static_cast<float>(i);
    EXPECT_EQ(fine.to_host()(3), 3.0f + static_cast<float>(i));
  }
}

/// Elements of float that the host cannot hold but a modeled device of `spec` can: 64 GiB,
/// or twice the host's memory on a host larger than that (with DRAM to match).
std::int64_t beyond_the_host(ferry::DeviceSpec& spec) {
  const std::uint64_t host = ferry::detail::host_memory_bytes();
  const std::uint64_t bytes = std::max(std::uint64_t{64} << 30, 2 * host);
  spec.dram_bytes = std::max(spec.dram_bytes, static_cast<std::int64_t>(bytes + (bytes >> 2)));
  return static_cast<std::int64_t>(bytes / sizeof(float));
}

TEST_P(Errors, AnArrayTheHostCannotHoldIsOutOfHostMemoryAtItsExportsOnly) {
  for (const ferry::Fallback fallback : {ferry::Fallback::none, ferry::Fallback::host}) {
    SCOPED_TRACE(fallback == ferry::Fallback::none ? "no fallback" : "host fallback");
    ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
    spec.fallback = fallback;
    const std::int64_t n = beyond_the_host(spec);
    ferry::Device big_dev = ferry::Device::modeled(spec, dev.executor());
    auto small = ferry::arange<float>(big_dev, 4);
    auto big = ferry::zeros<float>(big_dev, Shape{n});  // fits the modeled DRAM
    auto after = ferry::sum(big);  // a scalar: the model holds `big` alone
    try {
      ferry::wait(after);
      FAIL() << "expected OutOfHostMemory";
    } catch (const ferry::OutOfHostMemory& e) {
      EXPECT_EQ(e.op(), "zeros");
      EXPECT_EQ(e.bytes(), static_cast<std::uint64_t>(n) * sizeof(float));
      EXPECT_EQ(std::string(e.what()).rfind("[zeros] cannot allocate " + std::to_string(e.bytes()) +
                                                " bytes of host memory",
                                            0),
                0u)
          << e.what();
    }
    EXPECT_THROW((void)ferry::to_host(small, big), ferry::OutOfHostMemory);
    EXPECT_EQ(small.to_host()(3), 3.0f);  // an export that does not depend on it is unharmed
    big = {};
    after = {};
    // The device stays usable: a later small program works.
    EXPECT_EQ(big_dev.stats().dram_bytes_in_use, 16u);  // `small` alone
    auto x = ferry::arange<float>(big_dev, 8) * 2.0f;
    EXPECT_EQ(ferry::sum(x).to_host()(), 56.0f);
  }
}

TEST(HostMemory, AHostArrayTheHostCannotHoldIsOutOfHostMemoryAtTheCall) {
  ferry::DeviceSpec spec;
  const std::int64_t n = beyond_the_host(spec);
  EXPECT_THROW((void)ferry::HostArray<float>(Shape{n}), ferry::OutOfHostMemory);
}

}  // namespace

}  // namespace test_errors
