#pragma once
// CacheIndex: how a program finds the entries a call may replay without trying every entry's
// guards in turn. Most guards pin a leaf of the call to a value: a size of an array input (every
// size, with static shapes) or a scalar argument. Together with what every entry checks first
// (the inputs' ranks, devices and aliasing) those values form a key. Entries whose keys read the
// same leaves share a group; a lookup hashes the call once per group and tries only the entries
// of its bucket, whose guards (all of them, the pinned leaves included) decide as before. A hash
// collision therefore costs one guard check, never a wrong replay, and a call no key matches
// traces afresh.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "ferry/core/shape.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// A leaf of a call that a guard pins: size `dim` of array input `index`, or scalar argument
/// `index`.
struct KeyLeaf {
  bool argument = false;
  std::uint32_t index = 0;
  std::uint32_t dim = 0;
  friend auto operator<=>(const KeyLeaf&, const KeyLeaf&) = default;
};

/// What an entry's key reads of a call: the ranks its inputs must have (so each pinned size
/// exists) and the pinned leaves, in order.
struct KeySchema {
  std::vector<std::size_t> ranks;
  std::vector<KeyLeaf> leaves;
  friend bool operator==(const KeySchema&, const KeySchema&) = default;
};

/// A hash of 64-bit words, fed in order.
class KeyHash {
 public:
  void add(std::uint64_t v) noexcept {
    h_ ^= v + 0x9e3779b97f4a7c15ull + (h_ << 6) + (h_ >> 2);
    h_ *= 0xff51afd7ed558ccdull;
  }
  std::uint64_t value() const noexcept { return h_ ^ (h_ >> 33); }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

/// A call as the key reads it: its array inputs, the first input that is the same array as
/// each one, and its scalar arguments.
struct CallSignature {
  std::span<Step* const> inputs;
  std::span<const std::uint32_t> aliases;
  std::span<const std::int64_t> args;
};

/// The key of `call` under `schema`; the caller has checked the ranks.
inline std::uint64_t call_key(const KeySchema& schema, const CallSignature& call) noexcept {
  KeyHash h;
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    h.add(reinterpret_cast<std::uintptr_t>(call.inputs[i]->device().get()));
    h.add(call.aliases[i]);
  }
  for (const KeyLeaf& leaf : schema.leaves) {
    const std::int64_t v =
        leaf.argument ? call.args[leaf.index] : call.inputs[leaf.index]->shape().dims()[leaf.dim];
    h.add(static_cast<std::uint64_t>(v));
  }
  return h.value();
}

/// The entries of a program by key. Positions are the entries' places in the cache, in the
/// order they were traced: a lookup returns the first matching entry in that order, as trying
/// every entry would.
class CacheIndex {
 public:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  /// Files the entry at `position` (later than every position filed before) under `key`.
  void add(const KeySchema& schema, std::uint64_t key, std::uint32_t position) {
    auto group = std::find_if(groups_.begin(), groups_.end(),
                              [&](const Group& g) { return g.schema == schema; });
    if (group == groups_.end()) group = groups_.insert(groups_.end(), Group{schema, {}});
    group->buckets[key].push_back(position);
  }

  /// The first position whose entry `matches(position)` accepts among those filed under the
  /// call's key in each group, or kNone. The last call of `matches` is on the returned
  /// position (so what it filled in is that entry's).
  template <class Matches>
  std::uint32_t find(const CallSignature& call, Matches&& matches) const {
    std::uint32_t best = kNone;
    bool last_was_best = true;
    for (const Group& g : groups_) {
      if (!same_ranks(g.schema, call)) continue;
      const auto bucket = g.buckets.find(call_key(g.schema, call));
      if (bucket == g.buckets.end()) continue;
      for (const std::uint32_t position : bucket->second) {
        if (position >= best) break;
        if (matches(position)) {
          best = position;
          last_was_best = true;
          break;
        }
        last_was_best = false;
      }
    }
    // A later group's candidate that failed overwrote what the best one had filled in.
    if (best != kNone && !last_was_best) static_cast<void>(matches(best));
    return best;
  }

 private:
  struct Group {
    KeySchema schema;
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> buckets;
  };

  static bool same_ranks(const KeySchema& schema, const CallSignature& call) noexcept {
    for (std::size_t i = 0; i < schema.ranks.size(); ++i) {
      if (call.inputs[i]->shape().rank() != schema.ranks[i]) return false;
    }
    return true;
  }

  std::vector<Group> groups_;
};

}  // namespace ferry::detail
