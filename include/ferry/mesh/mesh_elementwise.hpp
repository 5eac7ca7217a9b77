#pragma once
// The elementwise ops on placed mesh arrays (+ - * /, maximum, minimum, neg, exp, relu, gelu,
// tanh): per device, placements kept, two operands broadcast as NumPy's (a Shard's dim counted
// in the result; the placement rules of broadcasting are in mesh/mesh_broadcast.hpp, with
// astype). A Partial passes only where the op commutes with its reduction (Partial(sum) +
// Partial(sum), Partial(sum) * c, Partial(sum) * Replicate, maximum of two Partial(max), ...).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh_broadcast.hpp"
#include "ferry/mesh/mesh_op_support.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry {

namespace detail {

enum class MeshBinary : std::uint8_t { add, subtract, multiply, divide, maximum, minimum };

inline std::string_view binary_name(MeshBinary k) {
  constexpr std::string_view names[] = {"add",    "subtract", "multiply",
                                        "divide", "maximum",  "minimum"};
  return names[static_cast<std::size_t>(k)];
}

/// Whether `k` of two arrays, both Partial(`r`) along one axis, is Partial(`r`): sums and means
/// are linear (add, subtract); a max of maxima is the maximum of the parts, a min of minima too.
inline bool partial_pair_ok(MeshBinary k, ReduceOp r) {
  switch (r) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return k == MeshBinary::add || k == MeshBinary::subtract;
    case ReduceOp::max:
      return k == MeshBinary::maximum;
    case ReduceOp::min:
      return k == MeshBinary::minimum;
  }
  return false;
}

/// Whether `k` of a Partial(`r`) array and a scalar (the array first unless `scalar_first`)
/// is Partial(`r`), the elements `floating` or integers: a sum or mean scales (array * c,
/// c * array; array / c of floating ones: an integer quotient truncates each part); a max or
/// min keeps a max or min with a constant of its own kind, and of floating elements moves by a
/// constant (+ c, - c: integers wrap, which breaks the order).
inline bool partial_scalar_ok(MeshBinary k, ReduceOp r, bool scalar_first, bool floating) {
  switch (r) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return k == MeshBinary::multiply || (k == MeshBinary::divide && !scalar_first && floating);
    case ReduceOp::max:
      return (floating && (k == MeshBinary::add || (k == MeshBinary::subtract && !scalar_first))) ||
             k == MeshBinary::maximum;
    case ReduceOp::min:
      return (floating && (k == MeshBinary::add || (k == MeshBinary::subtract && !scalar_first))) ||
             k == MeshBinary::minimum;
  }
  return false;
}

/// Whether `k` of a Partial(`r`) array and a Replicate one along one mesh axis (the Partial
/// first unless not `partial_first`) is Partial(`r`), the elements `floating` or integers: a
/// sum or mean is linear in its parts, so multiplying each part by the same value (in either
/// order) or, for floating elements, dividing it by one does that to the whole (an integer
/// quotient truncates each part). Adding one would add it once per part, and a max or min is
/// not linear.
inline bool partial_replicate_ok(MeshBinary k, ReduceOp r, bool partial_first, bool floating) {
  if (r != ReduceOp::sum && r != ReduceOp::mean) return false;
  return k == MeshBinary::multiply || (k == MeshBinary::divide && partial_first && floating);
}

template <Element T>
DeviceArray<T> apply_binary(MeshBinary k, const DeviceArray<T>& a, const DeviceArray<T>& b) {
  switch (k) {
    case MeshBinary::add:
      return ferry::add(a, b);
    case MeshBinary::subtract:
      return ferry::subtract(a, b);
    case MeshBinary::multiply:
      return ferry::multiply(a, b);
    case MeshBinary::divide:
      return ferry::divide(a, b);
    case MeshBinary::maximum:
      return ferry::maximum(a, b);
    case MeshBinary::minimum:
      return ferry::minimum(a, b);
  }
  return a;
}

template <Element T>
DeviceArray<T> apply_scalar(MeshBinary k, const DeviceArray<T>& a, T c, bool scalar_first) {
  switch (k) {
    case MeshBinary::add:
      return scalar_first ? ferry::add(c, a) : ferry::add(a, c);
    case MeshBinary::subtract:
      return scalar_first ? ferry::subtract(c, a) : ferry::subtract(a, c);
    case MeshBinary::multiply:
      return scalar_first ? ferry::multiply(c, a) : ferry::multiply(a, c);
    case MeshBinary::divide:
      return scalar_first ? ferry::divide(c, a) : ferry::divide(a, c);
    case MeshBinary::maximum:
      return scalar_first ? ferry::maximum(c, a) : ferry::maximum(a, c);
    case MeshBinary::minimum:
      return scalar_first ? ferry::minimum(c, a) : ferry::minimum(a, c);
  }
  return a;
}

template <Element T>
MeshArray<T> mesh_binary(MeshBinary k, const MeshArray<T>& a, const MeshArray<T>& b) {
  const std::string_view op = binary_name(k);
  check_placed(op, a, "a");
  check_placed(op, b, "b");
  check_same_mesh(op, a, b);
  const Placements& pa = a.placements();
  const Placements& pb = b.placements();
  if (!(a.global_shape() == b.global_shape())) {
    const Shape& ga = a.global_shape();
    const Shape& gb = b.global_shape();
    const Shape out = broadcast_shapes(op, ga, gb, "global shapes");
    Placements ps = broadcast_placements(
        op, a, b, out, [k](ReduceOp r) { return partial_pair_ok(k, r); },
        [k](ReduceOp r, bool partial_first) {
          return partial_replicate_ok(k, r, partial_first, Floating<T>);
        });
    std::vector<DeviceArray<T>> shards;
    shards.reserve(static_cast<std::size_t>(a.size()));
    for (std::int64_t i = 0; i < a.size(); ++i) {
      shards.push_back(apply_binary(k, a.shard(i), b.shard(i)));
    }
    return placed_like(a, std::move(shards), out, std::move(ps));
  }
  // Where one operand is Partial and the other Replicate, an op linear in the Partial one keeps
  // it (each device applies the replicated value to its own part); any other difference is one
  // a redistribute must remove.
  Placements ps = pa;
  bool lined_up = true;
  for (std::size_t x = 0; x < pa.size(); ++x) {
    if (pa[x] == pb[x]) continue;
    const auto* p = std::get_if<Partial>(&pa[x]);
    const auto* q = std::get_if<Partial>(&pb[x]);
    if (p != nullptr && std::holds_alternative<Replicate>(pb[x]) &&
        partial_replicate_ok(k, p->op, true, Floating<T>)) {
      continue;
    }
    if (q != nullptr && std::holds_alternative<Replicate>(pa[x]) &&
        partial_replicate_ok(k, q->op, false, Floating<T>)) {
      ps[x] = pb[x];
      continue;
    }
    lined_up = false;
  }
  if (!lined_up) {
    const Placements want = reduced_placements(pa);
    if (want == pa) {
      fail<PlacementError>(op, "placements differ: a ", placements_text(pa), ", b ",
                           placements_text(pb), "; call redistribute(b, ", placements_text(pa),
                           ") (b = redistribute(b, a.placements())) first");
    }
    fail<PlacementError>(op, "placements differ: a ", placements_text(pa), ", b ",
                         placements_text(pb), "; call ",
                         redistribute_advice("a", pa, want, "b", pb, want), " first");
  }
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* p = std::get_if<Partial>(&pa[x]);
    if (p != nullptr && pa[x] == pb[x] && !partial_pair_ok(k, p->op)) {
      const Placements want = reduced_placements(pa);
      fail<PlacementError>(op, "both operands are ", placement_text(pa[x]), " on mesh axis ", x,
                           " (placements ", placements_text(pa), "), and ", op,
                           " of the parts is not the parts of ", op, "; call redistribute(a, ",
                           placements_text(want), ") and redistribute(b, ", placements_text(want),
                           ") first");
    }
  }
  std::vector<DeviceArray<T>> out;
  out.reserve(static_cast<std::size_t>(a.size()));
  for (std::int64_t i = 0; i < a.size(); ++i)
    out.push_back(apply_binary(k, a.shard(i), b.shard(i)));
  return placed_like(a, std::move(out), a.global_shape(), std::move(ps));
}

template <Element T>
MeshArray<T> mesh_scalar(MeshBinary k, const MeshArray<T>& a, T c, bool scalar_first) {
  const std::string_view op = binary_name(k);
  check_placed(op, a, "the array");
  const Placements& pa = a.placements();
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* p = std::get_if<Partial>(&pa[x]);
    if (p != nullptr && !partial_scalar_ok(k, p->op, scalar_first, Floating<T>)) {
      fail<PlacementError>(op, "the array is ", placement_text(pa[x]), " on mesh axis ", x,
                           " (placements ", placements_text(pa), "), and ",
                           scalar_first ? "scalar, array" : "array, scalar",
                           " is not applied part by part; call redistribute(a, ",
                           placements_text(reduced_placements(pa)), ") first");
    }
  }
  return placed_like(
      a,
      each_shard(a, [&](const DeviceArray<T>& s) { return apply_scalar(k, s, c, scalar_first); }),
      a.global_shape(), pa);
}

/// A unary op per shard; `linear` ops (neg) keep Partial placements, turning a max into a min
/// and back for floating elements (an integer's negation wraps: -(-128) is -128 in int8, and a
/// uint8's is 256 minus it, so it reverses no order), the others take no Partial.
template <Element T, class F>
MeshArray<T> mesh_unary(std::string_view op, const MeshArray<T>& a, bool linear, F&& f) {
  check_placed(op, a, "the array");
  Placements ps = a.placements();
  for (std::size_t x = 0; x < ps.size(); ++x) {
    auto* p = std::get_if<Partial>(&ps[x]);
    if (p == nullptr) continue;
    if (!linear || (!Floating<T> && (p->op == ReduceOp::max || p->op == ReduceOp::min))) {
      fail<PlacementError>(op, "the array is ", placement_text(ps[x]), " on mesh axis ", x,
                           " (placements ", placements_text(a.placements()), "), and ", op,
                           " of the parts is not ", op,
                           " of their reduction; call redistribute(a, ",
                           placements_text(reduced_placements(a.placements())), ") first");
    }
    if (p->op == ReduceOp::max) {
      p->op = ReduceOp::min;
    } else if (p->op == ReduceOp::min) {
      p->op = ReduceOp::max;
    }
  }
  return placed_like(a, each_shard(a, f), a.global_shape(), std::move(ps));
}


}  // namespace detail

// ---- elementwise, two mesh arrays ----

/// a + b on each device. Both must be placed and on one mesh. Of one global shape, they must
/// have the same placements, which the result has. Of two global shapes that broadcast
/// (NumPy's rules: trailing dims aligned, size 1 or missing stretched), a Shard(d) of the
/// lower-rank operand is Shard(d + the rank difference) of the result; along each mesh axis
/// the operands' placements must then be equal, or one Shard(d) and the other Replicate with
/// size 1 along d or without it (a bias added to activations cut along the batch); the result
/// takes the Shard. Partial(sum) and Partial(mean) pass through + and -, Partial(max) through
/// maximum, Partial(min) through minimum. Along an axis where one operand is Partial(sum) or
/// Partial(mean) and the other Replicate, multiply (either order) and divide (the Partial one
/// divided) give that Partial, with no communication: each device multiplies its part, and the
/// sum or mean of the products is the product (+ and - refuse it: each part would add the
/// replicated value once). Throws InvalidArgument for an empty or unplaced
/// operand or two meshes, ShapeError for global shapes that do not broadcast, PlacementError
/// for placements that do not line up, a Shard of a size-1 dim that broadcasts, or a Partial
/// the op does not pass through (naming both placements and the redistribute to call).
template <Element T>
MeshArray<T> add(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::add, a, b);
}
/// a - b on each device; the rules and errors of add.
template <Element T>
MeshArray<T> subtract(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::subtract, a, b);
}
/// a * b on each device; the rules and errors of add: no Partial passes with another of its
/// kind, a Partial(sum) or Partial(mean) does against a Replicate (in either order).
template <Element T>
MeshArray<T> multiply(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::multiply, a, b);
}
/// a / b on each device; the rules and errors of add: a Partial(sum) or Partial(mean) a of
/// floating elements passes against a Replicate b (each part divided), no other Partial does
/// (an integer quotient truncates each part: (3 + 3) / 2 is 3, 3 / 2 + 3 / 2 is 2).
template <Element T>
MeshArray<T> divide(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::divide, a, b);
}
/// The larger of a and b on each device; the rules and errors of add.
template <Element T>
MeshArray<T> maximum(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::maximum, a, b);
}
/// The smaller of a and b on each device; the rules and errors of add.
template <Element T>
MeshArray<T> minimum(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::minimum, a, b);
}

// ---- elementwise, a mesh array and a scalar ----

/// a + c on each device, placements kept. A Partial(max) or Partial(min) of floating elements
/// passes (the bound moves by c; integers wrap, which breaks the order: int8 100 + 50 is
/// -106); a Partial(sum) or Partial(mean) does not (c would be added once per part).
/// Throws InvalidArgument for an empty or unplaced array, PlacementError for a Partial the op
/// does not pass through.
template <Element T>
MeshArray<T> add(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::add, a, c, false);
}
/// c + a; as add(a, c).
template <Element T>
MeshArray<T> add(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return detail::mesh_scalar(detail::MeshBinary::add, a, c, true);
}
/// a - c; as add(a, c).
template <Element T>
MeshArray<T> subtract(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::subtract, a, c, false);
}
/// c - a; as add(a, c), but no Partial passes.
template <Element T>
MeshArray<T> subtract(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return detail::mesh_scalar(detail::MeshBinary::subtract, a, c, true);
}
/// a * c on each device: Partial(sum) and Partial(mean) pass (a sum scales), max and min do
/// not. Throws like add(a, c).
template <Element T>
MeshArray<T> multiply(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::multiply, a, c, false);
}
/// c * a; as multiply(a, c).
template <Element T>
MeshArray<T> multiply(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return detail::mesh_scalar(detail::MeshBinary::multiply, a, c, true);
}
/// a / c; as multiply(a, c), for floating elements (an integer quotient truncates each part:
/// a Partial(sum) of integers does not pass).
template <Element T>
MeshArray<T> divide(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::divide, a, c, false);
}
/// c / a; no Partial passes. Throws like add(a, c).
template <Element T>
MeshArray<T> divide(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return detail::mesh_scalar(detail::MeshBinary::divide, a, c, true);
}
/// The larger of a and c: Partial(max) passes. Throws like add(a, c).
template <Element T>
MeshArray<T> maximum(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::maximum, a, c, false);
}
/// The smaller of a and c: Partial(min) passes. Throws like add(a, c).
template <Element T>
MeshArray<T> minimum(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return detail::mesh_scalar(detail::MeshBinary::minimum, a, c, false);
}

/// add, subtract, multiply, divide as operators, of two mesh arrays or a mesh array and a scalar.
template <Element T>
MeshArray<T> operator+(const MeshArray<T>& a, const MeshArray<T>& b) {
  return add(a, b);
}
template <Element T>
MeshArray<T> operator-(const MeshArray<T>& a, const MeshArray<T>& b) {
  return subtract(a, b);
}
template <Element T>
MeshArray<T> operator*(const MeshArray<T>& a, const MeshArray<T>& b) {
  return multiply(a, b);
}
template <Element T>
MeshArray<T> operator/(const MeshArray<T>& a, const MeshArray<T>& b) {
  return divide(a, b);
}
template <Element T>
MeshArray<T> operator+(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return add(a, c);
}
template <Element T>
MeshArray<T> operator+(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return add(c, a);
}
template <Element T>
MeshArray<T> operator-(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return subtract(a, c);
}
template <Element T>
MeshArray<T> operator-(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return subtract(c, a);
}
template <Element T>
MeshArray<T> operator*(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return multiply(a, c);
}
template <Element T>
MeshArray<T> operator*(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return multiply(c, a);
}
template <Element T>
MeshArray<T> operator/(const MeshArray<T>& a, std::type_identity_t<T> c) {
  return divide(a, c);
}
template <Element T>
MeshArray<T> operator/(std::type_identity_t<T> c, const MeshArray<T>& a) {
  return divide(c, a);
}

// ---- elementwise, unary ----

/// -a on each device, placements kept: a Partial(sum) or Partial(mean) stays one, a
/// Partial(max) of floating elements becomes Partial(min) and back. Throws InvalidArgument for
/// an empty or unplaced array, PlacementError for a Partial(max) or Partial(min) of integers
/// (negation wraps: -(-128) is -128 in int8, and a uint8's is 256 minus it).
template <Element T>
MeshArray<T> neg(const MeshArray<T>& a) {
  return detail::mesh_unary("neg", a, true, [](const DeviceArray<T>& s) { return ferry::neg(s); });
}
/// neg(a).
template <Element T>
MeshArray<T> operator-(const MeshArray<T>& a) {
  return neg(a);
}
/// exp of each element, on each device, placements kept. Throws InvalidArgument for an empty
/// or unplaced array, PlacementError for a Partial axis (exp of the parts is not exp of their
/// sum).
template <Element T>
MeshArray<T> exp(const MeshArray<T>& a) {
  return detail::mesh_unary("exp", a, false, [](const DeviceArray<T>& s) { return ferry::exp(s); });
}
/// max(a, 0) of each element; as exp.
template <Element T>
MeshArray<T> relu(const MeshArray<T>& a) {
  return detail::mesh_unary("relu", a, false,
                            [](const DeviceArray<T>& s) { return ferry::relu(s); });
}
/// GELU of each element (ferry::gelu's form); as exp.
template <Element T>
MeshArray<T> gelu(const MeshArray<T>& a) {
  return detail::mesh_unary("gelu", a, false,
                            [](const DeviceArray<T>& s) { return ferry::gelu(s); });
}
/// tanh of each element; as exp.
template <Element T>
MeshArray<T> tanh(const MeshArray<T>& a) {
  return detail::mesh_unary("tanh", a, false,
                            [](const DeviceArray<T>& s) { return ferry::tanh(s); });
}

}  // namespace ferry
