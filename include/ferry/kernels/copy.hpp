#pragma once
// Data movement kernels: a strided gather (transpose, permute, index) and its scatter
// (index_update), and the block copies behind slice and concat. All split over a ChunkRunner;
// a copy has no arithmetic, so any split gives the same bytes.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// Copies `count` contiguous blocks of `block` bytes, block i from src + i * src_pitch to
/// dst + i * dst_pitch, split over `runner` (a large block in pieces). Slice and concat are
/// this with different pitches. Does not throw.
inline void copy_blocks(const std::byte* src, std::int64_t src_pitch, std::byte* dst,
                        std::int64_t dst_pitch, std::int64_t count, std::int64_t block,
                        const ChunkRunner& runner = inline_runner()) noexcept {
  if (block <= 0 || count <= 0) return;
  // Pieces of at most kChunkBytes, so one huge block spreads over threads too.
  const std::int64_t per_block = (block + kChunkBytes - 1) / kChunkBytes;
  const std::int64_t piece = (block + per_block - 1) / per_block;
  const std::int64_t grain = per_block > 1 ? 1 : std::max<std::int64_t>(kChunkBytes / block, 1);
  parallel_for(runner, count * per_block, grain,
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 for (std::int64_t p = begin; p < end; ++p) {
                   const std::int64_t i = p / per_block;
                   const std::int64_t at = (p % per_block) * piece;
                   const std::int64_t n = std::min(piece, block - at);
                   std::memcpy(dst + i * dst_pitch + at, src + i * src_pitch + at,
                               static_cast<std::size_t>(n));
                 }
               });
}

/// memcpy of `bytes`, split over `runner`. Does not throw.
inline void copy_bytes(const std::byte* src, std::byte* dst, std::size_t bytes,
                       const ChunkRunner& runner = inline_runner()) noexcept {
  const auto n = static_cast<std::int64_t>(bytes);
  copy_blocks(src, n, dst, n, 1, n, runner);
}

}  // namespace ferry::kernels

namespace ferry::detail {

/// Tile edge of the blocked transpose: a tile of each side stays in L1 while it is swapped.
inline constexpr std::int64_t kTransposeTile = 64;
/// Edge of the blocks a tile is swapped in: 8 rows at a time, because a power-of-two row
/// pitch maps every row to the same L1 set and a set holds 8 lines.
inline constexpr std::int64_t kTransposeBlock = 8;

/// gather's blocked path: output dimension `q` is the input's contiguous one and the output's
/// innermost dimension reads the input with a stride, so copy square tiles of (q, inner): each
/// read cache line and each written one is used whole while the tile is in L1.
template <class T>
void gather_tiled(const T* in, T* out, const Coalesced<2>& c, std::size_t q,
                  const kernels::ChunkRunner& runner) {
  const std::size_t inner = c.rank - 1;
  const std::int64_t rows = c.size[q];
  const std::int64_t cols = c.size[inner];
  const std::int64_t out_q = c.st[0][q];
  const std::int64_t in_col = c.st[1][inner];
  constexpr std::int64_t kB = kTransposeTile;
  const std::int64_t bands = (rows + kB - 1) / kB;  // bands of kB rows along q per batch
  std::int64_t batches = 1;
  for (std::size_t d = 0; d < inner; ++d) {
    if (d != q) batches *= c.size[d];
  }
  const std::int64_t band_bytes = kB * cols * static_cast<std::int64_t>(2 * sizeof(T));
  const std::int64_t grain = std::max<std::int64_t>(kernels::kChunkBytes / band_bytes, 1);
  kernels::parallel_for(
      runner, batches * bands, grain, [&](std::int64_t begin, std::int64_t end) noexcept {
        for (std::int64_t item = begin; item < end; ++item) {
          // The batch position, divided out over the other outer dimensions (innermost first).
          std::int64_t rest = item / bands;
          std::int64_t in_base = 0;
          std::int64_t out_base = 0;
          for (std::size_t d = inner; d-- > 0;) {
            if (d == q) continue;
            const std::int64_t at = rest % c.size[d];
            rest /= c.size[d];
            out_base += at * c.st[0][d];
            in_base += at * c.st[1][d];
          }
          const std::int64_t r0 = (item % bands) * kB;
          const std::int64_t r1 = std::min(rows, r0 + kB);
          for (std::int64_t c0 = 0; c0 < cols; c0 += kB) {
            const std::int64_t c1 = std::min(cols, c0 + kB);
            constexpr std::int64_t k8 = kTransposeBlock;
            for (std::int64_t rb = r0; rb < r1; rb += k8) {
              for (std::int64_t cb = c0; cb < c1; cb += k8) {
                const T* s = in + in_base + rb;  // the input's stride along q is 1
                T* o = out + out_base + rb * out_q;
                if (rb + k8 <= r1 && cb + k8 <= c1) {
                  // A full block through registers: fixed trip counts the compiler unrolls.
                  T block[k8][k8];
                  for (std::int64_t j = 0; j < k8; ++j) {
                    for (std::int64_t r = 0; r < k8; ++r) block[r][j] = s[(cb + j) * in_col + r];
                  }
                  for (std::int64_t r = 0; r < k8; ++r) {
                    for (std::int64_t j = 0; j < k8; ++j) o[r * out_q + cb + j] = block[r][j];
                  }
                } else {
                  const std::int64_t rn = std::min(k8, r1 - rb);
                  const std::int64_t cn = std::min(k8, c1 - cb);
                  for (std::int64_t r = 0; r < rn; ++r) {
                    for (std::int64_t j = cb; j < cb + cn; ++j)
                      o[r * out_q + j] = s[j * in_col + r];
                  }
                }
              }
            }
          }
        }
      });
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// out (contiguous, of `shape`) gathers `in` read through `in_strides`, split over `runner`.
/// Does not throw.
template <class T>
void gather(const T* in, T* out, const Shape& shape, const Strides& in_strides,
            const ChunkRunner& runner = inline_runner()) noexcept {
  const std::array<Strides, 2> strides{detail::row_major_strides(shape), in_strides};
  if (shape.numel() == 0) return;
  const detail::Coalesced<2> c = detail::coalesce(shape, strides);
  if (c.rank >= 2 && c.st[1][c.rank - 1] != 1) {
    for (std::size_t q = 0; q + 1 < c.rank; ++q) {
      if (c.st[1][q] == 1) return detail::gather_tiled(in, out, c, q, runner);
    }
  }
  parallel_runs(runner, shape, strides, chunk_elements(2 * sizeof(T)),
                [&](const auto& off, const auto& step, std::int64_t n) noexcept {
                  T* o = out + off[0];
                  const T* src = in + off[1];
                  if (step[1] == 1) {
                    std::memcpy(o, src, static_cast<std::size_t>(n) * sizeof(T));
                  } else {
                    for (std::int64_t i = 0; i < n; ++i) o[i] = src[i * step[1]];
                  }
                });
}

/// gather's transpose: `in` (contiguous, of `shape`) written into `out` through `out_strides`,
/// split over `runner`. The strides must reach a distinct element for every position (basic
/// indexing's regions do), so that chunks never write the same element. Does not throw.
template <class T>
void scatter(const T* in, T* out, const Shape& shape, const Strides& out_strides,
             const ChunkRunner& runner = inline_runner()) noexcept {
  const std::array<Strides, 2> strides{detail::row_major_strides(shape), out_strides};
  if (shape.numel() == 0) return;
  parallel_runs(runner, shape, strides, chunk_elements(2 * sizeof(T)),
                [&](const auto& off, const auto& step, std::int64_t n) noexcept {
                  const T* src = in + off[0];
                  T* o = out + off[1];
                  if (step[1] == 1) {
                    std::memcpy(o, src, static_cast<std::size_t>(n) * sizeof(T));
                  } else {
                    for (std::int64_t i = 0; i < n; ++i) o[i * step[1]] = src[i];
                  }
                });
}

}  // namespace ferry::kernels
