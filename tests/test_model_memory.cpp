// Modeled device memory on specs::tiny() (1 MiB = 1,048,576 bytes of DRAM): an output is
// allocated when its command starts and freed when its last handle and its last reader are
// gone; a command that does not fit waits; one that can never fit, or that waits for memory
// nothing can free while the host waits, fails with OutOfDeviceMemory at the exports.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/memory.hpp"
#include "support/timeline.hpp"

namespace test_model_memory {

namespace {

using ferry_test::executor_for;

using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;
using std::chrono::nanoseconds;

constexpr std::int64_t kBig = 150'000;  // floats: 600,000 bytes, more than half of tiny's DRAM

class ModelMemory : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny(), executor_for(GetParam()));

  /// A 100 ns kernel writing `n` floats, reading `inputs`.
  ferry::DeviceArray<float> kernel(const std::string& name,
                                   std::vector<ferry::DeviceArray<float>> inputs, std::int64_t n,
                                   long long ns = 100) {
    return ferry::custom<float>(dev, name, std::move(inputs), Shape{n},
                                [](ferry::KernelArgs<float> args) {
                                  for (float& v : args.output) v = 1.0f;
                                },
                                ferry::Cost::fixed(nanoseconds(ns)));
  }
};
FERRY_SWEEP_EXECUTORS(ModelMemory);

TEST_P(ModelMemory, ACommandThatDoesNotFitWaitsForMemory) {
  auto a = kernel("a", {}, kBig);       // [0, 100), 600,000 bytes
  auto b = kernel("b", {}, kBig);       // would not fit beside a
  auto reader = kernel("reader", {a}, 1, 50);
  a = {};                               // the last handle of a goes; the reader still needs it
  ferry::wait(b);
  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "a")[0]), (Span{0, 100}));
  EXPECT_EQ(span_of(named(all, "reader")[0]), (Span{100, 150}));
  EXPECT_EQ(span_of(named(all, "b")[0]), (Span{150, 250}));  // a is freed when its reader ends
  EXPECT_EQ(dev.stats().peak_dram_bytes, 600'000u + 4u);
}

TEST_P(ModelMemory, AStepLargerThanTheDeviceFailsAtTheExportAndNothingElseDoes) {
  auto huge = ferry::ones<float>(dev, Shape{300'000});  // 1,200,000 bytes
  auto derived = ferry::sum(huge);
  auto fine = ferry::ones<float>(dev, Shape{4}) * 2.0f;
  const std::string expected =
      "[ones] step 0 on " + dev.name() +
      " needs 1200000 bytes of DRAM but the device has only 1048576 bytes of DRAM";
  try {
    (void)huge.to_host();
    FAIL() << "expected OutOfDeviceMemory";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  EXPECT_THROW((void)derived.to_host(), ferry::OutOfDeviceMemory);
  EXPECT_THROW(ferry::wait(huge, fine), ferry::OutOfDeviceMemory);
  EXPECT_EQ(fine.to_host()(3), 2.0f);
}

TEST_P(ModelMemory, WaitingForMemoryNothingCanFreeFailsAndTheDeviceStaysUsable) {
  auto held = ferry::ones<float>(dev, Shape{kBig});
  EXPECT_EQ(held.to_host()(0), 1.0f);
  auto blocked = ferry::ones<float>(dev, Shape{kBig});  // `held` keeps its memory
  try {
    ferry::wait(blocked);
    FAIL() << "expected OutOfDeviceMemory";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "[ones] step 2 on " + dev.name() +
            " needs 600000 bytes of DRAM while 600000 of 1048576 bytes of DRAM and 0 of 65536 "
            "bytes of L1 are held by arrays still in use, and nothing running can free them");
  }
  EXPECT_EQ(held.to_host()(kBig - 1), 1.0f);  // what was resident is untouched
  held = {};                                  // now the memory can be freed...
  auto next = ferry::ones<float>(dev, Shape{kBig});
  EXPECT_EQ(next.to_host()(0), 1.0f);         // ...and the device goes on
}

/// An L1 step whose output and L1 inputs exceed L1 can never run, whether its input is
/// computed yet or not: both say so (a pending input once went uncounted, and the step failed
/// later saying that arrays in use held the memory). One buffer read twice counts once.
TEST_P(ModelMemory, AnL1StepThatCanNeverFitSaysSoWhetherItsInputIsComputedOrNot) {
  const ferry::Layout l1{.space = ferry::MemorySpace::l1};
  for (const bool computed : {false, true}) {
    SCOPED_TRACE(computed ? "input computed" : "input pending");
    const auto a = ferry::to_layout(ferry::full<float>(dev, Shape{10'000}, 1.0f), l1);  // 40000 B
    if (computed) ferry::wait(a);
    try {
      ferry::wait(a + 1.0f);
      ADD_FAILURE() << "expected OutOfDeviceMemory";
    } catch (const ferry::OutOfDeviceMemory& e) {
      EXPECT_NE(std::string(e.what()).find(
                    " needs 40000 bytes of L1 and 80000 bytes of L1 with its L1 inputs, but the "
                    "device has only 65536 bytes of L1"),
                std::string::npos)
          << e.what();
    }
  }
  const auto b = ferry::to_layout(ferry::full<float>(dev, Shape{7'500}, 1.0f), l1);  // 30000 B
  EXPECT_EQ((b + b).to_host()(7'499), 2.0f);  // 60000 bytes of L1: b once, the output
  EXPECT_EQ(dev.stats().l1_bytes_in_use, 30'000u);
}

/// A donation waits for the other readers of its donor. One that can never fit fails at once
/// (an input in L1 not computed yet once went uncounted, and the donation's export threw
/// std::logic_error: the model found nothing to fail); the donation then runs.
TEST_P(ModelMemory, ADonationWhoseDonorsReaderCanNeverFitStillRuns) {
  const ferry::Layout l1_tiled{.space = ferry::MemorySpace::l1, .order = ferry::Order::tiled};
  auto p = ferry::to_device(dev, std::vector<float>(71 * 135, 1.0f), Shape{71, 135},
                            l1_tiled);  // 61440 bytes of L1
  auto reader = ferry::to_layout(p, ferry::Layout{.space = ferry::MemorySpace::l1});
  auto r = std::move(p) - 1.0f;
  EXPECT_EQ(r.to_host()(70, 134), 0.0f);
  try {
    (void)reader.to_host();
    ADD_FAILURE() << "expected OutOfDeviceMemory";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_NE(std::string(e.what()).find(" needs 38340 bytes of L1 and 99780 bytes of L1 with "
                                         "its L1 inputs, but the device has only 65536"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(dev.stats().donations, 1u);
  r = {};
  reader = {};
  EXPECT_EQ(dev.stats().l1_bytes_in_use, 0u);
}

/// When readers wait for memory nothing can free, an export that finds them fails them: a
/// ferry::Error at every export (the model once found nothing to fail and threw
/// std::logic_error). The donation among them needs no memory (it writes into b's buffer) and
/// runs: the model once failed it with the others, "nothing running can free them".
TEST_P(ModelMemory, ADonationWhoseDonorsReaderIsStuckOnMemoryFailsTyped) {
  ferry_test::expect_balanced_after(dev, [&] {
    const ferry::Layout l1{.space = ferry::MemorySpace::l1};
    auto a = ferry::to_layout(ferry::full<float>(dev, Shape{10'000}, 1.0f), l1);  // 40000 B
    auto b = ferry::to_layout(ferry::full<float>(dev, Shape{4'000}, 2.0f), l1);   // 16000 B
    ferry::wait(a, b);
    // DRAM (1 MiB) all but 8000 bytes full: no L1 buffer can be spilled to it.
    auto filler = ferry::full<float>(dev, Shape{(1'048'576 - 8'000) / 4}, 0.0f);
    ferry::wait(filler);
    // Each needs 16000 more bytes of L1 (9536 are free); spilling the other's input would make
    // room (as the model does when nothing else can run), but DRAM has none for it: neither
    // can start.
    auto m = b + 1.0f;
    auto y = ferry::slice(a, 0, 0, 4'000) + 1.0f;
    auto r = std::move(b) * 2.0f;
    const ferry::HostArray<float> rv = r.to_host();
    EXPECT_EQ(rv(0), 4.0f);
    EXPECT_EQ(rv(3'999), 4.0f);
    EXPECT_THROW((void)m.to_host(), ferry::OutOfDeviceMemory);
    EXPECT_THROW((void)y.to_host(), ferry::OutOfDeviceMemory);
    EXPECT_EQ(dev.stats().donations, 1u);
  });  // every buffer back, the failed steps' included
}

// A step an export's failure makes ready starts at that instant. The donation below waits for
// its donor's reader, which can never get its memory: the export of that reader fails it, and
// the donation, which needs no memory, can start then. It waited for the host's next event
// (here the next launch, 1000 ns later).
TEST_P(ModelMemory, AStepAFailureAtAnExportMakesReadyStartsAtOnce) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.launch_overhead = nanoseconds(1000);
  const ferry::Device slow_host = ferry::Device::modeled(spec, executor_for(GetParam()));
  ferry_test::expect_balanced_after(slow_host, [&] {
    const ferry::Layout l1{.space = ferry::MemorySpace::l1};
    auto a = ferry::to_layout(ferry::full<float>(slow_host, Shape{10'000}, 1.0f), l1);
    auto b = ferry::to_layout(ferry::full<float>(slow_host, Shape{4'000}, 2.0f), l1);
    auto filler = ferry::full<float>(slow_host, Shape{(1'048'576 - 8'000) / 4}, 0.0f);
    ferry::wait(a, b, filler);
    auto m = b + 1.0f;             // 16000 B of L1: 9536 are free, and DRAM has no room to spill
    auto r = std::move(b) * 2.0f;  // into b's buffer, once m has read it
    EXPECT_THROW(ferry::wait(m), ferry::OutOfDeviceMemory);
    auto later = ferry::full<float>(slow_host, Shape{1}, 3.0f);  // the host's next event
    EXPECT_EQ(r.to_host()(3'999), 4.0f);
    EXPECT_EQ(later.to_host()(0), 3.0f);
    const auto all = slices_of(slow_host);
    // The filler writes 1040576 bytes of DRAM from 125020 (after a's layout), 10 + 1040576 ns;
    // the host waits until then, launches m (1166606) and r (1167606), and waits for m: it
    // fails there, at 1167606, and r runs from then, 10 + (16000 + 16000) / 4 ns.
    ASSERT_EQ(named(all, "full").size(), 4u);
    EXPECT_EQ(span_of(named(all, "full")[2]), (Span{125'020, 1'165'606}));
    ASSERT_EQ(named(all, "multiply").size(), 1u);
    EXPECT_EQ(span_of(named(all, "multiply")[0]), (Span{1'167'606, 1'175'616}));
    EXPECT_EQ(span_of(named(all, "full")[3]), (Span{1'168'606, 1'168'620}));  // 10 + 4 ns
    EXPECT_EQ(slow_host.stats().donations, 1u);
  });
}

/// A step that fails is in no figure of the window: a copy that L1 cannot hold once set the
/// receiver's makespan to when it would have arrived.
TEST_P(ModelMemory, AFailedStepIsInNeitherMakespanNorLowerBound) {
  ferry::DeviceSpec big = ferry::specs::tiny();
  big.l1_bytes = 1 << 20;
  const ferry::Device sender = ferry::Device::modeled(big, executor_for(GetParam()));
  const auto a = ferry::to_layout(ferry::full<float>(sender, Shape{25'000}, 1.0f),
                                  ferry::Layout{.space = ferry::MemorySpace::l1});  // 100000 B
  EXPECT_THROW(ferry::wait(a.to(dev)), ferry::OutOfDeviceMemory);
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan.count(), 0);
  EXPECT_EQ(s.lower_bound.count(), 0);
  EXPECT_EQ(s.steps, 0u);
}

TEST_P(ModelMemory, AViewKeepsItsSourcesMemory) {
  auto source = kernel("source", {}, kBig);
  auto view = ferry::reshape(source, Shape{1000, 150});
  source = {};
  ferry::wait(view);
  auto other = kernel("other", {}, kBig);
  EXPECT_THROW(ferry::wait(other), ferry::OutOfDeviceMemory);
  view = {};  // the last holder of the buffer
  auto again = kernel("again", {}, kBig);
  EXPECT_NO_THROW(ferry::wait(again));
}

TEST_P(ModelMemory, AChainWithDroppedHandlesHoldsTwoBuffersAtMost) {
  auto x = ferry::zeros<std::int32_t>(dev, Shape{1000});  // 4000 bytes
  for (int i = 0; i < 100; ++i) x = x + 1;
  EXPECT_EQ(x.to_host()(999), 100);
  EXPECT_EQ(dev.stats().peak_dram_bytes, 8000u);  // an input and its output, never more
}

TEST_P(ModelMemory, HandlesAndReadersBothKeepABuffer) {
  // A buffer with no handle left is freed when its last reader completes, not before.
  auto a = kernel("a", {}, kBig);
  auto r1 = kernel("r1", {a}, 1, 100);
  auto r2 = kernel("r2", {a}, 1, 300);  // the later reader
  a = {};
  auto b = kernel("b", {}, kBig);  // must wait for both readers
  ferry::wait(b, r1, r2);
  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "r2")[0]), (Span{100, 400}));
  EXPECT_EQ(span_of(named(all, "b")[0]), (Span{400, 500}));
}

TEST_P(ModelMemory, AnImplicitLayoutConversionIsFreedOnceItsReaderHasRun) {
  // matmul reads a tiled weight as row-major through a conversion step of its own: that copy
  // must go once the matmul has read it, as an explicit to_layout's does. Forty calls hold
  // one weight, one input and nothing else (they once kept a copy a call, and failed at 14).
  auto w = ferry::to_device(dev, std::vector<float>(128 * 128, 0.5f), Shape{128, 128},
                            ferry::Layout{.order = ferry::Order::tiled});
  auto x = ferry::ones<float>(dev, Shape{4, 128});
  constexpr std::uint64_t kHeld = 128 * 128 * 4 + 4 * 128 * 4;  // w and x: 67,584 bytes
  for (int i = 0; i < 40; ++i) {
    const ferry::HostArray<float> y = ferry::matmul(x, w).to_host();
    ASSERT_EQ(y(3, 127), 64.0f) << "call " << i;
    ASSERT_EQ(dev.stats().dram_bytes_in_use, kHeld) << "call " << i;
  }
  // The same through sum, transpose and a broadcasting elementwise op.
  (void)ferry::sum(w).to_host();
  (void)ferry::transpose(w).to_host();
  (void)(w + ferry::ones<float>(dev, Shape{128})).to_host();
  EXPECT_EQ(dev.stats().dram_bytes_in_use, kHeld);
  w = {};
  x = {};
  EXPECT_EQ(dev.stats().dram_bytes_in_use, 0u);
}

TEST_P(ModelMemory, AnImplicitConversionLeavesNothingBehindUnderTheHostFallback) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.fallback = ferry::Fallback::host;
  ferry::Device fallback = ferry::Device::modeled(spec, executor_for(GetParam()));
  auto w = ferry::to_device(fallback, std::vector<float>(128 * 128, 0.5f), Shape{128, 128},
                            ferry::Layout{.order = ferry::Order::tiled});
  auto x = ferry::ones<float>(fallback, Shape{4, 128});
  for (int i = 0; i < 40; ++i) (void)ferry::matmul(x, w).to_host();
  EXPECT_EQ(fallback.stats().fallbacks, 0u);  // nothing was pushed off the device
  EXPECT_EQ(fallback.stats().dram_bytes_in_use, 67'584u);
}

}  // namespace

}  // namespace test_model_memory
