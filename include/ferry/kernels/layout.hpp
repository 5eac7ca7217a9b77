#pragma once
// Layout kernels: converting between row-major and tiled storage, and walking the elements a
// tiled buffer really holds (its padding left alone). A conversion splits into bands of 32
// rows (one row of tiles), which are disjoint in both buffers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// Calls `f(offset, count)` for each run of consecutive logical elements an array of `shape`
/// stored in `order` holds: one run for row-major, one per tile row for tiled. Elementwise ops
/// on operands of one shape and one layout run on these runs, in place of any conversion.
template <class F>
void for_each_valid_run(const Shape& shape, Order order, F&& f) {
  if (shape.numel() == 0) return;
  if (order == Order::row_major) {
    f(std::size_t{0}, static_cast<std::size_t>(shape.numel()));
    return;
  }
  const detail::TileGrid g = detail::tile_grid(shape);
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t r = 0; r < g.rows; ++r) {
      for (std::int64_t c = 0; c < g.cols; c += kTile) {
        f(static_cast<std::size_t>(g.offset(b, r, c)),
          static_cast<std::size_t>(std::min(kTile, g.cols - c)));
      }
    }
  }
}

/// for_each_valid_run split over `runner`: `f(offset, count)` on disjoint runs that together
/// cover every element once, in no particular order, ranges of about `grain` elements per
/// chunk (whole bands of 32 rows for tiled). For elementwise kernels, whose result does not
/// depend on the order. Throws what `f` throws.
template <class F>
void parallel_valid_runs(const ChunkRunner& runner, const Shape& shape, Order order,
                         std::int64_t grain, F&& f) {
  if (shape.numel() == 0) return;
  if (order == Order::row_major) {
    parallel_for(runner, shape.numel(), grain, [&](std::int64_t begin, std::int64_t end) {
      f(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin));
    });
    return;
  }
  const detail::TileGrid g = detail::tile_grid(shape);
  const std::int64_t band_elements = kTile * g.tile_cols * kTile;
  parallel_for(runner, g.batch * g.tile_rows, std::max<std::int64_t>(grain / band_elements, 1),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t band = begin; band < end; ++band) {
                   const std::int64_t b = band / g.tile_rows;
                   const std::int64_t r0 = (band % g.tile_rows) * kTile;
                   const std::int64_t r1 = std::min(g.rows, r0 + kTile);
                   for (std::int64_t r = r0; r < r1; ++r) {
                     for (std::int64_t c = 0; c < g.cols; c += kTile) {
                       f(static_cast<std::size_t>(g.offset(b, r, c)),
                         static_cast<std::size_t>(std::min(kTile, g.cols - c)));
                     }
                   }
                 }
               });
}

}  // namespace ferry::kernels

namespace ferry::detail {

/// Copies each tile row of the bands [begin, end) from `src` to `dst`: row-major to tiled
/// when `to_tiled`, tiled to row-major otherwise. A band is 32 rows of one matrix, one row of
/// tiles: disjoint in both buffers.
inline void copy_tile_bands(const TileGrid& g, const std::byte* src, std::byte* dst,
                            std::size_t element_size, bool to_tiled, std::int64_t begin,
                            std::int64_t end) noexcept {
  const std::int64_t band_elements = kTile * g.tile_cols * kTile;
  const bool padded = g.cols % kTile != 0 || g.rows % kTile != 0;
  for (std::int64_t band = begin; band < end; ++band) {
    const std::int64_t b = band / g.tile_rows;
    const std::int64_t r0 = (band % g.tile_rows) * kTile;
    const std::int64_t r1 = std::min(g.rows, r0 + kTile);
    if (to_tiled && padded) {  // padding is zero bytes, so equal arrays have equal buffers
      std::memset(dst + static_cast<std::size_t>(band * band_elements) * element_size, 0,
                  static_cast<std::size_t>(band_elements) * element_size);
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t c = 0; c < g.cols; c += kTile) {
        const auto n = static_cast<std::size_t>(std::min(kTile, g.cols - c)) * element_size;
        const auto flat = static_cast<std::size_t>((b * g.rows + r) * g.cols + c) * element_size;
        const auto tiled = static_cast<std::size_t>(g.offset(b, r, c)) * element_size;
        std::memcpy(dst + (to_tiled ? tiled : flat), src + (to_tiled ? flat : tiled), n);
      }
    }
  }
}

/// Splits the bands of a tiled conversion over `runner`.
inline void convert_tiles(const TileGrid& g, const std::byte* src, std::byte* dst,
                          std::size_t element_size, bool to_tiled,
                          const kernels::ChunkRunner& runner) {
  const auto band_bytes = static_cast<std::int64_t>(kTile * g.tile_cols * kTile) *
                          static_cast<std::int64_t>(2 * element_size);
  kernels::parallel_for(runner, g.batch * g.tile_rows,
                        std::max<std::int64_t>(kernels::kChunkBytes / band_bytes, 1),
                        [&](std::int64_t begin, std::int64_t end) noexcept {
                          copy_tile_bands(g, src, dst, element_size, to_tiled, begin, end);
                        });
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// Stores the row-major `src` of `shape` into `dst` in `to` order; `dst` holds
/// storage_bytes(shape, to). Tile padding is written as zero bytes, so equal arrays have equal
/// buffers. Split over `runner`; does not throw.
inline void store_as(const std::byte* src, std::byte* dst, const Shape& shape,
                     std::size_t element_size, Order to,
                     const ChunkRunner& runner = inline_runner()) {
  if (shape.numel() == 0) return;
  if (to == Order::row_major) {
    copy_bytes(src, dst, static_cast<std::size_t>(shape.numel()) * element_size, runner);
    return;
  }
  detail::convert_tiles(detail::tile_grid(shape), src, dst, element_size, true, runner);
}

/// Reads `src`, an array of `shape` in `from` order, into the row-major `dst`. Split over
/// `runner`; does not throw.
inline void load_from(const std::byte* src, std::byte* dst, const Shape& shape,
                      std::size_t element_size, Order from,
                      const ChunkRunner& runner = inline_runner()) {
  if (shape.numel() == 0) return;
  if (from == Order::row_major) {
    copy_bytes(src, dst, static_cast<std::size_t>(shape.numel()) * element_size, runner);
    return;
  }
  detail::convert_tiles(detail::tile_grid(shape), src, dst, element_size, false, runner);
}

/// Converts `src` (an array of `shape` in `from` order) into `dst` in `to` order, split over
/// `runner`. Throws InvalidArgument only for sizes no buffer could hold (never for a valid array).
inline void convert_order(const std::byte* src, Order from, std::byte* dst, Order to,
                          const Shape& shape, std::size_t element_size,
                          const ChunkRunner& runner = inline_runner()) {
  if (from == to) {
    const std::size_t bytes =
        detail::storage_bytes("to_layout", shape, element_size, {MemorySpace::dram, to});
    if (bytes != 0) copy_bytes(src, dst, bytes, runner);
  } else if (to == Order::tiled) {
    store_as(src, dst, shape, element_size, Order::tiled, runner);
  } else {
    load_from(src, dst, shape, element_size, from, runner);
  }
}

}  // namespace ferry::kernels
