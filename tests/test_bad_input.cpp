// Bad input, for every public function of ferry. Each call below gets a value the API does not
// accept: a data size that does not match the shape, a bad axis, a negative or overflowing
// size, shapes that do not combine, arrays of two devices, an empty handle, a handle whose
// buffer deallocate(force) freed, an export from inside a running step, a layout the shape
// cannot have, a DeviceSpec no device could have. Each must throw the documented error, of
// exactly that type, at the call (an export inside a kernel: at the export that depends on the
// kernel) -- never crash, hang, throw another type, or wait for an export to report a value the
// call could see. Where the text matters the whole message is compared; it starts with "[op] ".
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"

namespace test_bad_input {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::DeviceArray;
using ferry::Shape;
using ferry::SymInt;
using F = DeviceArray<float>;
using std::chrono::nanoseconds;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr ferry::Layout kTiled{ferry::MemorySpace::dram, ferry::Order::tiled};

ferry::Device tiny() { return ferry::Device::modeled(ferry::specs::tiny()); }

const std::string kEmpty =
    "got an empty DeviceArray (default-constructed, moved from or deallocated)";

/// A handle to an array of shape (3) made by `full`, whose buffer deallocate(force) freed
/// through another handle.
template <ferry::Element T>
DeviceArray<T> freed_on(const ferry::Device& dev) {
  auto a = ferry::full<T>(dev, Shape{3}, T{});
  const auto other = a;
  ferry::deallocate(other, ferry::force);
  return a;
}

/// `op(x)` throws InvalidArgument for an empty x and UseAfterFree for a freed one, at the call,
/// both naming `name`.
template <ferry::Element T, class Op>
void expect_handle_checks(const std::string& name, const ferry::Device& dev, Op op) {
  SCOPED_TRACE("op " + name);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { op(DeviceArray<T>{}); }),
            "[" + name + "] " + kEmpty);
  const DeviceArray<T> freed = freed_on<T>(dev);
  EXPECT_EQ(message_of<ferry::UseAfterFree>([&] { op(freed); }),
            "[" + name + "] the array of shape (3) made by 'full' was freed by deallocate(force)");
}

std::string mismatch(const std::string& op, const ferry::Device& a, const ferry::Device& b) {
  return "[" + op + "] arrays live on different devices: " + a.name() + " and " + b.name();
}

// ---- vocabulary -----------------------------------------------------------------------------

TEST(BadInput, ShapeRefusesNegativeTooManyAndOverflowingSizes) {
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)Shape(2, -1); }),
            "[Shape] negative size -1 in dimension 1");
  const std::int64_t negative[] = {4, -3};
  EXPECT_THROW((void)Shape(std::span<const std::int64_t>(negative)), ferry::InvalidArgument);
  const SymInt sym_negative[] = {SymInt(-1)};
  EXPECT_THROW((void)Shape(std::span<const SymInt>(sym_negative)), ferry::InvalidArgument);

  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)Shape(1, 1, 1, 1, 1, 1, 1, 1, 1); }),
            "[Shape] rank 9 exceeds the maximum of 8");
  const std::vector<std::int64_t> nine(9, 1);
  EXPECT_THROW((void)Shape(std::span<const std::int64_t>(nine)), ferry::InvalidArgument);

  // The product of the sizes must fit in int64, zeros left out (NumPy's rule).
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [] { (void)Shape(std::int64_t{1} << 32, std::int64_t{1} << 32); }),
            "[Shape] element count overflows int64 at dimension 1");
  EXPECT_THROW((void)Shape(std::int64_t{1} << 32, 0, std::int64_t{1} << 32),
               ferry::InvalidArgument);
  EXPECT_THROW((void)Shape(kInt64Max, 2), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)Shape(std::uint64_t{1} << 63); }),
            "[Shape] size 9223372036854775808 does not fit in int64");

  const Shape s{2, 3};
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)s[2]; }),
            "[Shape] dimension 2 of a rank-2 shape (2, 3)");
  EXPECT_THROW((void)Shape{}[0], ferry::InvalidArgument);
}

TEST(BadInput, SymIntRefusesDivisionByZeroAndValuesThatDoNotFit) {
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)(SymInt(7) / SymInt(0)); }),
            "[SymInt] division by zero (7 by 0)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)(SymInt(7) % 0); }),
            "[SymInt] remainder by zero (7 by 0)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [] { (void)static_cast<std::int32_t>(SymInt(std::int64_t{1} << 40)); }),
            "[SymInt] value 1099511627776 does not fit the integer type");
  EXPECT_THROW((void)static_cast<std::uint32_t>(SymInt(-1)), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [] { (void)SymInt(std::numeric_limits<std::uint64_t>::max()); }),
            "[SymInt] value 18446744073709551615 does not fit in int64");
}

TEST(BadInput, CostFixedRefusesANegativeDuration) {
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)ferry::Cost::fixed(nanoseconds(-5)); }),
            "[Cost::fixed] negative duration of -5 ns");
  EXPECT_THROW((void)ferry::Cost::fixed(std::chrono::seconds(-1)), ferry::InvalidArgument);
  // -1.5 ns rounds up to -1 ns: still negative.
  EXPECT_THROW((void)ferry::Cost::fixed(std::chrono::duration<double, std::nano>(-1.5)),
               ferry::InvalidArgument);
  // Values that have no integer nanosecond count: refused before any conversion.
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [] { (void)ferry::Cost::fixed(std::chrono::duration<double>(kNaN)); }),
            "[Cost::fixed] duration of nan ns is not a number or longer than a Duration holds");
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [] { (void)ferry::Cost::fixed(std::chrono::duration<double>(1e10)); }),
            "[Cost::fixed] duration of 1e+19 ns is not a number or longer than a Duration holds");
  EXPECT_THROW((void)ferry::Cost::fixed(std::chrono::hours(std::int64_t{1} << 60)),
               ferry::InvalidArgument);
  EXPECT_EQ(ferry::Cost::fixed(std::chrono::duration<double, std::nano>(0.5)).fixed_duration,
            nanoseconds(1));
}

// ---- executors and devices ------------------------------------------------------------------

TEST(BadInput, ExecutorNeedsAThread) {
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] { (void)ferry::Executor(0); }),
            "[Executor] needs at least one thread, got 0");
}

/// One field of a DeviceSpec set to a value no device could have, and the end of the message
/// Device::modeled must give for it.
struct SpecCase {
  std::string field;
  std::function<void(ferry::DeviceSpec&)> mutate;
  std::string rule;
};

// clang-format off
#define FERRY_SPEC_CASE(field, value, rule) \
  SpecCase{#field, [](ferry::DeviceSpec& s) { s.field = value; }, rule}
// clang-format on

void expect_spec_refused(const std::vector<SpecCase>& cases) {
  for (const SpecCase& c : cases) {
    SCOPED_TRACE(c.field + " " + c.rule);
    ferry::DeviceSpec spec = ferry::specs::tiny();
    c.mutate(spec);
    EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::Device::modeled(spec); }),
              "[Device::modeled] spec 'tiny': " + c.field + " " + c.rule);
  }
}

TEST(BadInput, DeviceModeledRefusesEveryImpossibleSpecField) {
  // The unmodified spec is accepted: each failure below comes from its one mutation.
  EXPECT_NO_THROW((void)ferry::Device::modeled(ferry::specs::tiny()));
  expect_spec_refused({
      FERRY_SPEC_CASE(compute_units, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(compute_units, -3, "must be positive, got -3"),
      FERRY_SPEC_CASE(unit_flops_per_second.bfloat16, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(unit_flops_per_second.bfloat16, -1e9, "must be positive, got -1e+09"),
      FERRY_SPEC_CASE(unit_flops_per_second.float32, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(unit_flops_per_second.float32, kNaN, "must be positive, got nan"),
      FERRY_SPEC_CASE(unit_flops_per_second.float64, -1, "must be positive, got -1"),
      FERRY_SPEC_CASE(unit_flops_per_second.float64, kInf, "must be positive, got inf"),
      FERRY_SPEC_CASE(unit_flops_per_second.integer, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(unit_flops_per_second.integer, -kInf, "must be positive, got -inf"),
      FERRY_SPEC_CASE(dram_bytes, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(dram_bytes, -1, "must be positive, got -1"),
      FERRY_SPEC_CASE(dram_bytes_per_second, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(dram_bytes_per_second, kNaN, "must be positive, got nan"),
      FERRY_SPEC_CASE(l1_bytes, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(l1_bytes, -64, "must be positive, got -64"),
      FERRY_SPEC_CASE(l1_bytes_per_second, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(l1_bytes_per_second, -4e9, "must be positive, got -4e+09"),
      FERRY_SPEC_CASE(h2d_bytes_per_second, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(h2d_bytes_per_second, kInf, "must be positive, got inf"),
      FERRY_SPEC_CASE(d2h_bytes_per_second, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(d2h_bytes_per_second, -1, "must be positive, got -1"),
      FERRY_SPEC_CASE(d2d_bytes_per_second, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(d2d_bytes_per_second, kNaN, "must be positive, got nan"),
      FERRY_SPEC_CASE(trace_steps, -1, "must not be negative, got -1"),
      FERRY_SPEC_CASE(h2d_latency, nanoseconds(-1), "must not be negative, got -1 ns"),
      FERRY_SPEC_CASE(d2h_latency, nanoseconds(-1), "must not be negative, got -1 ns"),
      FERRY_SPEC_CASE(d2d_latency, nanoseconds(-1), "must not be negative, got -1 ns"),
      FERRY_SPEC_CASE(kernel_latency, nanoseconds(-1), "must not be negative, got -1 ns"),
      FERRY_SPEC_CASE(launch_overhead, std::chrono::microseconds(-2),
                      "must not be negative, got -2000 ns"),
      FERRY_SPEC_CASE(h2d_min_duration, nanoseconds(-1), "must not be negative, got -1 ns"),
      FERRY_SPEC_CASE(d2h_min_duration, nanoseconds(-5), "must not be negative, got -5 ns"),
      FERRY_SPEC_CASE(tile_bytes, 0, "must be positive, got 0"),
      FERRY_SPEC_CASE(matmul_tile, -16, "must be in [16, 2^18], got -16"),
      FERRY_SPEC_CASE(matmul_tile_half_area, -1, "must not be negative, got -1"),
      FERRY_SPEC_CASE(dram_efficiency, 0, "must be in (0, 1], got 0"),
      FERRY_SPEC_CASE(dram_efficiency, 1.5, "must be in (0, 1], got 1.5"),
      FERRY_SPEC_CASE(l2_bytes, -1, "must not be negative, got -1"),
      FERRY_SPEC_CASE(kernel_rates.matmul.compute_efficiency, 0,
                      "must be in (0, 1], got 0"),
      FERRY_SPEC_CASE(kernel_rates.reduction.unit_bytes_per_second, kNaN,
                      "must be positive, got nan"),
      FERRY_SPEC_CASE(kernel_rates.layout.tile_overhead, nanoseconds(-3),
                      "must not be negative, got -3 ns"),
  });
  ferry::DeviceSpec l2 = ferry::specs::tiny();
  l2.l2_bytes = 1024;  // a cache needs a rate
  EXPECT_THROW((void)ferry::Device::modeled(l2), ferry::InvalidArgument);
}

TEST(BadInput, DeviceModeledRefusesFaultRatesThatAreNotProbabilities) {
  ferry::DeviceSpec certain = ferry::specs::tiny();
  certain.faults.h2d_failure_rate = 1;  // the bounds themselves are probabilities
  certain.faults.d2h_failure_rate = 0;
  EXPECT_NO_THROW((void)ferry::Device::modeled(certain));
  const std::string rule = "must be a probability in [0, 1], got ";
  expect_spec_refused({
      FERRY_SPEC_CASE(faults.h2d_failure_rate, -0.1, rule + "-0.1"),
      FERRY_SPEC_CASE(faults.h2d_failure_rate, 1.5, rule + "1.5"),
      FERRY_SPEC_CASE(faults.h2d_failure_rate, kNaN, rule + "nan"),
      FERRY_SPEC_CASE(faults.d2h_failure_rate, -1, rule + "-1"),
      FERRY_SPEC_CASE(faults.d2h_failure_rate, 2, rule + "2"),
      FERRY_SPEC_CASE(faults.d2h_failure_rate, kNaN, rule + "nan"),
      FERRY_SPEC_CASE(faults.kernel_failure_rate, -1e-9, rule + "-1e-09"),
      FERRY_SPEC_CASE(faults.kernel_failure_rate, kInf, rule + "inf"),
      FERRY_SPEC_CASE(faults.kernel_failure_rate, kNaN, rule + "nan"),
  });
}

#undef FERRY_SPEC_CASE

TEST(BadInput, DeviceWriteTraceToAnUnwritablePathThrowsError) {
  const ferry::Device dev = tiny();
  EXPECT_EQ(
      message_of<ferry::Error>([&] { dev.write_trace("/nonexistent-ferry-directory/trace.json"); }),
      "[write_trace] cannot write /nonexistent-ferry-directory/trace.json");
}

// ---- host arrays, import, export, lifetime --------------------------------------------------

TEST(BadInput, HostArrayRefusesWrongCountsSizesAndIndices) {
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] {
              (void)ferry::HostArray<float>(Shape{2, 2}, {1, 2, 3});
            }),
            "[HostArray] 3 values for shape (2, 2) of 4 elements");
  EXPECT_THROW((void)ferry::HostArray<bool>(Shape{3}, std::vector<bool>{true}),
               ferry::InvalidArgument);
  // The count is checked before the memory is asked for: 2^33 floats would not fit.
  EXPECT_EQ(message_of<ferry::InvalidArgument>([] {
              (void)ferry::HostArray<float>(Shape{std::int64_t{1} << 33}, {1, 2});
            }),
            "[HostArray] 2 values for shape (8589934592) of 8589934592 elements");
  // Host memory the call takes itself: more bytes than one allocation holds is OutOfHostMemory,
  // as documented (2^64 bytes, past uint64, reported as the largest uint64).
  EXPECT_EQ(message_of<ferry::OutOfHostMemory>(
                [] { (void)ferry::HostArray<double>(Shape{std::int64_t{1} << 61}); }),
            "[HostArray] cannot allocate 18446744073709551615 bytes of host memory: an array of "
            "shape (2305843009213693952) with 8-byte elements: no host has that much");
  EXPECT_EQ(message_of<ferry::OutOfHostMemory>(
                [] { (void)ferry::HostArray<std::int32_t>(Shape{std::int64_t{1} << 61}); }),
            "[HostArray] cannot allocate 9223372036854775808 bytes of host memory: an array of "
            "shape (2305843009213693952) with 4-byte elements: no host has that much");
  EXPECT_THROW((void)ferry::HostArray<float>(Shape{std::int64_t{1} << 61}, std::vector<float>{}),
               ferry::InvalidArgument);

  ferry::HostArray<float> h(Shape{2, 2});
  const ferry::HostArray<float>& ch = h;
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)h(0); }),
            "[HostArray] 1 indices for shape (2, 2)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)h(2, 0); }),
            "[HostArray] index 2 out of range for dimension 0 of shape (2, 2)");
  EXPECT_THROW((void)h(0, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ch(0, 0, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ch(1, 2), ferry::InvalidArgument);
}

TEST(BadInput, ToDeviceRefusesAWrongDataSizeInEveryOverload) {
  const ferry::Device dev = tiny();
  const std::vector<float> three{1, 2, 3};
  const std::string msg = "[to_device] 3 values for shape (2, 2) of 4 elements";
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::to_device(dev, std::span<const float>(three), Shape{2, 2});
            }),
            msg);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::to_device(dev, three, Shape{2, 2});
            }),
            msg);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::to_device(dev, std::vector<float>(three), Shape{2, 2});
            }),
            msg);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{2, 2});
            }),
            msg);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::to_device(dev, std::vector<bool>{true, false}, Shape{3});
            }),
            "[to_device] 2 values for shape (3) of 3 elements");
  EXPECT_THROW((void)ferry::to_device(dev, std::vector<float>{}, Shape{}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::to_device(dev, {1.0f, 2.0f}, Shape{}), ferry::InvalidArgument);
  // A shape that cannot exist is refused before the data is looked at.
  EXPECT_THROW((void)ferry::to_device(dev, three, {3, -1}), ferry::InvalidArgument);
}

TEST(BadInput, ToDeviceRefusesATiledScalarInEveryOverload) {
  const ferry::Device dev = tiny();
  const std::string msg =
      "[to_device] a scalar (shape ()) cannot be tiled: tiles need at least one dimension";
  const std::vector<float> one{1};
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::to_device(dev, std::span<const float>(one), Shape{}, kTiled); }),
            msg);
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::to_device(dev, one, Shape{}, kTiled); }),
            msg);
  EXPECT_THROW((void)ferry::to_device(dev, std::vector<float>{1}, Shape{}, kTiled),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::to_device(dev, {1.0}, Shape{}, kTiled), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::to_device(dev, std::vector<bool>{true}, Shape{}, kTiled),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::to_device(dev, ferry::HostArray<std::int32_t>(Shape{}),
                                      ferry::Layout{ferry::MemorySpace::l1, ferry::Order::tiled}),
               ferry::InvalidArgument);
}

TEST(BadInput, ExportsAndWaitsRefuseEmptyAndFreedHandles) {
  const ferry::Device dev = tiny();
  const auto good = ferry::ones<float>(dev, Shape{3});
  expect_handle_checks<float>("to_host", dev, [](const F& x) { (void)ferry::to_host(x); });
  expect_handle_checks<float>("to_host", dev, [](const F& x) { (void)x.to_host(); });
  expect_handle_checks<float>("to_host", dev, [&](const F& x) { (void)ferry::to_host(good, x); });
  expect_handle_checks<float>("to_host", dev,
                              [&](const F& x) { (void)ferry::to_host(x, good.astype<double>()); });
  expect_handle_checks<float>("to_host", dev, [&](const F& x) {
    (void)ferry::to_host(std::vector<F>{good, x});
  });
  expect_handle_checks<float>("wait", dev, [](const F& x) { ferry::wait(x); });
  expect_handle_checks<float>("wait", dev, [&](const F& x) { ferry::wait(good, x); });
  expect_handle_checks<float>("wait", dev, [&](const F& x) {
    ferry::wait(std::vector<F>{x, good});
  });
  // The good array was not disturbed by the refused calls.
  EXPECT_EQ(good.to_host()(2), 1.0f);
}

TEST(BadInput, ExportsInsideARunningStepAreRefused) {
  const ferry::Device dev = tiny();
  const auto other = ferry::ones<float>(dev, Shape{2});
  ferry::wait(other);
  // A kernel that runs `body` (an export); its error reaches the exports that depend on it.
  const auto nested = [&](const std::string& name, std::function<void()> body) {
    return ferry::custom<float>(
        dev, name, {}, Shape{1}, [body = std::move(body)](ferry::KernelArgs<float>) { body(); },
        ferry::Cost{});
  };
  const auto refused = [](const std::string& op, const std::string& step) {
    return "[" + op + "] called from inside the running step '" + step +
           "'; exports may only wait from outside";
  };
  const auto a = nested("calls_to_host", [&] { (void)ferry::to_host(other); });
  EXPECT_EQ(message_of<ferry::ExportInsideStep>([&] { (void)a.to_host(); }),
            refused("to_host", "calls_to_host"));
  EXPECT_EQ(message_of<ferry::ExportInsideStep>([&] { (void)(a * 2.0f).to_host(); }),
            refused("to_host", "calls_to_host"));
  const auto b = nested("calls_member", [&] { (void)other.to_host(); });
  EXPECT_THROW((void)ferry::to_host(b), ferry::ExportInsideStep);
  const auto c = nested("calls_batched", [&] { (void)ferry::to_host(other, other); });
  EXPECT_THROW(ferry::wait(c), ferry::ExportInsideStep);
  const auto d = nested("calls_vector", [&] { (void)ferry::to_host(std::vector<F>{other}); });
  EXPECT_THROW((void)ferry::to_host(std::vector<F>{d}), ferry::ExportInsideStep);
  const auto e = nested("calls_wait", [&] { ferry::wait(other); });
  EXPECT_EQ(message_of<ferry::ExportInsideStep>([&] { ferry::wait(e); }),
            refused("wait", "calls_wait"));
  const auto f = nested("calls_wait_vector", [&] { ferry::wait(std::vector<F>{other}); });
  EXPECT_THROW((void)ferry::to_host(f, other), ferry::ExportInsideStep);
  // An export started outside, whose sync point (get()) is reached inside a kernel: on a pool
  // of one worker, the one the kernel holds, waiting there would never end.
  std::future<ferry::HostArray<float>> started = ferry::to_host_async(other);
  const auto g = nested("calls_get", [&] { (void)started.get(); });
  EXPECT_EQ(message_of<ferry::ExportInsideStep>([&] { (void)g.to_host(); }),
            refused("to_host_async", "calls_get"));
  // The refusals left the device working.
  EXPECT_EQ((other + 1.0f).to_host()(1), 2.0f);
}

TEST(BadInput, DeallocateForceRefusesEmptyAndAlreadyFreedHandles) {
  const ferry::Device dev = tiny();
  expect_handle_checks<float>("deallocate", dev,
                              [](const F& x) { ferry::deallocate(x, ferry::force); });
  expect_handle_checks<bool>(
      "deallocate", dev, [](const DeviceArray<bool>& x) { ferry::deallocate(x, ferry::force); });
}

TEST(BadInput, ArrayMembersRefuseEmptyAndFreedHandles) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  expect_handle_checks<float>("shape", dev, [](const F& x) { (void)x.shape(); });
  expect_handle_checks<float>("device", dev, [](const F& x) { (void)x.device(); });
  expect_handle_checks<float>("layout", dev, [](const F& x) { (void)x.layout(); });
  expect_handle_checks<float>("ready", dev, [](const F& x) { (void)x.ready(); });
  expect_handle_checks<float>("to_host", dev, [](const F& x) { (void)x.to_host(); });
  expect_handle_checks<float>("to", dev, [&](const F& x) { (void)x.to(other); });
  expect_handle_checks<float>("to", dev, [&](const F& x) { (void)x.to(dev); });
  expect_handle_checks<float>("to", dev, [](const F& x) { (void)x.to(ferry::Device::cpu()); });
  expect_handle_checks<float>("astype", dev, [](const F& x) { (void)x.astype<std::int32_t>(); });
  expect_handle_checks<float>("astype", dev, [](const F& x) { (void)x.astype<float>(); });
  expect_handle_checks<bool>("astype", dev,
                             [](const DeviceArray<bool>& x) { (void)x.astype<ferry::bfloat16>(); });
}

// ---- ops ------------------------------------------------------------------------------------

TEST(BadInput, CreationRefusesBadShapesSizesAndRanges) {
  const ferry::Device dev = tiny();
  // 2^61 doubles: the byte count would wrap around in size_t if it were not checked. Each
  // message names the function called.
  const auto too_big = [](const std::string& op) {
    return "[" + op +
           "] an array of shape (2305843009213693952) with 8-byte elements does not fit in "
           "memory";
  };
  const Shape huge{std::int64_t{1} << 61};
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::full(dev, huge, 1.0); }),
            too_big("full"));
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::zeros<double>(dev, huge); }),
            too_big("zeros"));
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::ones<std::int64_t>(dev, huge); }),
            too_big("ones"));
  EXPECT_THROW((void)ferry::zeros<float>(dev, {2, -2}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::ones<bool>(dev, {kInt64Max, 2}), ferry::InvalidArgument);

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::arange<float>(dev, 0, 5, 0); }),
            "[arange] needs finite bounds and a non-zero step, got start 0, stop 5, step 0");
  EXPECT_THROW((void)ferry::arange<float>(dev, kNaN, 5), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<float>(dev, 0, kInf), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<double>(dev, 0, 1, kNaN), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<double>(dev, 0, 1, -kInf), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::arange<float>(dev, 0, 1e300); }),
            "[arange] length 1e+300 is too large");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::arange<std::int32_t>(dev, -1); }),
            "[arange] negative length -1");
  // 2^62 values is the longest arange; as int64 it does not fit in memory.
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::arange<std::int64_t>(dev, 0, 0x1p62); }),
            "[arange] an array of shape (4611686018427387904) with 8-byte elements does not fit "
            "in memory");
}

/// A binary op in its three call forms: array-array, array-scalar and scalar-array.
struct BinaryCase {
  std::string name;
  std::function<void(const F&, const F&)> arrays;
  std::function<void(const F&)> array_scalar;
  std::function<void(const F&)> scalar_array;
};

// clang-format off
#define FERRY_NAMED_BINARY(fn)                                      \
  BinaryCase{#fn,                                                   \
             [](const F& a, const F& b) { (void)ferry::fn(a, b); }, \
             [](const F& a) { (void)ferry::fn(a, 2.0f); },          \
             [](const F& a) { (void)ferry::fn(2.0f, a); }}
#define FERRY_OPERATOR_BINARY(name, op)                             \
  BinaryCase{name,                                                  \
             [](const F& a, const F& b) { (void)(a op b); },        \
             [](const F& a) { (void)(a op 2.0f); },                 \
             [](const F& a) { (void)(2.0f op a); }}
// clang-format on

void expect_binary_refusals(const std::vector<BinaryCase>& cases) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  const auto v = ferry::ones<float>(dev, Shape{3});
  const auto wrong = ferry::ones<float>(dev, Shape{4});
  const auto elsewhere = ferry::ones<float>(other, Shape{3});
  for (const BinaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(message_of<ferry::ShapeError>([&] { c.arrays(m, wrong); }),
              "[" + c.name + "] shapes (2, 3) and (4) do not broadcast");
    EXPECT_THROW(c.arrays(wrong, m), ferry::ShapeError);
    EXPECT_THROW(c.arrays(ferry::ones<float>(dev, Shape{2, 0}), m), ferry::ShapeError);
    EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] { c.arrays(v, elsewhere); }),
              mismatch(c.name, dev, other));
    EXPECT_THROW(c.arrays(elsewhere, m), ferry::DeviceMismatch);
    expect_handle_checks<float>(c.name, dev, [&](const F& x) { c.arrays(x, v); });
    expect_handle_checks<float>(c.name, dev, [&](const F& x) { c.arrays(v, x); });
    expect_handle_checks<float>(c.name, dev, c.array_scalar);
    expect_handle_checks<float>(c.name, dev, c.scalar_array);
  }
}

TEST(BadInput, ArithmeticRefusesBadShapesDevicesAndHandles) {
  expect_binary_refusals({
      FERRY_NAMED_BINARY(add),
      FERRY_NAMED_BINARY(subtract),
      FERRY_NAMED_BINARY(multiply),
      FERRY_NAMED_BINARY(divide),
      FERRY_NAMED_BINARY(maximum),
      FERRY_NAMED_BINARY(minimum),
      FERRY_NAMED_BINARY(pow),
      FERRY_OPERATOR_BINARY("add", +),
      FERRY_OPERATOR_BINARY("subtract", -),
      FERRY_OPERATOR_BINARY("multiply", *),
      FERRY_OPERATOR_BINARY("divide", /),
  });
  // A refused call leaves an operand given away (std::move) untouched.
  const ferry::Device dev = tiny();
  auto a = ferry::ones<float>(dev, Shape{2});
  EXPECT_THROW((void)ferry::add(std::move(a), ferry::ones<float>(dev, Shape{3})),
               ferry::ShapeError);
  EXPECT_TRUE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the check
}

TEST(BadInput, ComparisonsRefuseBadShapesDevicesAndHandles) {
  expect_binary_refusals({
      FERRY_NAMED_BINARY(less),
      FERRY_NAMED_BINARY(greater),
      FERRY_NAMED_BINARY(equal),
  });
}

#undef FERRY_NAMED_BINARY
#undef FERRY_OPERATOR_BINARY

TEST(BadInput, UnaryOpsRefuseEmptyAndFreedHandles) {
  const ferry::Device dev = tiny();
  expect_handle_checks<float>("neg", dev, [](const F& x) { (void)ferry::neg(x); });
  expect_handle_checks<float>("neg", dev, [](const F& x) { (void)-x; });
  expect_handle_checks<std::int32_t>(
      "abs", dev, [](const DeviceArray<std::int32_t>& x) { (void)ferry::abs(x); });
  expect_handle_checks<float>("relu", dev, [](const F& x) { (void)ferry::relu(x); });
  expect_handle_checks<float>("exp", dev, [](const F& x) { (void)ferry::exp(x); });
  expect_handle_checks<double>("log", dev,
                               [](const DeviceArray<double>& x) { (void)ferry::log(x); });
  expect_handle_checks<float>("sqrt", dev, [](const F& x) { (void)ferry::sqrt(x); });
  expect_handle_checks<ferry::bfloat16>(
      "sigmoid", dev, [](const DeviceArray<ferry::bfloat16>& x) { (void)ferry::sigmoid(x); });
  expect_handle_checks<float>("tanh", dev, [](const F& x) { (void)ferry::tanh(x); });
  expect_handle_checks<float>("gelu", dev, [](const F& x) { (void)ferry::gelu(x); });
  // Given away (a moved-from handle is an empty one).
  expect_handle_checks<float>("exp", dev, [](F x) { (void)ferry::exp(std::move(x)); });
}

TEST(BadInput, WhereRefusesBadShapesDevicesAndHandles) {
  using Mask = DeviceArray<bool>;
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto v = ferry::ones<float>(dev, Shape{3});
  const auto mask = ferry::less(v, 2.0f);
  const auto short_mask = ferry::ones<bool>(dev, Shape{2});
  const auto wrong = ferry::ones<float>(dev, Shape{4});

  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::where(short_mask, v, v); }),
            "[where] shapes (2), (3) and (3) do not broadcast");
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::where(mask, v, wrong); }),
            "[where] shapes (3), (3) and (4) do not broadcast");
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::where(short_mask, v, 0.0f); }),
            "[where] shapes (2), (3) and () do not broadcast");
  EXPECT_THROW((void)ferry::where(short_mask, 0.0f, v), ferry::ShapeError);

  const auto other_mask = ferry::ones<bool>(other, Shape{3});
  const auto other_v = ferry::ones<float>(other, Shape{3});
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] { (void)ferry::where(other_mask, v, v); }),
            mismatch("where", other, dev));
  EXPECT_THROW((void)ferry::where(mask, other_v, v), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::where(mask, v, other_v), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::where(mask, other_v, 1.0f), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::where(other_mask, 1.0f, v), ferry::DeviceMismatch);

  expect_handle_checks<bool>("where", dev, [&](const Mask& m) { (void)ferry::where(m, v, v); });
  expect_handle_checks<bool>("where", dev, [&](const Mask& m) { (void)ferry::where(m, v, 0.0f); });
  expect_handle_checks<bool>("where", dev, [&](const Mask& m) { (void)ferry::where(m, 0.0f, v); });
  expect_handle_checks<float>("where", dev, [&](const F& x) { (void)ferry::where(mask, x, v); });
  expect_handle_checks<float>("where", dev, [&](const F& x) { (void)ferry::where(mask, v, x); });
  expect_handle_checks<float>("where", dev, [&](const F& x) { (void)ferry::where(mask, x, 0.0f); });
  expect_handle_checks<float>("where", dev, [&](const F& x) { (void)ferry::where(mask, 0.0f, x); });
}

TEST(BadInput, MatmulRefusesBadShapesDevicesAndHandles) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto m23 = ferry::ones<float>(dev, Shape{2, 3});
  const auto v2 = ferry::ones<float>(dev, Shape{2});
  const auto v3 = ferry::ones<float>(dev, Shape{3});
  const auto scalar = ferry::ones<float>(dev, Shape{});
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::matmul(scalar, m23); }),
            "[matmul] needs arrays of rank 1 or more, got () x (2, 3)");
  EXPECT_THROW((void)ferry::matmul(m23, scalar), ferry::ShapeError);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::matmul(m23, m23); }),
            "[matmul] inner sizes differ: (2, 3) x (2, 3)");
  EXPECT_THROW((void)ferry::matmul(v3, v2), ferry::ShapeError);
  EXPECT_THROW((void)ferry::matmul(m23, v2), ferry::ShapeError);
  EXPECT_THROW((void)ferry::matmul(v3, m23), ferry::ShapeError);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] {
              (void)ferry::matmul(ferry::ones<float>(dev, Shape{2, 2, 3}),
                                  ferry::ones<float>(dev, Shape{3, 3, 4}));
            }),
            "[matmul] batch dimensions (2) and (3) do not broadcast: (2, 2, 3) x (3, 3, 4)");
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] {
              (void)ferry::matmul(m23, ferry::ones<float>(other, Shape{3, 2}));
            }),
            mismatch("matmul", dev, other));
  expect_handle_checks<float>("matmul", dev, [&](const F& x) { (void)ferry::matmul(x, v3); });
  expect_handle_checks<float>("matmul", dev, [&](const F& x) { (void)ferry::matmul(m23, x); });
}

TEST(BadInput, ReductionsRefuseBadAxesEmptyAxesAndHandles) {
  const ferry::Device dev = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  const auto scalar = ferry::ones<float>(dev, Shape{});
  const auto empty_rows = ferry::ones<float>(dev, Shape{0, 3});
  using Reduce = std::function<void(const F&, const std::vector<int>&)>;
  const std::vector<std::pair<std::string, Reduce>> reductions = {
      {"sum", [](const F& a, const std::vector<int>& axes) { (void)ferry::sum(a, axes); }},
      {"mean", [](const F& a, const std::vector<int>& axes) { (void)ferry::mean(a, axes, true); }},
      {"max", [](const F& a, const std::vector<int>& axes) { (void)ferry::max(a, axes); }},
      {"min", [](const F& a, const std::vector<int>& axes) { (void)ferry::min(a, axes, true); }},
  };
  for (const auto& entry : reductions) {
    const std::string& name = entry.first;
    const Reduce& reduce = entry.second;  // not a structured binding: clang 14 cannot capture one
    SCOPED_TRACE(name);
    EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { reduce(m, {2}); }),
              "[" + name + "] axis 2 is out of range for rank 2");
    EXPECT_THROW(reduce(m, {-3}), ferry::InvalidArgument);
    EXPECT_THROW(reduce(m, {0, 5}), ferry::InvalidArgument);
    EXPECT_THROW(reduce(scalar, {0}), ferry::InvalidArgument);
    EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
                reduce(m, {1, -1});
              }),
              "[" + name + "] axis -1 is given twice");
    EXPECT_THROW(reduce(m, {0, 0}), ferry::InvalidArgument);
    expect_handle_checks<float>(name, dev, [&](const F& x) { reduce(x, {}); });
    expect_handle_checks<float>(name, dev, [&](const F& x) { reduce(x, {0}); });
  }
  // max and min have no identity: an empty reduced axis is a shape error.
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::max(empty_rows, {0}); }),
            "[max] cannot reduce the empty axis 0 of (0, 3): the result has no identity");
  EXPECT_THROW((void)ferry::min(empty_rows), ferry::ShapeError);
  EXPECT_THROW((void)ferry::max(ferry::ones<std::int64_t>(dev, Shape{3, 0}), {-1}, true),
               ferry::ShapeError);

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::argmax(m, 2); }),
            "[argmax] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::argmax(m, -3), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::argmax(scalar, 0), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::argmax(empty_rows, 0); }),
            "[argmax] axis 0 of (0, 3) is empty");
  expect_handle_checks<float>("argmax", dev, [](const F& x) { (void)ferry::argmax(x, 0); });
}

TEST(BadInput, SoftmaxRefusesBadAxesAndHandles) {
  const ferry::Device dev = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::softmax(m, 2); }),
            "[softmax] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::softmax(m, -3), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::softmax(ferry::ones<double>(dev, Shape{}), 0); }),
            "[softmax] axis 0 is out of range for rank 0");
  expect_handle_checks<float>("softmax", dev, [](const F& x) { (void)ferry::softmax(x, -1); });
}

TEST(BadInput, ReshapeTransposeAndPermuteRefuseBadShapesAxesAndHandles) {
  const ferry::Device dev = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::reshape(m, {4}); }),
            "[reshape] cannot reshape (2, 3) of 6 elements into (4) of 4");
  EXPECT_THROW((void)ferry::reshape(m, {}), ferry::ShapeError);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::reshape(m, {-2, -3}); }),
            "[reshape] negative size -2 in dimension 0 of (-2, -3)");
  expect_handle_checks<float>("reshape", dev, [](const F& x) { (void)ferry::reshape(x, {3, 1}); });

  expect_handle_checks<float>("transpose", dev, [](const F& x) { (void)ferry::transpose(x); });

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::permute(m, {0}); }),
            "[permute] 1 axes given for an array of rank 2");
  EXPECT_THROW((void)ferry::permute(m, {0, 1, 2}), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::permute(m, {1, -1});
            }),
            "[permute] axis -1 is given twice");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::permute(m, {0, 2});
            }),
            "[permute] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::permute(m, {-3, 0}), ferry::InvalidArgument);
  expect_handle_checks<float>("permute", dev, [](const F& x) { (void)ferry::permute(x, {0}); });
}

TEST(BadInput, SliceAndUpdateSliceRefuseBadAxesRangesShapesDevicesAndHandles) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 1, 1, 4); }),
            "[slice] range [1, 4) is outside axis 1 of size 3 in (2, 3)");
  // Negative positions count from the end, as in NumPy: only below -size are they outside.
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 1, -4, 2); }),
            "[slice] range [-4, 2) is outside axis 1 of size 3 in (2, 3)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 1, 0, -4); }),
            "[slice] range [0, -4) is outside axis 1 of size 3 in (2, 3)");
  EXPECT_THROW((void)ferry::slice(m, 0, kInt64Max, kInt64Max), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(m, 0, std::numeric_limits<std::int64_t>::min(), 1),
               ferry::InvalidArgument);
  // A begin after its end is not outside the axis: it has a message of its own.
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 0, 2, 1); }),
            "[slice] begin 2 is after end 1 along axis 0 of size 2 in (2, 3)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 1, -1, 1); }),
            "[slice] begin -1 (position 2) is after end 1 along axis 1 of size 3 in (2, 3)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, -1, 2, -2); }),
            "[slice] begin 2 is after end -2 (position 1) along axis -1 of size 3 in (2, 3)");
  EXPECT_EQ(ferry::slice(m, 0, -1, 1).shape(), (Shape{0, 3}));  // [1, 1): empty, not refused
  EXPECT_EQ(ferry::slice(m, 1, -1, 3).shape(), (Shape{2, 1}));
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::slice(m, 2, 0, 1); }),
            "[slice] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::slice(m, -3, 0, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(ferry::ones<float>(dev, Shape{}), 0, 0, 0),
               ferry::InvalidArgument);
  expect_handle_checks<float>("slice", dev, [](const F& x) { (void)ferry::slice(x, 0, 0, 1); });

  const auto cache = ferry::zeros<float>(dev, Shape{4, 3});
  const auto row = ferry::ones<float>(dev, Shape{1, 3});
  const auto rows = ferry::ones<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)ferry::update_slice(cache, m, 1, 0); }),
            "[update_slice] cannot write (2, 3) into (4, 3) along axis 1");
  EXPECT_THROW((void)ferry::update_slice(cache, ferry::ones<float>(dev, Shape{3}), 0, 0),
               ferry::ShapeError);
  // A source longer than the destination along the axis does not fit inside it.
  EXPECT_EQ(message_of<ferry::ShapeError>([&] {
              (void)ferry::update_slice(cache, ferry::ones<float>(dev, Shape{6, 3}), 0, 0);
            }),
            "[update_slice] cannot write (6, 3) into (4, 3) along axis 0");
  EXPECT_EQ(
      message_of<ferry::InvalidArgument>([&] { (void)ferry::update_slice(cache, rows, 0, 3); }),
      "[update_slice] begin 3 puts 2 elements outside axis 0 of size 4 in (4, 3)");
  EXPECT_THROW((void)ferry::update_slice(cache, row, 0, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::update_slice(cache, row, 0, kInt64Max), ferry::InvalidArgument);
  EXPECT_EQ(
      message_of<ferry::InvalidArgument>([&] { (void)ferry::update_slice(cache, row, 2, 0); }),
      "[update_slice] axis 2 is out of range for rank 2");
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] {
              (void)ferry::update_slice(cache, ferry::ones<float>(other, Shape{1, 3}), 0, 0);
            }),
            mismatch("update_slice", dev, other));
  expect_handle_checks<float>("update_slice", dev, [&](const F& x) {
    (void)ferry::update_slice(x, ferry::ones<float>(dev, Shape{1}), 0, 0);
  });
  expect_handle_checks<float>("update_slice", dev,
                              [&](const F& x) { (void)ferry::update_slice(cache, x, 0, 0); });
  // Given away and refused: the destination's handle is left as it was.
  auto dst = ferry::zeros<float>(dev, Shape{4, 3});
  EXPECT_THROW((void)ferry::update_slice(std::move(dst), rows, 0, 3), ferry::InvalidArgument);
  EXPECT_TRUE(dst.valid());  // NOLINT(bugprone-use-after-move): the point of the check
}

TEST(BadInput, ConcatAndSplitRefuseBadListsAxesSizesShapesDevicesAndHandles) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto m = ferry::ones<float>(dev, Shape{2, 3});
  const auto v = ferry::ones<float>(dev, Shape{3});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::concat(std::vector<F>{}, 0); }),
            "[concat] needs at least one array");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::concat({m, m}, 2);
            }),
            "[concat] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::concat({m}, -3), ferry::InvalidArgument);
  const auto scalar = ferry::ones<float>(dev, Shape{});
  EXPECT_THROW((void)ferry::concat({scalar, scalar}, 0), ferry::InvalidArgument);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] {
              (void)ferry::concat({m, v}, 0);
            }),
            "[concat] shapes (2, 3) and (3) differ outside axis 0");
  EXPECT_EQ(message_of<ferry::ShapeError>([&] {
              (void)ferry::concat({m, ferry::ones<float>(dev, Shape{2, 4})}, 0);
            }),
            "[concat] shapes (2, 3) and (2, 4) differ outside axis 0");
  // Empty arrays may be long along the axis; their joined length must still fit in int64.
  const auto long_empty = ferry::zeros<float>(dev, Shape{0, std::int64_t{1} << 62});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::concat({long_empty, long_empty}, 1);
            }),
            "[concat] sizes along axis 1 add up to more than int64 holds");
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] {
              (void)ferry::concat({m, ferry::ones<float>(other, Shape{2, 3})}, 0);
            }),
            mismatch("concat", dev, other));
  expect_handle_checks<float>("concat", dev, [](const F& x) { (void)ferry::concat({x}, 0); });
  expect_handle_checks<float>("concat", dev, [&](const F& x) { (void)ferry::concat({v, x}, 0); });

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::split(m, {4, -1}, 1);
            }),
            "[split] negative part size -1");
  EXPECT_EQ(message_of<ferry::ShapeError>([&] {
              (void)ferry::split(m, {1, 1}, 1);
            }),
            "[split] part sizes do not add up to 3, the size of axis 1 of (2, 3)");
  EXPECT_THROW((void)ferry::split(m, {2, 2}, 1), ferry::ShapeError);
  EXPECT_THROW((void)ferry::split(m, {}, 0), ferry::ShapeError);
  EXPECT_THROW((void)ferry::split(m, {kInt64Max, kInt64Max}, 1), ferry::ShapeError);
  EXPECT_THROW((void)ferry::split(m, std::vector<std::int64_t>{1, 1}, 0 + 1), ferry::ShapeError);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::split(m, {1, 1}, 2);
            }),
            "[split] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::split(scalar, {}, 0), ferry::InvalidArgument);
  expect_handle_checks<float>("split", dev, [](const F& x) { (void)ferry::split(x, {1, 2}, 0); });
}

TEST(BadInput, ToLayoutRefusesLayoutsTheShapeCannotHaveAndHandles) {
  const ferry::Device dev = tiny();
  const auto scalar = ferry::ones<float>(dev, Shape{});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::to_layout(scalar, kTiled); }),
            "[to_layout] a scalar (shape ()) cannot be tiled: tiles need at least one dimension");
  EXPECT_THROW((void)ferry::to_layout(scalar, {ferry::MemorySpace::l1, ferry::Order::tiled}),
               ferry::InvalidArgument);
  expect_handle_checks<float>("to_layout", dev,
                              [](const F& x) { (void)ferry::to_layout(x, kTiled); });
  expect_handle_checks<float>("to_layout", dev, [](const F& x) { (void)ferry::to_layout(x, {}); });

  // Arrays whose bytes fit row-major but not once padded to 32x32 tiles. Each depends on a
  // failed step, so it is never computed: nothing tries to allocate its exabytes.
  const auto failed = ferry::custom<bool>(
      dev, "fails", {}, Shape{1},
      [](ferry::KernelArgs<bool>) { throw std::runtime_error("never computed"); }, ferry::Cost{});
  const auto never_computed = [&](const Shape& shape) {
    return ferry::custom<bool>(
        dev, "huge", {failed}, shape, [](ferry::KernelArgs<bool>) {}, ferry::Cost{});
  };
  const auto wide = never_computed(Shape{3, std::int64_t{1} << 61});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::to_layout(wide, kTiled); }),
            "[to_layout] an array of shape (3, 2305843009213693952) with 1-byte elements does not "
            "fit in memory once padded to tiles");
  // A size within 31 of the int64 maximum: rounding it up to whole tiles must not overflow.
  const auto longest = never_computed(Shape{kInt64Max});
  EXPECT_THROW((void)ferry::to_layout(longest, kTiled), ferry::InvalidArgument);
  // Their export gets the failure they depend on (or the model's verdict on their size), not
  // a std::bad_alloc: they were never computed.
  EXPECT_THROW((void)ferry::wait(wide, longest), std::runtime_error);
}

TEST(BadInput, CustomRefusesBadNamesCostsShapesDevicesAndHandles) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const auto nothing = [](ferry::KernelArgs<float>) {};
  const auto call = [&](std::string name, ferry::Cost cost) {
    (void)ferry::custom<float>(dev, std::move(name), {}, Shape{1}, nothing, cost);
  };
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { call("", {}); }), "[custom] needs a name");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { call("k", {.flops = -1}); }),
            "[k] negative cost: -1 flops, 0 bytes read, 0 bytes written");
  EXPECT_THROW(call("k", {.bytes_read = -1}), ferry::InvalidArgument);
  EXPECT_THROW(call("k", {.bytes_written = -kInf}), ferry::InvalidArgument);
  // The model turns a cost into whole nanoseconds: NaN and infinity have none.
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { call("k", {.flops = kNaN}); }),
            "[k] cost is not finite: nan flops, 0 bytes read, 0 bytes written");
  EXPECT_THROW(call("k", {.bytes_read = kInf}), ferry::InvalidArgument);
  EXPECT_THROW(call("k", {.bytes_written = kNaN}), ferry::InvalidArgument);
  // A negative fixed duration set by hand, which Cost::fixed would have refused.
  EXPECT_EQ(
      message_of<ferry::InvalidArgument>([&] { call("k", {.fixed_duration = nanoseconds(-3)}); }),
      "[k] negative fixed duration of -3 ns");

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::custom<double>(
                  dev, "k", {}, Shape{std::int64_t{1} << 61}, [](ferry::KernelArgs<double>) {},
                  ferry::Cost{});
            }),
            "[k] an array of shape (2305843009213693952) with 8-byte elements does not fit in "
            "memory");
  EXPECT_THROW((void)ferry::custom<float>(dev, "k", {}, {2, -1}, nothing, ferry::Cost{}),
               ferry::InvalidArgument);

  const auto elsewhere = ferry::ones<float>(other, Shape{1});
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] {
              (void)ferry::custom<float>(dev, "k", {elsewhere}, Shape{1}, nothing, ferry::Cost{});
            }),
            "[k] an input lives on " + other.name() + ", not on " + dev.name());
  expect_handle_checks<float>("k", dev, [&](const F& x) {
    (void)ferry::custom<float>(dev, "k", {ferry::ones<float>(dev, Shape{1}), x}, Shape{1}, nothing,
                               ferry::Cost{});
  });
}

// ---- messages name the function called, not the steps it is made of ------------------------

TEST(BadInput, ZerosAndOnesOutOfDeviceMemoryNameThemselves) {
  // tiny() has 1 MiB of DRAM: 300,000 floats never fit.
  for (const std::string op : {"zeros", "ones"}) {
    SCOPED_TRACE(op);
    const ferry::Device dev = tiny();
    const F huge = op == "zeros" ? ferry::zeros<float>(dev, Shape{300'000})
                                 : ferry::ones<float>(dev, Shape{300'000});
    EXPECT_EQ(message_of<ferry::OutOfDeviceMemory>([&] { (void)huge.to_host(); }),
              "[" + op +
                  "] step 0 on " + dev.name() +
                  " needs 1200000 bytes of DRAM but the device has only 1048576 bytes of DRAM");
  }
}

TEST(BadInput, TransposeOutOfDeviceMemoryNamesItself) {
  const ferry::Device dev = tiny();
  const F held = ferry::full(dev, Shape{400, 400}, 1.0f);  // 640,000 bytes
  ferry::wait(held);
  const F t = ferry::transpose(held);  // 640,000 more, while `held` keeps its memory
  EXPECT_EQ(message_of<ferry::OutOfDeviceMemory>([&] { (void)t.to_host(); }),
            "[transpose] step 1 on " + dev.name() +
                " needs 640000 bytes of DRAM while 640000 of 1048576 bytes of DRAM and 0 of 65536 "
                "bytes of L1 are held by arrays still in use, and nothing running can free them");
}

TEST(BadInput, AnImplicitLayoutConversionNamesTheOpThatNeededIt) {
  const ferry::Device dev = tiny();
  // 400 x 400 floats tiled: 416 x 416 padded, 692,224 bytes. matmul reads row-major, so it
  // converts w first: 640,000 more bytes, which never fit beside it.
  const F w = ferry::to_device(dev, std::vector<float>(400 * 400, 1.0f), Shape{400, 400}, kTiled);
  ferry::wait(w);
  const F y = ferry::matmul(w, w);
  EXPECT_EQ(message_of<ferry::OutOfDeviceMemory>([&] { (void)y.to_host(); }),
            "[to_layout for matmul] step 1 on " + dev.name() +
                " needs 640000 bytes of DRAM while 692224 of 1048576 bytes of DRAM and 0 of 65536 "
                "bytes of L1 are held by arrays still in use, and nothing running can free them");
}

TEST(BadInput, ALabelOutOfRangeInCrossEntropyNamesCrossEntropy) {
  const ferry::Device dev = tiny();
  const F logits = ferry::zeros<float>(dev, Shape{2, 3});
  // A negative label is no class counted from the end: -1, a padding label, scored class 2.
  for (const std::int64_t bad : {3, -1, -3}) {
    const auto labels = ferry::to_device(dev, std::vector<std::int64_t>{0, bad}, Shape{2});
    const std::string want =
        "[cross_entropy] index " + std::to_string(bad) + " is out of range [0, 3)";
    EXPECT_EQ(message_of<ferry::InvalidArgument>(
                  [&] { (void)ferry::cross_entropy(logits, labels).to_host(); }),
              want);
    EXPECT_EQ(message_of<ferry::InvalidArgument>(
                  [&] { (void)ferry::nn::cross_entropy(logits, labels).to_host(); }),
              want);
    // Its gradient too, read alone (a training loop that exports only the parameters): -1
    // scored class 2's gradient, with no error, when the backward counted it from the end.
    const auto g = ferry::grad([&](const F& z) { return ferry::nn::cross_entropy(z, labels); });
    EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)g(logits).to_host(); }), want);
  }
  // take_along_axis itself still counts a negative index from the end, as NumPy's does.
  const auto from_end = ferry::to_device(dev, std::vector<std::int64_t>{-1, -3}, Shape{2, 1});
  const auto picked =
      ferry::take_along_axis(ferry::reshape(ferry::arange<float>(dev, 6), Shape{2, 3}), from_end, 1)
          .to_host();
  EXPECT_EQ(std::vector<float>(picked.data().begin(), picked.data().end()),
            (std::vector<float>{2, 3}));
}

TEST(BadInput, AResultTooLargeForInt64NamesTheOpNotShape) {
  const ferry::Device dev = tiny();
  const std::string overflow = "the result's element count overflows int64";
  const auto ids = ferry::zeros<std::int64_t>(dev, Shape{1 << 20});
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::one_hot<float>(ids, std::int64_t{1} << 50); }),
            "[one_hot] " + overflow);
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)ferry::eye<float>(dev, std::int64_t{1} << 40); }),
            "[eye] " + overflow);
  const auto none = ferry::zeros<float>(dev, Shape{0});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] {
              (void)ferry::reshape(none, {std::numeric_limits<std::int64_t>::max(), 2});
            }),
            "[reshape] " + overflow);
  // Sizes that fit still build (a zero size keeps the count at 0).
  EXPECT_EQ(ferry::reshape(none, {std::numeric_limits<std::int64_t>::max(), 0}).shape(),
            (Shape{std::numeric_limits<std::int64_t>::max(), 0}));
}

/// eye is built of other ops (arange, subtract, equal, astype): an array too large for memory
/// was refused under subtract's name with its int64 index's 8-byte elements.
TEST(BadInput, AnEyeTooLargeForMemoryNamesEyeAndItsElementType) {
  const ferry::Device dev = tiny();
  const std::int64_t n = std::int64_t{1} << 31;
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::eye<double>(dev, n, n); }),
            "[eye] an array of shape (2147483648, 2147483648) with 8-byte elements does not fit "
            "in memory");
  // The float result would fit; the int64 diagonal index it is built from would not.
  const std::int64_t m = std::int64_t{1} << 30;
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::eye<float>(dev, m, m); }),
            "[eye] an array of shape (1073741824, 1073741824) with 4-byte elements does not fit "
            "in memory beside the int64 diagonal index it is built from");
}

TEST(BadInput, OpsMadeOfOtherOpsCheckTheirArgumentsUnderTheirOwnName) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  const F m = ferry::ones<float>(dev, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::sort(m, 2); }),
            "[sort] axis 2 is out of range for rank 2");
  expect_handle_checks<float>("sort", dev, [](const F& x) { (void)ferry::sort(x); });
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::std(m, {2}); }),
            "[std] axis 2 is out of range for rank 2");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::std(m, {}, -1); }),
            "[std] ddof must be >= 0, got -1");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::log_softmax(m, 2); }),
            "[log_softmax] axis 2 is out of range for rank 2");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::any(m, {2}); }),
            "[any] axis 2 is out of range for rank 2");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)ferry::all(m, {0, -2}); }),
            "[all] axis -2 is given twice");
  EXPECT_EQ(message_of<ferry::ShapeError>(
                [&] { (void)ferry::clip(m, ferry::zeros<float>(dev, Shape{4}), 1.0f); }),
            "[clip] shapes (2, 3) and (4) do not broadcast");
  EXPECT_EQ(message_of<ferry::ShapeError>(
                [&] { (void)ferry::clip(m, 0.0f, ferry::ones<float>(dev, Shape{4})); }),
            "[clip] shapes (2, 3) and (4) do not broadcast");
  EXPECT_EQ(message_of<ferry::DeviceMismatch>(
                [&] { (void)ferry::clip(m, 0.0f, ferry::ones<float>(other, Shape{3})); }),
            mismatch("clip", dev, other));
  const auto bad_key = ferry::to_device(dev, std::vector<std::int64_t>{1, 2, 3}, Shape{3});
  EXPECT_EQ(message_of<ferry::ShapeError>(
                [&] { (void)ferry::random::bernoulli(bad_key, 0.5, Shape{2}); }),
            "[bernoulli] needs a key of shape (2), got (3)");
}

TEST(BadInput, AnArrayNamesTheFunctionThatMadeIt) {
  // What a use of a freed array says: the name of the step that made it, which is the name of
  // the function called, not of an op it delegates to.
  const ferry::Device dev = tiny();
  const auto made_by = [&](const std::string& op, const std::function<F(const F&)>& make) {
    SCOPED_TRACE(op);
    const F x = ferry::to_device(dev, std::vector<float>{3, 1, 2, 5, 4, 6}, Shape{2, 3});
    const F y = make(x);
    const std::string shape = y.shape().to_string();
    ferry::deallocate(y, ferry::force);
    EXPECT_EQ(message_of<ferry::UseAfterFree>([&] { (void)ferry::sum(y); }),
              "[sum] the array of shape " + shape + " made by '" + op +
                  "' was freed by deallocate(force)");
  };
  made_by("zeros", [&](const F&) { return ferry::zeros<float>(dev, Shape{2}); });
  made_by("ones", [&](const F&) { return ferry::ones<float>(dev, Shape{2}); });
  made_by("transpose", [](const F& x) { return ferry::transpose(x); });
  made_by("swapaxes", [](const F& x) { return ferry::swapaxes(x, 0, 1); });
  made_by("squeeze", [](const F& x) { return ferry::squeeze(ferry::reshape(x, Shape{1, 6})); });
  made_by("squeeze", [](const F& x) { return ferry::squeeze(ferry::reshape(x, Shape{6, 1}), 1); });
  made_by("unsqueeze", [](const F& x) { return ferry::unsqueeze(x, 0); });
  made_by("stack", [](const F& x) { return ferry::stack({x, x}, 0); });
  made_by("pad", [](const F& x) { return ferry::pad(x, {{1, 0}, {0, 0}}); });
  made_by("tile", [](const F& x) { return ferry::tile(x, {1, 2}); });
  made_by("repeat", [](const F& x) { return ferry::repeat(x, 2, 1); });
  made_by("sort", [](const F& x) { return ferry::sort(x, 1); });
  made_by("topk", [](const F& x) { return ferry::topk(x, 2, 1).first; });
  made_by("clip", [](const F& x) { return ferry::clip(x, 2.0f, 4.0f); });
}

// ---- programs -------------------------------------------------------------------------------

TEST(BadInput, JitRefusesBadArgumentsAndKeepsEveryOpCheckInReplays) {
  const ferry::Device dev = tiny();
  const ferry::Device other = tiny();
  auto add = ferry::jit([](F a, F b) { return a + b; });
  const auto v2 = ferry::ones<float>(dev, Shape{2});
  const auto v3 = ferry::ones<float>(dev, Shape{3});

  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)add.input_layout(0); }),
            "[input_layout] the program has not been traced yet");
  expect_handle_checks<float>("jit", dev, [&](const F& x) { (void)add(x, v3); });
  expect_handle_checks<float>("jit", dev, [&](const F& x) { (void)add(v3, x); });
  // Ops inside the function throw as they would outside it: on the first call (a trace)...
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)add(v2, v3); }),
            "[add] shapes (2) and (3) do not broadcast");
  EXPECT_THROW((void)add(v3, ferry::ones<float>(other, Shape{3})), ferry::DeviceMismatch);
  // ...and once an entry is cached, a call it cannot serve is traced again, so nothing is lost.
  EXPECT_EQ(add(v3, v3).to_host()(0), 2.0f);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { (void)add(v3, v2); }),
            "[add] shapes (3) and (2) do not broadcast");
  expect_handle_checks<float>("jit", dev, [&](const F& x) { (void)add(x, v3); });
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)add.input_layout(2); }),
            "[input_layout] input 2 of a program with 2 array inputs");

  auto head = ferry::jit([](F a, SymInt n) { return ferry::slice(a, 0, 0, n); });
  EXPECT_EQ(head(v3, 2).shape(), Shape{2});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)head(v3, 5); }),
            "[slice] range [0, 5) is outside axis 0 of size 3 in (3)");
  // A negative end counts from the end: a sign the trace did not see, so it traces again.
  EXPECT_EQ(head(v3, -1).shape(), Shape{2});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)head(v3, -4); }),
            "[slice] range [0, -4) is outside axis 0 of size 3 in (3)");
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)head(v3, std::numeric_limits<std::uint64_t>::max()); }),
            "[SymInt] value 18446744073709551615 does not fit in int64");
}

}  // namespace

}  // namespace test_bad_input
