// detail::BoundedRing (model/bounded_ring.hpp), the trace's slices: a FIFO against a std::deque
// fed the same calls, round its end many times; a slot stays where it is while its element is
// kept; a slot is built only when the ring first reaches it; a reused slot comes back as its
// last element left it.
#include <gtest/gtest.h>

#include <cstddef>
#include <deque>
#include <string>

#include <ferry/model/bounded_ring.hpp>

namespace test_bounded_ring {

namespace {

using ferry::detail::BoundedRing;

TEST(BoundedRing, KeepsTheMostRecentElementsInOrderRoundItsEnd) {
  BoundedRing<std::string> ring(5);
  std::deque<std::string> want;
  for (int i = 0; i < 23; ++i) {
    if (ring.full()) {
      ring.pop_front();
      want.pop_front();
    }
    // Long strings: a slot read at the wrong place would show as a wrong element.
    ring.emplace_back_as_left() = "the element numbered " + std::to_string(i) + ", kept a while";
    want.push_back("the element numbered " + std::to_string(i) + ", kept a while");
    ASSERT_EQ(ring.size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(ring[k], want[k]) << i << ' ' << k;
  }
  EXPECT_TRUE(ring.full());
  EXPECT_EQ(ring.built(), 5U);
}

TEST(BoundedRing, AnElementStaysInItsSlotWhileTheRingFillsPastABlock) {
  BoundedRing<std::string> ring(1000);
  ring.emplace_back_as_left() = "first";
  const std::string* first = &ring[0];
  for (int i = 0; i < 999; ++i) ring.emplace_back_as_left() = std::to_string(i);
  EXPECT_EQ(&ring[0], first);  // 1,000 elements span four blocks of 256: nothing moved
  EXPECT_EQ(ring[0], "first");
  EXPECT_EQ(ring[999], "998");
}

TEST(BoundedRing, BuildsASlotOnlyWhenFirstReached) {
  BoundedRing<std::string> ring(10'000);
  EXPECT_EQ(ring.built(), 0U);
  for (int i = 0; i < 300; ++i) ring.emplace_back_as_left() = "x";
  EXPECT_EQ(ring.built(), 300U);  // not the capacity, nor a doubling past 300
  ring.clear();
  EXPECT_EQ(ring.size(), 0U);
  for (int i = 0; i < 200; ++i) ring.emplace_back_as_left() = "y";
  EXPECT_EQ(ring.built(), 300U);  // slots are reused from the start after a clear
  EXPECT_EQ(ring[199], "y");
}

TEST(BoundedRing, AReusedSlotIsAsItsLastElementLeftIt) {
  BoundedRing<std::string> ring(2);
  ring.emplace_back_as_left() = "a";
  ring.emplace_back_as_left() = "b";
  ring.pop_front();
  EXPECT_EQ(ring.emplace_back_as_left(), "a");  // the slot "a" left: its user sets what it needs
  EXPECT_EQ(ring[0], "b");
  EXPECT_EQ(ring.size(), 2U);
}

}  // namespace

}  // namespace test_bounded_ring
