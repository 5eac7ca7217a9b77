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
#include "ferry/model/memory.hpp"
#include "ferry/model/ring.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

/// The commands ready but not started (so: waiting for memory) among `slots` and everything
/// they depend on, in submission order.
inline std::vector<std::uint64_t> blocked_for(const std::vector<Command>& slab,
                                              std::span<const std::uint64_t> slots) {
  std::vector<std::uint64_t> stack(slots.begin(), slots.end());
  std::vector<std::uint64_t> blocked;
  std::vector<std::uint64_t> seen;
  while (!stack.empty()) {
    const std::uint64_t slot = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), slot) != seen.end()) continue;
    seen.push_back(slot);
    const Command& c = slab[slot];
    if (c.done()) continue;
    if (c.state == Command::State::ready) blocked.push_back(slot);
    for (std::size_t i = 0; i < c.inputs.size(); ++i) stack.push_back(c.inputs[i]);
  }
  std::sort(blocked.begin(), blocked.end(),
            [&](std::uint64_t a, std::uint64_t b) { return slab[a].id < slab[b].id; });
  return blocked;
}

/// Whether a handle names the command in `from` or anything that reads it, directly or not.
inline bool observable(const std::vector<Command>& slab, std::uint64_t from) {
  std::vector<std::uint64_t> stack{from};
  std::vector<std::uint64_t> seen;
  while (!stack.empty()) {
    const std::uint64_t slot = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), slot) != seen.end()) continue;
    seen.push_back(slot);
    const Command& c = slab[slot];
    if (c.handle) return true;
    for (std::size_t i = 0; i < c.successors.size(); ++i) stack.push_back(c.successors[i]);
  }
  return false;
}

/// The commands of `live` ready but not started whose results nothing can read.
inline std::vector<std::uint64_t> unobservable(const std::vector<Command>& slab,
                                               const Ring<std::uint32_t>& live) {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::uint32_t slot = live[i];
    if (slab[slot].state == Command::State::ready && !observable(slab, slot)) out.push_back(slot);
  }
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
