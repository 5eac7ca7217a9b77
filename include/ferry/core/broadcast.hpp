#pragma once
// NumPy broadcasting: shapes are aligned at their last dimension; two sizes combine when they
// are equal or one of them is 1 (so 1 with 0 gives 0, but 2 with 0 is an error).

#include <array>
#include <cstdint>
#include <string_view>

#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"

namespace ferry::detail {

/// Whether `a` and `b` broadcast together (broadcast_shapes would not throw).
inline bool broadcasts(const Shape& a, const Shape& b) noexcept {
  for (std::size_t i = 0; i < a.rank() && i < b.rank(); ++i) {
    const std::int64_t da = a.dims()[a.rank() - 1 - i];
    const std::int64_t db = b.dims()[b.rank() - 1 - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

/// The shape that `a` and `b` broadcast to; ShapeError naming `op` and both shapes otherwise,
/// called `shapes` there ("global shapes" for the mesh ops, whose operands also have shards).
inline Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b,
                              std::string_view shapes = "shapes") {
  if (!broadcasts(a, b)) fail<ShapeError>(op, shapes, " ", a, " and ", b, " do not broadcast");
  const std::size_t rank = a.rank() > b.rank() ? a.rank() : b.rank();
  std::array<std::int64_t, kMaxRank> out{};
  for (std::size_t i = 0; i < rank; ++i) {
    // i counts from the last dimension; a missing leading dimension acts as size 1.
    const std::int64_t da = i < a.rank() ? a.dims()[a.rank() - 1 - i] : 1;
    const std::int64_t db = i < b.rank() ? b.dims()[b.rank() - 1 - i] : 1;
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return Shape(std::span<const std::int64_t>(out.data(), rank));
}

/// Strides that read an array of shape `in` as if it had the broadcast shape `out`: 0 along
/// every dimension `in` lacks or has as size 1, the row-major stride elsewhere.
inline Strides broadcast_strides(const Shape& in, const Shape& out) noexcept {
  const Strides own = row_major_strides(in);
  Strides s{};
  const std::size_t offset = out.rank() - in.rank();
  for (std::size_t i = 0; i < in.rank(); ++i) {
    s[offset + i] = in.dims()[i] == 1 ? 0 : own[i];
  }
  return s;
}

}  // namespace ferry::detail
