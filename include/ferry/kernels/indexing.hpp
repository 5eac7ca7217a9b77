#pragma once
// Gather and scatter-add along one axis, with the array seen as (outer, size, inner) around that
// axis and the indices flattened to `count` positions: take copies rows of `inner` elements,
// scatter_add adds them back. Indices may be negative (counted from the end, as NumPy); one out
// of range throws InvalidArgument, which fails the step and reaches the caller through its
// futures (the values are not known at the call).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// Index `i` of an axis of `size`, a negative one counted from the end unless `from_end` is
/// false (a class label, where -1 is no class). Throws InvalidArgument naming `op` when it is
/// outside [-size, size) ([0, size) without from_end).
inline std::int64_t axis_position(std::string_view op, std::int64_t i, std::int64_t size,
                                  bool from_end = true) {
  const std::int64_t j = i < 0 && from_end ? i + size : i;
  if (j >= 0 && j < size) return j;
  if (from_end) {
    detail::fail<InvalidArgument>(op, "index ", i, " is out of range for an axis of size ", size);
  }
  detail::fail<InvalidArgument>(op, "index ", i, " is out of range [0, ", size, ")");
}

/// The positions of the `n` indices `idx` on an axis of `size`, every one checked before the
/// caller writes anything (axis_position's InvalidArgument for the first out of range).
template <class I>
std::vector<std::int64_t> axis_positions(std::string_view op, const I* idx, std::int64_t n,
                                         std::int64_t size, bool from_end = true) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) {
    rows[static_cast<std::size_t>(j)] =
        axis_position(op, static_cast<std::int64_t>(idx[j]), size, from_end);
  }
  return rows;
}

/// out[o, j, :] = in[o, idx[j], :] for o < outer and j < count; rows of `inner` elements. An
/// index out of range throws InvalidArgument naming `op`, the op the program called.
template <class T, class I>
void take(std::string_view op, const T* in, const I* idx, T* out, std::int64_t outer,
          std::int64_t size, std::int64_t count, std::int64_t inner,
          const ChunkRunner& runner = inline_runner()) {
  const std::int64_t rows_per_range =
      std::max<std::int64_t>(1, chunk_elements(2 * sizeof(T)) / std::max<std::int64_t>(inner, 1));
  parallel_for(runner, outer * count, rows_per_range, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t o = r / count;
      const std::int64_t j = axis_position(op, static_cast<std::int64_t>(idx[r % count]), size);
      std::copy_n(in + (o * size + j) * inner, inner, out + r * inner);
    }
  });
}

/// out[o, idx[j], :] += upd[o, j, :] for every j in order (a repeated index adds each of its
/// updates), out holding the base values already. The work splits by (outer, a block of inner
/// columns): each range owns its columns of every row, so the sum's order, and its bits, do not
/// depend on the runner.
template <class T, class I>
void scatter_add(std::string_view op, const I* idx, const T* upd, T* out, std::int64_t outer,
                 std::int64_t size, std::int64_t count, std::int64_t inner,
                 const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  const std::vector<std::int64_t> rows = axis_positions(op, idx, count, size);
  const std::int64_t width = std::max<std::int64_t>(256, (inner + 15) / 16);
  const std::int64_t blocks = (inner + width - 1) / width;
  parallel_for(runner, outer * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t o = t / blocks;
      const std::int64_t lo = (t % blocks) * width;
      const std::int64_t hi = std::min(inner, lo + width);
      for (std::int64_t j = 0; j < count; ++j) {
        T* dst = out + (o * size + rows[static_cast<std::size_t>(j)]) * inner;
        const T* src = upd + (o * count + j) * inner;
        for (std::int64_t i = lo; i < hi; ++i)
          dst[i] = static_cast<T>(Add{}(C(dst[i]), C(src[i])));  // integers wrap
      }
    }
  });
}

}  // namespace ferry::kernels
