#pragma once
// redistribute: a mesh array placed anew, each mesh axis going from its placement to the new
// one by the collective that transition takes along that axis (PyTorch DTensor's
// redistribute): Partial to Replicate an all-reduce, Shard to Replicate an all-gather, Partial
// to Shard a reduce-scatter, Shard{i} to Shard{j} an all-to-all, Replicate to Shard a slice of
// each device's own copy (no communication), Replicate to Partial nothing but zeros.
//
// The collectives cut a dim into equal parts; a size that does not divide (array_split's
// parts, the first size % n one larger) is padded on each device to n equal parts first and
// the padding cut off after, so the links carry the padded parts.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/distribute.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry {

namespace detail {

/// A redistribution under way: the shards and the placements they have now, one mesh axis
/// changed at a time. Each dim is sharded along one mesh axis at most (normalized_placements),
/// so along the axis being changed every member holds the same block of every other dim.
template <Element T>
class Redistribution {
 public:
  Redistribution(Mesh mesh, Shape global, Placements now, std::vector<DeviceArray<T>> shards)
      : mesh_(std::move(mesh)), global_(global), now_(std::move(now)), shards_(std::move(shards)) {}

  const Placements& now() const noexcept { return now_; }
  std::vector<DeviceArray<T>> take() && { return std::move(shards_); }

  /// Mesh axis `x` from its placement to `to`, by the collective the transition takes.
  void change(int x, const ferry::Placement& to) {
    const ferry::Placement& from = now_[static_cast<std::size_t>(x)];
    if (from == to) return;
    if (std::holds_alternative<Replicate>(to)) {
      replicate(x);
    } else if (const auto* p = std::get_if<Partial>(&to)) {
      replicate(x);  // Shard and another Partial go through Replicate
      make_partial(x, *p);
    } else {
      const int d = std::get<Shard>(to).dim;
      if (std::holds_alternative<Replicate>(from)) {
        cut_locally(x, d);
      } else if (const auto* summands = std::get_if<Partial>(&from)) {
        scatter(x, d, summands->op);
      } else {
        exchange(x, std::get<Shard>(from).dim, d);
      }
    }
    now_[static_cast<std::size_t>(x)] = to;
  }

  /// Mesh axis `x` to Replicate: an all-gather of a Shard, an all-reduce of a Partial.
  void replicate(int x) {
    const ferry::Placement& from = now_[static_cast<std::size_t>(x)];
    if (const auto* s = std::get_if<Shard>(&from)) {
      shards_ = all_gather(array(), s->dim, x).shards();
    } else if (const auto* p = std::get_if<Partial>(&from)) {
      if constexpr (Numeric<T>) shards_ = all_reduce(array(), p->op, x).shards();
    }
    now_[static_cast<std::size_t>(x)] = Replicate{};
  }

 private:
  std::int64_t members(int x) const { return mesh_.shape().sizes()[static_cast<std::size_t>(x)]; }
  std::int64_t position(std::size_t i, int x) const {
    return mesh_.shape()
        .coordinate_of(static_cast<std::int64_t>(i))
        .indices()[static_cast<std::size_t>(x)];
  }
  std::int64_t extent(int d) const { return global_.dims()[static_cast<std::size_t>(d)]; }
  MeshArray<T> array() const { return MeshArray<T>::from_shards(mesh_, shards_); }

  /// Replicate to Partial: a sum keeps the value at position 0 and zeros elsewhere (made on
  /// each device); max, min and mean keep it everywhere (see detail::holds_value).
  void make_partial(int x, Partial p) {
    if (p.op != ReduceOp::sum) return;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      if (position(i, x) != 0) {
        shards_[i] = ferry::zeros<T>(shards_[i].device(), shards_[i].shape());
      }
    }
  }

  /// Replicate to Shard{d}: each device keeps its own part of its copy; no communication.
  void cut_locally(int x, int d) {
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      const SplitPart part = split_part(extent(d), members(x), position(i, x));
      shards_[i] = ferry::slice(shards_[i], d, part.begin, part.begin + part.size);
    }
  }

  /// Partial to Shard{d}: a reduce-scatter of the shards padded to equal parts along d.
  void scatter(int x, int d, ReduceOp op) {
    if constexpr (Numeric<T>) {
      const std::int64_t n = members(x);
      for (DeviceArray<T>& s : shards_) s = padded_parts(s, d, extent(d), n);
      shards_ = reduce_scatter(array(), d, op, x).shards();
      for (std::size_t i = 0; i < shards_.size(); ++i) {
        const SplitPart part = split_part(extent(d), n, position(i, x));
        shards_[i] = ferry::slice(shards_[i], d, 0, part.size);
      }
    }
  }

  /// Shard{i} to Shard{j}: an all-to-all that cuts j into the members' parts and joins their
  /// parts of i. Padded along j to equal parts, and along i to the longest part, which is cut
  /// out again between the parts the all-to-all joined.
  void exchange(int x, int i, int j) {
    const std::int64_t n = members(x);
    const std::int64_t longest = (extent(i) + n - 1) / n;
    for (DeviceArray<T>& s : shards_) {
      s = padded_parts(s, j, extent(j), n);
      const std::int64_t has = s.shape().dims()[static_cast<std::size_t>(i)];
      if (has < longest) {
        s = ferry::concat(
            {s, ferry::zeros<T>(s.device(),
                                with_dim(s.shape(), static_cast<std::size_t>(i), longest - has))},
            i);
      }
    }
    shards_ = all_to_all(array(), j, i, x).shards();
    const bool even = extent(i) % n == 0;
    for (std::size_t m = 0; m < shards_.size(); ++m) {
      DeviceArray<T>& s = shards_[m];
      s = ferry::slice(s, j, 0, split_part(extent(j), n, position(m, x)).size);
      if (even) continue;
      std::vector<DeviceArray<T>> parts;
      for (std::int64_t k = 0; k < n; ++k) {
        parts.push_back(
            ferry::slice(s, i, k * longest, k * longest + split_part(extent(i), n, k).size));
      }
      s = ferry::concat(parts, i);
    }
  }

  /// `s`, whose dim `d` is the whole `size`, with each of its n array_split parts along d padded
  /// with zeros to the longest: n equal parts, part p of them holding part p of `s` first.
  static DeviceArray<T> padded_parts(const DeviceArray<T>& s, int d, std::int64_t size,
                                     std::int64_t n) {
    if (size % n == 0) return s;
    const std::int64_t longest = (size + n - 1) / n;
    std::vector<DeviceArray<T>> parts;
    for (std::int64_t p = 0; p < n; ++p) {
      const SplitPart part = split_part(size, n, p);
      parts.push_back(ferry::slice(s, d, part.begin, part.begin + part.size));
      if (part.size < longest) {
        parts.push_back(ferry::zeros<T>(
            s.device(), with_dim(s.shape(), static_cast<std::size_t>(d), longest - part.size)));
      }
    }
    return ferry::concat(parts, d);
  }

  Mesh mesh_;
  Shape global_;
  Placements now_;
  std::vector<DeviceArray<T>> shards_;
};

}  // namespace detail

/// `a` placed by `placements` (one per mesh axis), each mesh axis changed along its own axis by
/// the collective its transition takes: Partial to Replicate all_reduce, Shard to Replicate
/// all_gather, Partial to Shard reduce_scatter, Shard{i} to Shard{j} all_to_all, Replicate to
/// Shard a slice of each device's own copy (no communication); Replicate to Partial(sum) zeros
/// everywhere but position 0 (Partial(max, min, mean) keep the value everywhere); Shard to
/// Partial and one Partial to another go through Replicate; an axis already placed as asked is
/// left alone. Axes going to Replicate or Partial change first, in axis order, then those going
/// to a Shard, each once the dim it shards is free (when two axes swap their dims, one is
/// gathered first). A dim that does not divide is padded to equal parts around the collective.
/// Returns at once, a mesh array of futures. Throws InvalidArgument, as redistribute, for an
/// empty handle, an array without a global view, placements that do not fit the mesh or the
/// rank, a Partial the element type cannot hold.
template <Element T>
MeshArray<T> redistribute(const MeshArray<T>& a, Placements placements) {
  constexpr std::string_view op = "redistribute";
  const detail::CalledOp called(op);  // a device's failed step names it
  if (!a.valid()) detail::fail<InvalidArgument>(op, "empty mesh array");
  if (!a.placed()) {
    detail::fail<InvalidArgument>(
        op,
        "the mesh array has no global view (a collective's result, or from_shards without "
        "placements): give it placements with MeshArray::from_shards(mesh, shards, "
        "global_shape, placements)");
  }
  const Mesh mesh = a.mesh();
  const Shape& global = a.global_shape();
  const Placements want =
      detail::normalized_placements(op, mesh.spec(), global, std::move(placements));
  detail::check_partials<T>(op, want);
  detail::Redistribution<T> r(mesh, global, a.placements(), a.shards());
  const int axes = static_cast<int>(want.size());
  for (int x = 0; x < axes; ++x) {
    if (!detail::is_shard(want[static_cast<std::size_t>(x)]))
      r.change(x, want[static_cast<std::size_t>(x)]);
  }
  // The axes going to a Shard: each waits until no other axis shards its dim. When every one
  // waits on another (axes swapping dims), gathering one frees its dim.
  std::vector<int> waiting;
  for (int x = 0; x < axes; ++x) {
    if (r.now()[static_cast<std::size_t>(x)] != want[static_cast<std::size_t>(x)])
      waiting.push_back(x);
  }
  while (!waiting.empty()) {
    bool moved = false;
    for (auto it = waiting.begin(); it != waiting.end();) {
      const int x = *it;
      bool taken = false;
      for (int y = 0; y < axes; ++y) {
        taken = taken || (y != x && r.now()[static_cast<std::size_t>(y)] ==
                                        want[static_cast<std::size_t>(x)]);
      }
      if (taken) {
        ++it;
        continue;
      }
      r.change(x, want[static_cast<std::size_t>(x)]);
      it = waiting.erase(it);
      moved = true;
    }
    if (!moved) r.replicate(waiting.front());
  }
  return MeshArray<T>::from_shards(mesh, std::move(r).take(), global, want);
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(MeshArray<float> redistribute<float>(const MeshArray<float>&, Placements))

}  // namespace ferry
