// Intra-op parallelism: ThreadPool::run_chunks itself (every chunk once, the caller taking part
// when every worker is blocked, nested calls, host threads, exceptions through parallel_for),
// and every bandwidth-bound kernel against a plain reference loop on odd sizes, split over
// runners of 1, 2 and 8 threads and run inline, which must all give the same bits; then the
// ops on devices of both executors.
//
// The chunk size (kernels::kChunkBytes, 192 KiB moved per chunk) was measured on the 2-core
// development machine: an add of n floats split over a 2-worker pool first beats the plain
// loop at n = 32K-64K (384-768 KiB moved); below that the wake-up of a sleeping worker costs
// more than the half it takes over. So a kernel moving less than one chunk runs inline.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_parallel_kernels {

namespace {

using ferry_test::values_of;

using ferry::bfloat16;
using ferry::Shape;
using ferry::detail::Strides;
using ferry::detail::ThreadPool;
using ferry::kernels::ChunkRunner;

// ---------------------------------------------------------------------------------------------
// ThreadPool::run_chunks

struct Counts {
  std::vector<std::atomic<int>> hits;
  explicit Counts(std::int64_t n) : hits(static_cast<std::size_t>(n)) {}
};

void count_chunk(void* p, std::int64_t i) {
  static_cast<Counts*>(p)->hits[static_cast<std::size_t>(i)].fetch_add(1);
}

TEST(RunChunks, RunsEveryChunkExactlyOnce) {
  for (std::size_t threads : {1u, 2u, 8u}) {
    ThreadPool pool(threads);
    for (std::int64_t chunks : {0, 1, 2, 7, 33, 1000}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(chunks) + " chunks");
      Counts counts(chunks);
      pool.run_chunks(chunks, &count_chunk, &counts);
      for (const auto& h : counts.hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

// A thread whose t_wake_for_chunks is above a job's chunk count (a waiter running steps in a
// worker's stead: runtime/wait_driver.hpp) wakes no sleeping worker for it: its chunks still run
// once each, on the caller and on any worker awake, and the job ends with nobody woken for it.
TEST(RunChunks, AJobThatWakesNobodyStillRunsEveryChunkOnce) {
  namespace d = ferry::detail;
  for (std::size_t threads : {1u, 2u, 8u}) {
    ThreadPool pool(threads);
    // Long past their spin (ThreadPool::kSpinFor): the workers are asleep, or nearly.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::int64_t outer = std::exchange(d::t_wake_for_chunks, std::int64_t{1000});
    for (std::int64_t chunks : {1, 2, 7, 33, 999}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(chunks) + " chunks");
      Counts counts(chunks);
      pool.run_chunks(chunks, &count_chunk, &counts);
      for (const auto& h : counts.hits) ASSERT_EQ(h.load(), 1);
    }
    d::t_wake_for_chunks = outer;
  }
  EXPECT_EQ(d::t_wake_for_chunks, 2);
}

TEST(RunChunks, ParallelismCountsTheCallerOnlyWhenSomeoneCanHelp) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.parallelism(), 4);  // a host thread plus three workers
  std::int64_t inside = 0;
  ferry::kernels::parallel_for(pool, 2, 1, [&](std::int64_t, std::int64_t) {
    // Both ranges may write: the value is the same. (Only for the check below.)
    if (pool.parallelism() == 1) __atomic_store_n(&inside, 1, __ATOMIC_RELAXED);
  });
  EXPECT_EQ(__atomic_load_n(&inside, __ATOMIC_RELAXED), 1);
  EXPECT_EQ(ferry::kernels::inline_runner().parallelism(), 1);
  ferry::detail::ManualExecutor manual;
  EXPECT_EQ(manual.parallelism(), 1);
}

TEST(RunChunks, CallerRunsEveryChunkWhenAllWorkersAreBlocked) {
  for (std::size_t threads : {1u, 2u, 4u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    ThreadPool pool(threads);
    // Job A: threads + 1 chunks that block until released, so its caller and every worker end
    // up inside it (a worker finds A while idle; the caller claims a chunk itself).
    std::mutex m;
    std::condition_variable cv;
    int entered = 0;
    bool release = false;
    std::thread a([&] {
      ferry::kernels::parallel_for(pool, static_cast<std::int64_t>(threads) + 1, 1,
                                   [&](std::int64_t, std::int64_t) {
                                     std::unique_lock lock(m);
                                     ++entered;
                                     cv.notify_all();
                                     cv.wait(lock, [&] { return release; });
                                   });
    });
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return entered == static_cast<int>(threads) + 1; });
    }
    // Job B from another host thread: nobody can help, so its caller runs all of it.
    std::set<std::thread::id> ran_on;
    std::mutex ran_m;
    std::int64_t sum = 0;
    ferry::kernels::parallel_for(pool, 100, 1, [&](std::int64_t begin, std::int64_t end) {
      std::lock_guard lock(ran_m);
      ran_on.insert(std::this_thread::get_id());
      for (std::int64_t i = begin; i < end; ++i) sum += i;
    });
    EXPECT_EQ(sum, 4950);
    EXPECT_EQ(ran_on, std::set<std::thread::id>{std::this_thread::get_id()});
    {
      std::lock_guard lock(m);
      release = true;
    }
    cv.notify_all();
    a.join();
  }
}

TEST(RunChunks, NestedCallsRunInlineOnTheChunksThread) {
  ThreadPool pool(4);
  std::atomic<int> mismatched{0};
  Counts inner(64 * 16);
  ferry::kernels::parallel_for(pool, 64, 1, [&](std::int64_t o, std::int64_t) {
    const auto outer_thread = std::this_thread::get_id();
    ferry::kernels::parallel_for(pool, 16, 1, [&](std::int64_t i, std::int64_t) {
      if (std::this_thread::get_id() != outer_thread) mismatched.fetch_add(1);
      inner.hits[static_cast<std::size_t>(o * 16 + i)].fetch_add(1);
    });
  });
  EXPECT_EQ(mismatched.load(), 0);
  for (const auto& h : inner.hits) ASSERT_EQ(h.load(), 1);
}

TEST(RunChunks, ManyHostThreadsAtOnce) {
  ThreadPool pool(2);
  std::vector<std::thread> hosts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 6; ++t) {
    hosts.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        Counts counts(37);
        pool.run_chunks(37, &count_chunk, &counts);
        for (const auto& h : counts.hits) {
          if (h.load() != 1) wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : hosts) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(RunChunks, ExceptionsPropagateThroughParallelForAfterEveryRange) {
  ThreadPool pool(2);
  Counts counts(50);
  EXPECT_THROW(
      ferry::kernels::parallel_for(pool, 50, 1,
                                   [&](std::int64_t begin, std::int64_t) {
                                     counts.hits[static_cast<std::size_t>(begin)].fetch_add(1);
                                     if (begin == 17) throw std::runtime_error("range 17");
                                   }),
      std::runtime_error);
  for (const auto& h : counts.hits) ASSERT_EQ(h.load(), 1);
  // The pool still works afterwards.
  Counts again(9);
  pool.run_chunks(9, &count_chunk, &again);
  for (const auto& h : again.hits) ASSERT_EQ(h.load(), 1);
}

TEST(RunChunks, KernelsOfStepsSplitWhileOtherStepsRun) {
  // Several devices on one pool, each running big kernels: chunks of one step meet steps and
  // chunks of others.
  ferry::Executor ex(2);
  std::vector<std::thread> hosts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 3; ++t) {
    hosts.emplace_back([&, t] {
      ferry::Device dev(ex);
      std::vector<float> v(300'000);
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>((i + static_cast<std::size_t>(t)) % 97);
      const auto a = ferry::to_device(dev, v, Shape{static_cast<std::int64_t>(v.size())});
      const auto h = (a + a).to_host();
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (h.data()[i] != v[i] + v[i]) {
          wrong.fetch_add(1);
          break;
        }
      }
    });
  }
  for (std::thread& t : hosts) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---------------------------------------------------------------------------------------------
// Kernels: each run inline and on pools of 1, 2 and 8 threads (called from this host thread).

struct Runners {
  ThreadPool one{1};
  ThreadPool two{2};
  ThreadPool eight{8};
  std::vector<const ChunkRunner*> all() const {
    return {&ferry::kernels::inline_runner(), &one, &two, &eight};
  }
};

Runners& runners() {
  static Runners r;
  return r;
}

/// Runs `kernel(runner)` producing a byte vector on each runner; checks they all agree and
/// returns the inline one.
template <class Kernel>
std::vector<std::byte> same_on_every_runner(Kernel&& kernel) {
  std::vector<std::byte> first;
  bool have = false;
  for (const ChunkRunner* r : runners().all()) {
    std::vector<std::byte> got = kernel(*r);
    if (!have) {
      first = std::move(got);
      have = true;
    } else {
      EXPECT_EQ(got.size(), first.size());
      EXPECT_TRUE(got == first) << "a runner of parallelism " << r->parallelism()
                                << " gave other bytes";
    }
  }
  return first;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

template <class T>
std::vector<T> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// Sizes from the task plus ones that split into several chunks.
const std::vector<std::int64_t> kSizes{0, 1, 7, 33, 257, 1023, 100'003, 400'009};

TEST(ParallelKernels, MapAndZipMatchThePlainLoop) {
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const auto a = random_values<float>(n, 1);
    const auto b = random_values<float>(n, 2);
    const auto mapped = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<float> out(a.size());
      ferry::kernels::map(a.data(), out.data(), a.size(), ferry::kernels::Exp{}, r);
      return bytes_of(out);
    }));
    const auto zipped = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<float> out(a.size());
      ferry::kernels::zip(a.data(), b.data(), out.data(), a.size(), ferry::kernels::Add{}, r);
      return bytes_of(out);
    }));
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(mapped[i], std::exp(a[i]));
      ASSERT_EQ(zipped[i], a[i] + b[i]);
    }
  }
}

TEST(ParallelKernels, ZipBroadcastAndSelectMatchThePlainLoop) {
  // (rows, cols) plus a bias of (cols) and a column of (rows, 1).
  for (std::int64_t rows : {0, 1, 7, 257, 1023}) {
    for (std::int64_t cols : {1, 33, 1023}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      const Shape out{rows, cols};
      const auto a = random_values<double>(rows * cols, 3);
      const auto bias = random_values<double>(cols, 4);
      const auto column = random_values<double>(rows, 5);
      const Strides sa = ferry::detail::broadcast_strides(out, out);
      const Strides sbias = ferry::detail::broadcast_strides(Shape{cols}, out);
      const Strides scol = ferry::detail::broadcast_strides(Shape{rows, 1}, out);
      const auto plus_bias = values_of<double>(same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<double> o(a.size());
        ferry::kernels::zip_broadcast(a.data(), bias.data(), o.data(), out, sa, sbias,
                                      ferry::kernels::Subtract{}, r);
        return bytes_of(o);
      }));
      const auto col_minus = values_of<double>(same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<double> o(a.size());
        ferry::kernels::zip_broadcast(column.data(), a.data(), o.data(), out, scol, sa,
                                      ferry::kernels::Subtract{}, r);
        return bytes_of(o);
      }));
      std::vector<char> mask_chars(static_cast<std::size_t>(cols));
      for (std::int64_t j = 0; j < cols; ++j) mask_chars[static_cast<std::size_t>(j)] = j % 3 == 0;
      std::unique_ptr<bool[]> mask(new bool[static_cast<std::size_t>(cols)]);
      for (std::int64_t j = 0; j < cols; ++j)
        mask[static_cast<std::size_t>(j)] = mask_chars[static_cast<std::size_t>(j)] != 0;
      const auto selected = values_of<double>(same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<double> o(a.size());
        ferry::kernels::select(mask.get(), a.data(), column.data(), o.data(), out, sbias, sa, scol,
                               r);
        return bytes_of(o);
      }));
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const auto k = static_cast<std::size_t>(i * cols + j);
          const auto ii = static_cast<std::size_t>(i);
          const auto jj = static_cast<std::size_t>(j);
          ASSERT_EQ(plus_bias[k], a[k] - bias[jj]);
          ASSERT_EQ(col_minus[k], column[ii] - a[k]);
          ASSERT_EQ(selected[k], mask_chars[jj] != 0 ? a[k] : column[ii]);
        }
      }
    }
  }
}

TEST(ParallelKernels, ConvertFillAndIotaMatchThePlainLoop) {
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const auto a = random_values<float>(n, 6);
    const auto converted = values_of<bfloat16>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<bfloat16> out(a.size());
      ferry::kernels::convert(a.data(), out.data(), a.size(), r);
      return bytes_of(out);
    }));
    const auto filled = values_of<std::int32_t>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<std::int32_t> out(a.size());
      ferry::kernels::fill(out.data(), out.size(), std::int32_t{-7}, r);
      return bytes_of(out);
    }));
    const auto iota = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<float> out(a.size());
      ferry::kernels::iota(out.data(), out.size(), 0.5, 0.25, r);
      return bytes_of(out);
    }));
    const auto iota_int = values_of<std::int64_t>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<std::int64_t> out(a.size());
      ferry::kernels::iota_int(out.data(), out.size(), std::int64_t{-5}, std::int64_t{3}, r);
      return bytes_of(out);
    }));
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(converted[i].bits, bfloat16(a[i]).bits);
      ASSERT_EQ(filled[i], -7);
      ASSERT_EQ(iota[i], static_cast<float>(0.5 + static_cast<double>(i) * 0.25));
      ASSERT_EQ(iota_int[i], -5 + 3 * static_cast<std::int64_t>(i));
    }
  }
}

/// Reference reduction of a (outer, mid, inner) array over the middle axis, in double.
std::vector<double> reference_reduce(const std::vector<float>& x, std::int64_t outer,
                                     std::int64_t mid, std::int64_t inner,
                                     ferry::kernels::ReduceOp op) {
  std::vector<double> out(static_cast<std::size_t>(outer * inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      double acc = op == ferry::kernels::ReduceOp::max ? -INFINITY
                   : op == ferry::kernels::ReduceOp::min ? INFINITY
                                                         : 0.0;
      for (std::int64_t i = 0; i < mid; ++i) {
        const double v = x[static_cast<std::size_t>((o * mid + i) * inner + j)];
        if (op == ferry::kernels::ReduceOp::max) acc = std::max(acc, v);
        else if (op == ferry::kernels::ReduceOp::min) acc = std::min(acc, v);
        else acc += v;
      }
      if (op == ferry::kernels::ReduceOp::mean) acc /= static_cast<double>(mid);
      out[static_cast<std::size_t>(o * inner + j)] = acc;
    }
  }
  return out;
}

TEST(ParallelKernels, ReductionsMatchThePlainLoopAndEachOtherBitForBit) {
  using ferry::kernels::ReduceOp;
  struct Case {
    std::int64_t outer, mid, inner;
  };
  // Rows ([o, m] over m), one output (all of it), columns ([m, i], [o, m, i] over m).
  const std::vector<Case> cases{{1, 0, 1},    {1, 1, 1},      {1, 7, 1},       {1, 1023, 1},
                                {1, 400'009, 1}, {33, 257, 1}, {7, 40'000, 1},  {257, 1, 33},
                                {1, 257, 33},  {7, 33, 1023},  {3, 1023, 257},  {1, 0, 7}};
  for (const Case& c : cases) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
      if (c.mid == 0 && (op == ReduceOp::max || op == ReduceOp::min)) continue;
      SCOPED_TRACE(std::to_string(c.outer) + "x" + std::to_string(c.mid) + "x" +
                   std::to_string(c.inner) + " op " + std::to_string(static_cast<int>(op)));
      const Shape shape{c.outer, c.mid, c.inner};
      const std::array<bool, ferry::kMaxRank> flags{false, true, false};
      const auto x = random_values<float>(c.outer * c.mid * c.inner, 7);
      const auto got = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<float> out(static_cast<std::size_t>(c.outer * c.inner));
        ferry::kernels::reduce(x.data(), out.data(), shape, flags, op, r);
        return bytes_of(out);
      }));
      const auto want = reference_reduce(x, c.outer, c.mid, c.inner, op);
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i]));
        } else if (op == ReduceOp::max || op == ReduceOp::min) {
          ASSERT_EQ(got[i], static_cast<float>(want[i]));
        } else {
          // Sums in double, rounded once to float: within a float rounding of the reference.
          ASSERT_NEAR(got[i], want[i],
                      1e-6 * (std::abs(want[i]) + 1) + 1e-9 * static_cast<double>(c.mid));
        }
      }
    }
  }
}

TEST(ParallelKernels, PartsFoldAsTheirStackedReductionBitForBit) {
  // reduce_parts (all_reduce's fold of its members' parts) against reduce() of the parts
  // stacked on a new leading axis (a column fold, in double for float sums): 1 to 5 parts
  // (2 to 4 fold a whole block in one pass; two floats' sum in float), whole blocks of 256 and
  // a remainder, into a fresh buffer and into the first part. The floats are random bit
  // patterns: every exponent, subnormals, infinities and NaNs (compared as NaN: which of two
  // NaNs a sum keeps is the compiler's choice of operand order).
  using ferry::kernels::ReduceOp;
  constexpr std::int64_t count = 3 * 256 + 17;
  std::mt19937 gen(11);
  for (std::int64_t n = 1; n <= 5; ++n) {
    std::vector<float> stacked(static_cast<std::size_t>(n * count));
    for (float& x : stacked) {
      const std::uint32_t bits = gen();
      std::memcpy(&x, &bits, sizeof x);
    }
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min,
                        ReduceOp::prod}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(std::to_string(n) + " parts, op " + std::to_string(static_cast<int>(op)) +
                     (in_place ? ", into the first" : ""));
        std::vector<float> want(static_cast<std::size_t>(count));
        ferry::kernels::reduce(stacked.data(), want.data(), Shape{n, count}, {true}, op);
        std::vector<float> parts = stacked;
        std::vector<const float*> ptrs;
        for (std::int64_t i = 0; i < n; ++i) ptrs.push_back(parts.data() + i * count);
        std::vector<float> fresh(static_cast<std::size_t>(count));
        float* out = in_place ? parts.data() : fresh.data();
        ferry::kernels::reduce_parts<float>(ptrs, out, count, op);
        for (std::size_t j = 0; j < want.size(); ++j) {
          if (std::isnan(want[j])) {
            ASSERT_TRUE(std::isnan(out[j])) << "element " << j;
          } else {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(out[j]), std::bit_cast<std::uint32_t>(want[j]))
                << "element " << j << ": " << out[j] << " where " << want[j];
          }
        }
      }
    }
  }
  // Doubles and integers take the one-pass fold too.
  std::vector<double> d(2 * 512);
  std::vector<std::int32_t> k(3 * 512);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = std::ldexp(static_cast<double>(gen()), -16);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::int32_t>(gen());
  std::vector<double> d_want(512);
  std::vector<double> d_got(512);
  ferry::kernels::reduce(d.data(), d_want.data(), Shape{2, 512}, {true}, ReduceOp::sum);
  ferry::kernels::reduce_parts<double>(std::vector<const double*>{d.data(), d.data() + 512},
                                       d_got.data(), 512, ReduceOp::sum);
  EXPECT_EQ(d_got, d_want);
  std::vector<std::int32_t> k_want(512);
  std::vector<std::int32_t> k_got(512);
  ferry::kernels::reduce(k.data(), k_want.data(), Shape{3, 512}, {true}, ReduceOp::sum);
  ferry::kernels::reduce_parts<std::int32_t>(
      std::vector<const std::int32_t*>{k.data(), k.data() + 512, k.data() + 1024}, k_got.data(),
      512, ReduceOp::sum);
  EXPECT_EQ(k_got, k_want);
}

TEST(ParallelKernels, IntegerSumsWrapAndAnyOtherAxisPatternWorks) {
  // Reduce axes 0 and 2 of (7, 33, 5, 3): the general path.
  const Shape shape{7, 33, 5, 3};
  std::vector<std::int32_t> x(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>(i * 2654435761u);
  const std::array<bool, ferry::kMaxRank> flags{true, false, true, false};
  const auto got = values_of<std::int32_t>(same_on_every_runner([&](const ChunkRunner& r) {
    std::vector<std::int32_t> out(33 * 3);
    ferry::kernels::reduce(x.data(), out.data(), shape, flags, ferry::kernels::ReduceOp::sum, r);
    return bytes_of(out);
  }));
  for (std::int64_t b = 0; b < 33; ++b) {
    for (std::int64_t d = 0; d < 3; ++d) {
      std::uint32_t acc = 0;
      for (std::int64_t a = 0; a < 7; ++a) {
        for (std::int64_t c = 0; c < 5; ++c) {
          acc += static_cast<std::uint32_t>(
              x[static_cast<std::size_t>(((a * 33 + b) * 5 + c) * 3 + d)]);
        }
      }
      ASSERT_EQ(got[static_cast<std::size_t>(b * 3 + d)], static_cast<std::int32_t>(acc));
    }
  }
  // A long wrapping sum into one value.
  std::vector<std::int32_t> big(300'001, std::int32_t{2'000'000'000});
  const auto total = values_of<std::int32_t>(same_on_every_runner([&](const ChunkRunner& r) {
    std::vector<std::int32_t> out(1);
    ferry::kernels::reduce(big.data(), out.data(), Shape{300'001}, {true},
                           ferry::kernels::ReduceOp::sum, r);
    return bytes_of(out);
  }));
  EXPECT_EQ(total[0], static_cast<std::int32_t>(300'001u * 2'000'000'000u));
}

TEST(ParallelKernels, MaxPropagatesNaNFromAnyChunk) {
  std::vector<float> x = random_values<float>(400'009, 8);
  x[333'333] = NAN;
  const auto got = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
    std::vector<float> out(1);
    ferry::kernels::reduce(x.data(), out.data(), Shape{400'009}, {true},
                           ferry::kernels::ReduceOp::max, r);
    return bytes_of(out);
  }));
  EXPECT_TRUE(std::isnan(got[0]));
}

TEST(ParallelKernels, SoftmaxAndArgmaxMatchThePlainLoop) {
  struct Case {
    std::int64_t outer, axis, inner;
  };
  const std::vector<Case> cases{{1, 1, 1}, {1, 7, 1}, {33, 257, 1}, {1023, 257, 1}, {7, 33, 1023},
                                {3, 257, 33}, {0, 7, 1}, {1, 1023, 257}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.outer) + "x" + std::to_string(c.axis) + "x" +
                 std::to_string(c.inner));
    const auto x = random_values<float>(c.outer * c.axis * c.inner, 9);
    const auto got = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<float> out(x.size());
      ferry::kernels::softmax(x.data(), out.data(), c.outer, c.axis, c.inner, r);
      return bytes_of(out);
    }));
    const auto arg = values_of<std::int64_t>(same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<std::int64_t> out(static_cast<std::size_t>(c.outer * c.inner));
      ferry::kernels::argmax(x.data(), out.data(), c.outer, c.axis, c.inner, r);
      return bytes_of(out);
    }));
    for (std::int64_t o = 0; o < c.outer; ++o) {
      for (std::int64_t j = 0; j < c.inner; ++j) {
        auto at = [&](std::int64_t i) {
          return static_cast<std::size_t>((o * c.axis + i) * c.inner + j);
        };
        float max = x[at(0)];
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < c.axis; ++i) {
          if (x[at(i)] > max) {
            max = x[at(i)];
            best = i;
          }
        }
        ASSERT_EQ(arg[static_cast<std::size_t>(o * c.inner + j)], best);
        float sum = 0;
        for (std::int64_t i = 0; i < c.axis; ++i) sum += std::exp(x[at(i)] - max);
        for (std::int64_t i = 0; i < c.axis; ++i) {
          ASSERT_EQ(got[at(i)], std::exp(x[at(i)] - max) / sum);
        }
      }
    }
  }
}

TEST(ParallelKernels, TransposeAndPermuteMatchThePlainLoop) {
  for (std::int64_t rows : {1, 7, 33, 257, 1023}) {
    for (std::int64_t cols : {1, 7, 33, 1023}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      // out (cols, rows) reads in (rows, cols) with strides (1, cols).
      std::vector<std::int32_t> x(static_cast<std::size_t>(rows * cols));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>(i);
      const Shape out{cols, rows};
      const Strides from{1, cols};
      const auto got = values_of<std::int32_t>(same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<std::int32_t> o(x.size());
        ferry::kernels::gather(x.data(), o.data(), out, from, r);
        return bytes_of(o);
      }));
      for (std::int64_t i = 0; i < cols; ++i) {
        for (std::int64_t j = 0; j < rows; ++j) {
          ASSERT_EQ(got[static_cast<std::size_t>(i * rows + j)],
                    x[static_cast<std::size_t>(j * cols + i)]);
        }
      }
    }
  }
  // A rank-4 permute (2, 0, 3, 1) of (5, 33, 7, 257), the contiguous input axis in the middle.
  const Shape in{5, 33, 7, 257};
  std::vector<float> x = random_values<float>(in.numel(), 10);
  const Strides own = ferry::detail::row_major_strides(in);
  const int axes[] = {2, 0, 3, 1};
  Strides from{};
  std::array<std::int64_t, 4> dims{};
  for (std::size_t i = 0; i < 4; ++i) {
    dims[i] = in.dims()[static_cast<std::size_t>(axes[i])];
    from[i] = own[static_cast<std::size_t>(axes[i])];
  }
  const Shape out(std::span<const std::int64_t>(dims.data(), 4));
  const auto got = values_of<float>(same_on_every_runner([&](const ChunkRunner& r) {
    std::vector<float> o(x.size());
    ferry::kernels::gather(x.data(), o.data(), out, from, r);
    return bytes_of(o);
  }));
  for (std::int64_t f = 0; f < out.numel(); ++f) {
    const auto idx = ferry_test::unravel(f, out);
    std::int64_t src = 0;
    for (std::size_t d = 0; d < 4; ++d) src += idx[d] * from[d];
    ASSERT_EQ(got[static_cast<std::size_t>(f)], x[static_cast<std::size_t>(src)]);
  }
}

TEST(ParallelKernels, LayoutConversionsAndBlockCopiesMatchThePlainLoop) {
  for (const Shape& shape : {Shape{0, 5}, Shape{1}, Shape{7}, Shape{33, 257}, Shape{3, 1023, 65},
                             Shape{1023, 1023}}) {
    SCOPED_TRACE(shape.numel());
    std::vector<float> x = random_values<float>(shape.numel(), 11);
    const auto* src = reinterpret_cast<const std::byte*>(x.data());
    const std::size_t tiled_bytes = ferry::detail::storage_bytes(
        "test", shape, 4, {ferry::MemorySpace::dram, ferry::Order::tiled});
    const auto tiled = same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<std::byte> t(tiled_bytes, std::byte{0x55});  // the padding must be zeroed
      ferry::kernels::store_as(src, t.data(), shape, 4, ferry::Order::tiled, r);
      return t;
    });
    const ferry::detail::TileGrid g = ferry::detail::tile_grid(shape);
    std::vector<std::byte> want(tiled_bytes, std::byte{0});
    for (std::int64_t b = 0; b < g.batch; ++b) {
      for (std::int64_t i = 0; i < g.rows; ++i) {
        for (std::int64_t j = 0; j < g.cols; ++j) {
          std::memcpy(want.data() + g.offset(b, i, j) * 4,
                      src + ((b * g.rows + i) * g.cols + j) * 4, 4);
        }
      }
    }
    ASSERT_TRUE(tiled == want);
    const auto back = same_on_every_runner([&](const ChunkRunner& r) {
      std::vector<std::byte> flat(x.size() * 4);
      ferry::kernels::convert_order(tiled.data(), ferry::Order::tiled, flat.data(),
                                    ferry::Order::row_major, shape, 4, r);
      return flat;
    });
    ASSERT_TRUE(back == bytes_of(x));
  }
  // Block copies: 1023 blocks of 257 bytes, and one block of 3 MB split into pieces.
  for (std::int64_t count : {0, 1, 7, 1023}) {
    for (std::int64_t block : {1, 257, 3 << 20}) {
      if (count * block > (8 << 20)) continue;
      const std::int64_t pitch = block + 3;
      std::vector<std::byte> from(static_cast<std::size_t>(count * pitch));
      for (std::size_t i = 0; i < from.size(); ++i) from[i] = static_cast<std::byte>(i * 31);
      const auto copied = same_on_every_runner([&](const ChunkRunner& r) {
        std::vector<std::byte> to(static_cast<std::size_t>(count * block));
        ferry::kernels::copy_blocks(from.data(), pitch, to.data(), block, count, block, r);
        return to;
      });
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::memcmp(copied.data() + i * block, from.data() + i * pitch,
                              static_cast<std::size_t>(block)),
                  0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ops on devices: the same bits on the manual executor and on pools of 1, 2 and 8 threads.

TEST(ParallelOps, EveryExecutorGivesTheSameBits) {
  std::vector<std::vector<std::byte>> results;
  for (int threads : {0, 1, 2, 8}) {
    SCOPED_TRACE(threads);
    ferry::Device dev = ferry_test::make_device(threads);
    const auto x = ferry::to_device(dev, random_values<float>(513 * 1023, 12), Shape{513, 1023});
    const auto bias = ferry::to_device(dev, random_values<float>(1023, 13), Shape{1023});
    std::vector<std::byte> all;
    auto append = [&](const auto& v) {
      const auto b = bytes_of(v);
      all.insert(all.end(), b.begin(), b.end());
    };
    append(values_of(x + bias));
    append(values_of(ferry::exp(x) * 2.0f));
    append(values_of(ferry::sum(x)));
    append(values_of(ferry::sum(x, {0})));
    append(values_of(ferry::mean(x, {1})));
    append(values_of(ferry::max(x, {1})));
    append(values_of(ferry::softmax(x, 1)));
    append(values_of(ferry::softmax(x, 0)));
    append(values_of(ferry::transpose(x)));
    append(values_of(ferry::argmax(x, 1)));
    append(values_of(x.astype<double>()));
    append(values_of(ferry::to_layout(x, {ferry::MemorySpace::dram, ferry::Order::tiled})));
    append(values_of(ferry::where(ferry::greater(x, 0.0f), x, bias)));
    append(values_of(ferry::slice(x, 1, 3, 1000)));
    append(values_of(ferry::full(dev, Shape{300'001}, 1.5f)));
    results.push_back(std::move(all));
  }
  for (std::size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(results[i] == results[0]) << i;
}

TEST(ParallelOps, AddWithBroadcastMatchesThePlainLoop) {
  for (int threads : {0, 2}) {
    ferry::Device dev = ferry_test::make_device(threads);
    const auto xa = random_values<float>(257 * 1023, 14);
    const auto xb = random_values<float>(257, 15);
    const auto got = values_of(ferry::to_device(dev, xa, Shape{257, 1023}) +
                               ferry::to_device(dev, xb, Shape{257, 1}));
    for (std::size_t i = 0; i < 257; ++i) {
      for (std::size_t j = 0; j < 1023; ++j) ASSERT_EQ(got[i * 1023 + j], xa[i * 1023 + j] + xb[i]);
    }
  }
}

}  // namespace

}  // namespace test_parallel_kernels
