#pragma once
// CollectivePlan: the steps a real collective library runs for one collective over the n
// members of a group (a mesh axis, or a whole mesh), each step a list of one-hop transfers; and
// ideal_time, the plan's closed-form duration on an idle interconnect. The mesh simulator turns
// a plan into link and kernel commands, and its timeline must give ideal_time when nothing
// else runs.
//
// What is modeled, and why:
// - A ring is used in both directions at once, as tt-metal's CCL does ("Ethernet Multichip"
//   CCL developer guide, and its all-gather's SPLIT_TENSOR mode): each member's piece is cut in
//   halves, the first goes forward round the ring and the second backward, n-1 steps of one
//   hop each, so every link direction carries half a piece per step. wormhole_ccl.csv rules
//   out the unidirectional ring: its 8-chip all-gather of 1 GiB moves 7/8 GiB out of every chip
//   in 45 ms, 20.8 GB/s, over links of 12.5 GB/s a direction. A reduce-scatter uses both
//   directions too, the all-gather's pattern reversed in time, each receiver reducing the half
//   it gets into its own partial (tt-metal's 2024 report describes its reduce-scatter as one
//   way only: a one-way ring takes twice as long, which a calibration on reduce-scatters would
//   show). An all-reduce is a reduce-scatter, then an all-gather: the
//   2(n-1)/n of the buffer per member that nccl-tests' bus bandwidth counts.
// - A line sends whole pieces both ways, each travelling as far as the end it heads for, so
//   the ends idle on one side and the line reaches half a ring's bandwidth (tt-metal's line
//   all-gather, as its report describes it).
// - Through a switch every pair is one hop: each member sends each destination its piece
//   directly, and its one port to the switch carries all it sends (and receives).
// - Below LinkSpec::one_shot_bytes the one-shot algorithm: one step in which every piece goes
//   straight to every member that needs it, relayed hop by hop where the topology needs, as
//   tt-metal's full-tensor all-gather (whole shards both ways half round the ring) and the
//   one-shot all-reduce of vLLM and TensorRT-LLM (every member reduces every other's buffer).
//   Fewer steps, and so fewer step overheads, for more bytes on some links.
// - Relays within a step are cut-through: a packet crosses the next hop as soon as it arrives,
//   so a step pays one hop latency per hop of its longest chain, and its bytes once, at the
//   rate of its busiest link, rather than once per hop.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/core/error.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

/// The collectives a mesh runs.
enum class Collective : std::uint8_t {
  all_gather,      // every member gets every member's shard, in member order
  reduce_scatter,  // member p gets the reduction of every member's p-th part
  all_reduce,      // every member gets the reduction of every member's buffer
  all_to_all,      // member p gets the p-th part of every member's buffer, in member order
  broadcast,       // every member gets one member's buffer
  permute,         // each source's buffer goes to its target
};

/// "all_gather", "reduce_scatter", ... ("unknown" outside the enum).
constexpr std::string_view name_of(Collective c) noexcept {
  switch (c) {
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
    case Collective::permute: return "permute";
  }
  return "unknown";
}

/// How a plan moves its bytes (the file comment says why each).
enum class CollectiveAlgorithm : std::uint8_t {
  none,      // nothing to move: one member, or no bytes
  ring,      // a bidirectional ring: halves of each piece go opposite ways, n-1 hops each
  line,      // a line: whole pieces both ways toward the ends
  direct,    // through a switch: each member straight to each destination
  one_shot,  // below LinkSpec::one_shot_bytes: one step, every piece relayed to all who need it
  pipeline,  // a large broadcast through a switch: a chain from the root, relayed in one step
  routed,    // all_to_all and permute on a ring or line: each piece along its shortest path
};

/// "none", "ring", "line", ... ("unknown" outside the enum).
constexpr std::string_view name_of(CollectiveAlgorithm a) noexcept {
  switch (a) {
    case CollectiveAlgorithm::none: return "none";
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::line: return "line";
    case CollectiveAlgorithm::direct: return "direct";
    case CollectiveAlgorithm::one_shot: return "one_shot";
    case CollectiveAlgorithm::pipeline: return "pipeline";
    case CollectiveAlgorithm::routed: return "routed";
  }
  return "unknown";
}

/// Which way a transfer crosses its link: toward the next position (on a ring, the last's
/// next is the first), toward the previous one, or through a switch.
enum class LinkDirection : std::uint8_t { forward, backward, switched };

/// "forward", "backward", "switched" ("unknown" outside the enum).
constexpr std::string_view name_of(LinkDirection d) noexcept {
  switch (d) {
    case LinkDirection::forward: return "forward";
    case LinkDirection::backward: return "backward";
    case LinkDirection::switched: return "switched";
  }
  return "unknown";
}

/// One message over one hop: from `source` to `target`, positions along the group (0..n-1),
/// neighbours on a ring or line.
struct Transfer {
  std::int64_t source = 0;
  std::int64_t target = 0;
  LinkDirection direction = LinkDirection::forward;
  /// The member whose data this is in this step: the source at hop 1, the first sender where
  /// it is relayed.
  std::int64_t origin = 0;
  /// The bytes: [offset, offset + bytes) of slice `chunk` of the buffer (CollectivePlan says
  /// how the buffer is sliced).
  std::int64_t chunk = 0;
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
  /// 1: what the source held when the step began. h > 1: what the source received at hop h-1
  /// of this step from the same origin, passed on as it arrives.
  std::int64_t hop = 1;
  /// The target reduces it into its own partial (a reduction kernel follows), rather than
  /// storing it.
  bool reduce = false;
  /// The target only passes it on (a routed message crossing an intermediate member): it
  /// neither stores nor reduces it.
  bool passes_through = false;
};

/// What runs at once: a member's transfers of step s+1 send what it has after step s.
struct CollectiveStep {
  std::vector<Transfer> transfers;

  /// The longest relay chain in the step, in hops (0 when empty).
  std::int64_t hops() const noexcept {
    std::int64_t h = 0;
    for (const Transfer& t : transfers) h = std::max(h, t.hop);
    return h;
  }
};

/// The steps of one collective over `members` positions on `topology`. `bytes` is the size as
/// nccl-tests counts it: an all-gather's output (n shards); a reduce-scatter's input (n parts,
/// part p kept by member p); an all-reduce's, all-to-all's, broadcast's or permute's buffer on
/// each member. The buffer is cut into `chunks` slices as evenly as bytes allow, the first
/// bytes % chunks one byte longer: n for the all-gather (slice p is member p's shard), the
/// reduce-scatter, the all-to-all and the stepped all-reduce; 1 otherwise.
struct CollectivePlan {
  Collective collective = Collective::all_gather;
  Topology topology = Topology::ring;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::none;
  std::int64_t members = 1;
  std::int64_t bytes = 0;
  std::int64_t chunks = 1;
  std::vector<CollectiveStep> steps;

  /// The length of slice `chunk`. Throws nothing; meaningless outside [0, chunks).
  std::int64_t chunk_bytes(std::int64_t chunk) const noexcept {
    return bytes / chunks + (chunk < bytes % chunks ? 1 : 0);
  }
  /// Where slice `chunk` starts in the buffer. Throws nothing.
  std::int64_t chunk_offset(std::int64_t chunk) const noexcept {
    return chunk * (bytes / chunks) + std::min(chunk, bytes % chunks);
  }
  /// Bytes that cross a link, summed over every transfer (a relayed message once a hop).
  std::int64_t link_bytes() const noexcept {
    std::int64_t sum = 0;
    for (const CollectiveStep& s : steps) {
      for (const Transfer& t : s.transfers) sum += t.bytes;
    }
    return sum;
  }
};

namespace detail {

/// Writes the transfers of a plan: the patterns its algorithms are made of.
class PlanWriter {
 public:
  explicit PlanWriter(CollectivePlan& plan)
      : plan_(plan),
        n_(plan.members),
        // A ring of one or two members has one neighbouring pair: it is a line.
        topology_(plan.topology == Topology::ring && plan.members < 3 ? Topology::line : plan.topology) {}

  /// The topology the plan runs on (a ring of two is a line).
  Topology topology() const noexcept { return topology_; }

  void begin_step() { plan_.steps.emplace_back(); }

  void add(std::int64_t from, std::int64_t to, std::int64_t origin, std::int64_t chunk, std::int64_t offset,
           std::int64_t bytes, std::int64_t hop, bool reduce, bool passes_through) {
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
  void relay(std::int64_t origin, std::int64_t hops, std::int64_t step, std::int64_t chunk, std::int64_t offset,
             std::int64_t bytes, bool reduce, bool every_member_keeps) {
    for (std::int64_t h = 1; h <= hops; ++h) {
      const bool through = !every_member_keeps && h < hops;
      add(wrap(origin + (h - 1) * step), wrap(origin + h * step), origin, chunk, offset, bytes, h, reduce, through);
    }
  }

  /// `origin` sends a piece to every other member in one step: straight through a switch; to
  /// both ends of a line; half round a ring each way (the extra member of an even ring forward).
  void multicast(std::int64_t origin, std::int64_t chunk, std::int64_t offset, std::int64_t bytes, bool reduce) {
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
  void route(std::int64_t origin, std::int64_t target, std::int64_t chunk, std::int64_t offset, std::int64_t bytes,
             bool reduce) {
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
      case Topology::ring: return to == wrap(from + 1) ? LinkDirection::forward : LinkDirection::backward;
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
  std::int64_t first_half(std::int64_t chunk) const noexcept { return (plan_.chunk_bytes(chunk) + 1) / 2; }

  CollectivePlan& plan_;
  std::int64_t n_;
  Topology topology_;
};

/// Throws InvalidArgument, as `op`, for a group no plan can serve.
inline void check_group(std::string_view op, Topology topology, std::int64_t members, std::int64_t bytes) {
  if (topology != Topology::ring && topology != Topology::line && topology != Topology::fully_connected) {
    fail<InvalidArgument>(op, "topology is not a Topology (", static_cast<int>(topology), ")");
  }
  if (members < 1) fail<InvalidArgument>(op, "members must be positive, got ", members);
  if (bytes < 0) fail<InvalidArgument>(op, "bytes must not be negative, got ", bytes);
}

/// A plan with its header filled and no steps.
inline CollectivePlan start_plan(Collective c, Topology topology, std::int64_t members, std::int64_t bytes,
                                 std::int64_t chunks) {
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
inline CollectiveAlgorithm stepped_algorithm(const PlanWriter& w, const CollectivePlan& plan, const LinkSpec& link) {
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

/// The plan of an all-gather of `bytes` (the gathered output: n shards) over `members`
/// positions on `topology`: ring (n-1 steps, half shards both ways), line (n-1 steps, whole
/// shards both ways), switch (one step), or one-shot below link.one_shot_bytes (one step, whole
/// shards relayed half round a ring, to both ends of a line). Throws InvalidArgument for
/// members < 1, bytes < 0 or a topology outside the enum.
inline CollectivePlan plan_all_gather(Topology topology, std::int64_t members, std::int64_t bytes,
                                      const LinkSpec& link) {
  detail::check_group("plan_all_gather", topology, members, bytes);
  CollectivePlan plan = detail::start_plan(Collective::all_gather, topology, members, bytes, members);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = detail::stepped_algorithm(w, plan, link);
  if (plan.algorithm == CollectiveAlgorithm::ring) {
    w.ring_all_gather();
  } else if (plan.algorithm == CollectiveAlgorithm::line) {
    w.line_all_gather();
  } else {  // direct or one-shot: every shard to every member in one step
    w.begin_step();
    for (std::int64_t o = 0; o < members; ++o) w.multicast(o, o, 0, plan.chunk_bytes(o), false);
  }
  return plan;
}

/// The plan of a reduce-scatter of `bytes` (each member's input: n parts, member p keeping
/// the reduction of part p) over `members` positions on `topology`: ring (n-1 steps, half
/// parts both ways), line (n-1 steps, partials from both ends), switch (one step, each part
/// straight to its member), or one-shot below link.one_shot_bytes (one step, each part routed
/// to its member). Every receipt is a reduction: each part is reduced n-1 times. Throws
/// InvalidArgument like plan_all_gather.
inline CollectivePlan plan_reduce_scatter(Topology topology, std::int64_t members, std::int64_t bytes,
                                          const LinkSpec& link) {
  detail::check_group("plan_reduce_scatter", topology, members, bytes);
  CollectivePlan plan = detail::start_plan(Collective::reduce_scatter, topology, members, bytes, members);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = detail::stepped_algorithm(w, plan, link);
  if (plan.algorithm == CollectiveAlgorithm::ring) {
    w.ring_reduce_scatter();
  } else if (plan.algorithm == CollectiveAlgorithm::line) {
    w.line_reduce_scatter();
  } else {
    w.begin_step();
    for (std::int64_t o = 0; o < members; ++o) {
      for (std::int64_t j = 0; j < members; ++j) {
        if (j != o) w.route(o, j, j, 0, plan.chunk_bytes(j), true);
      }
    }
  }
  return plan;
}

/// The plan of an all-reduce of `bytes` (each member's buffer) over `members` positions on
/// `topology`: a reduce-scatter then an all-gather of n slices (ring or line: 2(n-1) steps;
/// switch: 2), or below link.one_shot_bytes one step in which every member's whole buffer
/// reaches every other member, which reduces it (one slice). Throws InvalidArgument like
/// plan_all_gather.
inline CollectivePlan plan_all_reduce(Topology topology, std::int64_t members, std::int64_t bytes,
                                      const LinkSpec& link) {
  detail::check_group("plan_all_reduce", topology, members, bytes);
  CollectivePlan plan = detail::start_plan(Collective::all_reduce, topology, members, bytes, members);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = detail::stepped_algorithm(w, plan, link);
  switch (plan.algorithm) {
    case CollectiveAlgorithm::ring:
      w.ring_reduce_scatter();
      w.ring_all_gather();
      break;
    case CollectiveAlgorithm::line:
      w.line_reduce_scatter();
      w.line_all_gather();
      break;
    case CollectiveAlgorithm::direct:
      w.begin_step();
      for (std::int64_t o = 0; o < members; ++o) {
        for (std::int64_t j = 0; j < members; ++j) {
          if (j != o) w.add(o, j, o, j, 0, plan.chunk_bytes(j), 1, true, false);
        }
      }
      w.begin_step();
      for (std::int64_t o = 0; o < members; ++o) w.multicast(o, o, 0, plan.chunk_bytes(o), false);
      break;
    default:  // one-shot
      plan.chunks = 1;
      w.begin_step();
      for (std::int64_t o = 0; o < members; ++o) w.multicast(o, 0, 0, bytes, true);
      break;
  }
  return plan;
}

/// The plan of an all-to-all of `bytes` (each member's buffer: n parts, part j for member j)
/// over `members` positions on `topology`: one step, each part straight to its member through
/// a switch, or along its shortest path on a ring or line. Throws InvalidArgument like
/// plan_all_gather.
inline CollectivePlan plan_all_to_all(Topology topology, std::int64_t members, std::int64_t bytes,
                                      const LinkSpec& link) {
  (void)link;  // one algorithm at every size
  detail::check_group("plan_all_to_all", topology, members, bytes);
  CollectivePlan plan = detail::start_plan(Collective::all_to_all, topology, members, bytes, members);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = w.topology() == Topology::fully_connected ? CollectiveAlgorithm::direct : CollectiveAlgorithm::routed;
  w.begin_step();
  for (std::int64_t o = 0; o < members; ++o) {
    for (std::int64_t j = 0; j < members; ++j) {
      if (j != o) w.route(o, j, j, 0, plan.chunk_bytes(j), false);
    }
  }
  return plan;
}

/// The plan of a broadcast of `bytes` from position `root` over `members` positions on
/// `topology`, in one step of relays: on a ring, halves of the buffer each way round it (whole
/// buffers half round it below link.one_shot_bytes); on a line, the buffer to both ends;
/// through a switch, a chain root, root+1, ... (straight to every member below
/// link.one_shot_bytes, which loads the root's port n-1 times). Throws InvalidArgument like
/// plan_all_gather, and for a root outside [0, members).
inline CollectivePlan plan_broadcast(Topology topology, std::int64_t members, std::int64_t bytes,
                                     std::int64_t root, const LinkSpec& link) {
  constexpr std::string_view op = "plan_broadcast";
  detail::check_group(op, topology, members, bytes);
  if (root < 0 || root >= members) {
    detail::fail<InvalidArgument>(op, "root ", root, " is not a position of a group of ", members);
  }
  CollectivePlan plan = detail::start_plan(Collective::broadcast, topology, members, bytes, 1);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  const bool small = bytes < link.one_shot_bytes;
  w.begin_step();
  switch (w.topology()) {
    case Topology::ring:
      if (small) {
        plan.algorithm = CollectiveAlgorithm::one_shot;
        w.multicast(root, 0, 0, bytes, false);
      } else {
        plan.algorithm = CollectiveAlgorithm::ring;
        const std::int64_t first = (bytes + 1) / 2;
        w.relay(root, members - 1, +1, 0, 0, first, false, true);
        w.relay(root, members - 1, -1, 0, first, bytes - first, false, true);
      }
      break;
    case Topology::line:
      plan.algorithm = CollectiveAlgorithm::line;
      w.multicast(root, 0, 0, bytes, false);
      break;
    case Topology::fully_connected:
      if (small) {
        plan.algorithm = CollectiveAlgorithm::direct;
        w.multicast(root, 0, 0, bytes, false);
      } else {
        plan.algorithm = CollectiveAlgorithm::pipeline;
        w.relay(root, members - 1, +1, 0, 0, bytes, false, true);
      }
      break;
  }
  return plan;
}

/// The plan of a permute over `members` positions on `topology`: each {source, target} pair
/// sends the source's `bytes` to the target in one step, straight through a switch or along
/// the shortest path on a ring or line; a pair whose source is its target moves nothing.
/// Throws InvalidArgument like plan_all_gather, and for a position outside [0, members) or two
/// pairs with one source or one target (naming both pairs).
inline CollectivePlan plan_permute(Topology topology, std::int64_t members, std::int64_t bytes,
                                   const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs,
                                   const LinkSpec& link) {
  (void)link;  // one algorithm at every size
  constexpr std::string_view op = "plan_permute";
  detail::check_group(op, topology, members, bytes);
  const auto text = [](const std::pair<std::int64_t, std::int64_t>& p) {
    return "{" + std::to_string(p.first) + ", " + std::to_string(p.second) + "}";
  };
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [s, t] = pairs[i];
    if (s < 0 || s >= members || t < 0 || t >= members) {
      detail::fail<InvalidArgument>(op, "pair ", text(pairs[i]), " names a position outside a group of ", members);
    }
    for (std::size_t e = 0; e < i; ++e) {
      if (pairs[e].first == s) {
        detail::fail<InvalidArgument>(op, "pairs ", text(pairs[e]), " and ", text(pairs[i]), " share source ", s);
      }
      if (pairs[e].second == t) {
        detail::fail<InvalidArgument>(op, "pairs ", text(pairs[e]), " and ", text(pairs[i]), " share target ", t);
      }
    }
  }
  CollectivePlan plan = detail::start_plan(Collective::permute, topology, members, bytes, 1);
  const bool moves = std::any_of(pairs.begin(), pairs.end(), [](const auto& p) { return p.first != p.second; });
  if (members == 1 || bytes == 0 || !moves) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = w.topology() == Topology::fully_connected ? CollectiveAlgorithm::direct : CollectiveAlgorithm::routed;
  w.begin_step();
  for (const auto& [s, t] : pairs) {
    if (s != t) w.route(s, t, 0, 0, bytes, false);
  }
  return plan;
}

/// The plan of `collective`, for the collectives that need nothing but a size: all_gather,
/// reduce_scatter, all_reduce, all_to_all (see each plan_ function). Throws InvalidArgument
/// like them, and for broadcast and permute, which need a root or pairs (plan_broadcast,
/// plan_permute).
inline CollectivePlan plan_collective(Collective collective, Topology topology, std::int64_t members,
                                      std::int64_t bytes, const LinkSpec& link) {
  switch (collective) {
    case Collective::all_gather: return plan_all_gather(topology, members, bytes, link);
    case Collective::reduce_scatter: return plan_reduce_scatter(topology, members, bytes, link);
    case Collective::all_reduce: return plan_all_reduce(topology, members, bytes, link);
    case Collective::all_to_all: return plan_all_to_all(topology, members, bytes, link);
    case Collective::broadcast:
      detail::fail<InvalidArgument>("plan_collective", "broadcast needs its root: call plan_broadcast");
    case Collective::permute:
      detail::fail<InvalidArgument>("plan_collective", "permute needs its pairs: call plan_permute");
  }
  detail::fail<InvalidArgument>("plan_collective", "collective is not a Collective (",
                                static_cast<int>(collective), ")");
}

namespace detail {

/// Whether `plan` runs on a line: a line axis, or a ring of two (one neighbouring pair).
inline bool runs_on_line(const CollectivePlan& plan) noexcept {
  return plan.topology == Topology::line || (plan.topology == Topology::ring && plan.members < 3);
}

/// The library calls `plan` costs: two for a stepped all-reduce of a library that composes it
/// (LinkSpec::composite_all_reduce), one otherwise, none for a plan without steps.
inline std::int64_t plan_calls(const CollectivePlan& plan, const LinkSpec& link) noexcept {
  if (plan.steps.empty()) return 0;
  const bool stepped = plan.algorithm != CollectiveAlgorithm::one_shot;
  return plan.collective == Collective::all_reduce && stepped && link.composite_all_reduce ? 2 : 1;
}

/// The rate, in bytes per second, at which `plan`'s busiest link direction carries its bytes:
/// links_per_pair links of bytes_per_second, times efficiency, times line_rate_factor on a line.
inline double plan_rate(const CollectivePlan& plan, const LinkSpec& link) noexcept {
  return link.bytes_per_second * static_cast<double>(link.links_per_pair) * link.efficiency *
         (runs_on_line(plan) ? link.line_rate_factor : 1.0);
}

/// What ideal_time counts of a plan, link costs apart: its steps, the hops of each step's
/// longest relay chain summed, and the bytes of each step's busiest link summed.
struct PlanLoad {
  std::int64_t steps = 0;
  std::int64_t hops = 0;
  std::int64_t busiest_bytes = 0;
};

inline PlanLoad plan_load(const CollectivePlan& plan) {
  PlanLoad out;
  // Keys: (source, target) for a direction of a neighbouring pair; through a switch
  // (member, -1) for its port out and (-1, member) for its port in.
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> load;
  for (const CollectiveStep& step : plan.steps) {
    load.clear();
    for (const Transfer& t : step.transfers) {
      if (t.direction == LinkDirection::switched) {
        load[{t.source, -1}] += t.bytes;
        load[{-1, t.target}] += t.bytes;
      } else {
        load[{t.source, t.target}] += t.bytes;
      }
    }
    std::int64_t busiest = 0;
    for (const auto& [key, bytes] : load) busiest = std::max(busiest, bytes);
    ++out.steps;
    out.hops += step.hops();
    out.busiest_bytes += busiest;
  }
  return out;
}

/// ideal_time from a plan's load, its calls and its rate (plan_calls, plan_rate), in ns.
inline double ideal_ns(const PlanLoad& load, std::int64_t calls, double rate, const LinkSpec& link) noexcept {
  const auto ns = [](Duration d) { return static_cast<double>(d.count()); };
  return static_cast<double>(calls) * ns(link.call_overhead) + static_cast<double>(load.steps) * ns(link.step_overhead) +
         static_cast<double>(load.hops) * ns(link.hop_latency) + static_cast<double>(load.busiest_bytes) * 1e9 / rate;
}

}  // namespace detail

/// The time `plan` takes on an idle interconnect of `link`s, in closed form: the library's
/// call overhead (twice for a stepped all-reduce where LinkSpec::composite_all_reduce), then
/// for each step its step overhead, one hop latency for each hop of its longest relay chain
/// (packets stream through relays), and the bytes of its busiest link at the rate the library
/// reaches (links_per_pair links of bytes_per_second, times efficiency, times
/// line_rate_factor on a line). A link is one direction between two neighbours of a ring or
/// line; through a switch, each member's port out and its port in. Reductions are not
/// counted: real implementations reduce packets as they stream in, and the simulator puts them
/// on the devices' compute units. A plan without steps takes no time (nothing is launched).
/// Throws InvalidArgument for a link no mesh could have (naming the field).
inline Duration ideal_time(const CollectivePlan& plan, const LinkSpec& link) {
  detail::validate(link, "ideal_time", "");
  if (plan.steps.empty()) return Duration::zero();
  return Duration(std::llround(
      detail::ideal_ns(detail::plan_load(plan), detail::plan_calls(plan, link), detail::plan_rate(plan, link), link)));
}

}  // namespace ferry
