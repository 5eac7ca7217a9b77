// to_host_async: returns at once, its copies start as soon as their arrays are computed (in
// the model: as soon as their inputs are done, before the host asks), get() is the sync point,
// and errors arrive as an export's. Timelines on specs::tiny() (see test_model_timeline.cpp):
// an import or export of 4 floats takes 116 ns, `x + 1` 42 ns.
#include <gtest/gtest.h>

#include <future>
#include <stdexcept>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/timeline.hpp"

namespace test_async_export {

namespace {

using ferry::Shape;
using ferry_test::executor_for;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;
using std::chrono::nanoseconds;

class AsyncExport : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device tiny() {
    return ferry::Device::modeled(ferry::specs::tiny(), executor_for(GetParam()));
  }
  static ferry::DeviceArray<float> four(const ferry::Device& dev) {
    return ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4});
  }
};
FERRY_SWEEP_EXECUTORS(AsyncExport);

TEST_P(AsyncExport, GetReturnsTheValues) {
  ferry::Device dev = tiny();
  auto x = four(dev);
  std::future<ferry::HostArray<float>> y = ferry::to_host_async(x + 1.0f);
  const ferry::HostArray<float> v = y.get();
  EXPECT_EQ(v.shape(), Shape{4});
  EXPECT_EQ(v(0), 2.0f);
  EXPECT_EQ(v(3), 5.0f);
  auto [a, b] = ferry::to_host_async(x * 2.0f, x.astype<std::int32_t>()).get();
  EXPECT_EQ(a(1), 4.0f);
  EXPECT_EQ(b(2), 3);
  const std::vector<ferry::HostArray<float>> many =
      ferry::to_host_async(std::vector{x, x + x}).get();
  ASSERT_EQ(many.size(), 2u);
  EXPECT_EQ(many[1](3), 8.0f);
}

TEST(AsyncExportManual, ReturnsBeforeAnythingRuns) {
  ferry::ManualExecutor manual;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny(), manual);
  auto y = ferry::to_device(dev, {1.0f}, Shape{1}) + 1.0f;
  auto pending = ferry::to_host_async(y);
  EXPECT_GE(manual.ready_count(), 1u);  // the add is queued, not run: the call did not wait
  EXPECT_EQ(pending.get()(0), 2.0f);    // get() drives the work on this thread
}

TEST_P(AsyncExport, TheCopyStartsWhenItsInputIsDoneNotWhenTheHostAsks) {
  ferry::Device dev = tiny();
  auto x = four(dev);                     // h2d 0..116
  auto pending = ferry::to_host_async(x + 1.0f);  // add 116..158, then d2h 158..274
  auto z = four(dev);                     // the second import queues behind the first: 116..232
  auto w = z * 3.0f;                      // 232..274
  (void)pending.get();                    // the host waits until 274
  const auto all = slices_of(dev);
  const auto out = named(all, "to_host");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(span_of(out[0]), (Span{158, 274}));
  EXPECT_EQ(dev.stats().host_stall, nanoseconds(274));
  EXPECT_EQ(dev.stats().host_syncs, 1u);
  EXPECT_EQ(w.to_host()(0), 3.0f);
}

TEST_P(AsyncExport, AnExportStreamsBackWhileTheNextBatchComputes) {
  // Double-buffered with asynchronous exports: batch b's copy back overlaps batch b + 1's
  // kernel, so the d2h engine is busy while the compute unit works.
  ferry::Device dev = tiny();
  std::vector<std::future<ferry::HostArray<float>>> results;
  for (int b = 0; b < 4; ++b)
    results.push_back(ferry::to_host_async(four(dev) + static_cast<float>(b)));
  for (int b = 0; b < 4; ++b)
    EXPECT_EQ(results[static_cast<std::size_t>(b)].get()(0), 1.0f + static_cast<float>(b));
  const auto out = named(slices_of(dev), "to_host");
  ASSERT_EQ(out.size(), 4u);
  // Imports back to back on h2d (116 each), each add right after its import, each export
  // right after its add: batch b's export runs from 116 (b + 1) + 42 to + 116.
  for (int b = 0; b < 4; ++b) {
    const long long start = 116LL * (b + 1) + 42;
    EXPECT_EQ(span_of(out[static_cast<std::size_t>(b)]), (Span{start, start + 116}));
  }
  EXPECT_GT(dev.stats().overlap, nanoseconds(0));
}

TEST_P(AsyncExport, ErrorsArriveThroughTheFuture) {
  ferry::Device dev = tiny();
  auto bad = ferry::custom<float>(
      dev, "throws", {}, Shape{1},
      [](ferry::KernelArgs<float>) { throw std::runtime_error("kernel failed"); }, ferry::Cost{});
  auto pending = ferry::to_host_async(bad + 1.0f);  // no throw at the call
  EXPECT_THROW((void)pending.get(), std::runtime_error);
  // An empty handle is refused at the call, as to_host refuses it.
  EXPECT_THROW((void)ferry::to_host_async(ferry::DeviceArray<float>{}), ferry::InvalidArgument);
  // The device goes on.
  EXPECT_EQ(ferry::to_host_async(four(dev)).get()(0), 1.0f);
}

TEST_P(AsyncExport, AFutureDroppedWithoutGetStillEndsItsExport) {
  ferry::Device dev = tiny();
  {
    auto x = four(dev);
    auto pending = ferry::to_host_async(x + 1.0f);
  }
  // The dropped future waited for its export (one host sync), and nothing is left behind in
  // the model: every byte of device memory came back.
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.host_syncs, 1u);
  EXPECT_EQ(s.dram_bytes_in_use, 0u);
}

}  // namespace

}  // namespace test_async_export
