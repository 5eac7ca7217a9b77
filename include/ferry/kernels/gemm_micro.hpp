#pragma once
// The register-blocked inner part of GEMM, written once over a vector type V and compiled once
// per instruction set (gemm_dispatch.hpp): the micro-kernel keeps an MR x (NV vectors) tile of
// C in registers while it walks k over packed panels of A and B, and the block loop runs it over
// every MR x NR tile of one packed block.
//
// Each element of C is one chain of fused multiply-adds over k in increasing order, starting
// from zero or from the partial sum stored in C by the previous k block. Storing and reloading
// the partial sum is exact, so an element's bits do not depend on where its tile sits, on the
// k blocking, or on which thread ran it. Tiles at the edges run the same kernel on zero-padded
// panels into a scratch tile, for the same reason.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::detail {

// GCC's vector extensions (also understood by clang): element-wise arithmetic on fixed-size
// vectors that each compiler lowers to the widest registers the function's target has.
using F32x4 = float __attribute__((vector_size(16)));
using F32x8 = float __attribute__((vector_size(32)));
using F32x16 = float __attribute__((vector_size(64)));
using F64x2 = double __attribute__((vector_size(16)));
using F64x4 = double __attribute__((vector_size(32)));
using F64x8 = double __attribute__((vector_size(64)));

/// acc (MR x NV*W, leading dimension ldc) = [acc +] sum over p < kc of a[p] (MR values) times
/// b[p] (NV*W values): a is an MR-wide packed panel, b an NV*W-wide one.
template <class V, class A, int MR, int NV>
[[gnu::always_inline]] inline void gemm_micro_tile(std::int64_t kc, const A* __restrict a,
                                                   const A* __restrict b, A* __restrict c,
                                                   std::int64_t ldc, bool accumulate) {
#if defined(__clang__)
  // One rounding per product-and-add wherever the target has FMA, at every optimization level.
  // GCC gets the same through the attributes of the entry points (gemm_dispatch.hpp).
#pragma clang fp contract(on)
#endif
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(A));
  V acc[static_cast<std::size_t>(MR)][static_cast<std::size_t>(NV)];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // memcpy, not a cast: C rows need not be aligned to the vector size.
      if (accumulate) {
        std::memcpy(&acc[i][v], c + i * ldc + v * kLanes, sizeof(V));
      } else {
        acc[i][v] = V{};
      }
    }
  }
  for (std::int64_t p = 0; p < kc; ++p) {
    V bv[static_cast<std::size_t>(NV)];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + v * kLanes, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const A s = a[i];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = acc[i][v] + s * bv[v];
    }
    a += MR;
    b += NV * kLanes;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(c + i * ldc + v * kLanes, &acc[i][v], sizeof(V));
  }
}

/// One packed block: `ap` holds ceil(rows / MR) panels of MR x kc, `bp` ceil(cols / NR) panels
/// of kc x NR (zero-padded); c is rows x cols with leading dimension ldc.
template <class A>
struct GemmBlock {
  std::int64_t kc;
  const A* ap;
  const A* bp;
  A* c;
  std::int64_t ldc;
  std::int64_t rows;
  std::int64_t cols;
  bool accumulate;
};

/// Runs the micro-kernel over every tile of `block`, the A panel outermost so it stays in L1
/// while the B panels stream past from L2.
template <class V, class A, int MR, int NV>
[[gnu::always_inline]] inline void gemm_run_block(const GemmBlock<A>& block) {
  constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(A));
  constexpr std::int64_t kNr = std::int64_t{NV} * kLanes;
  // Zeroed so the rows an edge tile does not use hold defined values.
  alignas(64) A edge[static_cast<std::size_t>(MR * kNr)] = {};
  for (std::int64_t i = 0; i < block.rows; i += MR) {
    const A* a = block.ap + i * block.kc;
    const std::int64_t mr = block.rows - i < MR ? block.rows - i : MR;
    for (std::int64_t j = 0; j < block.cols; j += kNr) {
      const A* b = block.bp + j * block.kc;
      A* c = block.c + i * block.ldc + j;
      const std::int64_t nr = block.cols - j < kNr ? block.cols - j : kNr;
      if (mr == MR && nr == kNr) {
        gemm_micro_tile<V, A, MR, NV>(block.kc, a, b, c, block.ldc, block.accumulate);
        continue;
      }
      if (block.accumulate) {
        for (std::int64_t r = 0; r < mr; ++r) {
          std::memcpy(edge + r * kNr, c + r * block.ldc, static_cast<std::size_t>(nr) * sizeof(A));
        }
      }
      gemm_micro_tile<V, A, MR, NV>(block.kc, a, b, edge, kNr, block.accumulate);
      for (std::int64_t r = 0; r < mr; ++r) {
        std::memcpy(c + r * block.ldc, edge + r * kNr, static_cast<std::size_t>(nr) * sizeof(A));
      }
    }
  }
}

}  // namespace ferry::detail
