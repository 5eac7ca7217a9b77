#pragma once
// Layout: where a device array's buffer lives (DRAM or L1) and how its elements are ordered
// in it (row-major, or 32x32 tiles of the last two dimensions, padded).

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"

namespace ferry {

/// The memory a device buffer lives in: DRAM is large and slower; L1 (`spec.l1_bytes`, the
/// whole device's on-chip memory) is small and fast.
enum class MemorySpace : std::uint8_t { dram, l1 };

/// The order of the elements in a buffer. `tiled` stores the last two dimensions as 32x32
/// tiles, row-major inside a tile and tile by tile, each matrix padded up to whole tiles (a
/// rank-1 array is one row). Accelerators whose compute units work on tiles want it.
enum class Order : std::uint8_t { row_major, tiled };

/// Where and how an array is stored. `Layout{}` is DRAM, row-major.
struct Layout {
  MemorySpace space = MemorySpace::dram;
  Order order = Order::row_major;

  friend bool operator==(const Layout&, const Layout&) = default;

  /// "dram row-major", "l1 tiled", ...
  std::string to_string() const {
    return std::string(space == MemorySpace::l1 ? "l1" : "dram") +
           (order == Order::tiled ? " tiled" : " row-major");
  }
};

/// The side of a tile.
inline constexpr std::int64_t kTile = 32;

namespace detail {

/// A tiled array seen as `batch` matrices of rows x cols, padded to whole tiles.
struct TileGrid {
  std::int64_t batch = 1;
  std::int64_t rows = 1;
  std::int64_t cols = 1;
  std::int64_t tile_rows = 0;  // tiles down a matrix
  std::int64_t tile_cols = 0;  // tiles across a matrix

  std::int64_t padded_elements() const noexcept {
    return batch * tile_rows * tile_cols * kTile * kTile;
  }
  /// Where element (b, r, c) of the logical array sits in the tiled buffer.
  std::int64_t offset(std::int64_t b, std::int64_t r, std::int64_t c) const noexcept {
    const std::int64_t tile = (b * tile_rows + r / kTile) * tile_cols + c / kTile;
    return tile * kTile * kTile + (r % kTile) * kTile + c % kTile;
  }
};

inline TileGrid tile_grid(const Shape& shape) noexcept {
  TileGrid g;
  const std::size_t rank = shape.rank();
  g.cols = rank >= 1 ? shape.dims()[rank - 1] : 1;
  g.rows = rank >= 2 ? shape.dims()[rank - 2] : 1;
  for (std::size_t i = 0; i + 2 < rank; ++i) g.batch *= shape.dims()[i];
  // Rounded up without adding first: a size near the int64 maximum must not overflow.
  g.tile_rows = g.rows / kTile + (g.rows % kTile != 0 ? 1 : 0);
  g.tile_cols = g.cols / kTile + (g.cols % kTile != 0 ? 1 : 0);
  return g;
}

/// InvalidArgument naming `op` for a layout no array of `shape` can have: tiles need at least
/// one dimension.
inline void check_layout(std::string_view op, const Shape& shape, Layout layout) {
  if (layout.order == Order::tiled && shape.rank() == 0) {
    fail<InvalidArgument>(op, "a scalar (shape ()) cannot be tiled: tiles need at least one "
                              "dimension");
  }
}

/// The bytes an array of `shape` takes in `layout` (tiles are padded); InvalidArgument naming
/// `op` when that cannot be allocated.
inline std::size_t storage_bytes(std::string_view op, const Shape& shape, std::size_t element_size,
                                 Layout layout) {
  if (layout.order == Order::row_major || shape.numel() == 0) {
    return checked_bytes(op, shape, element_size);
  }
  const TileGrid g = tile_grid(shape);
  // Padding can push an array that fits past what one allocation holds, or past int64: the
  // padded byte count is checked factor by factor, like checked_bytes, and the error names `op`.
  constexpr auto kMaxBytes =
      static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max());
  auto bytes = static_cast<std::uint64_t>(element_size);
  for (const std::int64_t n : {g.batch, g.tile_rows, g.tile_cols, kTile, kTile}) {
    const auto factor = static_cast<std::uint64_t>(n);  // at least 1: the array is not empty
    if (bytes > kMaxBytes / factor) {
      fail<InvalidArgument>(op, "an array of shape ", shape, " with ", element_size,
                            "-byte elements does not fit in memory once padded to tiles");
    }
    bytes *= factor;
  }
  return static_cast<std::size_t>(bytes);
}

}  // namespace detail
}  // namespace ferry
