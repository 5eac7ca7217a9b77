// matmul: 2-D products of every numeric type against a textbook triple loop, sizes that cross
// the kernel's cache blocking, empty extents, broadcast batch dimensions, 1-D operands with
// NumPy semantics, integer wrap-around, bfloat16 rounding, and the errors thrown at the call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_matmul {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::Shape;
using ferry_test::for_each_executor;
using ferry_test::OnEachExecutor;
using ferry_test::random_values;

template <class T>
double to_double(T x) {
  if constexpr (ferry::HalfFloating<T>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

/// Unit roundoff of the type ferry accumulates a floating product in (float for float,
/// double for double): the error bound below scales with it.
template <class T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, double>)
    return 0x1p-53;
  else
    return 0x1p-24;
}

/// The dimensions of `s` without its last `drop`.
Shape leading(const Shape& s, std::size_t drop) { return Shape(s.dims().first(s.rank() - drop)); }

/// Checks `got`, ferry's product of a (shape sa) and b (shape sb), element by element against
/// the textbook loop under NumPy rules: a 1-D left operand is a row, a 1-D right operand a
/// column, batch dimensions broadcast. Per type, the reference is
///   - int32/int64: the sum of products in two's-complement (unsigned) arithmetic: exact;
///   - bfloat16, float16: products (exact in float) summed in float in increasing k, rounded
///     once: exact;
///   - float/double: summed in double; the result may differ by the accumulation error of the
///     type, bounded by (k + 2) * u * sum |a_ik * b_kj| (doubled for the reference's own error).
template <class T>
void expect_matmul(const std::vector<T>& va, const Shape& sa, const std::vector<T>& vb,
                   const Shape& sb, const ferry::HostArray<T>& got) {
  const Shape pa = sa.rank() == 1 ? Shape{std::int64_t{1}, sa[0]} : sa;
  const Shape pb = sb.rank() == 1 ? Shape{sb[0], std::int64_t{1}} : sb;
  const std::int64_t m = pa.dims()[pa.rank() - 2];
  const std::int64_t k = pa.dims()[pa.rank() - 1];
  const std::int64_t n = pb.dims()[pb.rank() - 1];
  ASSERT_EQ(pb.dims()[pb.rank() - 2], k);
  const Shape ba = leading(pa, 2);
  const Shape bb = leading(pb, 2);
  // The broadcast batch shape, aligned at the right.
  const std::size_t nb = std::max(ba.rank(), bb.rank());
  std::vector<std::int64_t> full(nb + 2);
  for (std::size_t i = 0; i < nb; ++i) {
    const std::int64_t da = i < ba.rank() ? ba.dims()[ba.rank() - 1 - i] : 1;
    const std::int64_t db = i < bb.rank() ? bb.dims()[bb.rank() - 1 - i] : 1;
    ASSERT_TRUE(da == db || da == 1 || db == 1);
    full[nb - 1 - i] = da == 1 ? db : da;
  }
  full[nb] = m;
  full[nb + 1] = n;
  const Shape full_shape{std::span<const std::int64_t>(full)};
  // The result drops the promoted size-1 dimensions, which leaves the row-major order alone.
  ASSERT_EQ(got.shape().numel(), full_shape.numel());

  int failures = 0;
  std::ostringstream first;
  for (std::int64_t f = 0; f < full_shape.numel(); ++f) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(f, full_shape);
    const std::vector<std::int64_t> bidx(idx.begin(),
                                         idx.begin() + static_cast<std::ptrdiff_t>(nb));
    const std::int64_t i = idx[nb];
    const std::int64_t j = idx[nb + 1];
    const std::int64_t a0 = (ferry_test::broadcast_source(bidx, ba) * m + i) * k;
    const std::int64_t b0 = ferry_test::broadcast_source(bidx, bb) * k * n + j;
    double sum = 0;
    double bound = 0;
    float fsum = 0;
    std::uint64_t usum = 0;
    for (std::int64_t p = 0; p < k; ++p) {
      const T x = va[static_cast<std::size_t>(a0 + p)];
      const T y = vb[static_cast<std::size_t>(b0 + p * n)];
      sum += to_double(x) * to_double(y);
      bound += std::abs(to_double(x) * to_double(y));
      if constexpr (ferry::HalfFloating<T>) {
        fsum += static_cast<float>(x) * static_cast<float>(y);
      }
      if constexpr (std::is_integral_v<T>) {
        usum += static_cast<std::uint64_t>(x) * static_cast<std::uint64_t>(y);
      }
    }
    const T actual = got.data()[static_cast<std::size_t>(f)];
    bool ok = false;
    std::ostringstream expected;
    if constexpr (std::is_integral_v<T>) {
      const T e = static_cast<T>(static_cast<std::make_unsigned_t<T>>(usum));
      ok = actual == e;
      expected << +e;  // a number, not a character, for int8 and uint8
    } else if constexpr (ferry::HalfFloating<T>) {
      const T e(fsum);
      ok = actual.bits == e.bits;
      expected << static_cast<float>(e);
    } else {
      const double tol = 2.0 * static_cast<double>(k + 2) * unit_roundoff<T>() * bound;
      ok = std::abs(static_cast<double>(actual) - sum) <= tol;
      expected << sum << " +- " << tol;
    }
    if (!ok && failures++ == 0) {
      first << "first mismatch at flat " << f << ": expected " << expected.str() << ", got "
            << to_double(actual);
    }
  }
  EXPECT_EQ(failures, 0) << first.str();
}

/// Imports random operands of shapes sa and sb, multiplies them, checks the result's shape at
/// the call and its values after the export.
template <class T>
void check_random(const ferry::Device& dev, const Shape& sa, const Shape& sb, const Shape& out,
                  unsigned seed) {
  SCOPED_TRACE(sa.to_string() + " x " + sb.to_string());
  const std::vector<T> va = random_values<T>(static_cast<std::size_t>(sa.numel()), seed);
  const std::vector<T> vb = random_values<T>(static_cast<std::size_t>(sb.numel()), seed + 7);
  const auto a = ferry::to_device(dev, va, sa);
  const auto b = ferry::to_device(dev, vb, sb);
  const auto c = ferry::matmul(a, b);
  EXPECT_EQ(c.shape(), out);  // metadata is known when the call returns
  const ferry::HostArray<T> h = c.to_host();
  EXPECT_EQ(h.shape(), out);
  expect_matmul(va, sa, vb, sb, h);
}

template <class T>
std::vector<double> host_doubles(const ferry::HostArray<T>& h) {
  std::vector<double> out;
  for (const T& x : h.data()) out.push_back(to_double(x));
  return out;
}

/// `values` as T holds them: integers wrap into a narrow type (int8 139 is -117).
template <class T>
std::vector<double> as_held(std::vector<double> values) {
  if constexpr (std::is_integral_v<T>) {
    for (double& v : values) v = static_cast<double>(static_cast<T>(static_cast<std::int64_t>(v)));
  }
  return values;
}

template <class T>
class Matmul : public ::testing::Test {};
TYPED_TEST_SUITE(Matmul, ferry_test::NumericTypes);

TYPED_TEST(Matmul, SmallProductHasKnownValues) {
  using T = TypeParam;
  // Written out by hand so the check does not rest on the reference loop alone; every value
  // is exact in every element type, bfloat16 included.
  for_each_executor([](const ferry::Device& dev) {
    const auto a =
        ferry::to_device(dev, std::vector<T>{T(1), T(2), T(3), T(4), T(5), T(6)}, Shape{2, 3});
    const auto b =
        ferry::to_device(dev, std::vector<T>{T(7), T(8), T(9), T(10), T(11), T(12)}, Shape{3, 2});
    const auto h = ferry::matmul(a, b).to_host();
    ASSERT_EQ(h.shape(), (Shape{2, 2}));
    EXPECT_EQ(host_doubles(h), as_held<T>({58, 64, 139, 154}));
    const auto ht = ferry::matmul(b, a).to_host();
    ASSERT_EQ(ht.shape(), (Shape{3, 3}));
    EXPECT_EQ(host_doubles(ht), as_held<T>({39, 54, 69, 49, 68, 87, 59, 82, 105}));
  });
}

TYPED_TEST(Matmul, MatchesTheTextbookLoopAcrossBlockSizes) {
  using T = TypeParam;
  // The kernel blocks k by 128 and n by 512: these sizes sit on, just past and well past those
  // edges, plus odd and degenerate ones (a single row, column or inner element).
  struct Size {
    std::int64_t m, k, n;
  };
  const Size sizes[] = {{1, 1, 1},     {1, 7, 1},      {13, 17, 11}, {3, 300, 600}, {5, 129, 513},
                        {7, 128, 512}, {2, 257, 1025}, {64, 1, 64},  {1, 513, 3},   {33, 127, 511}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 1;
    for (const Size& s : sizes) {
      check_random<T>(dev, Shape{s.m, s.k}, Shape{s.k, s.n}, Shape{s.m, s.n}, seed++);
    }
  });
}

TYPED_TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    // A sum of no products is 0, however large m and n are.
    const auto a = ferry::to_device(dev, std::vector<T>{}, Shape{3, 0});
    const auto b = ferry::to_device(dev, std::vector<T>{}, Shape{0, 4});
    const auto h = ferry::matmul(a, b).to_host();
    ASSERT_EQ(h.shape(), (Shape{3, 4}));
    EXPECT_EQ(host_doubles(h), std::vector<double>(12, 0.0));
    // The same through batches and 1-D operands.
    check_random<T>(dev, Shape{2, 3, 0}, Shape{0, 5}, Shape{2, 3, 5}, 3);
    check_random<T>(dev, Shape{0}, Shape{0, 5}, Shape{5}, 4);
    const auto dot = ferry::matmul(ferry::to_device(dev, std::vector<T>{}, Shape{0}),
                                   ferry::to_device(dev, std::vector<T>{}, Shape{0}));
    ASSERT_EQ(dot.shape(), Shape{});
    EXPECT_EQ(host_doubles(dot.to_host()), std::vector<double>{0.0});
  });
}

TYPED_TEST(Matmul, EmptyRowsColumnsOrBatchesGiveEmptyResults) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    check_random<T>(dev, Shape{0, 5}, Shape{5, 3}, Shape{0, 3}, 1);
    check_random<T>(dev, Shape{4, 5}, Shape{5, 0}, Shape{4, 0}, 2);
    check_random<T>(dev, Shape{0, 2, 3}, Shape{3, 4}, Shape{0, 2, 4}, 3);
    check_random<T>(dev, Shape{1, 2, 3}, Shape{0, 3, 4}, Shape{0, 2, 4}, 4);
  });
}

TYPED_TEST(Matmul, BatchDimensionsBroadcast) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    check_random<T>(dev, Shape{2, 3, 4, 5}, Shape{5, 6}, Shape{2, 3, 4, 6}, 11);
    check_random<T>(dev, Shape{4, 1, 2, 3}, Shape{5, 3, 2}, Shape{4, 5, 2, 2}, 12);
    check_random<T>(dev, Shape{1, 2, 3}, Shape{7, 3, 4}, Shape{7, 2, 4}, 13);
    check_random<T>(dev, Shape{4, 5}, Shape{2, 3, 5, 6}, Shape{2, 3, 4, 6}, 14);
    check_random<T>(dev, Shape{3, 1, 2, 4}, Shape{1, 5, 4, 3}, Shape{3, 5, 2, 3}, 15);
    check_random<T>(dev, Shape{6, 2, 3}, Shape{6, 3, 2}, Shape{6, 2, 2}, 16);
  });
}

TYPED_TEST(Matmul, OneDimensionalOperandsFollowNumpy) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    // A 1-D left operand is a row vector and a 1-D right one a column; the promoted dimension
    // is dropped from the result.
    check_random<T>(dev, Shape{5}, Shape{5, 3}, Shape{3}, 21);
    check_random<T>(dev, Shape{4, 5}, Shape{5}, Shape{4}, 22);
    check_random<T>(dev, Shape{5}, Shape{5}, Shape{}, 23);
    check_random<T>(dev, Shape{300}, Shape{300}, Shape{}, 24);
    check_random<T>(dev, Shape{5}, Shape{2, 5, 3}, Shape{2, 3}, 25);
    check_random<T>(dev, Shape{2, 4, 5}, Shape{5}, Shape{2, 4}, 26);
    // (1, 2, 3) . (1, 2, 3) = 14: a literal, independent of the reference loop.
    const auto v = ferry::to_device(dev, std::vector<T>{T(1), T(2), T(3)}, Shape{3});
    EXPECT_EQ(host_doubles(ferry::matmul(v, v).to_host()), std::vector<double>{14});
  });
}

template <class T>
class MatmulInt : public ::testing::Test {};
using IntTypes = ::testing::Types<std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(MatmulInt, IntTypes);

TYPED_TEST(MatmulInt, ProductsAndSumsWrapInTwosComplement) {
  using T = TypeParam;
  using U = std::make_unsigned_t<T>;
  constexpr int kBits = std::numeric_limits<U>::digits;
  for_each_executor([](const ferry::Device& dev) {
    // Products and sums that leave the range of T: the result is the exact value modulo
    // 2^bits, read back as two's complement.
    const T quarter = static_cast<T>(U(1) << (kBits - 2));
    const T mx = std::numeric_limits<T>::max();
    const T mn = std::numeric_limits<T>::min();
    const auto a = ferry::to_device(dev, std::vector<T>{quarter, 7, mx, 0, mn, 1}, Shape{3, 2});
    const auto b = ferry::to_device(dev, std::vector<T>{4, 1, 3, mx}, Shape{2, 2});
    const auto h = ferry::matmul(a, b).to_host();
    ASSERT_EQ(h.shape(), (Shape{3, 2}));
    // Row 0: quarter*4 + 7*3 = 2^bits + 21 -> 21;  quarter*1 + 7*max wraps as computed in U.
    // Row 1: max*4 -> -4;  max*1 + 0 = max.
    // Row 2: min*4 + 1*3 -> 3;  min*1 + max = -1.
    const T r01 = static_cast<T>(static_cast<U>(quarter) + U(7) * static_cast<U>(mx));
    const std::vector<T> expected{21, r01, -4, mx, 3, -1};
    EXPECT_EQ(std::vector<T>(h.data().begin(), h.data().end()), expected);

    // Full-range random operands overflow in nearly every product and sum.
    std::mt19937_64 gen(99);
    std::uniform_int_distribution<T> dist(mn, mx);
    std::vector<T> va(4 * 37);
    std::vector<T> vb(37 * 5);
    for (T& x : va) x = dist(gen);
    for (T& x : vb) x = dist(gen);
    const auto c = ferry::matmul(ferry::to_device(dev, va, Shape{4, 37}),
                                 ferry::to_device(dev, vb, Shape{37, 5}));
    expect_matmul(va, Shape{4, 37}, vb, Shape{37, 5}, c.to_host());
  });
}

class MatmulBfloat16 : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(MatmulBfloat16);

TEST_P(MatmulBfloat16, RoundsOnceFromAFloatAccumulation) {
  using ferry::bfloat16;
  const float u8 = 0x1p-8f;  // half a bfloat16 ulp at 1
  // 1 + 2^-8 + 2^-8: exact in float, so the result is 1 + 2^-7. Rounding to bfloat16 after
  // each product would give 1 twice (each partial sum is a tie that rounds to even).
  const auto a = ferry::to_device(dev, std::vector<bfloat16>{1.0f, u8, u8}, Shape{1, 3});
  const auto ones = ferry::to_device(dev, std::vector<bfloat16>{1.0f, 1.0f, 1.0f}, Shape{3, 1});
  EXPECT_EQ(static_cast<float>(ferry::matmul(a, ones).to_host()(0, 0)), 1.0f + 0x1p-7f);
  // 2^24 + 1 - 2^24: the float accumulator loses the 1 (2^24 + 1 is a tie that rounds to
  // even), so the sum is 0; a double accumulator would keep it and give 1.
  const auto p = ferry::to_device(dev, std::vector<bfloat16>{0x1p12f, 1.0f, -0x1p12f}, Shape{3});
  const auto q = ferry::to_device(dev, std::vector<bfloat16>{0x1p12f, 1.0f, 0x1p12f}, Shape{3});
  EXPECT_EQ(static_cast<float>(ferry::matmul(p, q).to_host()()), 0.0f);
  // 1 + 2^-8 + 2^-30: float drops the 2^-30, leaving 1 + 2^-8, a tie between two bfloat16
  // neighbours, which rounds to the even one, 1.
  const auto x = ferry::to_device(dev, std::vector<bfloat16>{1.0f, 0x1p-4f, 0x1p-15f}, Shape{3});
  EXPECT_EQ(static_cast<float>(ferry::matmul(x, x).to_host()()), 1.0f);
}

class MatmulFloat16 : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(MatmulFloat16);

TEST_P(MatmulFloat16, AccumulatesInFloatAndRoundsOnce) {
  using ferry::float16;
  const float u11 = 0x1p-11f;  // half a float16 ulp at 1
  // 1 + 2^-11 + 2^-11 is 1 + 2^-10 in float; rounding to float16 after each product would give
  // 1 twice (each partial sum a tie that rounds to even).
  const auto a = ferry::to_device(dev, std::vector<float16>{1.0f, u11, u11}, Shape{1, 3});
  const auto ones = ferry::to_device(dev, std::vector<float16>{1.0f, 1.0f, 1.0f}, Shape{3, 1});
  EXPECT_EQ(static_cast<float>(ferry::matmul(a, ones).to_host()(0, 0)), 1.0f + 0x1p-10f);
  // 2048 + 1 + 1 + 1 + 1 = 2052, a float16; half partial sums would stay at 2048.
  const auto big =
      ferry::to_device(dev, std::vector<float16>{2048.0f, 1.0f, 1.0f, 1.0f, 1.0f}, Shape{5});
  const auto five = ferry::ones<float16>(dev, Shape{5});
  EXPECT_EQ(static_cast<float>(ferry::matmul(big, five).to_host()()), 2052.0f);
  // 2^24 + 1 - 2^24: a float accumulator loses the 1 (a tie to even); double would keep it.
  const auto p = ferry::to_device(dev, std::vector<float16>{4096.0f, 1.0f, -4096.0f}, Shape{3});
  const auto q = ferry::to_device(dev, std::vector<float16>{4096.0f, 1.0f, 4096.0f}, Shape{3});
  EXPECT_EQ(static_cast<float>(ferry::matmul(p, q).to_host()()), 0.0f);
  // A sum past 65504 is infinity once rounded, though every product is finite.
  const auto wide = ferry::full<float16>(dev, Shape{1, 2}, float16(40000.0f));
  const auto two = ferry::ones<float16>(dev, Shape{2, 1});
  EXPECT_TRUE(std::isinf(static_cast<float>(ferry::matmul(wide, two).to_host()(0, 0))));
}

class MatmulMetadata : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(MatmulMetadata);

TEST_P(MatmulMetadata, OperandsAreLeftUntouched) {
  // matmul may not write into its inputs: both are read again after the product.
  const std::vector<double> va = random_values<double>(6 * 4, 5);
  const std::vector<double> vb = random_values<double>(4 * 3, 6);
  const auto a = ferry::to_device(dev, va, Shape{6, 4});
  const auto b = ferry::to_device(dev, vb, Shape{4, 3});
  const auto c = ferry::matmul(a, b);
  const auto d = ferry::matmul(c, ferry::to_device(dev, std::vector<double>{1, 0, 0}, Shape{3}));
  const auto [ha, hb, hc, hd] = ferry::to_host(a, b, c, d);
  EXPECT_EQ(std::vector<double>(ha.data().begin(), ha.data().end()), va);
  EXPECT_EQ(std::vector<double>(hb.data().begin(), hb.data().end()), vb);
  expect_matmul(va, Shape{6, 4}, vb, Shape{4, 3}, hc);
  // d is the first column of c: chained products see the finished first one.
  ASSERT_EQ(hd.shape(), Shape{6});
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(hd(i), hc(i, 0));
}

TEST(MatmulManual, ShapeIsKnownBeforeAnythingRuns) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto a = ferry::ones<float>(dev, Shape{2, 1, 3, 4});
  const auto b = ferry::ones<float>(dev, Shape{5, 4, 6});
  const auto c = ferry::matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 5, 3, 6}));
  EXPECT_FALSE(c.ready());
  const auto h = c.to_host();
  EXPECT_EQ(h.data().size(), 2u * 5 * 3 * 6);
  for (float x : h.data()) EXPECT_EQ(x, 4.0f);  // each element sums k = 4 products of ones
}

// ---- errors: all thrown at the call, before anything is submitted ----

class MatmulErrors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(MatmulErrors);

TEST_P(MatmulErrors, RankZeroOperands) {
  const auto s = ferry::to_device(dev, {2.0f}, Shape{});
  const auto v = ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{3});
  expect_error<ferry::ShapeError>([&] { (void)ferry::matmul(s, v); },
                                  "[matmul] needs arrays of rank 1 or more, got () x (3)");
  EXPECT_THROW((void)ferry::matmul(v, s), ferry::ShapeError);
  EXPECT_THROW((void)ferry::matmul(s, s), ferry::ShapeError);
}

TEST_P(MatmulErrors, InnerSizesDiffer) {
  const auto x = ferry::zeros<float>(dev, Shape{32, 784});
  const auto w = ferry::zeros<float>(dev, Shape{785, 10});
  expect_error<ferry::ShapeError>([&] { (void)ferry::matmul(x, w); },
                                  "[matmul] inner sizes differ: (32, 784) x (785, 10)");
  // The same check for 1-D and batched operands, named by their own (unpromoted) shapes.
  const auto v3 = ferry::zeros<std::int32_t>(dev, Shape{3});
  const auto v4 = ferry::zeros<std::int32_t>(dev, Shape{4});
  expect_error<ferry::ShapeError>([&] { (void)ferry::matmul(v3, v4); },
                                  "[matmul] inner sizes differ: (3) x (4)");
  EXPECT_THROW((void)ferry::matmul(ferry::zeros<double>(dev, Shape{2, 3, 4}),
                                   ferry::zeros<double>(dev, Shape{2, 3, 4})),
               ferry::ShapeError);
  EXPECT_THROW((void)ferry::matmul(ferry::zeros<double>(dev, Shape{3, 0}),
                                   ferry::zeros<double>(dev, Shape{1, 3})),
               ferry::ShapeError);
}

TEST_P(MatmulErrors, BatchDimensionsThatDoNotBroadcast) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3, 4});
  const auto b = ferry::zeros<float>(dev, Shape{3, 4, 5});
  expect_error<ferry::ShapeError>(
      [&] { (void)ferry::matmul(a, b); },
      "[matmul] batch dimensions (2) and (3) do not broadcast: (2, 3, 4) x (3, 4, 5)");
  EXPECT_THROW((void)ferry::matmul(ferry::zeros<float>(dev, Shape{4, 2, 1, 3}),
                                   ferry::zeros<float>(dev, Shape{3, 5, 3, 2})),
               ferry::ShapeError);
  // 0 broadcasts only with 1.
  EXPECT_THROW((void)ferry::matmul(ferry::zeros<float>(dev, Shape{0, 1, 3}),
                                   ferry::zeros<float>(dev, Shape{2, 3, 1})),
               ferry::ShapeError);
}

TEST_P(MatmulErrors, OperandsOnTwoDevices) {
  ferry::Device other = ferry_test::make_device(GetParam());
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  const auto b = ferry::zeros<float>(other, Shape{3, 2});
  expect_error<ferry::DeviceMismatch>(
      [&] { (void)ferry::matmul(a, b); },
      "[matmul] arrays live on different devices: " + dev.name() + " and " + other.name());
  EXPECT_THROW((void)ferry::matmul(b, a), ferry::DeviceMismatch);
  // Checked before the shapes: these shapes would not multiply either.
  EXPECT_THROW((void)ferry::matmul(a, ferry::zeros<float>(other, Shape{5, 2})),
               ferry::DeviceMismatch);
}

TEST_P(MatmulErrors, EmptyHandles) {
  const ferry::DeviceArray<double> empty;
  const auto a = ferry::zeros<double>(dev, Shape{2, 2});
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::matmul(empty, a); },
      "[matmul] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  EXPECT_THROW((void)ferry::matmul(a, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::matmul(empty, empty), ferry::InvalidArgument);
}

}  // namespace

}  // namespace test_matmul
