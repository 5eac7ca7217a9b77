#pragma once
// Placements: how a mesh array's global value lies on the devices of one mesh axis, as
// PyTorch's DTensor places it. Shard{dim} cuts the global array along `dim` across the axis's
// devices (as NumPy's array_split: the first size % n one larger), Replicate{} gives every device
// the whole of it, Partial{op} gives each device a summand (its part of a reduction by `op`).
// A mesh array has one placement per mesh axis (MeshArray::placements).

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

/// How all_reduce and reduce_scatter combine the members' data, and what a Partial placement's
/// parts are reduced by.
enum class ReduceOp : std::uint8_t { sum, max, min, mean };

/// The global array cut along `dim` (negative counts from the end) across the devices of a mesh
/// axis, in the order of their coordinate on it; a size that does not divide is split as
/// NumPy's array_split does (the first size % n devices one element larger).
struct Shard {
  int dim = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};

/// Every device of a mesh axis holds the whole of the global array.
struct Replicate {
  friend bool operator==(const Replicate&, const Replicate&) = default;
};

/// Each device of a mesh axis holds a part of the global array: the global value is the
/// reduction by `op` of the devices' arrays in the order of their coordinate (ferry::sum, max,
/// min or mean over a new leading axis, as all_reduce computes it). `op` defaults to sum.
struct Partial {
  ReduceOp op{};  // ReduceOp::sum, the first enumerator
  friend bool operator==(const Partial&, const Partial&) = default;
};

/// One mesh axis's placement.
using Placement = std::variant<Shard, Replicate, Partial>;
/// One placement per mesh axis, axis 0 first.
using Placements = std::vector<Placement>;

namespace detail {

/// "sum", "max", "min", "mean"; "?" for a value outside the enum.
constexpr std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::mean: return "mean";
  }
  return "?";
}

/// reduce_op_name, or "ReduceOp(7)" for a value outside the enum.
inline std::string reduce_op_text(ReduceOp op) {
  if (const std::string_view name = reduce_op_name(op); name != "?") return std::string(name);
  return "ReduceOp(" + std::to_string(static_cast<int>(op)) + ")";
}

/// Whether `how` is a ReduceOp that reduces T's: any of the four, mean of floating T only.
/// The one test behind every such error; each caller words its own (check_reducible for the
/// collectives, reduce_parts for to_host).
template <Element T>
constexpr bool reducible(ReduceOp how) noexcept {
  const bool known = how == ReduceOp::sum || how == ReduceOp::max || how == ReduceOp::min ||
                     how == ReduceOp::mean;
  return known && (how != ReduceOp::mean || Floating<T>);
}

/// Throws InvalidArgument, as `op`, unless reducible<T>(how): naming the op when it is not a
/// ReduceOp, the element type when it is mean of a non-floating one.
template <Element T>
void check_reducible(std::string_view op, ReduceOp how) {
  if (reducible<T>(how)) return;
  if (how == ReduceOp::mean) {
    fail<InvalidArgument>(op, "ReduceOp::mean needs a floating element type, got ",
                          name_of(dtype_of<T>));
  }
  fail<InvalidArgument>(op, "op is not a ReduceOp (", static_cast<int>(how), ")");
}

/// "Shard(1)", "Replicate()", "Partial(sum)".
inline std::string placement_text(const ferry::Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return "Shard(" + std::to_string(s->dim) + ")";
  if (std::holds_alternative<Replicate>(p)) return "Replicate()";
  return "Partial(" + reduce_op_text(std::get<Partial>(p).op) + ")";
}

/// "(Shard(0), Replicate())".
inline std::string placements_text(const Placements& ps) {
  std::string out = "(";
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i > 0) out += ", ";
    out += placement_text(ps[i]);
  }
  return out + ")";
}

/// Throws InvalidArgument, as `op`, for a Partial placement an element type cannot hold: any
/// of bool (nothing to reduce), mean of integers.
template <Element T>
void check_partials(std::string_view op, const Placements& ps) {
  for (std::size_t a = 0; a < ps.size(); ++a) {
    const auto* p = std::get_if<Partial>(&ps[a]);
    if (p == nullptr) continue;
    if constexpr (!Numeric<T>) {
      fail<InvalidArgument>(op, placement_text(ps[a]), " on mesh axis ", a,
                            " needs a numeric element type, got ", name_of(dtype_of<T>));
    }
    // The collectives' rule and words (a Partial is reduced by them): mean needs a floating
    // type. normalized_placements has already refused an op that is no ReduceOp.
    check_reducible<T>(op, p->op);
  }
}

inline bool is_shard(const ferry::Placement& p) noexcept {
  return std::holds_alternative<Shard>(p);
}
inline bool is_partial(const ferry::Placement& p) noexcept {
  return std::holds_alternative<Partial>(p);
}

/// Part `p` of `n` of an axis of `size`, as NumPy's array_split cuts it: its first element and
/// its length (the first size % n parts one longer).
struct SplitPart {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};
inline SplitPart split_part(std::int64_t size, std::int64_t n, std::int64_t p) noexcept {
  const std::int64_t q = size / n;
  const std::int64_t r = size % n;
  return {p * q + std::min(p, r), q + (p < r ? 1 : 0)};
}

/// `ps` checked against a mesh (`spec`) and an array of shape `global`, with every Shard's dim
/// counted from the start. Throws InvalidArgument, as `op`, when there is not one placement per
/// mesh axis, a Shard's dim is out of range for the rank, two mesh axes shard one dim (a dim is
/// cut along one mesh axis at most), or a Partial's op is not a ReduceOp.
inline Placements normalized_placements(std::string_view op, const MeshSpec& spec,
                                        const Shape& global, Placements ps) {
  const std::size_t axes = spec.shape.rank();
  if (ps.size() != axes) {
    fail<InvalidArgument>(op, "placements ", placements_text(ps), " give ", ps.size(),
                          " placements for mesh ", spec.name, " ", spec.shape.to_string(), " of ",
                          axes, axes == 1 ? " axis" : " axes", "; give one per mesh axis");
  }
  const auto rank = static_cast<int>(global.rank());
  for (std::size_t a = 0; a < axes; ++a) {
    if (const auto* s = std::get_if<Shard>(&ps[a])) {
      if (s->dim < -rank || s->dim >= rank) {
        fail<InvalidArgument>(op, "Shard(", s->dim, ") on mesh axis ", a,
                              " is out of range for an array of rank ", rank, " ",
                              global.to_string());
      }
    } else if (const auto* part = std::get_if<Partial>(&ps[a])) {
      if (static_cast<std::size_t>(part->op) > 3) {
        fail<InvalidArgument>(op, placement_text(ps[a]), " on mesh axis ", a,
                              " has no ReduceOp (sum, max, min or mean)");
      }
    }
  }
  // The dim a Shard names, counted from the start; -1 for another placement.
  const auto dim_of = [rank](const ferry::Placement& p) {
    const auto* s = std::get_if<Shard>(&p);
    return s == nullptr ? -1 : (s->dim < 0 ? s->dim + rank : s->dim);
  };
  for (std::size_t a = 0; a < axes; ++a) {
    for (std::size_t b = a + 1; b < axes; ++b) {
      if (dim_of(ps[a]) >= 0 && dim_of(ps[a]) == dim_of(ps[b])) {
        fail<InvalidArgument>(op, "placements ", placements_text(ps), " shard dim ",
                              dim_of(ps[a]), " along mesh axes ", a, " and ", b,
                              "; a dim may be sharded along one mesh axis only");
      }
    }
  }
  for (ferry::Placement& p : ps) {
    if (auto* s = std::get_if<Shard>(&p); s != nullptr && s->dim < 0) s->dim += rank;
  }
  return ps;
}

/// Where the block of the device at `at` lies in the global array: its first index and its
/// size along each dim. `ps` are normalized (normalized_placements).
struct Block {
  std::vector<std::int64_t> begin;
  std::vector<std::int64_t> sizes;

  Shape shape() const { return Shape(std::span<const std::int64_t>(sizes)); }
};
inline Block block_of(const Shape& global, const Placements& ps, const MeshShape& mesh,
                      const MeshCoordinate& at) {
  Block b;
  b.begin.assign(global.rank(), 0);
  b.sizes.assign(global.dims().begin(), global.dims().end());
  for (std::size_t a = 0; a < ps.size(); ++a) {
    if (const auto* s = std::get_if<Shard>(&ps[a])) {
      const auto d = static_cast<std::size_t>(s->dim);
      const SplitPart part = split_part(global.dims()[d], mesh.sizes()[a], at.indices()[a]);
      b.begin[d] = part.begin;
      b.sizes[d] = part.size;
    }
  }
  return b;
}

}  // namespace detail

/// "Shard(1)": the dim as given.
inline std::ostream& operator<<(std::ostream& os, const Shard& s) {
  return os << detail::placement_text(s);
}
/// "Replicate()".
inline std::ostream& operator<<(std::ostream& os, const Replicate& r) {
  return os << detail::placement_text(r);
}
/// "Partial(sum)", "Partial(max)", ...
inline std::ostream& operator<<(std::ostream& os, const Partial& p) {
  return os << detail::placement_text(p);
}
/// The placement held, as its own operator<< prints it.
inline std::ostream& operator<<(std::ostream& os, const Placement& p) {
  return os << detail::placement_text(p);
}

}  // namespace ferry
