#pragma once
// Matrix multiplication of one row-major pair. Floating types take the packed path: C is cut
// into chunks of whole output tiles that the runner may spread over threads; a chunk walks k in
// blocks, packs its panels of A and B (converted to the accumulator type) into per-thread
// scratch, and runs the register-blocked micro-kernel of the CPU's best instruction set
// (gemm_micro.hpp, gemm_dispatch.hpp). Every output element is one chain of fused
// multiply-adds over k in increasing order, so its bits depend on neither the thread count, nor
// the chunking, nor the blocking. Accumulation: float for float, bfloat16 and float16 (rounded
// once, when stored), double for double, and unsigned (wrapping) for integers, which keep a
// plain loop.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/gemm_dispatch.hpp"
#include "ferry/kernels/parallel.hpp"

namespace ferry::kernels {

template <class T>
struct matmul_acc {
  using type = T;
};
template <HalfFloating T>
struct matmul_acc<T> {
  using type = float;
};
template <IntegerElement T>
struct matmul_acc<T> {
  using type = wrap_t<T>;  // at least 32 bits; the low bits kept are those of T's wrapping sum
};
template <class T>
using matmul_acc_t = typename matmul_acc<T>::type;

/// Below this many flops (2 m n k) a product runs on the calling thread: handing chunks to
/// other threads costs more than it saves. Measured by benchmarks/kernels.cpp (gemm_threads
/// rows) on the 2-core EPYC: two threads lose at 128^3 and win from about 192^3.
inline constexpr double kGemmParallelFlops = 2.0 * 160 * 160 * 160;

}  // namespace ferry::kernels

namespace ferry::detail {

/// Scratch memory of one thread, kept between calls so packing never page-faults twice.
class GemmScratch {
 public:
  GemmScratch() = default;
  GemmScratch(const GemmScratch&) = delete;
  GemmScratch& operator=(const GemmScratch&) = delete;
  ~GemmScratch() { release(); }

  /// At least `bytes` bytes aligned to 64. Throws std::bad_alloc.
  std::byte* get(std::size_t bytes) {
    if (bytes > size_) {
      release();
      data_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kAlign}));
      size_ = bytes;
    }
    return data_;
  }

  static constexpr std::size_t kAlign = 64;

 private:
  void release() noexcept {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlign});
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

inline std::byte* gemm_scratch(std::size_t bytes) {
  thread_local GemmScratch scratch;
  return scratch.get(bytes);
}

constexpr std::int64_t round_up(std::int64_t x, std::int64_t to) noexcept {
  return (x + to - 1) / to * to;
}

/// Packs rows [i0, i0 + rows) x columns [p0, p0 + kc) of a (leading dimension lda) into panels
/// of mr rows, each stored column by column; rows past the end are zeros.
template <class T, class A>
void gemm_pack_a(const T* a, std::int64_t lda, std::int64_t i0, std::int64_t rows, std::int64_t p0,
                 std::int64_t kc, std::int64_t mr, A* out) {
  for (std::int64_t ib = 0; ib < rows; ib += mr) {
    A* panel = out + ib * kc;
    const std::int64_t valid = std::min(mr, rows - ib);
    for (std::int64_t r = 0; r < valid; ++r) {
      const T* src = a + (i0 + ib + r) * lda + p0;
      for (std::int64_t p = 0; p < kc; ++p) panel[p * mr + r] = static_cast<A>(src[p]);
    }
    for (std::int64_t r = valid; r < mr; ++r) {
      for (std::int64_t p = 0; p < kc; ++p) panel[p * mr + r] = A(0);
    }
  }
}

/// Packs rows [p0, p0 + kc) x columns [j0, j0 + cols) of b (leading dimension ldb) into panels
/// of nr columns, each stored row by row; columns past the end are zeros.
template <class T, class A>
void gemm_pack_b(const T* b, std::int64_t ldb, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                 std::int64_t cols, std::int64_t nr, A* out) {
  for (std::int64_t jb = 0; jb < cols; jb += nr) {
    A* panel = out + jb * kc;
    const std::int64_t valid = std::min(nr, cols - jb);
    for (std::int64_t p = 0; p < kc; ++p) {
      const T* src = b + (p0 + p) * ldb + j0 + jb;
      A* dst = panel + p * nr;
      for (std::int64_t j = 0; j < valid; ++j) dst[j] = static_cast<A>(src[j]);
      for (std::int64_t j = valid; j < nr; ++j) dst[j] = A(0);
    }
  }
}

/// How one product is cut: chunks of rows_per x cols_per outputs, k in blocks of kc.
struct GemmPlan {
  GemmBlocking blocking;
  std::int64_t kc;
  std::int64_t rows_per;
  std::int64_t cols_per;
  std::int64_t row_chunks;
  std::int64_t col_chunks;
};

/// The plan depends on the shape and the instruction set only, never on the thread count.
/// Column stripes are one L2 block of B wide; rows are split only as far as needed for a few
/// chunks, because every chunk packs its own B.
template <class A>
GemmPlan gemm_plan(GemmIsa isa, std::int64_t m, std::int64_t k, std::int64_t n) {
  constexpr std::int64_t kMinChunks = 4;
  constexpr std::int64_t kMaxRows = 1024;
  GemmPlan plan{};
  plan.blocking = gemm_blocking<A>(isa);
  const GemmBlocking& bl = plan.blocking;
  const std::int64_t k_blocks = std::max<std::int64_t>(1, (k + bl.kc - 1) / bl.kc);
  plan.kc = std::max<std::int64_t>(1, (k + k_blocks - 1) / k_blocks);  // even blocks
  plan.col_chunks = (n + bl.nc - 1) / bl.nc;
  plan.cols_per = round_up((n + plan.col_chunks - 1) / plan.col_chunks, bl.nr);
  const std::int64_t min_rows = 4 * bl.mr;
  const std::int64_t wanted =
      std::max((m + kMaxRows - 1) / kMaxRows, (kMinChunks + plan.col_chunks - 1) / plan.col_chunks);
  plan.row_chunks = std::max<std::int64_t>(1, std::min(wanted, m / min_rows));
  plan.rows_per = round_up((m + plan.row_chunks - 1) / plan.row_chunks, bl.mr);
  plan.row_chunks = (m + plan.rows_per - 1) / plan.rows_per;
  return plan;
}

/// Computes the chunk (row_chunk, col_chunk) of c = a * b with the packed micro-kernels.
template <class T, class A>
void gemm_chunk(GemmIsa isa, const GemmPlan& plan, const T* a, const T* b, T* c, std::int64_t m,
                std::int64_t k, std::int64_t n, std::int64_t row_chunk, std::int64_t col_chunk) {
  constexpr bool kConvert = !std::is_same_v<T, A>;
  const GemmBlocking& bl = plan.blocking;
  const std::int64_t i0 = row_chunk * plan.rows_per;
  const std::int64_t j0 = col_chunk * plan.cols_per;
  const std::int64_t rows = std::min(plan.rows_per, m - i0);
  const std::int64_t cols = std::min(plan.cols_per, n - j0);
  const auto a_elems = static_cast<std::size_t>(round_up(rows, bl.mr) * plan.kc);
  const auto b_elems = static_cast<std::size_t>(round_up(cols, bl.nr) * plan.kc);
  const auto c_elems = kConvert ? static_cast<std::size_t>(rows * cols) : std::size_t{0};
  const auto aligned = [](std::size_t elems) {
    const std::size_t bytes = elems * sizeof(A);
    return (bytes + GemmScratch::kAlign - 1) / GemmScratch::kAlign * GemmScratch::kAlign;
  };
  std::byte* scratch = gemm_scratch(aligned(a_elems) + aligned(b_elems) + aligned(c_elems));
  A* ap = reinterpret_cast<A*>(scratch);
  A* bp = reinterpret_cast<A*>(scratch + aligned(a_elems));
  A* acc = nullptr;
  std::int64_t ldc = n;
  if constexpr (kConvert) {
    // bfloat16 and float16 keep their float partial sums here: rounding them between k blocks
    // would change the result.
    acc = reinterpret_cast<A*>(scratch + aligned(a_elems) + aligned(b_elems));
    ldc = cols;
  } else {
    acc = c + i0 * n + j0;
  }
  for (std::int64_t p0 = 0; p0 < k; p0 += plan.kc) {
    const std::int64_t kc = std::min(plan.kc, k - p0);
    gemm_pack_b(b, n, p0, kc, j0, cols, bl.nr, bp);
    gemm_pack_a(a, k, i0, rows, p0, kc, bl.mr, ap);
    gemm_block<A>(isa, GemmBlock<A>{kc, ap, bp, acc, ldc, rows, cols, p0 > 0});
  }
  if constexpr (kConvert) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j)
        c[(i0 + i) * n + j0 + j] = static_cast<T>(acc[i * cols + j]);
    }
  }
}

/// The integer product of rows [i0, i1): a plain loop that wraps like unsigned arithmetic.
template <class T>
void gemm_integer_rows(const T* a, const T* b, T* c, std::int64_t i0, std::int64_t i1,
                       std::int64_t k, std::int64_t n) {
  using A = kernels::matmul_acc_t<T>;
  std::vector<A> row(static_cast<std::size_t>(n));
  for (std::int64_t i = i0; i < i1; ++i) {
    std::fill(row.begin(), row.end(), A(0));
    for (std::int64_t p = 0; p < k; ++p) {
      const A av = static_cast<A>(a[i * k + p]);
      const T* brow = b + p * n;
      for (std::int64_t j = 0; j < n; ++j)
        row[static_cast<std::size_t>(j)] += av * static_cast<A>(brow[j]);
    }
    for (std::int64_t j = 0; j < n; ++j)
      c[i * n + j] = static_cast<T>(row[static_cast<std::size_t>(j)]);
  }
}

/// The packed product with the micro-kernel of `isa` (one the CPU runs), its output tiles
/// split over `runner`. Every isa gives the same bits for any runner.
template <class T>
void gemm_packed(GemmIsa isa, const T* a, const T* b, T* c, std::int64_t m, std::int64_t k,
                 std::int64_t n, const kernels::ChunkRunner& runner) {
  using A = kernels::matmul_acc_t<T>;
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>);
  const GemmPlan plan = gemm_plan<A>(isa, m, k, n);
  kernels::parallel_for(runner, plan.row_chunks * plan.col_chunks, 1,
                        [&](std::int64_t c0, std::int64_t c1) {
                          for (std::int64_t chunk = c0; chunk < c1; ++chunk) {
                            gemm_chunk<T, A>(isa, plan, a, b, c, m, k, n, chunk / plan.col_chunks,
                                             chunk % plan.col_chunks);
                          }
                        });
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// c (m x n) = a (m x k) * b (k x n), all contiguous row-major; c must not overlap a or b.
/// Products of at least kGemmParallelFlops split their output tiles over `runner`'s threads;
/// the result is the same bits on every runner. Throws std::bad_alloc when scratch memory
/// cannot be had.
template <class T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n,
          const ChunkRunner& runner = inline_runner()) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::fill(c, c + m * n, T(0));
    return;
  }
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const ChunkRunner& use = flops >= kGemmParallelFlops ? runner : inline_runner();
  if constexpr (std::is_integral_v<T>) {
    // Rows in groups of about a million multiply-adds each.
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / (k * n));
    parallel_for(use, m, grain, [&](std::int64_t i0, std::int64_t i1) {
      ::ferry::detail::gemm_integer_rows(a, b, c, i0, i1, k, n);
    });
  } else {
    ::ferry::detail::gemm_packed(::ferry::detail::gemm_isa(), a, b, c, m, k, n, use);
  }
}

}  // namespace ferry::kernels
