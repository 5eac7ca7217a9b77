#pragma once
// PlanWriter: the patterns collective plans are made of (rings both ways, lines, switches,
// one-shot and routed steps), written as transfers, and the choice of a stepped collective's
// algorithm by its message size. model/collective_plan.hpp says what each pattern models.

#include <cstdint>
#include <string_view>

#include "ferry/core/error.hpp"
#include "ferry/model/collective_steps.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

namespace detail {

/// Writes the transfers of a plan: the patterns its algorithms are made of.
class PlanWriter {
 public:
  explicit PlanWriter(CollectivePlan& plan)
      : plan_(plan),
        n_(plan.members),
        // A ring of one or two members has one neighbouring pair: it is a line.
        topology_(plan.topology == Topology::ring && plan.members < 3 ? Topology::line
                                                                      : plan.topology) {}

  /// The topology the plan runs on (a ring of two is a line).
  Topology topology() const noexcept { return topology_; }

  void begin_step() { plan_.steps.emplace_back(); }

  void add(std::int64_t from, std::int64_t to, std::int64_t origin, std::int64_t chunk,
           std::int64_t offset, std::int64_t bytes, std::int64_t hop, bool reduce,
           bool passes_through) {
    Transfer t;
    t.source = from;
    t.target = to;
    t.direction = direction(from, to);
    t.origin = origin;
    t.chunk = chunk;
    t.offset = offset;
    t.bytes = bytes;
    t.hop = hop;
    t.reduce = reduce && !passes_through;
    t.passes_through = passes_through;
    plan_.steps.back().transfers.push_back(t);
  }

  /// `origin` sends [offset, offset + bytes) of `chunk` `hops` hops along `step` (+1 or -1),
  /// relayed within this step; every member on the way keeps it, or only the last.
  void relay(std::int64_t origin, std::int64_t hops, std::int64_t step, std::int64_t chunk,
             std::int64_t offset, std::int64_t bytes, bool reduce, bool every_member_keeps) {
    for (std::int64_t h = 1; h <= hops; ++h) {
      const bool through = !every_member_keeps && h < hops;
      add(wrap(origin + (h - 1) * step), wrap(origin + h * step), origin, chunk, offset, bytes, h,
          reduce, through);
    }
  }

  /// `origin` sends a piece to every other member in one step: straight through a switch; to
  /// both ends of a line; half round a ring each way (the extra member of an even ring forward).
  void multicast(std::int64_t origin, std::int64_t chunk, std::int64_t offset, std::int64_t bytes,
                 bool reduce) {
    switch (topology_) {
      case Topology::fully_connected:
        for (std::int64_t j = 0; j < n_; ++j) {
          if (j != origin) add(origin, j, origin, chunk, offset, bytes, 1, reduce, false);
        }
        return;
      case Topology::line:
        relay(origin, n_ - 1 - origin, +1, chunk, offset, bytes, reduce, true);
        relay(origin, origin, -1, chunk, offset, bytes, reduce, true);
        return;
      case Topology::ring:
        relay(origin, n_ / 2, +1, chunk, offset, bytes, reduce, true);
        relay(origin, n_ - 1 - n_ / 2, -1, chunk, offset, bytes, reduce, true);
        return;
    }
  }

  /// `origin` sends a piece to `target` alone, along the shortest path; on a ring, a target
  /// as far one way as the other gets half each way, so both directions carry the same.
  void route(std::int64_t origin, std::int64_t target, std::int64_t chunk, std::int64_t offset,
             std::int64_t bytes, bool reduce) {
    switch (topology_) {
      case Topology::fully_connected:
        add(origin, target, origin, chunk, offset, bytes, 1, reduce, false);
        return;
      case Topology::line:
        if (target > origin) {
          relay(origin, target - origin, +1, chunk, offset, bytes, reduce, false);
        } else {
          relay(origin, origin - target, -1, chunk, offset, bytes, reduce, false);
        }
        return;
      case Topology::ring: {
        const std::int64_t d = wrap(target - origin);
        if (2 * d < n_) {
          relay(origin, d, +1, chunk, offset, bytes, reduce, false);
        } else if (2 * d > n_) {
          relay(origin, n_ - d, -1, chunk, offset, bytes, reduce, false);
        } else {
          const std::int64_t first = (bytes + 1) / 2;
          relay(origin, d, +1, chunk, offset, first, reduce, false);
          relay(origin, d, -1, chunk, offset + first, bytes - first, reduce, false);
        }
        return;
      }
    }
  }

  /// The bidirectional ring all-gather: at step k member p passes the first half of slice
  /// p-k+1 forward and the second half of slice p+k-1 backward (at step 1, its own slice).
  void ring_all_gather() {
    for (std::int64_t k = 1; k < n_; ++k) {
      begin_step();
      for (std::int64_t p = 0; p < n_; ++p) forward_half(p, wrap(p - k + 1), false);
      for (std::int64_t p = 0; p < n_; ++p) backward_half(p, wrap(p + k - 1), false);
    }
  }

  /// The bidirectional ring reduce-scatter: at step k member p passes its partial of the
  /// first half of slice p-k forward and of the second half of slice p+k backward; each
  /// receiver reduces it into its own, so slice j completes at member j after step n-1.
  void ring_reduce_scatter() {
    for (std::int64_t k = 1; k < n_; ++k) {
      begin_step();
      for (std::int64_t p = 0; p < n_; ++p) forward_half(p, wrap(p - k), true);
      for (std::int64_t p = 0; p < n_; ++p) backward_half(p, wrap(p + k), true);
    }
  }

  /// The line all-gather: at step k member p passes slice p-k+1 forward and slice p+k-1
  /// backward, where those exist (each slice travels to both ends, one hop a step).
  void line_all_gather() {
    for (std::int64_t k = 1; k < n_; ++k) {
      begin_step();
      for (std::int64_t p = k - 1; p + 1 < n_; ++p) whole(p, p + 1, p - k + 1, false);
      for (std::int64_t p = n_ - k; p >= 1; --p) whole(p, p - 1, p + k - 1, false);
    }
  }

  /// The line reduce-scatter, the all-gather reversed: at step k member p < k passes its
  /// partial of slice p+n-k forward and member p >= n-k its partial of slice p+k-n backward;
  /// slice j's two partials (from each end) meet at member j.
  void line_reduce_scatter() {
    for (std::int64_t k = 1; k < n_; ++k) {
      begin_step();
      for (std::int64_t p = 0; p < k; ++p) whole(p, p + 1, p + n_ - k, true);
      for (std::int64_t p = n_ - 1; p >= n_ - k; --p) whole(p, p - 1, p + k - n_, true);
    }
  }

 private:
  std::int64_t wrap(std::int64_t p) const noexcept { return ((p % n_) + n_) % n_; }

  LinkDirection direction(std::int64_t from, std::int64_t to) const noexcept {
    switch (topology_) {
      case Topology::fully_connected: return LinkDirection::switched;
      case Topology::line: return to > from ? LinkDirection::forward : LinkDirection::backward;
      case Topology::ring:
        return to == wrap(from + 1) ? LinkDirection::forward : LinkDirection::backward;
    }
    return LinkDirection::forward;
  }

  void forward_half(std::int64_t p, std::int64_t chunk, bool reduce) {
    add(p, wrap(p + 1), p, chunk, 0, first_half(chunk), 1, reduce, false);
  }
  void backward_half(std::int64_t p, std::int64_t chunk, bool reduce) {
    const std::int64_t first = first_half(chunk);
    add(p, wrap(p - 1), p, chunk, first, plan_.chunk_bytes(chunk) - first, 1, reduce, false);
  }
  void whole(std::int64_t from, std::int64_t to, std::int64_t chunk, bool reduce) {
    add(from, to, from, chunk, 0, plan_.chunk_bytes(chunk), 1, reduce, false);
  }
  std::int64_t first_half(std::int64_t chunk) const noexcept {
    return (plan_.chunk_bytes(chunk) + 1) / 2;
  }

  CollectivePlan& plan_;
  std::int64_t n_;
  Topology topology_;
};

/// Throws InvalidArgument, as `op`, for a group no plan can serve.
inline void check_group(std::string_view op, Topology topology, std::int64_t members,
                        std::int64_t bytes) {
  if (topology != Topology::ring && topology != Topology::line &&
      topology != Topology::fully_connected) {
    fail<InvalidArgument>(op, "topology is not a Topology (", static_cast<int>(topology), ")");
  }
  if (members < 1) fail<InvalidArgument>(op, "members must be positive, got ", members);
  if (bytes < 0) fail<InvalidArgument>(op, "bytes must not be negative, got ", bytes);
}

/// A plan with its header filled and no steps.
inline CollectivePlan start_plan(Collective c, Topology topology, std::int64_t members,
                                 std::int64_t bytes, std::int64_t chunks) {
  CollectivePlan plan;
  plan.collective = c;
  plan.topology = topology;
  plan.members = members;
  plan.bytes = bytes;
  plan.chunks = chunks;
  return plan;
}

/// The algorithm of a stepped collective (all-gather, reduce-scatter, all-reduce) on the
/// plan's topology, by the message size. Through a switch the all-gather and reduce-scatter
/// are one step at every size; only the all-reduce has a one-shot form there.
inline CollectiveAlgorithm stepped_algorithm(const PlanWriter& w, const CollectivePlan& plan,
                                             const LinkSpec& link) {
  const bool small = plan.bytes < link.one_shot_bytes;
  switch (w.topology()) {
    case Topology::ring: return small ? CollectiveAlgorithm::one_shot : CollectiveAlgorithm::ring;
    case Topology::line: return small ? CollectiveAlgorithm::one_shot : CollectiveAlgorithm::line;
    case Topology::fully_connected:
      return small && plan.collective == Collective::all_reduce ? CollectiveAlgorithm::one_shot
                                                                 : CollectiveAlgorithm::direct;
  }
  return CollectiveAlgorithm::none;
}

}  // namespace detail

}  // namespace ferry
