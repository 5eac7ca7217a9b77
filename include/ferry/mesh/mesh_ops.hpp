#pragma once
// Ops on placed mesh arrays: each runs once per device on that device's shard and gives the
// placement of the result (PyTorch DTensor's propagation rules, kept to the cases that need no
// communication). A combination that would need a collective is a PlacementError naming both
// placements and the redistribute that makes it work: nothing here gathers behind the caller's
// back. Operands of two meshes are InvalidArgument, of two global shapes ShapeError (no
// broadcasting between mesh arrays).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/normalization.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/softmax.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry {

/// The weight and bias (empty handles when absent, else 1-D of x's last size, Replicate on
/// every mesh axis of x's mesh) and the epsilon of a layer_norm or rms_norm of a mesh array.
template <Floating T>
struct MeshNormOptions {
  MeshArray<T> weight{};
  MeshArray<T> bias{};
  double eps = 1e-5;
};

namespace detail {

/// Throws InvalidArgument, as `op`, for an empty handle or an array without a global view.
template <Element T>
void check_placed(std::string_view op, const MeshArray<T>& a, std::string_view what) {
  if (!a.valid()) fail<InvalidArgument>(op, what, " is an empty mesh array");
  if (!a.placed()) {
    fail<InvalidArgument>(op, what,
                          " has no global view (a collective's result, or from_shards without "
                          "placements): give it placements with MeshArray::from_shards(mesh, "
                          "shards, global_shape, placements)");
  }
}

/// Throws InvalidArgument, as `op`, when `a` and `b` live on two meshes.
template <Element T>
void check_same_mesh(std::string_view op, const MeshArray<T>& a, const MeshArray<T>& b) {
  const Mesh ma = a.mesh();
  const Mesh mb = b.mesh();
  if (MeshAccess::handle(ma) != MeshAccess::handle(mb)) {
    fail<InvalidArgument>(op, "the operands live on two meshes: ", ma.spec().name, " ",
                          ma.shape().to_string(), " and ", mb.spec().name, " ",
                          mb.shape().to_string(), "; an op takes arrays of one mesh");
  }
}

/// `ps` with every Partial made Replicate: what an all-reduce (redistribute) gives.
inline Placements reduced_placements(Placements ps) {
  for (auto& p : ps) {
    if (std::holds_alternative<Partial>(p)) p = Replicate{};
  }
  return ps;
}

/// `ps` with axis `x` set to `p`.
inline Placements with_axis(Placements ps, std::size_t x, ferry::Placement p) {
  ps[x] = p;
  return ps;
}

/// A mesh array of `shards` on `a`'s mesh, of shape `global`, placed by `ps`.
template <Element T>
MeshArray<T> placed_like(const MeshArray<T>& a, std::vector<DeviceArray<T>> shards,
                         const Shape& global, Placements ps) {
  return MeshArray<T>::from_shards(a.mesh(), std::move(shards), global, std::move(ps));
}

/// `f` of every shard of `a`.
template <Element T, class F>
std::vector<DeviceArray<T>> each_shard(const MeshArray<T>& a, F&& f) {
  std::vector<DeviceArray<T>> out;
  out.reserve(static_cast<std::size_t>(a.size()));
  for (const DeviceArray<T>& s : a.shards()) out.push_back(f(s));
  return out;
}

/// The elementwise ops of two mesh arrays or of one and a scalar.
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
/// is Partial(`r`): a sum or mean scales (array * c, c * array, array / c); a max or min moves
/// by a constant (+ c, - c) and keeps a max or min with a constant of its own kind.
inline bool partial_scalar_ok(MeshBinary k, ReduceOp r, bool scalar_first) {
  switch (r) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return k == MeshBinary::multiply || (k == MeshBinary::divide && !scalar_first);
    case ReduceOp::max:
      return k == MeshBinary::add || (k == MeshBinary::subtract && !scalar_first) ||
             k == MeshBinary::maximum;
    case ReduceOp::min:
      return k == MeshBinary::add || (k == MeshBinary::subtract && !scalar_first) ||
             k == MeshBinary::minimum;
  }
  return false;
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
  if (!(a.global_shape() == b.global_shape())) {
    fail<ShapeError>(op, "global shapes differ: ", a.global_shape(), " and ", b.global_shape(),
                     "; mesh arrays combine only at one global shape (no broadcasting)");
  }
  const Placements& pa = a.placements();
  const Placements& pb = b.placements();
  if (pa != pb) {
    const Placements want = reduced_placements(pa);
    if (want == pa) {
      fail<PlacementError>(op, "placements differ: a ", placements_text(pa), ", b ",
                           placements_text(pb), "; call redistribute(b, ", placements_text(pa),
                           ") (b = redistribute(b, a.placements())) first");
    }
    fail<PlacementError>(op, "placements differ: a ", placements_text(pa), ", b ",
                         placements_text(pb), "; call redistribute(a, ", placements_text(want),
                         ") and redistribute(b, ", placements_text(want), ") first");
  }
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* p = std::get_if<Partial>(&pa[x]);
    if (p != nullptr && !partial_pair_ok(k, p->op)) {
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
  return placed_like(a, std::move(out), a.global_shape(), pa);
}

template <Element T>
MeshArray<T> mesh_scalar(MeshBinary k, const MeshArray<T>& a, T c, bool scalar_first) {
  const std::string_view op = binary_name(k);
  check_placed(op, a, "the array");
  const Placements& pa = a.placements();
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* p = std::get_if<Partial>(&pa[x]);
    if (p != nullptr && !partial_scalar_ok(k, p->op, scalar_first)) {
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

/// A unary op per shard; `linear` ops (neg) keep Partial placements (`flips` turns a max into
/// a min and back), the others take no Partial.
template <Element T, class F>
MeshArray<T> mesh_unary(std::string_view op, const MeshArray<T>& a, bool linear, F&& f) {
  check_placed(op, a, "the array");
  Placements ps = a.placements();
  for (std::size_t x = 0; x < ps.size(); ++x) {
    auto* p = std::get_if<Partial>(&ps[x]);
    if (p == nullptr) continue;
    if (!linear) {
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

/// `axes` (negative from the end; empty: every dim) as flags over a rank-`rank` array; throws
/// InvalidArgument, as `op`, for one out of range or given twice.
inline std::vector<bool> axis_flags(std::string_view op, const std::vector<int>& axes,
                                    std::size_t rank) {
  std::vector<bool> flags(rank, axes.empty());
  const auto r = static_cast<int>(rank);
  for (int ax : axes) {
    if (ax < -r || ax >= r) {
      fail<InvalidArgument>(op, "axis ", ax, " is out of range for a global array of rank ", r);
    }
    const auto d = static_cast<std::size_t>(ax < 0 ? ax + r : ax);
    if (flags[d]) fail<InvalidArgument>(op, "axis ", ax, " is given twice");
    flags[d] = true;
  }
  return flags;
}

/// A reduction by `r` over `axes`: local reductions, a sharded reduced dim becoming
/// Partial(`r`) (a mean: Partial(sum) of local sums over the global count).
template <Numeric T>
MeshArray<T> mesh_reduce(std::string_view op, ReduceOp r, const MeshArray<T>& a,
                         const std::vector<int>& axes, bool keepdims) {
  check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  const std::vector<bool> flags = axis_flags(op, axes, global.rank());
  // new_dim[d]: where dim d lands in the result.
  std::vector<int> new_dim(global.rank(), 0);
  std::vector<std::int64_t> out_dims;
  std::vector<int> local_axes;
  std::int64_t count = 1;
  for (std::size_t d = 0; d < global.rank(); ++d) {
    new_dim[d] = static_cast<int>(out_dims.size());
    if (flags[d]) {
      local_axes.push_back(static_cast<int>(d));
      count *= global.dims()[d];
      if (keepdims) out_dims.push_back(1);
    } else {
      out_dims.push_back(global.dims()[d]);
    }
  }
  const ReduceOp part_op = r == ReduceOp::mean ? ReduceOp::sum : r;
  Placements ps = a.placements();
  bool sharded = false;
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (const auto* s = std::get_if<Shard>(&ps[x])) {
      const auto d = static_cast<std::size_t>(s->dim);
      if (flags[d]) {
        ps[x] = Partial{part_op};
        sharded = true;
      } else {
        ps[x] = Shard{new_dim[d]};
      }
    } else if (const auto* p = std::get_if<Partial>(&ps[x]); p != nullptr && p->op != part_op) {
      fail<PlacementError>(op, "the array is ", placement_text(ps[x]), " on mesh axis ", x,
                           " (placements ", placements_text(a.placements()), "), and ", op,
                           " of the parts is not ", op, " of their ", reduce_op_text(p->op),
                           "; call redistribute(a, ",
                           placements_text(reduced_placements(a.placements())), ") first");
    }
  }
  const Shape out(std::span<const std::int64_t>(out_dims.data(), out_dims.size()));
  auto local = [&](const DeviceArray<T>& s) -> DeviceArray<T> {
    switch (r) {
      case ReduceOp::sum:
        return ferry::sum(s, local_axes, keepdims);
      case ReduceOp::max:
        return ferry::max(s, local_axes, keepdims);
      case ReduceOp::min:
        return ferry::min(s, local_axes, keepdims);
      case ReduceOp::mean:
        break;
    }
    if constexpr (Floating<T>) {
      if (!sharded) return ferry::mean(s, local_axes, keepdims);
      return ferry::divide(ferry::sum(s, local_axes, keepdims), static_cast<T>(count));
    }
    fail<InvalidArgument>(op, "needs a floating element type");
  };
  if (local_axes.empty()) return a;  // a reduction over no dims of an empty-rank array
  return placed_like(a, each_shard(a, local), out, std::move(ps));
}

/// Throws PlacementError, as `op`, when dim `d` of `a` is sharded or `a` has a Partial axis:
/// the op needs the whole of that dim and the reduced values on every device.
template <Element T>
void check_whole_dim(std::string_view op, const MeshArray<T>& a, std::size_t d,
                     std::string_view what) {
  const Placements& ps = a.placements();
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (const auto* s = std::get_if<Shard>(&ps[x]);
        s != nullptr && static_cast<std::size_t>(s->dim) == d) {
      fail<PlacementError>(op, what, " ", d, " is sharded along mesh axis ", x, " (placements ",
                           placements_text(ps), "); call redistribute(a, ",
                           placements_text(with_axis(ps, x, Replicate{})),
                           ") or shard another dim first");
    }
    if (is_partial(ps[x])) {
      fail<PlacementError>(op, "the array is ", placement_text(ps[x]), " on mesh axis ", x,
                           " (placements ", placements_text(ps), "); call redistribute(a, ",
                           placements_text(reduced_placements(ps)), ") first");
    }
  }
}

template <Floating T>
MeshArray<T> mesh_norm(std::string_view op, const MeshArray<T>& x, const MeshNormOptions<T>& o,
                       bool centered) {
  check_placed(op, x, "x");
  const Shape& global = x.global_shape();
  if (global.rank() == 0) fail<ShapeError>(op, "needs an array of rank >= 1, got a scalar");
  check_whole_dim(op, x, global.rank() - 1, "the normalized last dim");
  const std::int64_t last = global.dims()[global.rank() - 1];
  for (const MeshArray<T>* p : {&o.weight, &o.bias}) {
    if (!p->valid()) continue;
    const std::string_view what = p == &o.weight ? "weight" : "bias";
    check_placed(op, *p, what);
    check_same_mesh(op, x, *p);
    if (p->global_shape().rank() != 1 || p->global_shape().dims()[0] != last) {
      fail<ShapeError>(op, what, " must have the shape (", last, ") of x's last axis, got ",
                       p->global_shape(), " for x of ", global);
    }
    for (const auto& pl : p->placements()) {
      if (!std::holds_alternative<Replicate>(pl)) {
        const Placements want(p->placements().size(), Replicate{});
        fail<PlacementError>(op, what, " is placed ", placements_text(p->placements()),
                             "; it must be Replicate on every mesh axis: call redistribute(", what,
                             ", ", placements_text(want), ") first");
      }
    }
  }
  std::vector<DeviceArray<T>> out;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    NormOptions<T> local;
    if (o.weight.valid()) local.weight = o.weight.shard(i);
    if (o.bias.valid()) local.bias = o.bias.shard(i);
    local.eps = o.eps;
    out.push_back(centered ? ferry::layer_norm(x.shard(i), local)
                           : ferry::rms_norm(x.shard(i), local));
  }
  return placed_like(x, std::move(out), global, x.placements());
}

}  // namespace detail

// ---- elementwise, two mesh arrays ----

/// a + b on each device. Both must be placed, on one mesh, of one global shape and of the same
/// placements; the result has them. Partial(sum) and Partial(mean) pass through + and -,
/// Partial(max) through maximum, Partial(min) through minimum. Throws InvalidArgument for an
/// empty or unplaced operand or two meshes, ShapeError for two global shapes, PlacementError
/// for placements that differ or a Partial the op does not pass through (naming the
/// redistribute to call).
template <Element T>
MeshArray<T> add(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::add, a, b);
}
/// a - b on each device; the rules and errors of add.
template <Element T>
MeshArray<T> subtract(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::subtract, a, b);
}
/// a * b on each device; the rules and errors of add (no Partial passes).
template <Element T>
MeshArray<T> multiply(const MeshArray<T>& a, const MeshArray<T>& b) {
  return detail::mesh_binary(detail::MeshBinary::multiply, a, b);
}
/// a / b on each device; the rules and errors of add (no Partial passes).
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

/// a + c on each device, placements kept. A Partial(max) or Partial(min) passes (the bound
/// moves by c); a Partial(sum) or Partial(mean) does not (c would be added once per part).
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
/// a / c; as multiply(a, c).
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
/// Partial(max) becomes Partial(min) and back. Throws InvalidArgument for an empty or unplaced
/// array.
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

// ---- reductions ----

/// The sum over `axes` (negative from the end; empty: every dim), keeping them as size 1 when
/// `keepdims`. Each device sums its shard; a reduced dim sharded along mesh axis x makes axis x
/// Partial(sum); other Shards follow their dim to its new number; Replicate stays; a
/// Partial(sum) stays. Throws InvalidArgument for an empty or unplaced array or a bad axis,
/// PlacementError for a Partial other than sum.
template <Numeric T>
MeshArray<T> sum(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("sum", ReduceOp::sum, a, axes, keepdims);
}
/// The mean over `axes`; as sum, a sharded reduced dim giving Partial(sum) of each device's
/// sum divided by the global count (where no reduced dim is sharded, each device's mean).
template <Floating T>
MeshArray<T> mean(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("mean", ReduceOp::mean, a, axes, keepdims);
}
/// The maximum over `axes`; as sum, giving Partial(max), and passing Partial(max) only.
template <Numeric T>
MeshArray<T> max(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("max", ReduceOp::max, a, axes, keepdims);
}
/// The minimum over `axes`; as sum, giving Partial(min), and passing Partial(min) only.
template <Numeric T>
MeshArray<T> min(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("min", ReduceOp::min, a, axes, keepdims);
}

// ---- softmax and norms ----

/// softmax over `axis` on each device, placements kept. Throws InvalidArgument for an empty or
/// unplaced array or an axis out of range, PlacementError when `axis` is sharded or the array
/// has a Partial axis.
template <Floating T>
MeshArray<T> softmax(const MeshArray<T>& a, int axis) {
  constexpr std::string_view op = "softmax";
  detail::check_placed(op, a, "the array");
  const auto rank = static_cast<int>(a.global_shape().rank());
  if (axis < -rank || axis >= rank) {
    detail::fail<InvalidArgument>(op, "axis ", axis, " is out of range for a global array of rank ",
                                  rank);
  }
  detail::check_whole_dim(op, a, static_cast<std::size_t>(axis < 0 ? axis + rank : axis), "axis");
  return detail::placed_like(
      a, detail::each_shard(a, [&](const DeviceArray<T>& s) { return ferry::softmax(s, axis); }),
      a.global_shape(), a.placements());
}

/// layer_norm over the last dim on each device, placements kept; `options`' weight and bias
/// are Replicate mesh arrays of x's mesh. Throws InvalidArgument for an empty or unplaced
/// array or a weight or bias of another mesh, ShapeError for a scalar x or a weight or bias not
/// of x's last size, PlacementError when the last dim is sharded, x has a Partial axis, or a
/// weight or bias is not Replicate everywhere; and what ferry::layer_norm throws.
template <Floating T>
MeshArray<T> layer_norm(const MeshArray<T>& x, const MeshNormOptions<T>& options = {}) {
  return detail::mesh_norm("layer_norm", x, options, true);
}
/// rms_norm over the last dim on each device; as layer_norm.
template <Floating T>
MeshArray<T> rms_norm(const MeshArray<T>& x, const MeshNormOptions<T>& options = {}) {
  return detail::mesh_norm("rms_norm", x, options, false);
}

// ---- shape ops ----

/// `a` reshaped to `shape` (fully given, no -1) on each device. Allowed when every dim up to
/// and including the last sharded one keeps its size and place (the dims after it may be
/// reshaped freely); Shard dims keep their numbers, Replicate and Partial stay. Throws
/// InvalidArgument for an empty or unplaced array, ShapeError when the element counts differ,
/// PlacementError when the reshape touches a sharded dim or one before it.
template <Element T>
MeshArray<T> reshape(const MeshArray<T>& a, const Shape& shape) {
  constexpr std::string_view op = "reshape";
  detail::check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  if (global.numel() != shape.numel()) {
    detail::fail<ShapeError>(op, "cannot reshape a global ", global, " into ", shape);
  }
  const Placements& ps = a.placements();
  std::size_t keep = 0;  // dims [0, keep) must stay
  for (const auto& p : ps) {
    if (const auto* s = std::get_if<Shard>(&p)) {
      keep = std::max(keep, static_cast<std::size_t>(s->dim) + 1);
    }
  }
  bool ok = shape.rank() >= keep;
  for (std::size_t d = 0; ok && d < keep; ++d) ok = shape.dims()[d] == global.dims()[d];
  if (!ok) {
    detail::fail<PlacementError>(
        op, "reshaping a global ", global, " into ", shape, " changes dims up to ", keep - 1,
        ", which placements ", detail::placements_text(ps), " shard; call redistribute(a, ",
        detail::placements_text(std::vector<Placement>(ps.size(), Replicate{})),
        ") first, or keep the sharded dims and those before them");
  }
  return detail::placed_like(
      a,
      detail::each_shard(a,
                         [&](const DeviceArray<T>& s) {
                           std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
                           for (std::size_t d = 0; d < keep; ++d) dims[d] = s.shape().dims()[d];
                           return ferry::reshape(
                               s, Shape(std::span<const std::int64_t>(dims.data(), dims.size())));
                         }),
      shape, ps);
}

/// `a` with its dims reordered (dim i of the result is dim axes[i] of `a`; negative from the
/// end) on each device, as np.transpose(a, axes): a Shard follows its dim. (Not `permute`:
/// on mesh arrays that name is the collective that moves shards between devices.) Throws
/// InvalidArgument for an empty or unplaced array or `axes` that are not a permutation of the
/// dims.
template <Element T>
MeshArray<T> transpose(const MeshArray<T>& a, const std::vector<int>& axes) {
  constexpr std::string_view op = "transpose";
  detail::check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  const auto rank = static_cast<int>(global.rank());
  std::vector<int> where(global.rank(), -1);  // where[d]: the result's dim holding dim d
  bool ok = axes.size() == global.rank();
  for (std::size_t i = 0; ok && i < axes.size(); ++i) {
    const int ax = axes[i];
    ok = ax >= -rank && ax < rank;
    if (!ok) break;
    const auto d = static_cast<std::size_t>(ax < 0 ? ax + rank : ax);
    ok = where[d] < 0;
    where[d] = static_cast<int>(i);
  }
  if (!ok) {
    std::string text = "(";
    for (std::size_t i = 0; i < axes.size(); ++i) {
      text += (i > 0 ? ", " : "") + std::to_string(axes[i]);
    }
    detail::fail<InvalidArgument>(op, "axes ", text, ") are not a permutation of the ", rank,
                                  " dims of a global ", global);
  }
  std::vector<std::int64_t> dims(global.rank());
  for (std::size_t d = 0; d < global.rank(); ++d) {
    dims[static_cast<std::size_t>(where[d])] = global.dims()[d];
  }
  Placements ps = a.placements();
  for (auto& p : ps) {
    if (auto* s = std::get_if<Shard>(&p)) s->dim = where[static_cast<std::size_t>(s->dim)];
  }
  return detail::placed_like(
      a, detail::each_shard(a, [&](const DeviceArray<T>& s) { return ferry::permute(s, axes); }),
      Shape(std::span<const std::int64_t>(dims.data(), dims.size())), std::move(ps));
}

/// `a` with its dims reversed (ferry::transpose), a Shard following its dim; throws like
/// transpose(a, axes).
template <Element T>
MeshArray<T> transpose(const MeshArray<T>& a) {
  detail::check_placed("transpose", a, "the array");
  std::vector<int> axes;
  for (auto d = static_cast<int>(a.global_shape().rank()); d-- > 0;) axes.push_back(d);
  return transpose(a, axes);
}

// ---- matmul ----

/// a @ w on each device, for Megatron's layers: `a` of rank >= 2 (activations, its last dim
/// contracted), `w` of rank 2 (k, n). Mesh axis by mesh axis: Replicate x Replicate gives
/// Replicate; a Shard of a dim of `a` before its last x Replicate keeps that Shard (batch or
/// rows); Replicate x Shard(1) gives Shard(-1) (column-parallel); Shard(-1) x Shard(0) gives
/// Partial(sum) (row-parallel); Partial(sum) x Replicate and Replicate x Partial(sum) give
/// Partial(sum). Throws InvalidArgument for an empty or unplaced operand or two meshes,
/// ShapeError for ranks outside these or inner sizes that differ, PlacementError for any
/// other pair of placements (naming both and the redistribute that makes the call work).
template <Numeric T>
MeshArray<T> matmul(const MeshArray<T>& a, const MeshArray<T>& w) {
  constexpr std::string_view op = "matmul";
  detail::check_placed(op, a, "a");
  detail::check_placed(op, w, "w");
  detail::check_same_mesh(op, a, w);
  const Shape& ga = a.global_shape();
  const Shape& gw = w.global_shape();
  if (ga.rank() < 2 || gw.rank() != 2) {
    detail::fail<ShapeError>(op, "a mesh matmul takes a of rank >= 2 and w of rank 2, got ", ga,
                             " x ", gw);
  }
  const std::size_t r = ga.rank();
  if (ga.dims()[r - 1] != gw.dims()[0]) {
    detail::fail<ShapeError>(op, "inner sizes differ: ", ga, " x ", gw);
  }
  const Placements& pa = a.placements();
  const Placements& pw = w.placements();
  Placements out(pa.size());
  const auto last = static_cast<int>(r - 1);
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* sa = std::get_if<Shard>(&pa[x]);
    const auto* sw = std::get_if<Shard>(&pw[x]);
    const auto* qa = std::get_if<Partial>(&pa[x]);
    const auto* qw = std::get_if<Partial>(&pw[x]);
    const bool ra = std::holds_alternative<Replicate>(pa[x]);
    const bool rw = std::holds_alternative<Replicate>(pw[x]);
    if (ra && rw) {
      out[x] = Replicate{};
    } else if (sa != nullptr && sa->dim < last && rw) {
      out[x] = *sa;
    } else if (ra && sw != nullptr && sw->dim == 1) {
      out[x] = Shard{last};
    } else if (sa != nullptr && sa->dim == last && sw != nullptr && sw->dim == 0) {
      out[x] = Partial{};
    } else if ((qa != nullptr && qa->op == ReduceOp::sum && rw) ||
               (ra && qw != nullptr && qw->op == ReduceOp::sum)) {
      out[x] = Partial{};
    } else {
      // The nearest placement that works: change w to fit a where a is the activation
      // Megatron expects, else a to fit w.
      std::string fix;
      if (qa != nullptr || qw != nullptr) {
        fix = "redistribute(a, " + detail::placements_text(detail::reduced_placements(pa)) +
              ") and redistribute(w, " + detail::placements_text(detail::reduced_placements(pw)) +
              ")";
      } else if (sw != nullptr && sw->dim == 0) {  // row-parallel weights: shard a's last dim
        fix = "redistribute(a, " + detail::placements_text(detail::with_axis(pa, x, Shard{last})) +
              ")";
      } else if (sa != nullptr && sa->dim == last) {  // a's last dim cut: cut w's rows too
        fix =
            "redistribute(w, " + detail::placements_text(detail::with_axis(pw, x, Shard{0})) + ")";
      } else {  // a cut along rows and w along columns on one axis: replicate w there
        fix = "redistribute(w, " + detail::placements_text(detail::with_axis(pw, x, Replicate{})) +
              ")";
      }
      detail::fail<PlacementError>(op, "on mesh axis ", x, " a is ", detail::placement_text(pa[x]),
                                   " and w is ", detail::placement_text(pw[x]), " (a ",
                                   detail::placements_text(pa), ", w ", detail::placements_text(pw),
                                   "), which no local product ", "places; call ", fix, " first");
    }
  }
  std::vector<std::int64_t> dims(ga.dims().begin(), ga.dims().end());
  dims[r - 1] = gw.dims()[1];
  std::vector<DeviceArray<T>> shards;
  shards.reserve(static_cast<std::size_t>(a.size()));
  for (std::int64_t i = 0; i < a.size(); ++i)
    shards.push_back(ferry::matmul(a.shard(i), w.shard(i)));
  return detail::placed_like(a, std::move(shards),
                             Shape(std::span<const std::int64_t>(dims.data(), dims.size())),
                             std::move(out));
}

}  // namespace ferry
