// Programs: tracing, guards, the cache, replay and fusion. Every program is checked against the
// same function run eagerly, with values on both sides of every guard it records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/timeline.hpp"

namespace test_program {

namespace {

using ferry::DeviceArray;
using ferry::Shape;
using ferry::SymInt;
using ferry_test::message_of;

template <class T = float>
std::vector<T> values(std::int64_t n, int seed) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] =
        static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 23) - 11) /
        static_cast<T>(4);
  }
  return v;
}

template <class T>
DeviceArray<T> input(const ferry::Device& dev, Shape shape, int seed) {
  return ferry::to_device(dev, values<T>(shape.numel(), seed), shape);
}

template <class T>
void expect_same(const DeviceArray<T>& got, const DeviceArray<T>& want) {
  const auto g = got.to_host();
  const auto w = want.to_host();
  ASSERT_EQ(g.shape(), w.shape());
  for (std::size_t i = 0; i < g.data().size(); ++i) {
    ASSERT_EQ(g.data()[i], w.data()[i]) << "element " << i;
  }
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class Program : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Program);

// ---- SymInt outside a trace ----

TEST(SymInt, IsAPlainIntegerOutsideATrace) {
  const SymInt a = 7;
  const SymInt b = 3;
  EXPECT_EQ(static_cast<std::int64_t>(a + b), 10);
  EXPECT_EQ(static_cast<std::int64_t>(a - b), 4);
  EXPECT_EQ(static_cast<std::int64_t>(a * b), 21);
  EXPECT_EQ(static_cast<std::int64_t>(a / b), 2);
  EXPECT_EQ(static_cast<std::int64_t>(-a % b), -1);
  EXPECT_EQ(static_cast<std::int64_t>(min(a, b)), 3);
  EXPECT_EQ(static_cast<std::int64_t>(max(a, b)), 7);
  EXPECT_TRUE(a > b);
  EXPECT_TRUE(b <= 3);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a.symbolic());
  EXPECT_EQ(a.to_string(), "7");
}

TEST(SymInt, DivisionByZeroAndNarrowingAreTypedErrors) {
  EXPECT_THROW((void)(SymInt(1) / SymInt(0)), ferry::InvalidArgument);
  EXPECT_THROW((void)(SymInt(1) % 0), ferry::InvalidArgument);
  EXPECT_THROW((void)static_cast<std::int8_t>(SymInt(300)), ferry::InvalidArgument);
  EXPECT_THROW((void)static_cast<std::uint32_t>(SymInt(-1)), ferry::InvalidArgument);
  EXPECT_THROW((void)SymInt(std::numeric_limits<std::uint64_t>::max()), ferry::InvalidArgument);
}

TEST(SymInt, ShapesGiveTheirSizesAsSymInts) {
  const Shape s{2, 3};
  EXPECT_EQ(static_cast<int>(s[1]), 3);
  EXPECT_EQ(static_cast<std::int64_t>(s.size()), 6);
  const Shape t{s[1], SymInt(4), 5};
  EXPECT_EQ(t, (Shape{3, 4, 5}));
}

TEST_P(Program, AVectorInsideATupleKeepsItsLengthOnReplay) {
  // The vector's length is what the arrays after it leave: a replay gave it every handle, and
  // the array after it none (or read past the end with more parts).
  auto f = ferry::jit([](DeviceArray<float> x) {
    return std::make_tuple(x + 1.0f, ferry::split(x, {1, 1, x.shape()[0] - 2}, 0), x * 2.0f);
  });
  auto g = ferry::jit([](DeviceArray<float> x) {
    return std::make_pair(ferry::split(x, {1, x.shape()[0] - 1}, 0), x * 3.0f);
  });
  for (const std::int64_t n : {4, 6, 5}) {
    SCOPED_TRACE(n);
    const auto x = input<float>(dev, Shape{n, 3}, static_cast<int>(n));
    const auto host_in = x.to_host();
    const std::span<const float> in = host_in.data();
    const auto [plus, parts, twice] = f(x);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0].shape(), (Shape{1, 3}));
    EXPECT_EQ(parts[2].shape(), (Shape{n - 2, 3}));
    const auto [halves, thrice] = g(x);
    ASSERT_EQ(halves.size(), 2u);
    EXPECT_EQ(halves[1].shape(), (Shape{n - 1, 3}));
    ASSERT_TRUE(twice.valid() && thrice.valid());
    const auto p = plus.to_host();
    const auto t = twice.to_host();
    const auto h = thrice.to_host();
    const auto last = parts[2].to_host();
    for (std::size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(p.data()[i], in[i] + 1.0f);
      EXPECT_EQ(t.data()[i], in[i] * 2.0f);
      EXPECT_EQ(h.data()[i], in[i] * 3.0f);
    }
    for (std::size_t i = 0; i < last.data().size(); ++i) EXPECT_EQ(last.data()[i], in[6 + i]);
  }
  EXPECT_EQ(f.cache_size(), 1u);
  EXPECT_EQ(f.cache_hits(), 2u);
  EXPECT_EQ(g.cache_hits(), 2u);
}

// ---- guards ----

TEST_P(Program, AFlagGuardRetracesWhenTheBranchFlips) {
  auto g = ferry::jit([](DeviceArray<float> a, SymInt flag) {
    if (flag > 5) return ferry::ones<float>(a.device(), Shape{1});
    return ferry::zeros<float>(a.device(), Shape{1});
  });
  const auto a = input<float>(dev, Shape{2}, 1);
  EXPECT_EQ(g(a, 6).to_host().data()[0], 1.0f);
  EXPECT_EQ(g(a, 0).to_host().data()[0], 0.0f);  // "flag > 5" fails: a new trace
  EXPECT_EQ(g.cache_size(), 2u);
  EXPECT_EQ(g(a, 7).to_host().data()[0], 1.0f);
  EXPECT_EQ(g(a, 5).to_host().data()[0], 0.0f);
  EXPECT_EQ(g(a, -3).to_host().data()[0], 0.0f);
  EXPECT_EQ(g.cache_misses(), 2u);
  EXPECT_EQ(g.cache_hits(), 3u);
  const std::string e = g.explain();
  EXPECT_TRUE(contains(e, "arg0 > 5")) << e;
  EXPECT_TRUE(contains(e, "arg0 <= 5")) << e;
}

TEST_P(Program, AShapeDependentBranchIsGuardedOnBothSides) {
  auto body = [](DeviceArray<float> x) {
    if (x.shape()[0] > 4) return x * 2.0f;
    return x + 1.0f;
  };
  auto f = ferry::jit(body);
  for (int n : {5, 1, 8, 4, 6, 2, 3, 7}) {
    const auto x = input<float>(dev, Shape{n, 3}, n);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f.cache_misses(), 2u);
  EXPECT_TRUE(contains(f.explain(), "in0.shape[0] > 4")) << f.explain();
  EXPECT_TRUE(contains(f.explain(), "in0.shape[0] <= 4")) << f.explain();
}

TEST_P(Program, ASizeConvertedToIntIsGuardedForEquality) {
  auto body = [](DeviceArray<float> x) {
    const int n = static_cast<int>(x.shape()[0]);
    return x * static_cast<float>(n);
  };
  auto f = ferry::jit(body);
  for (int n : {3, 3, 4, 3, 4, 5}) {
    const auto x = input<float>(dev, Shape{n}, n);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 3u);
  EXPECT_EQ(f.cache_hits(), 3u);
  EXPECT_TRUE(contains(f.explain(), "in0.shape[0] == 3")) << f.explain();
}

TEST_P(Program, NumelIsAGuardedConversionToo) {
  auto body = [](DeviceArray<float> x) {
    if (x.shape().numel() > 6) return x - 1.0f;
    return x + 1.0f;
  };
  auto f = ferry::jit(body);
  for (int n : {2, 2, 4, 4, 2}) {
    const auto x = input<float>(dev, Shape{n, 3}, n);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 2u);  // numel() guards every size: one entry per shape
}

TEST_P(Program, BroadcastingOfSizeOneIsAGuard) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> y) { return x + y; };
  auto f = ferry::jit(body);
  struct Case {
    std::int64_t x0, y0;
  };
  // Rows of y either match x's or are 1 (broadcast); x itself may have 1 row.
  for (Case c :
       {Case{3, 1}, Case{5, 1}, Case{3, 3}, Case{4, 4}, Case{1, 1}, Case{1, 4}, Case{2, 1}}) {
    const auto x = input<float>(dev, Shape{c.x0, 4}, 1);
    const auto y = input<float>(dev, Shape{c.y0, 4}, 2);
    const auto got = f(x, y);
    EXPECT_EQ(got.shape(), (Shape{std::max(c.x0, c.y0), 4}));
    expect_same(got, body(x, y));
  }
  EXPECT_EQ(f.cache_size(), 3u) << f.explain();  // x0 == y0 (1 with 1 too), y0 == 1, x0 == 1
  EXPECT_THROW(f(input<float>(dev, Shape{3, 4}, 1), input<float>(dev, Shape{2, 4}, 2)),
               ferry::ShapeError);
}

TEST_P(Program, MatmulInnerSizesAreGuardedAndAMismatchThrowsAtTheCall) {
  auto f =
      ferry::jit([](DeviceArray<float> x, DeviceArray<float> w) { return ferry::matmul(x, w); });
  const auto w = input<float>(dev, Shape{3, 2}, 9);
  for (int n : {1, 4, 2}) {
    const auto x = input<float>(dev, Shape{n, 3}, n);
    expect_same(f(x, w), ferry::matmul(x, w));
  }
  EXPECT_EQ(f.cache_size(), 1u);
  EXPECT_THROW(f(input<float>(dev, Shape{2, 4}, 1), w), ferry::ShapeError);
  EXPECT_EQ(f.cache_size(), 1u);
  EXPECT_TRUE(contains(f.explain(), "in1.shape[0] == in0.shape[1]")) << f.explain();
}

TEST_P(Program, SplitWithAComputedLastPartReplaysForAnySize) {
  auto body = [](DeviceArray<float> x, SymInt d0, SymInt d1) {
    return ferry::split(x, {d0, d1, x.shape()[2] - d0 - d1}, 2);
  };
  auto f = ferry::jit(body);
  struct Case {
    int c, d0, d1;
  };
  for (Case k : {Case{6, 1, 2}, Case{9, 4, 1}, Case{5, 0, 5}, Case{7, 2, 2}}) {
    const auto x = input<float>(dev, Shape{2, 1, k.c}, k.c);
    const auto got = f(x, k.d0, k.d1);
    const auto want = body(x, k.d0, k.d1);
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) expect_same(got[i], want[i]);
    EXPECT_EQ(static_cast<int>(got[2].shape()[2]), k.c - k.d0 - k.d1);
  }
  // d0 == 0 makes the second part start at 0: a guard of the first trace fails, so (5, 0, 5)
  // traces again.
  EXPECT_EQ(f.cache_hits(), 2u) << f.explain();
  EXPECT_THROW(f(input<float>(dev, Shape{2, 1, 4}, 1), 3, 3), ferry::InvalidArgument);
}

TEST_P(Program, SymbolicSizesFeedOpParameters) {
  auto body = [](DeviceArray<float> x) {
    const SymInt n = x.shape()[0];
    auto top = ferry::slice(x, 0, 0, n - 1);
    auto flat = ferry::reshape(top, Shape{(n - 1) * x.shape()[1]});
    return flat + ferry::full<float>(x.device(), Shape{(n - 1) * 2}, 0.5f);
  };
  auto f = ferry::jit(body);
  for (int n : {3, 5, 2, 9}) {
    const auto x = input<float>(dev, Shape{n, 2}, n);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(Program, SlicePositionsFromTheEndFollowSymbolicSizes) {
  // -1 counts from the end of a symbolic axis: one trace serves every size, and its gradient
  // writes back into the right rows.
  auto body = [](DeviceArray<float> x) { return ferry::slice(x, 0, -2, -1) * 2.0f; };
  auto f = ferry::jit(body);
  for (int n : {3, 5, 9, 4}) {
    const auto x = input<float>(dev, Shape{n, 2}, n);
    expect_same(f(x), body(x));
    EXPECT_EQ(f(x).shape(), (Shape{1, 2}));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  // A position whose sign changes is a decision the trace relies on: it traces again.
  auto g = ferry::jit(
      [](DeviceArray<float> x, SymInt b) { return ferry::slice(x, 0, b, x.shape()[0]); });
  const auto x = input<float>(dev, Shape{4, 2}, 1);
  expect_same(g(x, 1), ferry::slice(x, 0, 1, 4));
  expect_same(g(x, -1), ferry::slice(x, 0, 3, 4));
  expect_same(g(x, 2), ferry::slice(x, 0, 2, 4));
  expect_same(g(x, -3), ferry::slice(x, 0, 1, 4));
  EXPECT_EQ(g.cache_size(), 2u) << g.explain();
}

// ---- the cache ----

TEST_P(Program, OneSymbolicEntryServesAHundredBatchSizes) {
  const auto w = input<float>(dev, Shape{8, 4}, 3);
  auto body = [w](DeviceArray<float> x) { return ferry::relu(ferry::matmul(x, w)); };
  auto f = ferry::jit(body);
  for (int batch = 1; batch <= 100; ++batch) {
    const auto x = input<float>(dev, Shape{batch, 8}, batch);
    const auto y = f(x);
    ASSERT_EQ(y.shape(), (Shape{batch, 4}));
    if (batch % 17 == 1) expect_same(y, body(x));
  }
  EXPECT_EQ(f.cache_size(), 1u);
  EXPECT_EQ(f.cache_misses(), 1u);
  EXPECT_EQ(f.cache_hits(), 99u);
}

TEST_P(Program, StaticShapesMakeOneEntryPerSize) {
  auto f = ferry::jit([](DeviceArray<float> x) { return ferry::relu(x); },
                      ferry::CacheMode::static_shapes);
  for (int round = 0; round < 2; ++round) {
    for (int batch = 1; batch <= 10; ++batch) (void)f(input<float>(dev, Shape{batch}, batch));
  }
  EXPECT_EQ(f.cache_size(), 10u);
  EXPECT_EQ(f.cache_misses(), 10u);
  EXPECT_EQ(f.cache_hits(), 10u);
}

TEST_P(Program, AStaticCacheOfAHundredEntriesReplaysTheEntryOfEachSize) {
  auto body = [](DeviceArray<float> x) {
    return ferry::sum(x, {0}) * static_cast<float>(static_cast<int>(x.shape()[0]));
  };
  auto f = ferry::jit(body, ferry::CacheMode::static_shapes);
  for (int n = 1; n <= 100; ++n) (void)f(input<float>(dev, Shape{n, 2}, n));
  ASSERT_EQ(f.cache_size(), 100u);
  // Every size again, in another order: each call finds its own entry, whose constants (the
  // size it multiplies by) show in the values.
  for (int n = 100; n >= 1; n -= 3) {
    const auto x = input<float>(dev, Shape{n, 2}, n + 1);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 100u);
  EXPECT_EQ(f.cache_misses(), 100u);
  EXPECT_EQ(f.cache_hits(), 34u);
  // A size no entry has, and a rank none has, trace afresh.
  for (const Shape& s : {Shape{101, 2}, Shape{3, 3}, Shape{2, 2, 2}}) {
    const auto x = input<float>(dev, s, 4);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 103u);
  EXPECT_EQ(f.cache_misses(), 103u);
}

TEST_P(Program, TheKeyHoldsTheDeviceTooAndTheGuardsStillDecide) {
  auto body = [](DeviceArray<float> x) { return x * 2.0f; };
  auto f = ferry::jit(body, ferry::CacheMode::static_shapes);
  ferry::Device other = ferry_test::make_device(GetParam());
  const auto here = input<float>(dev, Shape{3}, 1);
  const auto there = input<float>(other, Shape{3}, 1);
  expect_same(f(here), body(here));
  expect_same(f(there), body(there));  // same sizes, another device: its own entry
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f(there).device(), other);
  EXPECT_EQ(f(here).device(), dev);
  EXPECT_EQ(f.cache_hits(), 2u);
}

TEST_P(Program, EntriesThatPinDifferentLeavesAreAllFound) {
  // k > 5 pins k (a constant of the trace); k <= 5 does not: two kinds of key side by side.
  auto body = [](DeviceArray<float> x, SymInt k) {
    if (k > 5) return x * static_cast<float>(static_cast<int>(k));
    return x + 1.0f;
  };
  auto f = ferry::jit(body);
  const auto x = input<float>(dev, Shape{4}, 1);
  for (int k : {7, 2, 7, 8, 3, 8, 7, 5}) expect_same(f(x, k), body(x, k));
  EXPECT_EQ(f.cache_size(), 3u) << f.explain();  // k == 7, k == 8, k <= 5
  EXPECT_EQ(f.cache_hits(), 5u);
}

TEST_P(Program, StaticModeTreatsSymIntArgumentsAsConstants) {
  auto body = [](DeviceArray<float> x, SymInt k) {
    return x * static_cast<float>(static_cast<int>(k));
  };
  auto f = ferry::jit(body, ferry::CacheMode::static_shapes);
  const auto x = input<float>(dev, Shape{4}, 1);
  for (int k : {2, 3, 2}) expect_same(f(x, k), body(x, k));
  EXPECT_EQ(f.cache_size(), 2u);
}

TEST_P(Program, PlainIntegerParametersAreConstantsOfATrace) {
  auto body = [](DeviceArray<float> x, int axis) { return ferry::sum(x, {axis}); };
  auto f = ferry::jit(body);
  const auto x = input<float>(dev, Shape{3, 4}, 1);
  for (int axis : {0, 1, 0}) expect_same(f(x, axis), body(x, axis));
  EXPECT_EQ(f.cache_size(), 2u);
}

TEST_P(Program, TheSameArrayTwiceIsPartOfTheKey) {
  auto body = [](DeviceArray<float> a, DeviceArray<float> b) { return a * b; };
  auto f = ferry::jit(body);
  const auto x = input<float>(dev, Shape{5}, 1);
  const auto y = input<float>(dev, Shape{5}, 2);
  expect_same(f(x, x), body(x, x));
  expect_same(f(x, y), body(x, y));
  expect_same(f(y, y), body(y, y));
  EXPECT_EQ(f.cache_size(), 2u);
}

TEST_P(Program, CapturedArraysAreConstantsOfTheProgram) {
  const auto bias = input<float>(dev, Shape{4}, 5);
  auto body = [bias](DeviceArray<float> x) { return x + bias; };
  auto f = ferry::jit(body);
  for (int n : {1, 3, 2}) {
    const auto x = input<float>(dev, Shape{n, 4}, n);
    expect_same(f(x), body(x));
  }
  EXPECT_TRUE(contains(f.explain(), "const")) << f.explain();
}

// ---- refusals ----

TEST_P(Program, ATraceThatExportsIsNotCachedAndSaysWhy) {
  auto body = [](DeviceArray<float> x) {
    const auto h = x.to_host();
    return h.data()[0] > 0 ? x * 2.0f : x * 3.0f;
  };
  auto f = ferry::jit(body);
  for (int seed : {1, 2, 3}) {
    const auto x = input<float>(dev, Shape{4}, seed);
    expect_same(f(x), body(x));
  }
  EXPECT_EQ(f.cache_size(), 0u);
  EXPECT_EQ(f.cache_misses(), 3u);
  EXPECT_TRUE(contains(f.explain(), "not cached: to_host inside the traced function"))
      << f.explain();
}

TEST_P(Program, AStepNoProgramRecordsIsRefused) {
  auto f = ferry::jit([](DeviceArray<float> x) {
    return ferry::custom<float>(
        x.device(), "double", {x}, Shape{3},
        [](ferry::KernelArgs<float> k) {
          for (std::size_t i = 0; i < 3; ++i) k.output[i] = 2 * k.inputs[0][i];
        },
        ferry::Cost{});
  });
  const auto x = input<float>(dev, Shape{3}, 1);
  EXPECT_EQ(f(x).to_host().data()[1], 2 * values<float>(3, 1)[1]);
  EXPECT_EQ(f.cache_size(), 0u);
  EXPECT_TRUE(contains(f.explain(), "'double' cannot be replayed")) << f.explain();
}

TEST_P(Program, ImportsAndReadinessChecksAreRefused) {
  auto imports = ferry::jit([](DeviceArray<float> x) {
    return x + ferry::to_device(x.device(), std::vector<float>{1, 2}, Shape{2});
  });
  auto polls = ferry::jit([](DeviceArray<float> x) { return x.ready() ? x : x * 1.0f; });
  const auto x = input<float>(dev, Shape{2}, 1);
  (void)imports(x);
  (void)polls(x);
  EXPECT_EQ(imports.cache_size(), 0u);
  EXPECT_EQ(polls.cache_size(), 0u);
  EXPECT_TRUE(contains(polls.explain(), "ready()")) << polls.explain();
}

// ---- replay ----

TEST_P(Program, ReplayFusesAnElementwiseRunIntoOneStep) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> y) {
    auto t = ferry::relu(x * 2.0f + y);
    return ferry::sigmoid(t - 0.5f) * y;
  };
  auto f = ferry::jit(body);
  const auto x = input<float>(dev, Shape{33, 7}, 1);
  const auto y = input<float>(dev, Shape{33, 7}, 2);
  expect_same(f(x, y), body(x, y));  // the trace runs eagerly: 6 steps
  dev.reset_stats();
  const auto replayed = f(x, y);
  ferry::wait(replayed);
  EXPECT_EQ(dev.stats().steps, 1u);  // one fused kernel
  expect_same(replayed, body(x, y));
  EXPECT_TRUE(contains(f.explain(), "fused[multiply,add,relu,subtract,... 6 ops](in0, in1)"))
      << f.explain();
}

TEST_P(Program, ABiasIsFusedAsAnInputThatRepeats) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> b, DeviceArray<float> c) {
    auto t = ferry::relu(x + b) * 2.0f;  // b: (5,), repeating along x's rows
    return c - t;                        // c: (1, 5), first operand of the run's last op
  };
  auto f = ferry::jit(body);
  const auto b = input<float>(dev, Shape{5}, 7);
  const auto c = input<float>(dev, Shape{1, 5}, 8);
  for (int n : {3, 1, 6}) {
    const auto x = input<float>(dev, Shape{n, 5}, n);
    (void)f(x, b, c);
    dev.reset_stats();
    const auto got = f(x, b, c);
    ferry::wait(got);
    EXPECT_EQ(dev.stats().steps, 1u) << f.explain();
    expect_same(got, body(x, b, c));
  }
}

TEST_P(Program, OperandsThatDoNotRepeatAlongTheOutputFallBackToOneStepPerOp) {
  auto body = [](DeviceArray<float> col, DeviceArray<float> row) { return ferry::exp(col + row); };
  auto f = ferry::jit(body);
  const auto col = input<float>(dev, Shape{4, 1}, 1);
  const auto row = input<float>(dev, Shape{1, 3}, 2);
  (void)f(col, row);
  dev.reset_stats();
  const auto got = f(col, row);
  ferry::wait(got);
  EXPECT_EQ(dev.stats().steps, 2u);  // (4, 1) + (1, 3): the kernel cannot read either in place
  expect_same(got, body(col, row));
}

TEST_P(Program, ASmallerIntermediateIsNotFusedIntoALargerRun) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> b) { return x + ferry::exp(b * 0.5f); };
  auto f = ferry::jit(body);
  const auto x = input<float>(dev, Shape{4, 3}, 1);
  const auto b = input<float>(dev, Shape{3}, 2);
  (void)f(x, b);
  expect_same(f(x, b), body(x, b));
  EXPECT_TRUE(contains(f.explain(), "fused[multiply,exp](in1)")) << f.explain();
}

TEST_P(Program, AValueUsedTwiceEndsAFusedRun) {
  auto body = [](DeviceArray<float> x) {
    auto t = ferry::exp(x * 0.5f);
    return ferry::matmul(t + 1.0f, ferry::transpose(t));
  };
  auto f = ferry::jit(body);
  for (int n : {2, 5}) {
    const auto x = input<float>(dev, Shape{n, 3}, n);
    (void)f(x);
    expect_same(f(x), body(x));
  }
  EXPECT_TRUE(contains(f.explain(), "fused[multiply,exp](in0)")) << f.explain();
}

TEST_P(Program, FusedValuesMatchEagerForEveryElementType) {
  auto run = [&]<class T>(T scale) {
    auto body = [scale](DeviceArray<T> x, DeviceArray<T> y) {
      return ferry::maximum(x * scale - y, y) + ferry::abs(x);
    };
    auto f = ferry::jit(body);
    const auto x = input<T>(dev, Shape{5, 40}, 3);
    const auto y = input<T>(dev, Shape{5, 40}, 4);
    (void)f(x, y);
    expect_same(f(x, y), body(x, y));
  };
  run(1.5f);
  run(2.5);
  run(ferry::bfloat16(0.75f));
  run(std::int32_t{3});
  run(std::int64_t{-2});
}

TEST_P(Program, TiledInputsAreConvertedToTheDeclaredLayout) {
  auto f = ferry::jit([](DeviceArray<float> x) { return x * 3.0f + 1.0f; });
  EXPECT_THROW((void)f.input_layout(0), ferry::InvalidArgument);
  const ferry::Layout tiled{ferry::MemorySpace::dram, ferry::Order::tiled};
  const auto x = ferry::to_layout(input<float>(dev, Shape{40, 33}, 1), tiled);
  const auto first = f(x);
  EXPECT_EQ(f.input_layout(0), tiled);
  EXPECT_EQ(first.layout(), tiled);  // elementwise ops keep the tiles
  const auto row_major = input<float>(dev, Shape{40, 33}, 1);
  const auto second = f(row_major);  // converted to tiles on submit
  EXPECT_EQ(second.layout(), tiled);
  EXPECT_EQ(f.cache_size(), 1u);
  expect_same(ferry::to_layout(second, ferry::Layout{}), ferry::to_layout(first, ferry::Layout{}));
  EXPECT_THROW((void)f.input_layout(1), ferry::InvalidArgument);
}

TEST_P(Program, ProgramsStitchOnDeviceWithoutTheHost) {
  auto layer = ferry::jit([](DeviceArray<float> x, DeviceArray<float> w) {
    return ferry::relu(ferry::matmul(x, w));
  });
  auto head = ferry::jit([](DeviceArray<float> h) { return ferry::softmax(h, -1); });
  const auto w = input<float>(dev, Shape{6, 6}, 4);
  const auto x = input<float>(dev, Shape{3, 6}, 5);
  (void)head(layer(layer(x, w), w));  // traces both
  ferry::wait(w, x);
  dev.reset_stats();
  const auto y = head(layer(layer(x, w), w));
  EXPECT_EQ(dev.stats().bytes_h2d + dev.stats().bytes_d2h, 0u);
  EXPECT_EQ(dev.stats().host_syncs, 0u);
  expect_same(y,
              ferry::softmax(ferry::relu(ferry::matmul(ferry::relu(ferry::matmul(x, w)), w)), -1));
}

TEST_P(Program, AProgramCalledInsideAnotherIsPartOfItsTrace) {
  auto inner = ferry::jit([](DeviceArray<float> x) { return x + 1.0f; });
  auto outer = ferry::jit([&inner](DeviceArray<float> x) { return inner(x) * 2.0f; });
  for (int n : {2, 3}) {
    const auto x = input<float>(dev, Shape{n}, n);
    expect_same(outer(x), (x + 1.0f) * 2.0f);
  }
  EXPECT_EQ(outer.cache_size(), 1u);
  EXPECT_EQ(inner.cache_size(), 0u);  // never called on its own
}

// A module's training mode steers what the function submits (Dropout drops out only in
// training): a replay needs the mode the trace read, as PyTorch's compiled modules guard on it.
TEST_P(Program, AModulesTrainingModeIsGuarded) {
  ferry::nn::Dropout drop(0.5);
  auto f = ferry::jit([&drop](DeviceArray<float> x, ferry::random::Key key) {
    return drop(x, key) + 1.0f;
  });
  const auto x = input<float>(dev, Shape{64}, 1);
  const auto key = ferry::random::key(dev, 7);
  const auto dropped = ferry::random::dropout(key, x, 0.5) + 1.0f;
  expect_same(f(x, key), dropped);  // traced in training
  expect_same(f(x, key), dropped);  // replayed
  drop.eval();
  expect_same(f(x, key), x + 1.0f);  // the mode changed: traced again
  expect_same(f(x, key), x + 1.0f);
  drop.train();
  expect_same(f(x, key), dropped);  // the first entry again
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f.cache_misses(), 2u);
  EXPECT_EQ(f.cache_hits(), 3u);
  EXPECT_TRUE(contains(f.explain(), "a module in training mode"));
  EXPECT_TRUE(contains(f.explain(), "a module in evaluation mode"));

  // A module the function makes itself is made again, in its first mode, by any new trace:
  // nothing to guard once it is gone.
  auto local = ferry::jit([](DeviceArray<float> x) {
    ferry::nn::Dropout d(0.5);
    d.eval();
    return d(x) * 2.0f;
  });
  expect_same(local(x), x * 2.0f);
  expect_same(local(x), x * 2.0f);
  EXPECT_EQ(local.cache_hits(), 1u);
}

TEST_P(Program, ErrorsInsideTheFunctionReachTheCallerAndCacheNothing) {
  auto f = ferry::jit([](DeviceArray<float> x) { return ferry::reshape(x, Shape{7}); });
  EXPECT_THROW(f(input<float>(dev, Shape{2, 3}, 1)), ferry::ShapeError);
  EXPECT_EQ(f.cache_size(), 0u);
  EXPECT_THROW(f(DeviceArray<float>{}), ferry::InvalidArgument);
  const auto ok = f(input<float>(dev, Shape{7}, 1));  // still usable
  EXPECT_EQ(ok.shape(), Shape{7});
}

TEST_P(Program, WhereAndComparisonsReplay) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> y) {
    return ferry::where(ferry::greater(x, 0.0f), x * 2.0f, y) +
           ferry::where(ferry::less(x, y), 1.0f, x);
  };
  auto f = ferry::jit(body);
  for (int n : {2, 5, 3}) {
    const auto x = input<float>(dev, Shape{n, 3}, n);
    const auto y = input<float>(dev, Shape{3}, n + 1);
    expect_same(f(x, y), body(x, y));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(Program, UpdateSliceWithASymbolicPositionReplays) {
  auto step = ferry::jit([](DeviceArray<float> cache, DeviceArray<float> row, SymInt at) {
    return ferry::update_slice(cache, row, 0, at);
  });
  auto cache = ferry::zeros<float>(dev, Shape{4, 3});
  for (int t = 0; t < 4; ++t) {
    cache = step(cache, input<float>(dev, Shape{1, 3}, t), t);
  }
  const auto h = cache.to_host();
  for (int t = 0; t < 4; ++t) {
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(h(t, j), values<float>(3, t)[static_cast<std::size_t>(j)]);
  }
  EXPECT_EQ(step.cache_size(), 1u) << step.explain();
  EXPECT_THROW(step(cache, input<float>(dev, Shape{1, 3}, 0), 4), ferry::InvalidArgument);
}

TEST_P(Program, ReplayedMatmulChainsMatchEagerForNewSizes) {
  auto body = [](DeviceArray<float> x, DeviceArray<float> w, DeviceArray<float> v) {
    auto h = ferry::matmul(ferry::matmul(x, w), ferry::transpose(w));  // (n, k) -> (n, k)
    auto stacked = ferry::matmul(ferry::reshape(h, Shape{x.shape()[0], 1, x.shape()[1]}), w);
    return std::make_tuple(h, stacked, ferry::matmul(h, v), ferry::matmul(v, ferry::transpose(h)));
  };
  auto f = ferry::jit(body);
  const auto w = input<float>(dev, Shape{5, 3}, 2);
  const auto v = input<float>(dev, Shape{5}, 3);
  for (int n : {4, 1, 7, 2, 7}) {
    const auto x = input<float>(dev, Shape{n, 5}, n);
    const auto got = f(x, w, v);
    const auto want = body(x, w, v);
    expect_same(std::get<0>(got), std::get<0>(want));
    expect_same(std::get<1>(got), std::get<1>(want));  // batched: (n, 1, 5) x (5, 3)
    expect_same(std::get<2>(got), std::get<2>(want));  // matrix x vector
    expect_same(std::get<3>(got), std::get<3>(want));  // vector x matrix
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  EXPECT_EQ(f.cache_hits(), 4u);
}

TEST_P(Program, BatchedMatmulsReplayWithTheirBroadcasts) {
  auto body = [](DeviceArray<float> a, DeviceArray<float> b) { return ferry::matmul(a, b); };
  auto f = ferry::jit(body);
  struct Case {
    Shape a, b;
  };
  // Each second case makes the broadcasting decisions of the one before with other sizes.
  for (const Case& c :
       {Case{Shape{2, 3, 4}, Shape{1, 4, 5}}, Case{Shape{3, 3, 4}, Shape{1, 4, 2}},
        Case{Shape{2, 1, 2, 4}, Shape{3, 4, 6}}, Case{Shape{4, 1, 3, 7}, Shape{5, 7, 2}}}) {
    const auto a = input<float>(dev, c.a, 1);
    const auto b = input<float>(dev, c.b, 2);
    expect_same(f(a, b), body(a, b));
  }
  EXPECT_EQ(f.cache_hits(), 2u) << f.explain();
}

TEST_P(Program, AReplayedMatmulIsTheStepTheOpSubmits) {
  // The same calls on two fresh devices, eager on one and replayed on the other: the model sees
  // the same steps, so it tells the same story.
  auto body = [](DeviceArray<float> x, DeviceArray<float> w) {
    DeviceArray<float> h = ferry::matmul(x, w);
    h = ferry::matmul(h, w);
    return ferry::matmul(h, w);
  };
  auto f = ferry::jit(body);
  ferry::Device eager = ferry_test::make_device(GetParam());
  ferry::Device replayed = ferry_test::make_device(GetParam());
  ferry::wait(body(input<float>(eager, Shape{3, 16}, 1), input<float>(eager, Shape{16, 16}, 2)));
  ferry::wait(f(input<float>(replayed, Shape{3, 16}, 1), input<float>(replayed, Shape{16, 16}, 2)));
  eager.reset_stats();
  replayed.reset_stats();
  for (int n : {5, 9}) {
    const auto x = input<float>(eager, Shape{n, 16}, n);
    const auto w = input<float>(eager, Shape{16, 16}, 2);
    expect_same(body(x, w), body(x, w));
    const auto rx = input<float>(replayed, Shape{n, 16}, n);
    const auto rw = input<float>(replayed, Shape{16, 16}, 2);
    expect_same(f(rx, rw), f(rx, rw));
  }
  EXPECT_EQ(f.cache_hits(), 4u);
  const ferry::DeviceStats a = eager.stats();
  const ferry::DeviceStats b = replayed.stats();
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.unit_time, b.unit_time);
  EXPECT_EQ(a.peak_dram_bytes, b.peak_dram_bytes);
}

TEST_P(Program, AReplayedMatmulChainHasTheEagerTimelineSliceBySlice) {
  // Two fresh devices, one running a chain of matmuls eagerly and one replaying it: every slice
  // of the model's timeline (its name, engine, times, shape, type, bytes, flops and arrows) is
  // the same. A replayed step lends the op's name where the eager one copies it; the model
  // files both under the same interned name.
  auto body = [](DeviceArray<float> x, DeviceArray<float> w) {
    DeviceArray<float> h = x;
    for (int i = 0; i < 4; ++i) h = ferry::matmul(h, w);
    return h;
  };
  auto f = ferry::jit(body);
  ferry::Device eager = ferry_test::make_device(GetParam());
  ferry::Device replayed = ferry_test::make_device(GetParam());
  const auto w = input<float>(eager, Shape{8, 8}, 2);
  const auto rw = input<float>(replayed, Shape{8, 8}, 2);
  ferry::wait(body(input<float>(eager, Shape{8, 8}, 1), w));
  ferry::wait(f(input<float>(replayed, Shape{8, 8}, 1), rw));  // the trace
  eager.reset_stats();
  replayed.reset_stats();
  for (int n : {8, 3}) {
    const auto got = f(input<float>(replayed, Shape{n, 8}, n), rw);
    const auto want = body(input<float>(eager, Shape{n, 8}, n), w);
    expect_same(got, want);
  }
  EXPECT_EQ(f.cache_hits(), 2u) << f.explain();
  const std::vector<ferry_test::Slice> a = ferry_test::slices_of(eager);
  const std::vector<ferry_test::Slice> b = ferry_test::slices_of(replayed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(ferry_test::named(a, "matmul").size(), 8u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("slice " + std::to_string(i) + " " + std::string(a[i].name));
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].track, b[i].track);
    EXPECT_EQ(ferry_test::span_of(a[i]), ferry_test::span_of(b[i]));
    EXPECT_EQ(*a[i].shape, *b[i].shape);  // each device's own copy: the sizes
    EXPECT_EQ(a[i].dtype, b[i].dtype);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].flops, b[i].flops);
    EXPECT_EQ(a[i].producers.size(), b[i].producers.size());
  }
}

TEST_P(Program, AReplayedMatmulOfTiledInputsConvertsThemAsTheOpDoes) {
  const ferry::Layout tiled{ferry::MemorySpace::dram, ferry::Order::tiled};
  auto body = [](DeviceArray<float> x, DeviceArray<float> w) { return ferry::matmul(x, w) * 2.0f; };
  auto f = ferry::jit(body);
  const auto w = ferry::to_layout(input<float>(dev, Shape{33, 8}, 2), tiled);
  for (int n : {40, 3}) {
    const auto x = ferry::to_layout(input<float>(dev, Shape{n, 33}, n), tiled);
    const auto got = f(x, w);
    const auto want = body(x, w);
    EXPECT_EQ(got.layout(), want.layout());
    expect_same(got, want);
  }
  EXPECT_EQ(f.cache_hits(), 1u);
}

TEST_P(Program, AReplayReadingAForcedFreeArrayThrowsAsTheOpWould) {
  auto w = input<float>(dev, Shape{3, 3}, 2);
  auto f = ferry::jit([w](DeviceArray<float> x) { return ferry::matmul(x, w); });
  (void)f(input<float>(dev, Shape{2, 3}, 1));
  ferry::wait(w);
  ferry::deallocate(w, ferry::force);
  try {
    (void)f(input<float>(dev, Shape{4, 3}, 1));
    ADD_FAILURE() << "the replay read a freed array";
  } catch (const ferry::UseAfterFree& e) {
    EXPECT_TRUE(contains(e.what(), "[matmul]")) << e.what();
  }
}

TEST_P(Program, AFusedReplayReadingAForcedFreeArrayThrowsAsTheFirstOpWould) {
  // x * c + 1 replays as one fused kernel; with c freed it goes op by op, as the eager call
  // does, and names the op ("[multiply]", never the fused kernel's "fused[multiply,add]").
  auto c = input<float>(dev, Shape{4}, 2);
  auto f = ferry::jit([c](DeviceArray<float> x) { return x * c + 1.0f; });
  (void)f(input<float>(dev, Shape{4}, 1));
  (void)f(input<float>(dev, Shape{4}, 3));
  ferry::wait(c);
  ferry::deallocate(c, ferry::force);
  const std::string eager = message_of<ferry::UseAfterFree>(
      [&] { (void)(input<float>(dev, Shape{4}, 1) * c + 1.0f); });
  EXPECT_TRUE(contains(eager, "[multiply] ")) << eager;
  EXPECT_EQ(message_of<ferry::UseAfterFree>([&] { (void)f(input<float>(dev, Shape{4}, 1)); }),
            eager);
}

// ---- random programs: traced, replayed and eager agree exactly ----

/// A random program of elementwise ops, reductions, matmuls and shape ops over an (n, 6) input,
/// built from a seed so that the same function can run eagerly and as a program.
struct RandomProgram {
  unsigned seed;
  DeviceArray<float> operator()(DeviceArray<float> x, DeviceArray<float> w) const {
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    DeviceArray<float> v = x;
    DeviceArray<float> other = x;
    for (int i = 0; i < 12; ++i) {
      switch (pick(9)) {
        case 0: v = v + other; break;
        case 1: v = v * 0.75f; break;
        case 2: v = ferry::relu(v - 0.25f); break;
        case 3: v = ferry::tanh(v); break;
        case 4: v = ferry::maximum(v, other * -1.0f); break;
        case 5: v = ferry::matmul(v, w); break;
        case 6: v = v + ferry::sum(v, {0}, true); break;
        case 7: other = v; v = 2.0f - v; break;
        case 8: v = ferry::reshape(ferry::transpose(ferry::transpose(v)), v.shape()); break;
      }
    }
    return v;
  }
};

TEST_P(Program, RandomProgramsAgreeTracedReplayedAndEager) {
  const auto w = input<float>(dev, Shape{6, 6}, 77);
  for (unsigned seed = 0; seed < 25; ++seed) {
    SCOPED_TRACE("program seed " + std::to_string(seed));
    const RandomProgram body{seed};
    auto f = ferry::jit(body);
    for (int n : {3, 5, 3, 1}) {
      const auto x = input<float>(dev, Shape{n, 6}, static_cast<int>(seed) + n);
      expect_same(f(x, w), body(x, w));
    }
    EXPECT_GE(f.cache_hits(), 1u) << f.explain();
  }
}

TEST(ProgramCacheIndex, ALookupReturnsTheFirstMatchingEntryAcrossKeys) {
  using ferry::detail::CacheIndex;
  using ferry::detail::KeyLeaf;
  using ferry::detail::KeySchema;
  // Entries 0 and 2 pin argument 0 to 7; entry 1 pins nothing; entry 3 pins argument 0 to 8.
  const KeySchema pins{{}, {KeyLeaf{true, 0, 0}}};
  const KeySchema free{{}, {}};
  auto key = [](const KeySchema& s, std::int64_t arg) {
    const std::int64_t args[] = {arg};
    return ferry::detail::call_key(s, {{}, {}, args});
  };
  CacheIndex index;
  index.add(pins, key(pins, 7), 0);
  index.add(free, key(free, 0), 1);
  index.add(pins, key(pins, 7), 2);
  index.add(pins, key(pins, 8), 3);
  auto find = [&](std::int64_t arg, std::vector<std::uint32_t> accepted,
                  std::vector<std::uint32_t>* tried) {
    const std::int64_t args[] = {arg};
    return index.find({{}, {}, args}, [&](std::uint32_t at) {
      tried->push_back(at);
      return std::find(accepted.begin(), accepted.end(), at) != accepted.end();
    });
  };
  std::vector<std::uint32_t> tried;
  EXPECT_EQ(find(7, {0, 1, 2}, &tried), 0u);
  EXPECT_EQ(tried, (std::vector<std::uint32_t>{0}));  // entry 1 comes later: not tried
  tried.clear();
  EXPECT_EQ(find(7, {1, 2}, &tried), 1u);
  EXPECT_EQ(tried, (std::vector<std::uint32_t>{0, 2, 1}));
  tried.clear();
  EXPECT_EQ(find(7, {2}, &tried), 2u);
  // The last call is on the entry returned, so what it filled in is that entry's.
  EXPECT_EQ(tried, (std::vector<std::uint32_t>{0, 2, 1, 2}));
  tried.clear();
  EXPECT_EQ(find(8, {}, &tried), CacheIndex::kNone);
  EXPECT_EQ(tried, (std::vector<std::uint32_t>{3, 1}));  // never 0 or 2: another key
}

TEST(ProgramThreads, CallsFromManyThreadsShareOneCache) {
  ferry::Device dev(ferry::Executor(2));
  const auto w = input<float>(dev, Shape{4, 4}, 1);
  auto body = [w](DeviceArray<float> x) { return ferry::relu(ferry::matmul(x, w) + 1.0f); };
  auto f = ferry::jit(body);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const auto x = input<float>(dev, Shape{1 + (i + t) % 6, 4}, i);
        const auto got = f(x).to_host();
        const auto want = body(x).to_host();
        for (std::size_t k = 0; k < got.data().size(); ++k)
          failures[t] += got.data()[k] != want.data()[k];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int n : failures) EXPECT_EQ(n, 0);
  EXPECT_EQ(f.cache_hits() + f.cache_misses(), 100u);
  EXPECT_LE(f.cache_size(), 4u);  // concurrent first calls may each trace once
}

}  // namespace

}  // namespace test_program
