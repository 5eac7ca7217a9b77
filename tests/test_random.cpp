// Counter-based random numbers: Philox4x32-10 against the known answers of its authors; the same
// key gives the same bits on every executor, thread count and device; split keys are
// independent; the distributions' moments; keys as jit inputs; dropout's gradient; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"

namespace test_random {

namespace {

using ferry_test::values_of;

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary
namespace fr = ferry::random;

TEST(Philox, MatchesTheKnownAnswersOfRandom123) {
  using W = ferry::kernels::PhiloxWords;
  EXPECT_EQ(ferry::kernels::philox({0, 0, 0, 0}, 0, 0),
            (W{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(ferry::kernels::philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff,
                                   0xffffffff),
            (W{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(ferry::kernels::philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822,
                                   0x299f31d0),
            (W{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, TheSameKeyGivesTheSameBitsEverywhere) {
  const Shape shape{301, 257};  // many chunks
  std::vector<float> first;
  std::vector<double> first_normal;
  std::vector<ferry::Device> devices{ferry::Device::cpu(),
                                     ferry::Device::modeled(ferry::specs::h100_sxm())};
  for (int threads : {0, 1, 2, 4}) devices.push_back(ferry_test::make_device(threads));
  for (const ferry::Device& dev : devices) {
    SCOPED_TRACE(dev.name());
    const fr::Key k = fr::key(dev, 20261123);
    const auto u = values_of(fr::uniform(k, shape));
    const auto n = values_of(fr::normal<double>(fr::split(k)[1], shape));
    if (first.empty()) {
      first = u;
      first_normal = n;
    } else {
      EXPECT_EQ(u, first);
      EXPECT_EQ(n, first_normal);
    }
  }
  // Element i depends on i and the key only: a smaller draw is a prefix of a larger one.
  const ferry::Device dev = ferry::Device::cpu();
  const auto part = values_of(fr::uniform(fr::key(dev, 20261123), Shape{1000}));
  EXPECT_EQ(part, std::vector<float>(first.begin(), first.begin() + 1000));
}

TEST(Random, SplitKeysAreIndependentStreams) {
  const ferry::Device dev = ferry::Device::cpu();
  const fr::Key k = fr::key(dev, 7);
  const std::vector<fr::Key> keys = fr::split(k, 4);
  ASSERT_EQ(keys.size(), 4u);
  std::set<std::vector<std::int64_t>> distinct{values_of(k)};
  std::set<std::vector<float>> draws{values_of(fr::uniform(k, Shape{8}))};
  for (const fr::Key& s : keys) {
    EXPECT_EQ(s.shape(), (Shape{2}));
    for (std::int64_t w : values_of(s)) EXPECT_TRUE(w >= 0 && w <= 0xffffffffLL);
    distinct.insert(values_of(s));
    draws.insert(values_of(fr::uniform(s, Shape{8})));
  }
  EXPECT_EQ(distinct.size(), 5u);
  EXPECT_EQ(draws.size(), 5u);
  EXPECT_EQ(values_of(fr::split(k, 4)[2]), values_of(keys[2]));  // splitting is deterministic too
  EXPECT_TRUE(fr::split(k, 0).empty());
  EXPECT_NE(values_of(fr::uniform(fr::key(dev, 1), Shape{4})),
            values_of(fr::uniform(fr::key(dev, 1ULL << 32), Shape{4})));
}

TEST(Random, DistributionsHaveTheirMoments) {
  const ferry::Device dev = ferry_test::make_device(2);
  const auto keys = fr::split(fr::key(dev, 3), 4);
  const std::int64_t n = 200000;
  const auto u = values_of(fr::uniform<double>(keys[0], Shape{n}, -2, 3));
  double mean = 0;
  double var = 0;
  for (double x : u) {
    EXPECT_TRUE(x >= -2 && x < 3);
    mean += x;
  }
  mean /= n;
  for (double x : u) var += (x - mean) * (x - mean);
  var /= n;
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_NEAR(var, 25.0 / 12, 0.03);
  const auto z = values_of(fr::normal<double>(keys[1], Shape{n}));
  mean = 0;
  var = 0;
  for (double x : z) mean += x;
  mean /= n;
  for (double x : z) var += (x - mean) * (x - mean);
  var /= n;
  EXPECT_NEAR(mean, 0, 0.01);
  EXPECT_NEAR(var, 1, 0.02);
  const auto b = values_of(fr::bernoulli(keys[2], 0.3, Shape{n}));
  double hits = 0;
  for (bool x : b) hits += x ? 1 : 0;
  EXPECT_NEAR(hits / n, 0.3, 0.01);
  const auto bf = values_of(fr::normal<ferry::bfloat16>(keys[3], Shape{3, 0}));
  EXPECT_TRUE(bf.empty());
}

TEST(Random, DropoutKeepsTheMeanAndItsGradientIsTheMask) {
  const ferry::Device dev = ferry::Device::cpu();
  const fr::Key k = fr::key(dev, 11);
  const D x = ferry::to_device(dev, std::vector<double>(10000, 2.0), Shape{100, 100});
  const auto y = values_of(fr::dropout(k, x, 0.25));
  double zeros = 0;
  for (double v : y) {
    EXPECT_TRUE(v == 0 || v == 2.0 / 0.75);
    zeros += v == 0 ? 1 : 0;
  }
  EXPECT_NEAR(zeros / 10000, 0.25, 0.02);
  const D g = ferry::grad([&](const D& a) { return ferry::sum(fr::dropout(k, a, 0.25) * 3.0); })(x);
  const auto gv = values_of(g);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(gv[i], y[i] == 0 ? 0.0 : 3.0 / 0.75);
  EXPECT_EQ(values_of(fr::dropout(k, x, 0.0)), values_of(x));
  EXPECT_EQ(values_of(fr::dropout(k, x, 1.0)), std::vector<double>(10000, 0.0));
}

TEST(Random, UnderJitAKeyIsAnInput) {
  const ferry::Device dev = ferry_test::make_device(2);
  auto f = ferry::jit(
      [](fr::Key k, D x) { return fr::dropout(k, x, 0.5) + fr::normal<double>(k, x.shape()); });
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    for (std::int64_t n : {5, 9}) {
      const fr::Key k = fr::key(dev, seed);
      const D x =
          ferry::to_device(dev, std::vector<double>(static_cast<std::size_t>(n), 1.0), Shape{n});
      EXPECT_EQ(values_of(f(k, x)),
                values_of(fr::dropout(k, x, 0.5) + fr::normal<double>(k, x.shape())));
    }
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  const fr::Key a = fr::key(dev, 1);
  const fr::Key b = fr::key(dev, 2);
  const D x = ferry::to_device(dev, std::vector<double>(16, 1.0), Shape{16});
  EXPECT_NE(values_of(f(a, x)), values_of(f(b, x)));
}

/// [lo, hi) holds whatever T the draws are rounded to: float16 in [0, 1) gave exactly 1.0 about
/// once in 4096 draws (bfloat16 once in 512), where 53 random bits rounded up to hi. Such a draw
/// is the largest T below hi instead.
TEST(Random, UniformNeverReachesHiInAnyType) {
  const ferry::Device dev = ferry_test::make_device(2);
  const fr::Key k = fr::key(dev, 0);
  const auto below_one = [&](auto tag, float top) {
    using T = decltype(tag);
    std::size_t tops = 0;
    for (const T x : values_of(fr::uniform<T>(k, Shape{100000}))) {
      ASSERT_LT(static_cast<float>(x), 1.0f);
      tops += static_cast<float>(x) == top ? 1 : 0;
    }
    EXPECT_GT(tops, 0u) << "the draws that rounded to 1 are the largest value below it";
  };
  below_one(ferry::float16{}, 1.0f - 0x1p-11f);
  below_one(ferry::bfloat16{}, 1.0f - 0x1p-8f);
  // A range narrower than one float step: every draw rounds to lo or to hi, and hi is refused.
  for (const float x : values_of(fr::uniform<float>(k, Shape{1000}, 1.0, 1.0 + 0x1p-30))) {
    EXPECT_EQ(x, 1.0f);
  }
  // Finite bounds whose difference overflows a double: the values still lie between them.
  std::size_t negative = 0;
  for (const double x : values_of(fr::uniform<double>(k, Shape{1000}, -1e308, 1e308))) {
    ASSERT_TRUE(std::isfinite(x) && x >= -1e308 && x < 1e308) << x;
    negative += x < 0 ? 1 : 0;
  }
  EXPECT_GT(negative, 400u);
  EXPECT_LT(negative, 600u);
}

/// lo need not be a T: float16's nearest to 0.1 is 0.0999755859375, below it, and a draw that
/// rounded there is the smallest float16 above 0.1 instead (0.1 + 2^-14, less that gap), so
/// [lo, hi) holds in T too. A range that holds no T is refused.
TEST(Random, UniformNeverFallsBelowALoTheTypeCannotHold) {
  const ferry::Device dev = ferry_test::make_device(2);
  const fr::Key k = fr::key(dev, 0);
  const float floor = 0.0999755859375f + 0x1p-14f;  // 0.10003662109375
  std::size_t floors = 0;
  for (const ferry::float16 x : values_of(fr::uniform<ferry::float16>(k, Shape{1'000'000}, 0.1,
                                                                      0.2))) {
    const auto v = static_cast<double>(static_cast<float>(x));
    ASSERT_GE(v, 0.1);
    ASSERT_LT(v, 0.2);
    floors += static_cast<float>(x) == floor ? 1 : 0;
  }
  // (0.100067 - 0.1) / 0.1 of the draws, about 610 (the few that rounded below 0.1 among them)
  EXPECT_GT(floors, 500u);
  EXPECT_LT(floors, 720u);
  // A negative lo: bfloat16's nearest to -0.3 is -0.30078125, below it.
  for (const ferry::bfloat16 x :
       values_of(fr::uniform<ferry::bfloat16>(k, Shape{100'000}, -0.3, -0.29))) {
    const auto v = static_cast<double>(static_cast<float>(x));
    ASSERT_GE(v, -0.3);
    ASSERT_LT(v, -0.29);
  }
  try {
    (void)fr::uniform<ferry::float16>(k, Shape{2}, 0.1, 0.10002);
    FAIL() << "no error";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "[uniform] no float16 lies in [0.1, 0.10002)");
  }
  // lo == hi stays allowed: lo rounded to T.
  for (const ferry::float16 x : values_of(fr::uniform<ferry::float16>(k, Shape{4}, 0.1, 0.1))) {
    EXPECT_EQ(static_cast<float>(x), 0.0999755859375f);
  }
}

TEST(Random, ErrorsNameTheOpAndTheValues) {
  const ferry::Device dev = ferry::Device::cpu();
  const fr::Key bad = ferry::to_device(dev, std::vector<std::int64_t>{1, 2, 3}, Shape{3});
  try {
    (void)fr::uniform(bad, Shape{2});
    FAIL() << "no error";
  } catch (const ferry::ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "[uniform] needs a key of shape (2), got (3)");
  }
  const fr::Key k = fr::key(dev, 0);
  EXPECT_THROW((void)fr::split(bad), ferry::ShapeError);
  EXPECT_THROW((void)fr::split(k, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)fr::normal(fr::Key{}, Shape{2}), ferry::InvalidArgument);
  EXPECT_THROW((void)fr::uniform(k, Shape{2}, 1, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)fr::uniform(k, Shape{2}, 0, INFINITY), ferry::InvalidArgument);
  EXPECT_THROW((void)fr::bernoulli(k, 1.5, Shape{2}), ferry::InvalidArgument);
  const D x = ferry::to_device(dev, std::vector<double>(4, 1.0), Shape{4});
  EXPECT_THROW((void)fr::dropout(k, x, -0.1), ferry::InvalidArgument);
  EXPECT_THROW((void)fr::dropout(bad, x, 0.5), ferry::ShapeError);
  EXPECT_THROW((void)fr::dropout(k, D{}, 0.5), ferry::InvalidArgument);
}

/// A count of keys no memory holds is refused at the call under split's name: the (n, 2) array
/// by its count and bytes, as creation ops are, and the n handles (host memory split takes
/// itself) as OutOfHostMemory, where std::vector threw std::bad_alloc.
TEST(Random, SplitRefusesMoreKeysThanMemoryHolds) {
  const ferry::Device dev = ferry::Device::cpu();
  const fr::Key k = fr::key(dev, 0);
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)fr::split(k, std::int64_t{1} << 62); }),
            "[split] the result's element count overflows int64");
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)fr::split(k, std::int64_t{1} << 60); }),
            "[split] an array of shape (1152921504606846976, 2) with 8-byte elements does not "
            "fit in memory");
  try {
    (void)fr::split(k, std::int64_t{1} << 55);  // 2^55 handles: more than any host has
    FAIL() << "no error";
  } catch (const ferry::OutOfHostMemory& e) {
    EXPECT_EQ(e.op(), "split");
    EXPECT_EQ(e.bytes(), (std::uint64_t{1} << 55) * sizeof(fr::Key));
  }
  EXPECT_EQ(fr::split(k, 3).size(), 3u);  // the control
}

}  // namespace

}  // namespace test_random
