// The modeled device's timeline, checked against timestamps worked out by hand on
// specs::tiny(): copies take 100 ns + 1 ns per byte; a kernel takes 10 ns + the larger of one
// ns per flop and one ns per byte read or written; two compute units; no launch overhead.
//
// So for an array of 4 floats (16 bytes): an import or export takes 116 ns, `x + 1` (4 flops,
// 32 bytes) 42 ns, `a + b` (4 flops, 48 bytes) 58 ns.
//
// At the end, the two queues every timeline is decided with (ready commands, device events),
// checked against a plain sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/memory.hpp"
#include "support/timeline.hpp"

namespace test_model_timeline {

namespace {

using ferry_test::executor_for;

using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using ferry_test::track_of;
using Span = std::pair<long long, long long>;
using std::chrono::nanoseconds;

class ModelTimeline : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device tiny(ferry::DeviceSpec spec = ferry::specs::tiny()) {
    return ferry::Device::modeled(std::move(spec), executor_for(GetParam()));
  }
  static ferry::DeviceArray<float> four(const ferry::Device& dev) {
    return ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4});
  }
};
FERRY_SWEEP_EXECUTORS(ModelTimeline);

TEST_P(ModelTimeline, CopyComputeCopy) {
  ferry::Device dev = tiny();
  auto x = four(dev);
  auto y = x + 1.0f;
  EXPECT_EQ(y.to_host()(3), 5.0f);

  const auto all = slices_of(dev);
  ASSERT_EQ(named(all, "to_device").size(), 1u);
  EXPECT_EQ(span_of(named(all, "to_device")[0]), (Span{0, 116}));
  EXPECT_EQ(named(all, "to_device")[0].track, track_of("h2d"));
  EXPECT_EQ(span_of(named(all, "add")[0]), (Span{116, 158}));
  EXPECT_EQ(named(all, "add")[0].track, track_of("compute 0"));
  EXPECT_EQ(span_of(named(all, "to_host")[0]), (Span{158, 274}));
  EXPECT_EQ(named(all, "to_host")[0].track, track_of("d2h"));

  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(274));
  EXPECT_EQ(s.critical_path, nanoseconds(274));
  EXPECT_EQ(s.lower_bound, nanoseconds(274));
  EXPECT_DOUBLE_EQ(s.efficiency(), 1.0);
  EXPECT_EQ(s.host_stall, nanoseconds(274));  // the host waited from 0 to the export's end
  EXPECT_EQ(s.host_syncs, 1u);
  EXPECT_EQ(s.steps, 3u);
  EXPECT_EQ(s.bytes_h2d, 16u);
  EXPECT_EQ(s.bytes_d2h, 16u);
  EXPECT_EQ(s.bytes_d2d, 0u);
  EXPECT_EQ(s.overlap, nanoseconds(0));
  EXPECT_EQ(s.busy("h2d"), nanoseconds(116));
  EXPECT_EQ(s.busy("compute 0"), nanoseconds(42));
  EXPECT_EQ(s.busy("compute 1"), nanoseconds(0));
  EXPECT_EQ(s.peak_dram_bytes, 32u);  // x and y; the export writes host memory
}

TEST_P(ModelTimeline, TwoChainsOverlapOnSeparateEngines) {
  ferry::Device dev = tiny();
  auto a = four(dev);
  auto b = four(dev);
  auto ya = a + 1.0f;
  auto yb = b + 1.0f;
  (void)ferry::to_host(ya, yb);

  const auto all = slices_of(dev);
  const auto imports = named(all, "to_device");
  EXPECT_EQ(span_of(imports[0]), (Span{0, 116}));
  EXPECT_EQ(span_of(imports[1]), (Span{116, 232}));  // one h2d engine: the second waits
  const auto adds = named(all, "add");
  EXPECT_EQ(span_of(adds[0]), (Span{116, 158}));     // overlaps b's import
  EXPECT_EQ(span_of(adds[1]), (Span{232, 274}));
  const auto exports = named(all, "to_host");
  EXPECT_EQ(span_of(exports[0]), (Span{158, 274}));  // overlaps yb's add
  EXPECT_EQ(span_of(exports[1]), (Span{274, 390}));

  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(390));
  EXPECT_EQ(s.overlap, nanoseconds(42 + 42));
  EXPECT_EQ(s.critical_path, nanoseconds(274));
  EXPECT_EQ(s.lower_bound, nanoseconds(274));  // h2d and d2h are busy 232 each
  EXPECT_EQ(s.host_syncs, 1u);                 // one batched export
}

TEST_P(ModelTimeline, Diamond) {
  ferry::Device dev = tiny();
  auto x = four(dev);
  // exp and multiply run side by side on the two units, and share DRAM's 1 byte per ns: each
  // moves its 32 bytes at half a byte per ns, 64 ns after its 10 ns of latency (42 ns alone).
  auto left = ferry::exp(x);
  auto right = x * 2.0f;
  auto joined = left + right;   // 58 ns: two inputs read, alone
  (void)joined.to_host();

  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "exp")[0]), (Span{116, 190}));
  EXPECT_EQ(named(all, "exp")[0].track, track_of("compute 0"));
  EXPECT_EQ(span_of(named(all, "multiply")[0]), (Span{116, 190}));
  EXPECT_EQ(named(all, "multiply")[0].track, track_of("compute 1"));
  EXPECT_EQ(span_of(named(all, "add")[0]), (Span{190, 248}));
  EXPECT_EQ(span_of(named(all, "to_host")[0]), (Span{248, 364}));
  EXPECT_EQ(dev.stats().makespan, nanoseconds(364));
  // The critical path counts each step's duration alone.
  EXPECT_EQ(dev.stats().critical_path, nanoseconds(116 + 42 + 58 + 116));
}

TEST_P(ModelTimeline, LockstepTakesTheSumOfAllDurations) {
  ferry::Device dev = tiny();
  for (int batch = 0; batch < 4; ++batch) {
    auto y = four(dev) + 1.0f;
    (void)y.to_host();  // the host waits after every batch
  }
  const auto all = slices_of(dev);
  const auto imports = named(all, "to_device");
  for (int batch = 0; batch < 4; ++batch) {
    EXPECT_EQ(span_of(imports[static_cast<std::size_t>(batch)]),
              (Span{274LL * batch, 274LL * batch + 116}));
  }
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(4 * (116 + 42 + 116)));
  EXPECT_EQ(s.host_syncs, 4u);
  EXPECT_EQ(s.host_stall, nanoseconds(4 * 274));
  // The host releases each batch only once the previous export returned: no schedule of this
  // program ends before it does.
  EXPECT_EQ(s.lower_bound, nanoseconds(4 * (116 + 42 + 116)));
}

TEST_P(ModelTimeline, PipelinedLoopTakesTheLargestEngineLoadPlusFillAndDrain) {
  ferry::Device dev = tiny();
  std::vector<ferry::DeviceArray<float>> ys;
  for (int batch = 0; batch < 4; ++batch) ys.push_back(four(dev) + 1.0f);
  (void)ferry::to_host(ys[0], ys[1], ys[2], ys[3]);

  const auto all = slices_of(dev);
  const auto exports = named(all, "to_host");
  const Span expected_exports[] = {{158, 274}, {274, 390}, {390, 506}, {506, 622}};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(span_of(exports[i]), expected_exports[i]);
  const ferry::DeviceStats s = dev.stats();
  // h2d is busy 4 x 116 = 464 from 0; the last batch then needs its add (42) and export (116).
  EXPECT_EQ(s.makespan, nanoseconds(464 + 42 + 116));
  EXPECT_EQ(s.lower_bound, nanoseconds(464));
  EXPECT_EQ(s.host_syncs, 1u);
}

TEST_P(ModelTimeline, LaunchOverheadAdvancesTheHostAndDelaysRelease) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.launch_overhead = nanoseconds(50);
  ferry::Device dev = tiny(spec);
  auto x = four(dev);       // submitted during [0, 50): released at 50
  auto y = x + 1.0f;        // released at 100, ready at 166
  (void)y.to_host();        // the export's copy is released at 150; the host waits until 324
  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "to_device")[0]), (Span{50, 166}));
  EXPECT_EQ(span_of(named(all, "add")[0]), (Span{166, 208}));
  EXPECT_EQ(span_of(named(all, "to_host")[0]), (Span{208, 324}));
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(324));
  EXPECT_EQ(s.host_stall, nanoseconds(324 - 150));
  // Only after the export does the host's clock read 324: the next step is released later.
  auto z = y * 3.0f;
  (void)z.to_host();
  EXPECT_EQ(span_of(named(slices_of(dev), "multiply")[0]), (Span{374, 416}));
}

TEST_P(ModelTimeline, ACommandNeverStartsBeforeItsSubmission) {
  // With overhead, the host is the bottleneck: each kernel waits for its own submission.
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.launch_overhead = nanoseconds(1000);
  ferry::Device dev = tiny(spec);
  std::vector<ferry::DeviceArray<float>> outs;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(ferry::custom<float>(dev, "k", {}, Shape{1}, [](ferry::KernelArgs<float>) {},
                                        ferry::Cost::fixed(nanoseconds(10))));
  }
  ferry::wait(outs);
  const auto ks = named(slices_of(dev), "k");
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(span_of(ks[0]), (Span{1000, 1010}));
  EXPECT_EQ(span_of(ks[1]), (Span{2000, 2010}));
  EXPECT_EQ(span_of(ks[2]), (Span{3000, 3010}));
  EXPECT_EQ(dev.stats().host_stall, nanoseconds(10));  // the host waits only for the last one
}

/// host_stall counts only the host's wait inside the window. Work submitted and not waited
/// for, then reset_stats: the window starts where that work ends (12020), the host still at
/// 4010; the next export (a kernel 12020 to 20030, its copy out 20030 to 24130) stalls the
/// host 24130 - 12020 = 12110 ns of the window, its whole makespan, not the 20120 from 4010.
TEST_P(ModelTimeline, AWaitCountsOnlyFromTheWindowsStart) {
  ferry::Device dev = tiny(ferry::specs::tiny());
  auto w = ferry::ones<float>(dev, Shape{1000});
  ferry::wait(w);
  auto y = w * 2.0f;
  dev.reset_stats();
  auto z = w + 1.0f;
  (void)z.to_host();
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(12110));
  EXPECT_EQ(s.host_stall, nanoseconds(12110));
  EXPECT_LE(s.lower_bound, s.makespan);
  ferry::wait(y);
}

/// Three short independent tasks, then a chain of three, all 100 ns, on two units.
void short_tasks_then_a_chain(const ferry::Device& dev) {
  const auto fixed = ferry::Cost::fixed(nanoseconds(100));
  const auto nothing = [](ferry::KernelArgs<float>) {};
  std::vector<ferry::DeviceArray<float>> all;
  for (int i = 0; i < 3; ++i)
    all.push_back(ferry::custom<float>(dev, "short", {}, Shape{1}, nothing, fixed));
  auto l1 = ferry::custom<float>(dev, "chain", {}, Shape{1}, nothing, fixed);
  auto l2 = ferry::custom<float>(dev, "chain", {l1}, Shape{1}, nothing, fixed);
  auto l3 = ferry::custom<float>(dev, "chain", {l2}, Shape{1}, nothing, fixed);
  all.push_back(l3);
  ferry::wait(all);
}

TEST_P(ModelTimeline, FifoStartsWorkInSubmissionOrder) {
  ferry::Device dev = tiny();  // tiny schedules first in, first out
  short_tasks_then_a_chain(dev);
  const auto chain = named(slices_of(dev), "chain");
  EXPECT_EQ(span_of(chain[0]), (Span{100, 200}));  // behind two of the short tasks
  EXPECT_EQ(span_of(chain[2]), (Span{300, 400}));
  EXPECT_EQ(dev.stats().makespan, nanoseconds(400));
}

TEST_P(ModelTimeline, CriticalPathStartsTheLongestRemainingPathFirst) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.policy = ferry::SchedulePolicy::critical_path;
  ferry::Device dev = tiny(spec);
  short_tasks_then_a_chain(dev);
  const auto chain = named(slices_of(dev), "chain");
  EXPECT_EQ(span_of(chain[0]), (Span{0, 100}));
  EXPECT_EQ(span_of(chain[1]), (Span{100, 200}));
  EXPECT_EQ(span_of(chain[2]), (Span{200, 300}));
  EXPECT_EQ(dev.stats().makespan, nanoseconds(300));
  EXPECT_EQ(dev.stats().lower_bound, nanoseconds(300));
}

TEST_P(ModelTimeline, ViewsAreFreeAndWaitForTheirSource) {
  ferry::Device dev = tiny();
  auto x = four(dev);
  auto r = ferry::reshape(x, Shape{2, 2});
  auto y = r + 1.0f;
  EXPECT_EQ(y.to_host()(1, 1), 5.0f);
  const auto all = slices_of(dev);
  EXPECT_TRUE(named(all, "reshape").empty());  // no engine time at all
  EXPECT_EQ(span_of(named(all, "add")[0]), (Span{116, 158}));
  EXPECT_EQ(dev.stats().steps, 3u);
}

TEST_P(ModelTimeline, AWaitMovesTheHostClockWithoutCopying) {
  ferry::Device dev = tiny();
  auto x = four(dev);
  ferry::wait(x);  // host waits until 116
  auto y = x + 1.0f;
  ferry::wait(y);
  const auto all = slices_of(dev);
  EXPECT_TRUE(named(all, "to_host").empty());
  EXPECT_EQ(span_of(named(all, "add")[0]), (Span{116, 158}));
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.host_syncs, 2u);
  EXPECT_EQ(s.host_stall, nanoseconds(158));
  EXPECT_EQ(s.bytes_d2h, 0u);
}

TEST_P(ModelTimeline, ResetStatsStartsANewWindowAfterEverythingSubmitted) {
  ferry::Device dev = tiny();
  auto y = four(dev) + 1.0f;
  (void)y.to_host();  // ends at 274
  dev.reset_stats();
  EXPECT_EQ(dev.stats().makespan, nanoseconds(0));
  EXPECT_EQ(dev.stats().steps, 0u);
  EXPECT_DOUBLE_EQ(dev.stats().efficiency(), 1.0);
  EXPECT_TRUE(slices_of(dev).empty());
  auto z = y * 2.0f;  // released at 274 (the host's clock), ready then
  (void)z.to_host();
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.makespan, nanoseconds(42 + 116));
  EXPECT_EQ(s.steps, 2u);
  EXPECT_EQ(s.critical_path, nanoseconds(42 + 116));  // y belongs to the old window
  EXPECT_EQ(span_of(named(slices_of(dev), "multiply")[0]), (Span{274, 316}));
}

TEST_P(ModelTimeline, WorkSubmittedAtOneInstantIsScheduledAsOneGraph) {
  // With no launch overhead the whole graph is known before the first placement: the critical
  // path policy sees the long chain although it was submitted last.
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.policy = ferry::SchedulePolicy::critical_path;
  spec.compute_units = 1;
  ferry::Device dev = tiny(spec);
  const auto fixed = ferry::Cost::fixed(nanoseconds(10));
  const auto nothing = [](ferry::KernelArgs<float>) {};
  auto lone = ferry::custom<float>(dev, "lone", {}, Shape{1}, nothing, fixed);
  auto head = ferry::custom<float>(dev, "head", {}, Shape{1}, nothing, fixed);
  auto tail = ferry::custom<float>(dev, "tail", {head}, Shape{1}, nothing, fixed);
  ferry::wait(lone, tail);
  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "head")[0]), (Span{0, 10}));
  EXPECT_EQ(span_of(named(all, "lone")[0]), (Span{10, 20}));
  EXPECT_EQ(span_of(named(all, "tail")[0]), (Span{20, 30}));
}

TEST_P(ModelTimeline, TheRemainingPathIsExactHoweverLongTheChainBelow) {
  // The head of a 200-step chain of 10 ns steps and a lone 1,000 ns step, both ready at 0 on
  // one unit. The chain is released after the head, one link at a time, so the head's remaining
  // path (2,010 ns) is only right if every release reaches it, however far above: then it goes
  // first. Link k (from 1) starts at 10k with 10 (201 - k) ns left; link 100 at 1,000 still
  // has more than the lone step, link 101 at 1,010 as much (and one successor more, MISF), and
  // link 102 at 1,020 less: the lone step runs from 1,020 to 2,020, the last 99 links after it.
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.policy = ferry::SchedulePolicy::critical_path;
  spec.compute_units = 1;
  ferry::Device dev = tiny(spec);
  // Its memory back and no schedule under its lower bound, once the arrays are gone.
  ferry_test::expect_balanced_after(dev, [&] {
    const auto nothing = [](ferry::KernelArgs<float>) {};
    const auto ten = ferry::Cost::fixed(nanoseconds(10));
    const auto thousand = ferry::Cost::fixed(nanoseconds(1000));
    auto lone = ferry::custom<float>(dev, "lone", {}, Shape{1}, nothing, thousand);
    auto link = ferry::custom<float>(dev, "head", {}, Shape{1}, nothing, ten);
    for (int i = 0; i < 200; ++i) {
      link = ferry::custom<float>(dev, "link", {link}, Shape{1}, nothing, ten);
    }
    ferry::wait(lone, link);
    const auto all = slices_of(dev);
    EXPECT_EQ(span_of(named(all, "head")[0]), (Span{0, 10}));
    EXPECT_EQ(span_of(named(all, "link")[100]), (Span{1010, 1020}));
    EXPECT_EQ(span_of(named(all, "lone")[0]), (Span{1020, 2020}));
    EXPECT_EQ(span_of(named(all, "link").back()), (Span{3000, 3010}));
  });
}

// The queues the schedule is decided with: each hands out its entries in its strict order, the
// order one heap would give, whatever order they arrive in (the orders of a fan-out: each entry
// worse than the last, or better, as a source queued again at each reader; and mixed).
// They are bare containers, driven here without a device: there is no memory in use and no
// makespan or lower bound to check after them. A device's books, where these queues decide
// its schedule, are checked above (lower bounds by hand; expect_balanced_after on the long
// chain).
using ferry::detail::EventQueue;
using ferry::detail::ReadyQueue;

/// Entries as pushed: {bottom, fanout, id}; the patterns of a fan-out and of its source.
std::vector<std::array<long long, 3>> ready_entries() {
  std::vector<std::array<long long, 3>> in;
  long long id = 0;
  for (int i = 0; i < 40; ++i) in.push_back({7, 0, id++});           // each worse: the back
  for (int i = 1; i <= 40; ++i) in.push_back({7, i, id++});          // each better: the front
  for (int i = 0; i < 60; ++i) in.push_back({(i * 37) % 11, (i * 13) % 5, id++});  // mixed
  for (int i = 0; i < 20; ++i) in.push_back({20 + i, 0, id++});      // each better again
  return in;
}

TEST(ModelQueues, AReadyQueueHandsOutEntriesBestFirst) {
  for (const auto policy : {ferry::SchedulePolicy::critical_path, ferry::SchedulePolicy::fifo}) {
    const auto in = ready_entries();
    // The reference: all entries sorted by the policy's order, taken from as a heap would be.
    const auto better = [&](const std::array<long long, 3>& a, const std::array<long long, 3>& b) {
      if (policy == ferry::SchedulePolicy::critical_path && a[0] != b[0]) return a[0] > b[0];
      if (policy == ferry::SchedulePolicy::critical_path && a[1] != b[1]) return a[1] > b[1];
      return a[2] < b[2];
    };
    ReadyQueue q(policy);
    std::vector<std::array<long long, 3>> waiting;
    std::vector<long long> got;
    std::vector<long long> want;
    for (std::size_t i = 0; i < in.size(); ++i) {
      q.push(nanoseconds(in[i][0]), static_cast<std::uint32_t>(in[i][1]),
             static_cast<std::uint64_t>(in[i][2]), static_cast<std::uint32_t>(i));
      waiting.push_back(in[i]);
      if (i % 7 == 6) {  // a pop now and then, while entries still arrive
        got.push_back(static_cast<long long>(q.top().id));
        q.pop();
        const auto best = std::min_element(waiting.begin(), waiting.end(), better);
        want.push_back((*best)[2]);
        waiting.erase(best);
      }
    }
    EXPECT_EQ(q.size(), waiting.size());
    std::sort(waiting.begin(), waiting.end(), better);
    for (const auto& w : waiting) want.push_back(w[2]);
    while (!q.empty()) {
      got.push_back(static_cast<long long>(q.top().id));
      q.pop();
    }
    EXPECT_EQ(got, want);
  }
}

TEST(ModelQueues, AnEventQueueHandsOutDeviceEventsByTimeThenPushOrder) {
  // Times as a model pushes them: mostly later than the last, some earlier than all (a
  // completion moved earlier), some in between, many equal (ties go in push order).
  std::vector<long long> times;
  for (int i = 0; i < 30; ++i) times.push_back(100 + 10 * (i / 3));
  times.push_back(50);  // earlier than all
  times.push_back(50);  // as early as the first: after it
  for (int i = 0; i < 10; ++i) times.push_back(90 - i);
  for (int i = 0; i < 40; ++i) times.push_back(80 + (i * 29) % 97);
  EventQueue q;
  std::vector<std::pair<long long, std::uint64_t>> waiting;  // (time, slot = push order)
  std::vector<std::uint64_t> got;
  std::vector<std::uint64_t> want;
  const auto take = [&] {
    const auto t = q.next(nanoseconds(0));
    EventQueue::Event e;
    ASSERT_TRUE(q.pop_device(t, e));
    got.push_back(e.slot);
    const auto first = std::min_element(waiting.begin(), waiting.end());
    EXPECT_EQ(t.count(), first->first);
    want.push_back(first->second);
    waiting.erase(first);
  };
  for (std::size_t i = 0; i < times.size(); ++i) {
    q.push_device(nanoseconds(times[i]), i, EventQueue::Kind::complete);
    waiting.push_back({times[i], i});
    if (i % 9 == 8) take();
  }
  while (!waiting.empty()) take();
  EXPECT_EQ(got, want);
  EXPECT_TRUE(q.device_idle());
  EXPECT_EQ(q.next(nanoseconds(0)), EventQueue::kNever);
}

}  // namespace

}  // namespace test_model_timeline
