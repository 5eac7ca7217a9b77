#pragma once
// tile and repeat: an array repeated along its dimensions, written as a reshape that adds a
// size-1 dimension, a broadcast_to along it and a reshape that folds it back in, so the
// symbolic shape rules and the gradients (a sum over the copies) are those three ops'. The
// steps carry the name of the op called (tile, repeat), as its errors do.

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/ops/broadcast.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry {

namespace detail {

/// `a` (of user shape `in`) with dimension d repeated `count` times: each element `count`
/// times in a row when `interleave` (np.repeat), the whole run along d `count` times otherwise
/// (np.tile). Works on the rank-4 view (outer, size, 1, inner) or (outer, 1, size * inner), so
/// any rank fits. Its steps carry `name`, the op that asked for it (a string literal).
template <Element T>
DeviceArray<T> repeat_axis(std::string_view name, const DeviceArray<T>& a, const Shape& in,
                           std::size_t d, std::int64_t count, bool interleave) {
  SymInt outer = 1;
  SymInt inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer = outer * in[i];
  for (std::size_t i = d + 1; i < in.rank(); ++i) inner = inner * in[i];
  const SymInt size = in[d];
  const DeviceArray<T> wide =
      interleave ? expand(name, reshape(name, a, Shape(outer, size, SymInt(1), inner)),
                          Shape(outer, size, SymInt(count), inner), false)
                 : expand(name, reshape(name, a, Shape(outer, SymInt(1), size * inner)),
                          Shape(outer, SymInt(count), size * inner), false);
  return reshape(name, wide, with_sym_dim(in, d, size * count));
}

/// InvalidArgument naming `op` unless `size * count` fits in int64 (`count` >= 0).
inline void check_repeat_fits(std::string_view op, const Shape& in, std::size_t d,
                              std::int64_t count) {
  const std::int64_t size = in.dims()[d];
  if (count != 0 && size > std::numeric_limits<std::int64_t>::max() / count) {
    fail<InvalidArgument>(op, "size ", size, " of axis ", d, " of ", in, " times ", count,
                          " overflows int64");
  }
}

}  // namespace detail

/// `a` repeated reps[i] times along dimension i, as `np.tile(a, reps)`: when reps is shorter
/// than a's rank it is padded with leading 1s; when longer, a gains leading size-1 dimensions
/// (PyTorch's `tile` does the same; its `repeat` needs reps at least as long as the rank). A
/// count of 0 gives an empty dimension. One copy per dimension whose count is not 1; `a` itself
/// when every count is 1 and no dimension is added. Counts are plain integers: a trace
/// specializes on them. Throws InvalidArgument for a negative count, more than kMaxRank counts,
/// a size or element count that would overflow int64, or an empty handle.
template <Element T>
DeviceArray<T> tile(const DeviceArray<T>& a, const std::vector<std::int64_t>& reps) {
  constexpr std::string_view name = "tile";
  detail::Step& s = detail::step_of(name, a);
  if (reps.size() > kMaxRank) {
    detail::fail<InvalidArgument>(name, reps.size(), " counts exceed the maximum rank ", kMaxRank);
  }
  for (std::size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0)
      detail::fail<InvalidArgument>(name, "negative count ", reps[i], " for axis ", i);
  }
  const Shape plain = s.shape();
  const std::size_t rank = plain.rank() > reps.size() ? plain.rank() : reps.size();
  const std::size_t lead = rank - plain.rank();  // size-1 dimensions added to a
  const std::size_t skip = rank - reps.size();   // leading counts taken as 1
  std::array<std::int64_t, kMaxRank> count{};
  for (std::size_t i = 0; i < rank; ++i) count[i] = i < skip ? 1 : reps[i - skip];
  std::array<std::int64_t, kMaxRank> padded{};
  for (std::size_t i = 0; i < rank; ++i) padded[i] = i < lead ? 1 : plain.dims()[i - lead];
  const Shape plain_padded(std::span<const std::int64_t>(padded.data(), rank));
  for (std::size_t i = 0; i < rank; ++i) detail::check_repeat_fits(name, plain_padded, i, count[i]);
  // The result's element count must fit too (each size alone may).
  std::array<std::int64_t, kMaxRank> out_dims{};
  for (std::size_t i = 0; i < rank; ++i) out_dims[i] = padded[i] * count[i];
  detail::check_count_fits(name, std::span<const std::int64_t>(out_dims.data(), rank));

  DeviceArray<T> out = a;
  Shape cur = detail::user_shape(s);
  if (lead > 0) {
    std::array<SymInt, kMaxRank> dims{};
    for (std::size_t i = 0; i < rank; ++i) dims[i] = i < lead ? SymInt(1) : cur[i - lead];
    cur = Shape(std::span<const SymInt>(dims.data(), rank));
    out = detail::reshape(name, out, cur);
  }
  for (std::size_t i = 0; i < rank; ++i) {
    if (count[i] == 1) continue;
    out = detail::repeat_axis(name, out, cur, i, count[i], false);
    cur = detail::with_sym_dim(cur, i, cur[i] * count[i]);
  }
  return out;
}

/// Each element of `a` repeated `repeats` times in a row along `axis` (negative counts from the
/// end), as `np.repeat(a, repeats, axis)` with a single count, or `torch.repeat_interleave`.
/// Unlike NumPy, `axis` is required (NumPy flattens without it) and the count is one integer
/// (not one per element). One copy; `a` itself when `repeats` is 1. Throws InvalidArgument for a
/// negative count, a bad axis (a scalar has none), a size or element count that would overflow
/// int64, or an empty handle.
template <Element T>
DeviceArray<T> repeat(const DeviceArray<T>& a, std::int64_t repeats, int axis) {
  constexpr std::string_view name = "repeat";
  detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  if (repeats < 0) detail::fail<InvalidArgument>(name, "negative count ", repeats);
  detail::check_repeat_fits(name, s.shape(), d, repeats);
  std::array<std::int64_t, kMaxRank> out_dims{};
  for (std::size_t i = 0; i < s.shape().rank(); ++i) out_dims[i] = s.shape().dims()[i];
  out_dims[d] *= repeats;
  detail::check_count_fits(name, std::span<const std::int64_t>(out_dims.data(), s.shape().rank()));
  if (repeats == 1) return a;
  return detail::repeat_axis(name, a, detail::user_shape(s), d, repeats, true);
}

}  // namespace ferry
