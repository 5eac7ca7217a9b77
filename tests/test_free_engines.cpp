// FreeEngines (model/free_engines.hpp), the idle engines of one engine class, against the
// min-heap of engine numbers the scheduler kept before: the same engine comes out at every
// take, on a device with more lanes than one word of bits holds.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <vector>

#include <ferry/model/free_engines.hpp>

namespace test_free_engines {

using ferry::detail::FreeEngines;
using Reference = std::priority_queue<int, std::vector<int>, std::greater<>>;

TEST(FreeEngines, TakesTheLowestNumberFirst) {
  FreeEngines free;
  EXPECT_TRUE(free.empty());
  for (int e : {130, 3, 64, 63, 0, 127}) free.push(e);
  EXPECT_EQ(free.size(), 6u);
  std::vector<int> taken;
  while (!free.empty()) {
    taken.push_back(free.top());
    free.pop();
  }
  EXPECT_EQ(taken, (std::vector<int>{0, 3, 63, 64, 127, 130}));
  // Empty again, a lane returned in a higher word is found.
  free.push(200);
  EXPECT_EQ(free.top(), 200);
  free.push(5);
  EXPECT_EQ(free.top(), 5);
}

TEST(FreeEngines, MatchesAMinHeapUnderRandomTakesAndReturns) {
  // As the scheduler builds them: copy engines 0-2, then 132 compute lanes (h100_sxm()).
  constexpr int kEngines = 3 + 132;
  std::mt19937 rng(7);
  FreeEngines free;
  Reference reference;
  for (int e = 0; e < kEngines; ++e) {
    free.push(e);
    reference.push(e);
  }
  std::vector<int> busy;
  for (int i = 0; i < 20000; ++i) {
    const bool take = busy.empty() || (!reference.empty() && rng() % 2 == 0);
    if (take) {
      ASSERT_FALSE(free.empty());
      ASSERT_EQ(free.top(), reference.top()) << "take " << i;
      busy.push_back(free.top());
      free.pop();
      reference.pop();
    } else {
      const std::size_t k = rng() % busy.size();
      const int e = busy[k];
      busy[k] = busy.back();
      busy.pop_back();
      free.push(e);
      reference.push(e);
    }
    ASSERT_EQ(free.size(), reference.size());
    ASSERT_EQ(free.empty(), reference.empty());
  }
}

}  // namespace test_free_engines
