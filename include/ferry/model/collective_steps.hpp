#pragma once
// The vocabulary of collective plans: the collectives a mesh runs, how a plan moves its bytes,
// and a plan itself: steps of one-hop transfers over the members of a group. What each plan
// holds, and why, is model/collective_plan.hpp's; what it costs, model/collective_time.hpp's.

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ferry/model/horizon.hpp"
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
  /// Bytes that cross a link, summed over every transfer (a relayed message once a hop), held
  /// at the largest int64: a one-shot all-reduce of 256 buffers of 2^53 bytes moves 2^69.
  /// Throws nothing.
  std::int64_t link_bytes() const noexcept {
    std::int64_t sum = 0;
    for (const CollectiveStep& s : steps) {
      for (const Transfer& t : s.transfers) sum = detail::held_sum(sum, t.bytes);
    }
    return sum;
  }
};

}  // namespace ferry
