#pragma once
// How two placed mesh arrays of different shapes or element types are brought to one: the
// placement rules of NumPy broadcasting for the elementwise ops (which placement the result
// takes along each mesh axis, and which redistribute to call when the operands' placements do
// not line up), and astype, the element type conversion of a placed array (which Partials
// survive it). Both are rules about placements, not about any one op, so they are kept apart
// from the per-op code of mesh/mesh_elementwise.hpp, which uses the first.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_op_support.hpp"
#include "ferry/mesh/placement.hpp"

namespace ferry {

namespace detail {

/// `p` of an operand of rank `rank` seen in the result of rank `out_rank`: NumPy aligns the
/// trailing dims, so a Shard's dim moves up by the rank difference.
inline ferry::Placement lifted(const ferry::Placement& p, std::size_t rank, std::size_t out_rank) {
  if (const auto* s = std::get_if<Shard>(&p)) {
    return Shard{s->dim + static_cast<int>(out_rank - rank)};
  }
  return p;
}

/// The size of dim `d` of the result (rank `out_rank`) in an operand of shape `s`: 1 where the
/// operand lacks the dim.
inline std::int64_t size_in(const Shape& s, std::size_t out_rank, int d) {
  const auto off = static_cast<int>(out_rank - s.rank());
  return d < off ? 1 : s.dims()[static_cast<std::size_t>(d - off)];
}

/// How an operand of shape `s` would be placed along one mesh axis to match the result's
/// Shard(d) there: cut along the same dim if it has it at full size, else Replicate (it
/// broadcasts along d on each device).
inline ferry::Placement matching(const Shape& s, std::size_t out_rank, int d) {
  const auto off = static_cast<int>(out_rank - s.rank());
  if (size_in(s, out_rank, d) == 1) return Replicate{};
  return Shard{d - off};
}

/// " (the result's Shard(2))" when a Shard's dim moves in the result, else nothing.
inline std::string in_result(const ferry::Placement& p, const ferry::Placement& lifted_p) {
  if (p == lifted_p) return "";
  return " (the result's " + placement_text(lifted_p) + ")";
}

/// Whether two mesh axes of `ps` cut one dim (which no placement allows).
inline bool sharded_twice(const Placements& ps) {
  for (std::size_t x = 0; x < ps.size(); ++x) {
    for (std::size_t y = x + 1; y < ps.size(); ++y) {
      if (is_shard(ps[x]) && ps[x] == ps[y]) return true;
    }
  }
  return false;
}

/// The placements of `op` of `a` and `b` of two global shapes that broadcast, NumPy's way.
/// Along each mesh axis: equal placements (Shards compared in the result's dims) stay, a
/// Partial(r) only where `partial_passes(r)` (the op of two Partial(r) parts is the Partial(r)
/// of the op); a Shard(d) of one operand against a Replicate of the other stays when the
/// other has size 1 along d or lacks it (it broadcasts on each device, the Megatron bias); a
/// Partial(r) of one operand against a Replicate of the other stays where
/// `partial_with_replicate(r, a is the Partial one)` (an op linear in the Partial operand).
/// Throws, as `op`: PlacementError for a Shard of a size-1 dim the other operand stretches,
/// and for any other pair (naming both placements and the redistributes that make them line
/// up).
template <Element T, class PartialPasses, class PartialWithReplicate>
Placements broadcast_placements(std::string_view op, const MeshArray<T>& a, const MeshArray<T>& b,
                                const Shape& out, PartialPasses&& partial_passes,
                                PartialWithReplicate&& partial_with_replicate) {
  const std::size_t out_rank = out.rank();
  const Shape& ga = a.global_shape();
  const Shape& gb = b.global_shape();
  const Placements& pa = a.placements();
  const Placements& pb = b.placements();
  for (const auto* side : {&a, &b}) {
    const Shape& g = side->global_shape();
    const Placements& ps = side->placements();
    for (std::size_t x = 0; x < ps.size(); ++x) {
      const auto* s = std::get_if<Shard>(&ps[x]);
      if (s == nullptr) continue;
      const auto d = static_cast<std::size_t>(s->dim);
      const std::int64_t stretched = out.dims()[d + (out_rank - g.rank())];
      if (g.dims()[d] == 1 && stretched != 1) {
        const char* name = side == &a ? "a" : "b";
        fail<PlacementError>(op, name, " ", g, " is ", placement_text(ps[x]), " on mesh axis ", x,
                             ", a dim of size 1 that broadcasts to ", stretched,
                             " (placements a ", placements_text(pa), ", b ", placements_text(pb),
                             "); call redistribute(", name, ", ",
                             placements_text(with_axis(ps, x, Replicate{})), ") first");
      }
    }
  }
  Placements result(pa.size());
  // Two ways to line the operands up: the side that is cut stays and the other follows it by
  // a local slice (slice_a, slice_b); or b follows a on every failing axis (follow_b).
  Placements slice_a = pa;
  Placements slice_b = pb;
  Placements follow_b = pb;
  bool partial_mismatch = false;
  std::string first_bad;
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const ferry::Placement la = lifted(pa[x], ga.rank(), out_rank);
    const ferry::Placement lb = lifted(pb[x], gb.rank(), out_rank);
    const auto* sa = std::get_if<Shard>(&la);
    const auto* sb = std::get_if<Shard>(&lb);
    const bool ra = std::holds_alternative<Replicate>(la);
    const bool rb = std::holds_alternative<Replicate>(lb);
    if (la == lb) {
      const auto* p = std::get_if<Partial>(&la);
      if (p != nullptr && !partial_passes(p->op)) {
        partial_mismatch = true;
        if (first_bad.empty()) {
          first_bad = "both operands are " + placement_text(la) + " on mesh axis " +
                      std::to_string(x) + ", and " + std::string(op) +
                      " of the parts is not the parts of " + std::string(op);
        }
      }
      result[x] = la;
      continue;
    }
    const auto* pla = std::get_if<Partial>(&la);
    const auto* plb = std::get_if<Partial>(&lb);
    if (pla != nullptr && rb && partial_with_replicate(pla->op, true)) {
      result[x] = la;
      continue;
    }
    if (plb != nullptr && ra && partial_with_replicate(plb->op, false)) {
      result[x] = lb;
      continue;
    }
    if (sa != nullptr && rb && size_in(gb, out_rank, sa->dim) == 1) {
      result[x] = la;
      continue;
    }
    if (sb != nullptr && ra && size_in(ga, out_rank, sb->dim) == 1) {
      result[x] = lb;
      continue;
    }
    if (first_bad.empty()) {
      first_bad = "on mesh axis " + std::to_string(x) + " a is " + placement_text(pa[x]) +
                  in_result(pa[x], la) + " and b " + placement_text(pb[x]) + in_result(pb[x], lb) +
                  ", which do not line up in the broadcast " + out.to_string();
    }
    if (is_partial(la) || is_partial(lb)) {
      partial_mismatch = true;
    } else if (sa != nullptr) {
      slice_b[x] = matching(gb, out_rank, sa->dim);
      follow_b[x] = slice_b[x];
    } else {  // a holds its whole dim where b is cut: a is sliced to b's cut
      slice_a[x] = matching(ga, out_rank, sb->dim);
      follow_b[x] = Replicate{};
    }
  }
  if (first_bad.empty()) return result;
  std::string fix;
  if (partial_mismatch) {
    fix = redistribute_advice("a", pa, reduced_placements(pa), "b", pb, reduced_placements(pb));
  } else if (sharded_twice(slice_a) || sharded_twice(slice_b)) {
    fix = "redistribute(b, " + placements_text(follow_b) + ")";
  } else if (slice_a != pa && slice_b != pb) {
    fix = "redistribute(a, " + placements_text(slice_a) + ") and redistribute(b, " +
          placements_text(slice_b) + ")";
  } else if (slice_a != pa) {
    fix = "redistribute(a, " + placements_text(slice_a) + ")";
  } else {
    fix = "redistribute(b, " + placements_text(slice_b) + ")";
  }
  fail<PlacementError>(op, first_bad, " (a ", ga, " ", placements_text(pa), ", b ", gb, " ",
                       placements_text(pb), "); call ", fix, " first");
}
}  // namespace detail

// ---- element type ----

namespace detail {

/// Whether converting each part of a Partial(`r`) array of T to U gives the parts of the
/// converted whole (astype below says which do).
template <Element T, Element U>
constexpr bool partial_converts(ReduceOp r) {
  if constexpr (std::same_as<U, bool> || std::same_as<T, bool>) {
    return false;  // bool parts are never Partial, and != 0 keeps no order
  } else if (r == ReduceOp::sum || r == ReduceOp::mean) {
    return Floating<T> && Floating<U>;
  } else if constexpr (Floating<U> || Floating<T>) {
    return true;
  } else {  // between integers: the order holds where U holds every T
    return std::cmp_less_equal(std::numeric_limits<U>::min(), std::numeric_limits<T>::min()) &&
           std::cmp_greater_equal(std::numeric_limits<U>::max(), std::numeric_limits<T>::max());
  }
}

}  // namespace detail

/// `a`'s values converted to U on each device (as DeviceArray::astype converts them, and
/// differentiable as it is), its global shape and placements kept. A Partial(max) or
/// Partial(min) passes where the conversion keeps the order, so the largest part stays the
/// largest: to a floating U, from a floating T to an integer U (it truncates and saturates),
/// and between integers to a U that holds every T (int8 to int16; not int32 to uint8, which
/// wraps). A Partial(sum) or Partial(mean) passes only from a floating T to a floating U (the
/// conversion is then linear up to rounding; an integer sum wraps where a floating one does
/// not, and to an integer each part rounds). Nothing passes to bool (it tests != 0). Throws
/// InvalidArgument for an empty or unplaced array, PlacementError for a Partial it does not
/// pass (naming the redistribute to call).
template <Element U, Element T>
MeshArray<U> astype(const MeshArray<T>& a) {
  constexpr std::string_view op = "astype";
  detail::check_placed(op, a, "the array");
  const Placements& ps = a.placements();
  for (std::size_t x = 0; x < ps.size(); ++x) {
    const auto* p = std::get_if<Partial>(&ps[x]);
    if (p != nullptr && !detail::partial_converts<T, U>(p->op)) {
      detail::fail<PlacementError>(
          op, "the array is ", detail::placement_text(ps[x]), " on mesh axis ", x,
          " (placements ", detail::placements_text(ps), "), and converting ",
          name_of(dtype_of<T>), " parts to ", name_of(dtype_of<U>), " is not converting their ",
          detail::reduce_op_text(p->op), "; call redistribute(a, ",
          detail::placements_text(detail::reduced_placements(ps)), ") first");
    }
  }
  std::vector<DeviceArray<U>> out;
  out.reserve(static_cast<std::size_t>(a.size()));
  for (const DeviceArray<T>& s : a.shards()) out.push_back(s.template astype<U>());
  return MeshArray<U>::from_shards(a.mesh(), std::move(out), a.global_shape(), ps);
}

}  // namespace ferry
