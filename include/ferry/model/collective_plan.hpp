#pragma once
// CollectivePlan: the steps a real collective library runs for one collective over the n
// members of a group (a mesh axis, or a whole mesh), each step a list of one-hop transfers
// (model/collective_steps.hpp), written with model/plan_writer.hpp's patterns; what a plan
// costs on an idle interconnect is model/collective_time.hpp's ideal_time, which the mesh
// simulator's timeline gives a stepped plan when nothing else runs (a one-step plan with relays
// can take up to a hop latency more: docs/concepts.md, Meshes).
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
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/model/collective_steps.hpp"
#include "ferry/model/collective_time.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/plan_writer.hpp"

namespace ferry {

/// The plan of an all-gather of `bytes` (the gathered output: n shards) over `members`
/// positions on `topology`: ring (n-1 steps, half shards both ways), line (n-1 steps, whole
/// shards both ways), switch (one step), or one-shot below link.one_shot_bytes (one step, whole
/// shards relayed half round a ring, to both ends of a line). Throws InvalidArgument for
/// members < 1, bytes < 0 or a topology outside the enum.
inline CollectivePlan plan_all_gather(Topology topology, std::int64_t members, std::int64_t bytes,
                                      const LinkSpec& link) {
  detail::check_group("plan_all_gather", topology, members, bytes);
  CollectivePlan plan =
      detail::start_plan(Collective::all_gather, topology, members, bytes, members);
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
inline CollectivePlan plan_reduce_scatter(Topology topology, std::int64_t members,
                                          std::int64_t bytes, const LinkSpec& link) {
  detail::check_group("plan_reduce_scatter", topology, members, bytes);
  CollectivePlan plan =
      detail::start_plan(Collective::reduce_scatter, topology, members, bytes, members);
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
  CollectivePlan plan =
      detail::start_plan(Collective::all_reduce, topology, members, bytes, members);
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
  CollectivePlan plan =
      detail::start_plan(Collective::all_to_all, topology, members, bytes, members);
  if (members == 1 || bytes == 0) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = w.topology() == Topology::fully_connected ? CollectiveAlgorithm::direct
                                                             : CollectiveAlgorithm::routed;
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
      detail::fail<InvalidArgument>(op, "pair ", text(pairs[i]),
                                    " names a position outside a group of ", members);
    }
    for (std::size_t e = 0; e < i; ++e) {
      if (pairs[e].first == s) {
        detail::fail<InvalidArgument>(op, "pairs ", text(pairs[e]), " and ", text(pairs[i]),
                                      " share source ", s);
      }
      if (pairs[e].second == t) {
        detail::fail<InvalidArgument>(op, "pairs ", text(pairs[e]), " and ", text(pairs[i]),
                                      " share target ", t);
      }
    }
  }
  CollectivePlan plan = detail::start_plan(Collective::permute, topology, members, bytes, 1);
  const bool moves =
      std::any_of(pairs.begin(), pairs.end(), [](const auto& p) { return p.first != p.second; });
  if (members == 1 || bytes == 0 || !moves) return plan;
  detail::PlanWriter w(plan);
  plan.algorithm = w.topology() == Topology::fully_connected ? CollectiveAlgorithm::direct
                                                             : CollectiveAlgorithm::routed;
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
inline CollectivePlan plan_collective(Collective collective, Topology topology,
                                      std::int64_t members, std::int64_t bytes,
                                      const LinkSpec& link) {
  switch (collective) {
    case Collective::all_gather: return plan_all_gather(topology, members, bytes, link);
    case Collective::reduce_scatter: return plan_reduce_scatter(topology, members, bytes, link);
    case Collective::all_reduce: return plan_all_reduce(topology, members, bytes, link);
    case Collective::all_to_all: return plan_all_to_all(topology, members, bytes, link);
    case Collective::broadcast:
      detail::fail<InvalidArgument>("plan_collective",
                                    "broadcast needs its root: call plan_broadcast");
    case Collective::permute:
      detail::fail<InvalidArgument>("plan_collective",
                                    "permute needs its pairs: call plan_permute");
  }
  detail::fail<InvalidArgument>("plan_collective", "collective is not a Collective (",
                                static_cast<int>(collective), ")");
}

}  // namespace ferry
