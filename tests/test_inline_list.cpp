// detail::InlineList (core/inline_list.hpp): the first N elements in place, the rest on the
// heap, against a std::vector fed the same calls; a moved-from list is empty; resize (and the
// count constructor) makes default elements, in place and past N; what it held is released,
// by clear() at once.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ferry/core/inline_list.hpp>

namespace test_inline_list {

namespace {

using ferry::detail::InlineList;

template <class T, std::size_t N>
std::vector<T> items(const InlineList<T, N>& list) {
  return std::vector<T>(list.begin(), list.end());
}

TEST(InlineList, PushBackMatchesAVectorInPlaceAndPastN) {
  InlineList<std::string, 2> list;
  std::vector<std::string> want;
  EXPECT_TRUE(list.empty());
  for (int i = 0; i < 7; ++i) {
    // Long strings: a copy left behind in the inline slots would show as a wrong element.
    std::string s = "element number " + std::to_string(i) + " of a list longer than N";
    list.push_back(s);
    want.push_back(s);
    ASSERT_EQ(list.size(), want.size());
    EXPECT_EQ(items(list), want);
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(list[k], want[k]);
  }
}

TEST(InlineList, ResizeMakesDefaultElements) {
  InlineList<int, 4> small;
  small.push_back(7);
  small.resize(3);
  EXPECT_EQ(items(small), (std::vector<int>{7, 0, 0}));
  small[2] = 5;
  small.resize(6);  // past N: moved to the heap, the new ones default
  EXPECT_EQ(items(small), (std::vector<int>{7, 0, 5, 0, 0, 0}));
  small.push_back(9);
  EXPECT_EQ(items(small), (std::vector<int>{7, 0, 5, 0, 0, 0, 9}));
}

TEST(InlineList, MovedFromIsEmptyAndReusable) {
  for (const std::size_t n : {std::size_t{3}, std::size_t{9}}) {  // in place, then on the heap
    InlineList<int, 4> from;
    std::vector<int> want;
    for (std::size_t i = 0; i < n; ++i) {
      from.push_back(static_cast<int>(i) + 1);
      want.push_back(static_cast<int>(i) + 1);
    }
    InlineList<int, 4> to(std::move(from));
    EXPECT_EQ(items(to), want);
    EXPECT_EQ(from.size(), 0u);  // NOLINT(bugprone-use-after-move): what the test checks
    // Stale values in its slots are not elements: resize makes fresh ones.
    from.resize(2);
    EXPECT_EQ(items(from), (std::vector<int>{0, 0}));
    InlineList<int, 4> assigned;
    assigned.push_back(42);
    assigned = std::move(to);
    EXPECT_EQ(items(assigned), want);
    EXPECT_TRUE(to.empty());  // NOLINT(bugprone-use-after-move)
  }
}

TEST(InlineList, MovesMakeNoCopiesAndWhatItHeldIsReleased) {
  using List = InlineList<std::shared_ptr<int>, 2>;
  const auto shared = std::make_shared<int>(7);
  List list;
  for (int i = 0; i < 5; ++i) list.push_back(i == 1 ? shared : std::make_shared<int>(i));
  EXPECT_EQ(shared.use_count(), 2);  // past N: moved to the heap, not copied
  EXPECT_EQ(list.span().size(), 5u);
  EXPECT_EQ(*list.span()[1], 7);
  list = List{};
  EXPECT_EQ(shared.use_count(), 1);  // assigned over: what it held is gone

  List counted(3);  // default elements, past N
  EXPECT_EQ(counted.size(), 3u);
  EXPECT_EQ(counted[2], nullptr);
  counted[2] = shared;
  const List copy = counted;
  EXPECT_EQ(copy[2], shared);
  EXPECT_EQ(shared.use_count(), 3);
}

// clear() lets go of what the list held at once, in place and on the heap, and the list is
// reused from its first slot; back() is the last element; emplace_back makes one in place.
TEST(InlineList, ClearReleasesAtOnceAndTheListIsReused) {
  using List = InlineList<std::shared_ptr<int>, 2>;
  const auto shared = std::make_shared<int>(7);
  for (const int n : {2, 5}) {  // in place, then on the heap
    List list;
    for (int i = 0; i < n; ++i) list.push_back(shared);
    EXPECT_EQ(shared.use_count(), 1 + n);
    EXPECT_EQ(list.back(), shared);
    list.clear();
    EXPECT_TRUE(list.empty());
    EXPECT_EQ(shared.use_count(), 1);  // nothing left in a slot
    list.emplace_back(std::make_shared<int>(3));
    list.emplace_back(shared);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(*list[0], 3);
    EXPECT_EQ(list.back(), shared);
    EXPECT_EQ(shared.use_count(), 2);
  }
  InlineList<std::pair<int, std::string>, 1> pairs;
  pairs.emplace_back(1, "one");
  pairs.emplace_back(2, "two");  // past N
  EXPECT_EQ(pairs.back().first, 2);
  EXPECT_EQ(pairs[0].second, "one");
}

}  // namespace

}  // namespace test_inline_list
