// Donation: an op given the only reference to a buffer of its output's size and layout writes
// its output into that buffer, really (the same memory) and in the model (no allocation). It
// waits for the readers submitted before it, so they read the old values.
#include <gtest/gtest.h>

#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"

namespace test_donation {

namespace {

using ferry_test::buffer_of;
using ferry_test::values_of;

using ferry::Shape;

class Donation : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Donation);

TEST_P(Donation, AnArrayGivenAwayIsOverwrittenInPlace) {
  auto w = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4});
  auto g = ferry::to_device(dev, {0.5f, 0.5f, 1.0f, 1.0f}, Shape{4});
  const std::byte* before = buffer_of(w);
  auto updated = std::move(w) - 2.0f * g;
  EXPECT_FALSE(w.valid());  // NOLINT(bugprone-use-after-move): the op took the handle
  EXPECT_EQ(buffer_of(updated), before);
  EXPECT_EQ(values_of(updated), (std::vector<float>{0.0f, 1.0f, 1.0f, 2.0f}));
  EXPECT_EQ(dev.stats().donations, 1u);
}

TEST_P(Donation, TemporariesAreDonatedToo) {
  auto x = ferry::to_device(dev, {-1.0f, 2.0f}, Shape{2});
  auto y = ferry::relu(x * 3.0f) + 1.0f;  // relu and + reuse the product's buffer
  EXPECT_EQ(values_of(y), (std::vector<float>{1.0f, 7.0f}));
  EXPECT_EQ(dev.stats().donations, 2u);
}

TEST_P(Donation, NothingIsDonatedThatSomeoneCanStillRead) {
  auto w = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  const std::byte* before = buffer_of(w);
  auto kept = w;                             // a second handle
  auto a = std::move(w) + 1.0f;              // not the only reference: a new buffer
  auto b = kept + 1.0f;                      // an lvalue: never donated
  auto v = ferry::reshape(kept, Shape{1, 2});
  auto c = std::move(kept) * 2.0f;           // the last handle, but a view shares its buffer
  auto big = ferry::to_device(dev, {1.0f}, Shape{1});
  auto d = std::move(big) + ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});  // broadcast: wrong size
  EXPECT_NE(buffer_of(a), before);
  EXPECT_NE(buffer_of(b), before);
  EXPECT_NE(buffer_of(c), before);
  EXPECT_EQ(values_of(a), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(values_of(b), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(values_of(c), (std::vector<float>{2.0f, 4.0f}));
  EXPECT_EQ(values_of(ferry::reshape(v, Shape{2})), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(values_of(d), (std::vector<float>{2.0f, 3.0f}));  // the right operand's temporary
  EXPECT_EQ(dev.stats().donations, 1u);                        // ...is donated
}

TEST_P(Donation, TheSameBufferGivenTwiceToOneOpIsSafe) {
  auto w = ferry::to_device(dev, {1.0f, -2.0f, 3.0f}, Shape{3});
  const std::byte* before = buffer_of(w);
  auto sq = std::move(w) * std::move(w);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(buffer_of(sq), before);
  EXPECT_EQ(values_of(sq), (std::vector<float>{1.0f, 4.0f, 9.0f}));
  auto m = ferry::to_device(dev, {5.0f, 6.0f}, Shape{2});
  auto twice = std::move(m) + m;  // NOLINT(bugprone-use-after-move): both name the one array
  EXPECT_EQ(values_of(twice), (std::vector<float>{10.0f, 12.0f}));
}

TEST(DonationOrder, ADonationWaitsForTheReadersSubmittedBeforeIt) {
  ferry::ManualExecutor ex;
  ferry::Device dev(ex);
  auto w = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto reader = w * 10.0f;          // reads the old values
  auto update = std::move(w) + 1.0f;
  // Only the reader may run: the update overwrites what the reader reads.
  EXPECT_EQ(ex.ready_count(), 1u);
  EXPECT_TRUE(ex.run_one());
  EXPECT_TRUE(reader.ready());
  EXPECT_EQ(ex.ready_count(), 1u);  // now the update
  EXPECT_EQ(values_of(update), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(values_of(reader), (std::vector<float>{10.0f, 20.0f}));
  EXPECT_EQ(dev.stats().donations, 1u);
}

TEST_P(Donation, AnInPlaceUpdateWithPendingReadersMatchesTheReference) {
  auto w = ferry::to_device(dev, std::vector<float>(64, 1.0f), Shape{8, 8});
  std::vector<ferry::DeviceArray<float>> readers;
  for (int i = 0; i < 20; ++i) {
    readers.push_back(w * 2.0f);
    w = std::move(w) + 1.0f;
  }
  const auto all = ferry::to_host(readers);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i](0, 0), 2.0f * (1.0f + static_cast<float>(i)));
  }
  EXPECT_EQ(values_of(w)[63], 21.0f);
  EXPECT_EQ(dev.stats().donations, 20u);  // each update
}

// A replayed program donates an argument given away as the eager ops would: the step that
// reads it last (a fused run, or an elementwise op alone) writes into its buffer.
TEST_P(Donation, AReplayWritesIntoAnArgumentGivenAway) {
  const auto step = ferry::jit([](ferry::DeviceArray<float> w, ferry::DeviceArray<float> g) {
    return w - g * 0.5f;  // one fused kernel
  });
  const auto bump = ferry::jit([](ferry::DeviceArray<float> w, ferry::SymFloat s) {
    return w * s;  // one op, its scalar an input of the trace
  });
  const auto g = ferry::to_device(dev, {2.0f, 4.0f, 6.0f}, Shape{3});
  ferry::wait(step(ferry::to_device(dev, {0.0f, 0.0f, 0.0f}, Shape{3}), g));  // traces
  ferry::wait(bump(ferry::to_device(dev, {0.0f, 0.0f, 0.0f}, Shape{3}), ferry::SymFloat(1.0)));
  dev.reset_stats();
  auto w = ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{3});
  const std::byte* before = buffer_of(w);
  w = step(std::move(w), g);
  EXPECT_EQ(buffer_of(w), before);
  w = bump(std::move(w), ferry::SymFloat(2.0));
  EXPECT_EQ(buffer_of(w), before);
  w = bump(std::move(w), ferry::SymFloat(-0.5));  // the scalar patched per call
  EXPECT_EQ(buffer_of(w), before);
  EXPECT_EQ(values_of(w), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(step.cache_hits(), 1u);
  EXPECT_EQ(bump.cache_hits(), 2u);
  EXPECT_EQ(dev.stats().donations, 3u);
  auto v = ferry::to_device(dev, {1.0f, 1.0f, 1.0f}, Shape{3});
  w = bump(std::move(v), ferry::SymFloat(3.0));
  EXPECT_EQ(values_of(w), (std::vector<float>{3.0f, 3.0f, 3.0f}));
  EXPECT_EQ(dev.stats().donations, 4u);
}

TEST_P(Donation, AReplayKeepsAnArgumentSomeoneCanStillRead) {
  const auto step = ferry::jit([](ferry::DeviceArray<float> w, ferry::DeviceArray<float> g) {
    return w - g * 0.5f;
  });
  const auto g = ferry::to_device(dev, {2.0f, 4.0f}, Shape{2});
  ferry::wait(step(ferry::to_device(dev, {0.0f, 0.0f}, Shape{2}), g));
  dev.reset_stats();
  auto w = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  const std::byte* before = buffer_of(w);
  const auto kept = w;                                     // a second handle
  const auto a = step(std::move(w), g);
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  const auto view = ferry::reshape(x, Shape{1, 2});        // a view shares the buffer
  const std::byte* x_before = buffer_of(x);
  const auto b = step(std::move(x), g);
  const auto c = step(kept, g);                            // an lvalue: never donated
  EXPECT_NE(buffer_of(a), before);
  EXPECT_NE(buffer_of(b), x_before);
  EXPECT_NE(buffer_of(c), before);
  EXPECT_EQ(values_of(a), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(values_of(b), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(values_of(kept), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(values_of(ferry::reshape(view, Shape{2})), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(dev.stats().donations, 0u);
}

}  // namespace

}  // namespace test_donation
