#pragma once
// The cumulative sum along one axis, the array seen as (outer, size, inner) around it: each
// line summed in order, floating types in double (as the reductions), integers wrapping. Lines
// are independent, so any runner gives the same bits.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

template <class T>
void cumsum(const T* in, T* out, std::int64_t outer, std::int64_t size, std::int64_t inner,
            const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<std::is_floating_point_v<C>, double, C>;
  const std::int64_t per_outer = std::max<std::int64_t>(size * inner, 1);
  const std::int64_t grain = std::max<std::int64_t>(chunk_elements(2 * sizeof(T)) / per_outer, 1);
  parallel_for(runner, outer, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<Acc> running(static_cast<std::size_t>(inner));
    for (std::int64_t o = begin; o < end; ++o) {
      std::fill(running.begin(), running.end(), Acc{});
      for (std::int64_t j = 0; j < size; ++j) {
        const std::int64_t row = (o * size + j) * inner;
        for (std::int64_t i = 0; i < inner; ++i) {
          Acc& r = running[static_cast<std::size_t>(i)];
          r = Add{}(r, static_cast<Acc>(static_cast<C>(in[row + i])));
          out[row + i] = convert_value<T>(r);
        }
      }
    }
  });
}

}  // namespace ferry::kernels
