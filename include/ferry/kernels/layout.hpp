#pragma once
// Layout kernels: converting between row-major and tiled storage, and walking the elements a
// tiled buffer really holds (its padding left alone).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"

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

/// Stores the row-major `src` of `shape` into `dst` in `to` order; `dst` holds
/// storage_bytes(shape, to). Tile padding is written as zero bytes, so equal arrays have equal
/// buffers.
inline void store_as(const std::byte* src, std::byte* dst, const Shape& shape,
                     std::size_t element_size, Order to) {
  const std::size_t row_bytes_total = static_cast<std::size_t>(shape.numel()) * element_size;
  if (to == Order::row_major) {
    if (row_bytes_total != 0) std::memcpy(dst, src, row_bytes_total);
    return;
  }
  if (shape.numel() == 0) return;
  const detail::TileGrid g = detail::tile_grid(shape);
  std::memset(dst, 0, static_cast<std::size_t>(g.padded_elements()) * element_size);
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t r = 0; r < g.rows; ++r) {
      const std::byte* row = src + static_cast<std::size_t>((b * g.rows + r) * g.cols) * element_size;
      for (std::int64_t c = 0; c < g.cols; c += kTile) {
        const auto n = static_cast<std::size_t>(std::min(kTile, g.cols - c));
        std::memcpy(dst + static_cast<std::size_t>(g.offset(b, r, c)) * element_size,
                    row + static_cast<std::size_t>(c) * element_size, n * element_size);
      }
    }
  }
}

/// Reads `src`, an array of `shape` in `from` order, into the row-major `dst`.
inline void load_from(const std::byte* src, std::byte* dst, const Shape& shape,
                      std::size_t element_size, Order from) {
  if (from == Order::row_major) {
    if (shape.numel() != 0) {
      std::memcpy(dst, src, static_cast<std::size_t>(shape.numel()) * element_size);
    }
    return;
  }
  std::size_t out = 0;
  for_each_valid_run(shape, from, [&](std::size_t offset, std::size_t n) {
    std::memcpy(dst + out * element_size, src + offset * element_size, n * element_size);
    out += n;
  });
}

/// Converts `src` (an array of `shape` in `from` order) into `dst` in `to` order.
inline void convert_order(const std::byte* src, Order from, std::byte* dst, Order to,
                          const Shape& shape, std::size_t element_size) {
  if (from == to) {
    const std::size_t bytes = detail::storage_bytes("to_layout", shape, element_size, {MemorySpace::dram, to});
    if (bytes != 0) std::memcpy(dst, src, bytes);
  } else if (to == Order::tiled) {
    store_as(src, dst, shape, element_size, Order::tiled);
  } else {
    load_from(src, dst, shape, element_size, from);
  }
}

}  // namespace ferry::kernels
