#pragma once
// Sorting along one axis, the array seen as (outer, size, inner) around it: a stable argsort of
// each line (NaN last in either direction, as NumPy puts it last), and the gather and
// scatter-add of values by per-element indices along the axis (take_along_axis and its
// transpose). Lines are independent, so any runner gives the same result.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string_view>
#include <vector>

#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/indexing.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// out holds, for each line, the positions that order it: ascending (or descending), equal
/// values in their original order, NaN after every number.
template <class T>
void argsort(const T* in, std::int64_t* out, std::int64_t outer, std::int64_t size,
             std::int64_t inner, bool descending, const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  const std::int64_t grain =
      std::max<std::int64_t>(1, chunk_elements(sizeof(T) + 8) / std::max<std::int64_t>(size, 1));
  parallel_for(runner, outer * inner, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(size));
    std::vector<C> line(static_cast<std::size_t>(size));
    for (std::int64_t l = begin; l < end; ++l) {
      const std::int64_t o = l / inner;
      const std::int64_t i = l % inner;
      for (std::int64_t j = 0; j < size; ++j)
        line[static_cast<std::size_t>(j)] = static_cast<C>(in[(o * size + j) * inner + i]);
      std::iota(order.begin(), order.end(), std::int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        const C x = line[static_cast<std::size_t>(a)];
        const C y = line[static_cast<std::size_t>(b)];
        if (is_nan(x)) return false;
        if (is_nan(y)) return true;
        return descending ? y < x : x < y;
      });
      for (std::int64_t j = 0; j < size; ++j)
        out[(o * size + j) * inner + i] = order[static_cast<std::size_t>(j)];
    }
  });
}

/// out[o, j, i] = in[o, idx[o, j, i], i] for j < count: `size` the input's axis, `count` the
/// indices' (negative indices count from the end unless `from_end` is false; one out of range
/// throws InvalidArgument naming `op`, the op the caller called).
template <class T, class I>
void take_along(std::string_view op, const T* in, const I* idx, T* out, std::int64_t outer,
                std::int64_t size, std::int64_t count, std::int64_t inner,
                const ChunkRunner& runner = inline_runner(), bool from_end = true) {
  parallel_for(runner, outer * count * inner, chunk_elements(2 * sizeof(T) + sizeof(I)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t e = begin; e < end; ++e) {
                   const std::int64_t i = e % inner;
                   const std::int64_t o = e / (count * inner);
                   const auto at = static_cast<std::int64_t>(idx[e]);
                   const std::int64_t row = axis_position(op, at, size, from_end);
                   out[e] = in[(o * size + row) * inner + i];
                 }
               });
}

/// out[o, idx[o, j, i], i] += upd[o, j, i], out holding the base values: take_along's
/// transpose. Each outer slice is one range's, summed in order of j. Indices as take_along's
/// (`op` names the op called, `from_end` says whether a negative one counts from the end).
template <class T, class I>
void scatter_add_along(std::string_view op, const I* idx, const T* upd, T* out,
                       std::int64_t outer, std::int64_t size, std::int64_t count,
                       std::int64_t inner, const ChunkRunner& runner = inline_runner(),
                       bool from_end = true) {
  using C = compute_t<T>;
  const std::vector<std::int64_t> rows =
      axis_positions(op, idx, outer * count * inner, size, from_end);
  parallel_for(runner, outer, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      for (std::int64_t j = 0; j < count; ++j) {
        for (std::int64_t i = 0; i < inner; ++i) {
          const std::int64_t e = (o * count + j) * inner + i;
          T& d = out[(o * size + rows[static_cast<std::size_t>(e)]) * inner + i];
          d = static_cast<T>(Add{}(C(d), C(upd[e])));
        }
      }
    }
  });
}

}  // namespace ferry::kernels
