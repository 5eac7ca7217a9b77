#pragma once
// Stuck work: the walks the simulator makes over its commands when nothing can happen until the
// host acts: which commands an export waits for that wait for memory, and which waiting
// commands nothing can read any more.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/memory.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

/// Visits every command reachable from `starts` once, following the inputs (`to_inputs`) or the
/// readers of each command not done yet, until `visit(slot)` returns true. True if it did.
template <class Visit>
bool walk(const CommandSlab& slab, std::span<const std::uint64_t> starts, bool to_inputs,
          Visit visit) {
  std::vector<std::uint64_t> stack(starts.begin(), starts.end());
  std::vector<bool> seen(slab.size());
  while (!stack.empty()) {
    const std::uint64_t slot = stack.back();
    stack.pop_back();
    if (seen[slot]) continue;
    seen[slot] = true;
    if (visit(slot)) return true;
    const Command& c = slab[slot];
    if (c.done()) continue;
    const IdList& next = to_inputs ? c.inputs : c.successors;
    for (std::size_t i = 0; i < next.size(); ++i) stack.push_back(next[i]);
    // A donation also waits for the other readers of its donor (Scheduler::wait_for_donor).
    // A donor done keeps no list of its readers: they are found among the commands not done
    // (a walk made only when nothing can happen, so a scan of the slab is affordable).
    if (to_inputs && c.donor != kNoCommand && slab[c.donor].waiter == slot) {
      for (std::size_t other = 0; other < slab.size(); ++other) {
        const Command& o = slab[other];
        if (other == slot || o.done()) continue;
        for (std::size_t i = 0; i < o.inputs.size(); ++i) {
          if (o.inputs[i] == c.donor) {
            stack.push_back(other);
            break;
          }
        }
      }
    }
  }
  return false;
}

/// The commands ready but not started (so: waiting for memory) among `slots` and everything
/// they depend on, in submission order.
inline std::vector<std::uint64_t> blocked_for(const CommandSlab& slab,
                                              std::span<const std::uint64_t> slots) {
  std::vector<std::uint64_t> blocked;
  walk(slab, slots, true, [&](std::uint64_t slot) {
    if (slab[slot].state == Command::State::ready) blocked.push_back(slot);
    return false;
  });
  std::sort(blocked.begin(), blocked.end(),
            [&](std::uint64_t a, std::uint64_t b) { return slab[a].id < slab[b].id; });
  return blocked;
}

/// Whether a handle names the command in `from` or anything that reads it, directly or not.
inline bool observable(const CommandSlab& slab, std::uint64_t from) {
  const std::uint64_t starts[] = {from};
  return walk(slab, starts, false, [&](std::uint64_t slot) { return slab[slot].handle; });
}

/// The commands of `slab` ready but not started whose results nothing can read, in submission
/// order. (A slot no command holds keeps its last command, done.)
inline std::vector<std::uint64_t> unobservable(const CommandSlab& slab) {
  std::vector<std::uint64_t> out;
  for (std::size_t slot = 0; slot < slab.size(); ++slot) {
    if (slab[slot].state == Command::State::ready && !observable(slab, slot)) out.push_back(slot);
  }
  std::sort(out.begin(), out.end(),
            [&](std::uint64_t a, std::uint64_t b) { return slab[a].id < slab[b].id; });
  return out;
}

/// Why waiting for memory is hopeless: what is held, of what.
inline std::string held_memory(const DeviceMemory& memory, const DeviceSpec& spec) {
  return "while " + std::to_string(memory.dram_used()) + " of " + std::to_string(spec.dram_bytes) +
         " bytes of DRAM and " + std::to_string(memory.l1_used()) + " of " +
         std::to_string(spec.l1_bytes) +
         " bytes of L1 are held by arrays still in use, and nothing running can free them";
}

}  // namespace ferry::detail
