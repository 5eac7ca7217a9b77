// Lifetimes: deallocate releases a handle's claim now; deallocate(force) frees the buffer while
// other handles exist, after the steps already submitted have read it, and any later use of
// any handle throws UseAfterFree at the call. Freed memory is free in the model too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"

namespace {

using ferry::Shape;

class Lifetime : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Lifetime);

TEST_P(Lifetime, DeallocateEmptiesTheHandleAndLeavesOthersAlone) {
  auto a = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto b = a;
  ferry::deallocate(a);
  EXPECT_FALSE(a.valid());
  EXPECT_THROW((void)(a + 1.0f), ferry::InvalidArgument);
  EXPECT_EQ(b.to_host()(1), 2.0f);
  ferry::deallocate(a);  // already empty: nothing to do
}

TEST_P(Lifetime, AForcedFreeMakesEveryHandleThrowUseAfterFreeAtTheCall) {
  auto a = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto b = a;
  auto before = a * 10.0f;  // submitted before the free: it still gets its values
  ferry::deallocate(a, ferry::force);
  try {
    (void)(b + 1.0f);
    FAIL() << "expected UseAfterFree";
  } catch (const ferry::UseAfterFree& e) {
    EXPECT_EQ(std::string(e.what()),
              "[add] the array of shape (2) made by 'to_device' was freed by deallocate(force)");
  }
  EXPECT_THROW((void)a.to_host(), ferry::UseAfterFree);
  EXPECT_THROW((void)ferry::to_host(b, before), ferry::UseAfterFree);
  EXPECT_THROW(ferry::wait(b), ferry::UseAfterFree);
  EXPECT_THROW((void)b.shape(), ferry::UseAfterFree);
  EXPECT_THROW((void)b.to(ferry::Device::cpu()), ferry::UseAfterFree);
  EXPECT_THROW(ferry::deallocate(b, ferry::force), ferry::UseAfterFree);
  EXPECT_EQ(before.to_host()(1), 20.0f);
  EXPECT_EQ(ferry::detail::ArrayAccess::step(b)->output().data(), nullptr);  // really freed
}

TEST_P(Lifetime, AForcedFreeReleasesTheMemoryInTheModel) {
  ferry::Device tiny = ferry::Device::modeled(ferry::specs::tiny(), dev.executor());
  constexpr std::int64_t kBig = 150'000;  // 600,000 bytes: two do not fit in 1 MiB
  auto held = ferry::ones<float>(tiny, Shape{kBig});
  auto other = held;
  ferry::wait(held);
  ferry::deallocate(held, ferry::force);
  auto next = ferry::ones<float>(tiny, Shape{kBig}) * 3.0f;  // fits in place of `held`
  EXPECT_EQ(next.to_host()(kBig - 1), 3.0f);
  EXPECT_EQ(tiny.stats().peak_dram_bytes, 600'000u);  // held, then next in its place (ones is donated)
}

TEST_P(Lifetime, ForcingAFreeBeforeTheArrayIsComputedFreesItAfterward) {
  auto a = ferry::to_device(dev, {3.0f}, Shape{1}) + 1.0f;
  auto reader = a * 2.0f;
  ferry::deallocate(a, ferry::force);
  EXPECT_EQ(reader.to_host()(0), 8.0f);
}

}  // namespace
