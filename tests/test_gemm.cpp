// The GEMM kernel: every element type against a plain reference loop on odd and empty sizes,
// every micro-kernel this CPU runs, batched and broadcast products through ferry::matmul, and
// the same bits whatever runs the chunks (1, 2, 8 threads, the manual executor, a runner that
// runs chunks backwards, one that runs them on threads of its own).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_gemm {

namespace {

using ferry::bfloat16;
using ferry::Shape;
using ferry::detail::GemmIsa;

struct Dims {
  std::int64_t m;
  std::int64_t k;
  std::int64_t n;
};

std::string to_string(const Dims& d) {
  return std::to_string(d.m) + "x" + std::to_string(d.k) + "x" + std::to_string(d.n);
}

/// Odd sizes (1, 7, 33, 257, 1023) on every side, skinny and non-square shapes, and the
/// sizes that cross the k blocking and the chunking.
const std::vector<Dims> kSizes = {{1, 1, 1},      {7, 7, 7},      {33, 33, 33},  {1, 7, 33},
                                  {33, 7, 1},     {7, 1023, 1},   {1023, 7, 1},  {257, 33, 7},
                                  {7, 33, 257},   {33, 257, 33},  {32, 784, 10}, {1023, 33, 65},
                                  {65, 33, 1023}, {257, 1023, 9}, {100, 800, 70}};

/// Operands with a wide spread of magnitudes, so a sum in another order would round
/// differently; integers large enough that their products wrap.
template <class T>
std::vector<T> operand(std::size_t count, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::vector<T> v(count);
  if constexpr (std::is_integral_v<T>) {
    for (auto& x : v) x = static_cast<T>(gen());
  } else {
    std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
    std::uniform_int_distribution<int> exponent(-12, 12);
    for (auto& x : v)
      x = static_cast<T>(static_cast<float>(std::ldexp(mantissa(gen), exponent(gen))));
  }
  return v;
}

/// Whether the micro-kernels fuse each multiply-add (x86 with AVX2 or AVX-512 do; the portable
/// kernel rounds the product first where the target has no FMA).
bool fuses(GemmIsa isa) { return isa != GemmIsa::portable; }

/// The plain loop: for each element, products in increasing k, in the accumulator type (float
/// for bfloat16 and float16, unsigned for integers), fused when `fused`, rounded to T once at
/// the end.
template <class T>
std::vector<T> reference(const std::vector<T>& a, const std::vector<T>& b, const Dims& d,
                         bool fused) {
  using A = ferry::kernels::matmul_acc_t<T>;
  std::vector<T> c(static_cast<std::size_t>(d.m * d.n));
  for (std::int64_t i = 0; i < d.m; ++i) {
    for (std::int64_t j = 0; j < d.n; ++j) {
      A acc = A(0);
      for (std::int64_t p = 0; p < d.k; ++p) {
        const A x = static_cast<A>(a[static_cast<std::size_t>(i * d.k + p)]);
        const A y = static_cast<A>(b[static_cast<std::size_t>(p * d.n + j)]);
        if constexpr (std::is_integral_v<T>) {
          acc += x * y;
        } else if (fused) {
          acc = std::fma(x, y, acc);
        } else {
          const A product = x * y;
          acc = acc + product;
        }
      }
      c[static_cast<std::size_t>(i * d.n + j)] = static_cast<T>(acc);
    }
  }
  return c;
}

template <class T>
std::uint64_t bits_of(T x) {
  if constexpr (ferry::HalfFloating<T>) {
    return x.bits;
  } else {
    std::uint64_t u = 0;
    std::memcpy(&u, &x, sizeof(T));
    return u;
  }
}

/// Expects the same bits element by element (all values here are finite).
template <class T>
void expect_same_bits(const std::vector<T>& expected, const std::vector<T>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  int failures = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (bits_of(expected[i]) != bits_of(actual[i]) && failures++ < 3) {
      ADD_FAILURE() << "at " << i << ": expected " << static_cast<double>(expected[i]) << ", got "
                    << static_cast<double>(actual[i]);
    }
  }
  EXPECT_EQ(failures, 0);
}

/// Expects c to be the plain loop's product of a and b: the same bits where the micro-kernel of
/// `isa` fuses its multiply-adds or the type makes fusing irrelevant (bfloat16 and float16
/// products are exact in float; integers are exact), within the error bound otherwise (a
/// portable kernel on a target with FMA may or may not fuse).
template <class T>
void expect_reference(const std::vector<T>& a, const std::vector<T>& b, const Dims& d,
                      const std::vector<T>& c, GemmIsa isa) {
  if (fuses(isa) || !std::is_same_v<T, ferry::kernels::matmul_acc_t<T>> || std::is_integral_v<T>) {
    expect_same_bits(reference(a, b, d, !std::is_integral_v<T>), c);
    return;
  }
  const auto r = reference(a, b, d, false);
  for (std::size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(static_cast<double>(c[i]), static_cast<double>(r[i]),
                1e-4 * (1 + std::abs(static_cast<double>(r[i]))))
        << "at " << i;
  }
}

/// Runs chunks last to first on the calling thread while claiming 8 threads, so a kernel
/// splits its work and any dependence on chunk order shows.
class ReverseRunner : public ferry::kernels::ChunkRunner {
 public:
  void run_chunks(std::int64_t chunks, void (*fn)(void*, std::int64_t),
                  void* context) const noexcept override {
    for (std::int64_t i = chunks; i-- > 0;) fn(context, i);
  }
  std::int64_t parallelism() const noexcept override { return 8; }
};

/// Runs chunks on `threads` threads of its own (the caller included), taking them in turn.
class ThreadRunner : public ferry::kernels::ChunkRunner {
 public:
  explicit ThreadRunner(int threads) : threads_(threads) {}
  void run_chunks(std::int64_t chunks, void (*fn)(void*, std::int64_t),
                  void* context) const noexcept override {
    std::atomic<std::int64_t> next{0};
    const auto work = [&] {
      for (std::int64_t i = next++; i < chunks; i = next++) fn(context, i);
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads_; ++t) helpers.emplace_back(work);
    work();
    for (auto& h : helpers) h.join();
  }
  std::int64_t parallelism() const noexcept override { return threads_; }

 private:
  int threads_;
};

template <class T>
class Gemm : public ::testing::Test {};
TYPED_TEST_SUITE(Gemm, ferry_test::NumericTypes);

TYPED_TEST(Gemm, MatchesThePlainLoopOnEveryMicroKernel) {
  using T = TypeParam;
  for (const Dims& d : kSizes) {
    SCOPED_TRACE(to_string(d));
    const auto a = operand<T>(static_cast<std::size_t>(d.m * d.k), 1);
    const auto b = operand<T>(static_cast<std::size_t>(d.k * d.n), 2);
    if constexpr (std::is_integral_v<T>) {
      std::vector<T> c(static_cast<std::size_t>(d.m * d.n));
      ferry::kernels::gemm(a.data(), b.data(), c.data(), d.m, d.k, d.n);
      expect_reference(a, b, d, c, ferry::detail::gemm_isa());
    } else {
      for (GemmIsa isa : {GemmIsa::portable, GemmIsa::avx2, GemmIsa::avx512}) {
        if (!ferry::detail::gemm_isa_supported(isa)) continue;
        SCOPED_TRACE("micro-kernel " + std::to_string(static_cast<int>(isa)));
        std::vector<T> c(static_cast<std::size_t>(d.m * d.n), T(7));
        ferry::detail::gemm_packed(isa, a.data(), b.data(), c.data(), d.m, d.k, d.n,
                                   ferry::kernels::inline_runner());
        expect_reference(a, b, d, c, isa);
      }
    }
  }
}

TYPED_TEST(Gemm, EmptyDimensionsWriteNothingAndEmptyKWritesZeros) {
  using T = TypeParam;
  std::vector<T> a(64, T(1));
  std::vector<T> b(64, T(1));
  std::vector<T> c(64, T(5));
  ferry::kernels::gemm(a.data(), b.data(), c.data(), 0, 8, 8);
  ferry::kernels::gemm(a.data(), b.data(), c.data(), 8, 8, 0);
  for (const T& x : c) EXPECT_EQ(static_cast<double>(x), 5.0);
  ferry::kernels::gemm(a.data(), b.data(), c.data(), 7, 0, 9);
  for (std::size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(static_cast<double>(c[i]), i < 63 ? 0.0 : 5.0) << "at " << i;
  }
}

TYPED_TEST(Gemm, SameBitsOnEveryRunner) {
  using T = TypeParam;
  const ReverseRunner reverse;
  const ThreadRunner threads2(2);
  const ThreadRunner threads3(3);
  for (const Dims& d : {Dims{300, 700, 200}, Dims{1023, 33, 257}, Dims{64, 64, 64}}) {
    SCOPED_TRACE(to_string(d));
    const auto a = operand<T>(static_cast<std::size_t>(d.m * d.k), 3);
    const auto b = operand<T>(static_cast<std::size_t>(d.k * d.n), 4);
    std::vector<T> inline_c(static_cast<std::size_t>(d.m * d.n));
    ferry::kernels::gemm(a.data(), b.data(), inline_c.data(), d.m, d.k, d.n);
    const std::vector<const ferry::kernels::ChunkRunner*> runners = {&reverse, &threads2,
                                                                     &threads3};
    for (const ferry::kernels::ChunkRunner* runner : runners) {
      std::vector<T> c(inline_c.size());
      ferry::kernels::gemm(a.data(), b.data(), c.data(), d.m, d.k, d.n, *runner);
      expect_same_bits(inline_c, c);
    }
  }
}

/// The product through ferry::matmul on a device of `threads` executor threads (0: manual).
template <class T>
std::vector<T> matmul_on(const ferry::Device& dev, const std::vector<T>& a, const Shape& sa,
                         const std::vector<T>& b, const Shape& sb) {
  const auto da = ferry::to_device(dev, a, sa);
  const auto db = ferry::to_device(dev, b, sb);
  const ferry::HostArray<T> out = ferry::matmul(da, db).to_host();
  return std::vector<T>(out.data().begin(), out.data().end());
}

TYPED_TEST(Gemm, MatmulGivesTheSameBitsOnEveryExecutor) {
  using T = TypeParam;
  // One large product (split over tiles) and a stack of products (split over the stack).
  const std::vector<std::pair<Shape, Shape>> cases = {{Shape{300, 500}, Shape{500, 190}},
                                                      {Shape{16, 64, 96}, Shape{16, 96, 80}}};
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(sa.to_string() + " x " + sb.to_string());
    const auto a = operand<T>(static_cast<std::size_t>(sa.numel()), 5);
    const auto b = operand<T>(static_cast<std::size_t>(sb.numel()), 6);
    const std::vector<T> first = matmul_on(ferry::Device::cpu(), a, sa, b, sb);
    for (int threads : {0, 1, 2, 8}) {
      SCOPED_TRACE(threads == 0 ? std::string("manual executor")
                                : std::to_string(threads) + " executor threads");
      expect_same_bits(first, matmul_on(ferry_test::make_device(threads), a, sa, b, sb));
    }
  }
}

TYPED_TEST(Gemm, BatchedAndBroadcastProductsMatchThePlainLoop) {
  using T = TypeParam;
  // (3, 1, m, k) x (4, k, n) -> (3, 4, m, n): a repeats over the 4, b over the 3.
  const Dims d{33, 17, 9};
  const Shape sa{3, 1, d.m, d.k};
  const Shape sb{4, d.k, d.n};
  const auto a = operand<T>(static_cast<std::size_t>(sa.numel()), 8);
  const auto b = operand<T>(static_cast<std::size_t>(sb.numel()), 9);
  for (int threads : {0, 2}) {
    const std::vector<T> got = matmul_on(ferry_test::make_device(threads), a, sa, b, sb);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(12 * d.m * d.n));
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t j = 0; j < 4; ++j) {
        SCOPED_TRACE("batch " + std::to_string(i) + ", " + std::to_string(j));
        const std::vector<T> ai(a.begin() + i * d.m * d.k, a.begin() + (i + 1) * d.m * d.k);
        const std::vector<T> bj(b.begin() + j * d.k * d.n, b.begin() + (j + 1) * d.k * d.n);
        const auto start = got.begin() + (i * 4 + j) * d.m * d.n;
        const std::vector<T> cij(start, start + d.m * d.n);
        expect_reference(ai, bj, d, cij, ferry::detail::gemm_isa());
      }
    }
  }
}

}  // namespace

}  // namespace test_gemm
