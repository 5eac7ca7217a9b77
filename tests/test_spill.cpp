// L1 pressure in the model, worked out by hand on specs::tiny(): 64 KiB of L1 (4 bytes/ns),
// DRAM at 1 byte/ns, copies 100 ns + 1 ns per byte, kernels 10 ns + the larger of 1 ns per
// flop and their memory time. An array of 4096 floats takes 16384 bytes: four fill L1.
//
// A step that needs L1 spills buffers it does not use (least recently used first, never one a
// ready step reads but when nothing runs and that is all that keeps the ready steps waiting)
// on its own engine before it runs, 16384 ns each, and brings its spilled inputs back the same
// way. Values never change.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/files.hpp"
#include "support/memory.hpp"
#include "support/temp_dir.hpp"
#include "support/timeline.hpp"

namespace test_spill {

namespace {

using ferry_test::values_of;

using ferry_test::executor_for;

using ferry::Layout;
using ferry::MemorySpace;
using ferry::Order;
using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;

const Layout kL1{MemorySpace::l1, Order::row_major};
constexpr std::int64_t kQuarter = 4096;  // floats: a quarter of L1

class Spill : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device tiny(ferry::DeviceSpec spec = ferry::specs::tiny()) {
    return ferry::Device::modeled(std::move(spec), executor_for(GetParam()));
  }
  static std::vector<float> values(float base) {
    std::vector<float> v(kQuarter);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = base - static_cast<float>(i % 13);
    return v;
  }
  static std::vector<float> relu_of(const std::vector<float>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] > 0 ? v[i] : 0.0f;
    return out;
  }
};
FERRY_SWEEP_EXECUTORS(Spill);

TEST_P(Spill, AStepNeedingL1SpillsTheLeastRecentlyUsedBufferAndBringsItBackWhenRead) {
  ferry::Device dev = tiny();
  const auto va = values(5), vb = values(6), vc = values(7), vd = values(8);
  auto a = ferry::to_device(dev, va, Shape{kQuarter}, kL1);
  auto b = ferry::to_device(dev, vb, Shape{kQuarter}, kL1);
  auto c = ferry::to_device(dev, vc, Shape{kQuarter}, kL1);
  auto d = ferry::to_device(dev, vd, Shape{kQuarter}, kL1);
  ferry::wait(a, b, c, d);  // four imports of 16484 ns on the h2d engine: L1 is full at 65936

  auto e = ferry::relu(a);  // its L1 output needs room: b is the oldest buffer it does not read
  ferry::wait(e);
  auto all = slices_of(dev);
  ASSERT_EQ(named(all, "spill").size(), 1u);
  EXPECT_EQ(span_of(named(all, "spill")[0]), (Span{65936, 82320}));
  EXPECT_EQ(named(all, "spill")[0].producers.size(), 1u);
  EXPECT_EQ(named(all, "spill")[0].producers[0], 1u);                // b
  EXPECT_EQ(span_of(named(all, "relu")[0]), (Span{82320, 90522}));   // 10 + 32768 / 4
  EXPECT_EQ(dev.stats().spills, 1u);

  // relu(b) brings b back (16384 ns) and needs room for it and its output: c and d, the least
  // recently used, go (32768 ns), all before it runs.
  auto f = ferry::relu(b);
  ferry::wait(f);
  all = slices_of(dev);
  ASSERT_EQ(named(all, "spill+fill").size(), 1u);
  EXPECT_EQ(span_of(named(all, "spill+fill")[0]), (Span{90522, 139674}));
  const ferry::detail::IdList moved = named(all, "spill+fill")[0].producers;
  ASSERT_EQ(moved.size(), 3u);
  EXPECT_EQ(moved[0], 2u);  // c
  EXPECT_EQ(moved[1], 3u);  // d
  EXPECT_EQ(moved[2], 1u);  // b, filled
  EXPECT_EQ(span_of(named(all, "relu")[1]), (Span{139674, 147876}));

  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.spills, 3u);
  EXPECT_EQ(s.peak_l1_bytes, 65536u);
  EXPECT_EQ(values_of(e), relu_of(va));
  EXPECT_EQ(values_of(f), relu_of(vb));
  EXPECT_EQ(values_of(c), vc);
  EXPECT_EQ(values_of(d), vd);
}

TEST_P(Spill, ABufferAReadyStepIsAboutToReadIsNeverSpilled) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.compute_units = 1;
  spec.policy = ferry::SchedulePolicy::fifo;
  ferry::Device dev = tiny(spec);
  auto a = ferry::to_device(dev, values(1), Shape{kQuarter}, kL1);  // the least recently used
  auto b = ferry::to_device(dev, values(2), Shape{kQuarter}, kL1);
  auto c = ferry::to_device(dev, values(3), Shape{kQuarter}, kL1);
  auto d = ferry::to_device(dev, values(4), Shape{kQuarter}, kL1);
  ferry::wait(a, b, c, d);
  auto r = ferry::relu(b);                             // needs room; runs first (fifo)
  auto out = ferry::to_layout(a, ferry::Layout{});     // ready at once, waits for the unit
  ferry::wait(r, out);
  const auto spills = named(slices_of(dev), "spill");
  ASSERT_EQ(spills.size(), 1u);
  ASSERT_EQ(spills[0].producers.size(), 1u);
  EXPECT_EQ(spills[0].producers[0], 2u);  // c, not a: `out` was about to read a
  EXPECT_EQ(values_of(out), values(1));
}

// Two L1 arrays of 24576 bytes (49152 of 65536 held), each read by a ready step that needs
// 24576 bytes more: each step's input keeps the other waiting, and nothing runs. The first
// submitted spills the other's input and runs; the second then brings its input back. (Both
// failed with OutOfDeviceMemory, "nothing running can free them", though one spill fits.)
TEST_P(Spill, TwoStepsEachWaitingForTheRoomTheOthersInputHoldsBothRun) {
  for (const bool first_alone : {false, true}) {
    SCOPED_TRACE(first_alone ? "the first exported alone" : "both exported together");
    ferry::Device dev = tiny();
    ferry_test::expect_balanced_after(dev, [&] {
      const std::int64_t n = 6144;  // 24576 bytes
      std::vector<float> v1(static_cast<std::size_t>(n)), v2(v1.size());
      for (std::size_t i = 0; i < v1.size(); ++i) {
        v1[i] = static_cast<float>(i % 7) - 3.0f;
        v2[i] = 2.0f - static_cast<float>(i % 5);
      }
      auto x1 = ferry::to_device(dev, v1, Shape{n}, kL1);  // h2d 100 + 24576: [0, 24676]
      auto x2 = ferry::to_device(dev, v2, Shape{n}, kL1);  // [24676, 49352]
      ferry::wait(x1, x2);
      auto y1 = ferry::relu(x1);
      auto y2 = ferry::relu(x2);
      if (first_alone) EXPECT_EQ(values_of(y1), relu_of(v1));
      ferry::wait(y1, y2);
      const auto all = slices_of(dev);
      // y1 spills x2 (24576 ns), then runs 10 + (24576 + 24576) / 4 ns.
      ASSERT_EQ(named(all, "spill").size(), 1u);
      EXPECT_EQ(span_of(named(all, "spill")[0]), (Span{49352, 73928}));
      ASSERT_EQ(named(all, "spill")[0].producers.size(), 1u);
      EXPECT_EQ(named(all, "spill")[0].producers[0], 1u);  // x2
      ASSERT_EQ(named(all, "relu").size(), 2u);
      EXPECT_EQ(span_of(named(all, "relu")[0]), (Span{73928, 86226}));
      // y2 waits for y1 (its input is a running step's, its output still being written) and,
      // when y1 was exported alone first, for that export's copy, which reads y1 until 86226 +
      // 100 + 24576; then it spills x1 and y1 (least recently used, then oldest) and brings x2
      // back: 3 x 24576 ns.
      const long long y2_from = first_alone ? 110902 : 86226;
      ASSERT_EQ(named(all, "spill+fill").size(), 1u);
      EXPECT_EQ(span_of(named(all, "spill+fill")[0]), (Span{y2_from, y2_from + 73728}));
      const ferry::detail::IdList moved = named(all, "spill+fill")[0].producers;
      ASSERT_EQ(moved.size(), 3u);
      EXPECT_EQ(moved[0], 0u);  // x1
      EXPECT_EQ(moved[1], 2u);  // y1
      EXPECT_EQ(moved[2], 1u);  // x2, filled
      EXPECT_EQ(span_of(named(all, "relu")[1]), (Span{y2_from + 73728, y2_from + 86026}));
      EXPECT_EQ(dev.stats().spills, 3u);
      EXPECT_EQ(values_of(y1), relu_of(v1));
      EXPECT_EQ(values_of(y2), relu_of(v2));
      // The trace of a schedule the deadlock resolver unblocked, spills and all.
      const ferry_test::TempDir dir("ferry_spill");
      dev.write_trace(dir.file("trace.json"));
      ferry_test::expect_strict_json("the trace", ferry_test::read_text(dir.file("trace.json")));
    });  // every buffer back, spilled or not
  }
}

TEST_P(Spill, AnL1StepLargerThanL1FailsAtTheExportAndTheDeviceStaysUsable) {
  ferry::Device dev = tiny();
  auto big = ferry::to_device(dev, std::vector<float>(20000, 1.0f), Shape{20000}, kL1);
  auto derived = big * 2.0f;
  try {
    (void)derived.to_host();
    FAIL() << "expected OutOfDeviceMemory";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_EQ(std::string(e.what()),
              "[to_device] step 0 on " + dev.name() +
                  " needs 80000 bytes of L1 and 80000 bytes of L1 with its L1 inputs, but the "
                  "device has only 65536 bytes of L1");
  }
  auto fine = ferry::to_device(dev, values(3), Shape{kQuarter}, kL1) + 1.0f;
  EXPECT_EQ(fine.to_host()(0), 4.0f);
}

// A view of a buffer the model spilled from a full L1 waits for it to come back, as a zero-time
// kernel does, on a compute unit that carries the fill: its value is its source's, and the
// device goes on. (Views once had no queue to wait in: the model wrote past its ready queues
// and failed the view, saying it needed 0 bytes of L1.)
TEST_P(Spill, AViewOfASpilledBufferWaitsForItToComeBack) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.l1_bytes = 16384;
  ferry::Device dev = tiny(spec);
  ferry_test::expect_balanced_after(dev, [&] {
    std::vector<float> v(40 * 26);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    auto a = ferry::to_device(dev, v, Shape{40, 26}, kL1);             // 4160 bytes of L1
    auto t = ferry::to_layout(a, Layout{MemorySpace::l1, Order::tiled});  // 8192
    auto tt = ferry::transpose(ferry::transpose(t));                    // 4160: 16512 in all
    EXPECT_EQ(values_of(tt), v);
    auto whole = ferry::concat({ferry::slice(t, 0, 0, 20), ferry::slice(t, 0, 20, 40)}, 0);
    EXPECT_EQ(values_of(whole), v);
    auto mixed = ferry::concat({ferry::slice(t, 0, 0, 20), ferry::slice(tt, 0, 20, 40)}, 0);
    EXPECT_EQ(values_of(mixed), v);
  });
  EXPECT_EQ(values_of(ferry::to_device(dev, values(3), Shape{kQuarter}, kL1) + 1.0f)[0], 4.0f);
  EXPECT_EQ(dev.stats().fallbacks, 0u);
  // The views that waited on a compute unit are in the trace like any kernel.
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("ferry_spilled_view_" + std::to_string(GetParam()) + ".json");
  dev.write_trace(path);
  ferry_test::expect_strict_json("the trace", ferry_test::read_text(path.string()));
  std::filesystem::remove(path);
}

}  // namespace

}  // namespace test_spill
