#pragma once
// DeviceMemory: the model's allocator. It knows what DRAM and L1 hold and decides what
// starting a command takes: its output's memory (or its donor's buffer), L1 buffers spilled
// to DRAM to make room (least recently used first, never one a ready or running command is
// about to read, unless the scheduler allows those a ready one reads: see plan), and its
// spilled L1 inputs brought back.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/timeline.hpp"

namespace ferry::detail {

/// What starting one command takes, beyond an engine.
struct Placement {
  std::vector<std::uint32_t> spills;  // L1 buffers to move to DRAM first
  std::vector<std::uint32_t> fills;   // its spilled L1 inputs, to move back
  std::uint64_t spill_bytes = 0;
  std::uint64_t fill_bytes = 0;
  bool donates = false;  // the output takes over its donor's buffer

  bool moves_nothing() const noexcept { return spills.empty() && fills.empty(); }
};

class DeviceMemory {
 public:
  DeviceMemory(std::uint64_t dram_bytes, std::uint64_t l1_bytes)
      : dram_capacity_(dram_bytes), l1_capacity_(l1_bytes) {}

  std::uint64_t dram_used() const noexcept { return dram_used_; }
  std::uint64_t l1_used() const noexcept { return l1_used_; }
  std::uint64_t peak_dram() const noexcept { return peak_dram_; }
  std::uint64_t peak_l1() const noexcept { return peak_l1_; }
  void reset_peaks() noexcept {
    peak_dram_ = dram_used_;
    peak_l1_ = l1_used_;
  }

  /// Whether the command can start once enough is freed: never_fits has nothing to say. Asked
  /// of every command, so it builds no string.
  bool can_ever_fit(const CommandSlab& slab, const Command& c) const noexcept {
    return (c.l1 || c.out_bytes <= dram_capacity_) && l1_needed(slab, c) <= l1_capacity_;
  }

  /// Why the command can never start, whatever is freed: its output is larger than its memory,
  /// or its L1 output and L1 inputs cannot all be in L1 at once. Empty if it can.
  std::string never_fits(const CommandSlab& slab, const Command& c) const {
    if (!c.l1 && c.out_bytes > dram_capacity_) {
      return "but the device has only " + std::to_string(dram_capacity_) + " bytes of DRAM";
    }
    const std::uint64_t l1 = l1_needed(slab, c);
    if (l1 > l1_capacity_) {
      return "and " + std::to_string(l1) + " bytes of L1 with its L1 inputs, but the device has "
             "only " + std::to_string(l1_capacity_) + " bytes of L1";
    }
    return {};
  }

  /// The L1 bytes `c` needs at once: its L1 output and its L1 inputs (not its donor), each
  /// buffer once. An input not computed yet counts too (at submission, none is allocated).
  std::uint64_t l1_needed(const CommandSlab& slab, const Command& c) const noexcept {
    std::uint64_t l1 = c.l1 ? c.out_bytes : 0;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const std::uint64_t buffer = source(slab, c.inputs[i]);
      const Command& in = slab[buffer];
      if (!in.l1 || c.inputs[i] == c.donor) continue;
      bool again = false;  // a + a reads one buffer
      for (std::size_t j = 0; j < i && !again; ++j) again = source(slab, c.inputs[j]) == buffer;
      if (!again) l1 += in.out_bytes;
    }
    return l1;
  }

  /// Plans starting `slot` now; false if it must wait for memory. `spill_ready_inputs`: whether
  /// it may spill an L1 buffer that ready commands are about to read (each brings it back when
  /// it starts). Only while nothing runs and ready commands wait for the L1 that only those
  /// buffers hold: each keeping its inputs, none could ever start.
  bool plan(const CommandSlab& slab, std::uint64_t slot, Placement& p,
            bool spill_ready_inputs = false) const {
    const Command& c = slab[slot];
    p.spills.clear();  // keeps their storage: planning is on every command's path
    p.fills.clear();
    p.spill_bytes = p.fill_bytes = 0;
    p.donates = donates(slab, c);
    std::uint64_t need_l1 = c.l1 && !p.donates ? c.out_bytes : 0;
    const std::uint64_t need_dram = !c.l1 && !p.donates ? c.out_bytes : 0;
    for (std::size_t i = 0; i < c.inputs.size() && spilled_ != 0; ++i) {
      const std::uint64_t in = source(slab, c.inputs[i]);
      const Command& b = slab[in];
      if (b.allocated && b.spilled &&
          std::find(p.fills.begin(), p.fills.end(), in) == p.fills.end()) {
        p.fills.push_back(static_cast<std::uint32_t>(in));
        p.fill_bytes += b.out_bytes;
        need_l1 += b.out_bytes;
      }
    }
    if (l1_used_ + need_l1 > l1_capacity_ &&
        !choose_spills(slab, c, need_l1, spill_ready_inputs, p)) {
      return false;
    }
    return dram_used_ + need_dram + p.spill_bytes <= dram_capacity_;
  }

  /// Carries out `p` for `slot` at `now`: spills, fills, then the output's memory.
  void apply(CommandSlab& slab, std::uint64_t slot, const Placement& p, Duration now,
             Timeline& timeline) {
    Command& c = slab[slot];
    for (std::uint32_t v : p.spills) {
      Command& b = slab[v];
      b.spilled = true;
      ++spilled_;
      l1_used_ -= b.out_bytes;
      dram_used_ += b.out_bytes;
      std::erase(l1_residents_, v);
    }
    for (std::uint32_t f : p.fills) {
      Command& b = slab[f];
      b.spilled = false;
      --spilled_;
      dram_used_ -= b.out_bytes;
      l1_used_ += b.out_bytes;
      l1_residents_.push_back(f);
    }
    if (p.donates) {
      Command& d = slab[c.donor];
      c.allocated = d.allocated;
      c.spilled = d.spilled;
      d.allocated = false;
      std::replace(l1_residents_.begin(), l1_residents_.end(), static_cast<std::uint32_t>(c.donor),
                   static_cast<std::uint32_t>(slot));
    } else if (c.out_bytes != 0) {
      c.allocated = true;
      (c.l1 ? l1_used_ : dram_used_) += c.out_bytes;
      if (c.l1) {
        l1_residents_.push_back(static_cast<std::uint32_t>(slot));
        ++l1_buffers_;
      }
    }
    c.last_use = now;
    for (std::size_t i = 0; i < c.inputs.size() && l1_buffers_ != 0; ++i) {
      slab[source(slab, c.inputs[i])].last_use = now;  // only L1 buffers are ranked by it
    }
    if (c.out_bytes == 0 && p.moves_nothing()) return;
    peak_dram_ = std::max(peak_dram_, dram_used_);
    peak_l1_ = std::max(peak_l1_, l1_used_);
    timeline.memory(now, dram_used_, l1_used_);
  }

  /// Frees the buffer of `slot`, wherever it is now.
  void release(CommandSlab& slab, std::uint64_t slot, Duration now, Timeline& timeline) {
    Command& c = slab[slot];
    if (!c.allocated) return;
    c.allocated = false;
    if (c.l1) --l1_buffers_;
    if (c.spilled) --spilled_;
    if (c.l1 && !c.spilled) {
      l1_used_ -= c.out_bytes;
      std::erase(l1_residents_, static_cast<std::uint32_t>(slot));
    } else {
      dram_used_ -= c.out_bytes;
    }
    timeline.memory(now, dram_used_, l1_used_);
  }

  /// The command whose buffer `slot` reads: the source of a view, else itself.
  static std::uint64_t source(const CommandSlab& slab, std::uint64_t slot) noexcept {
    const std::uint64_t v = slab[slot].view_of;
    return v != kNoCommand ? v : slot;
  }

 private:
  /// Whether `c` can take over its donor's buffer now: nothing but `c` holds it any more.
  static bool donates(const CommandSlab& slab, const Command& c) {
    if (c.donor == kNoCommand) return false;
    std::int32_t ours = 0;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) ours += c.inputs[i] == c.donor ? 1 : 0;
    const Command& d = slab[c.donor];
    return d.pins == ours && (d.allocated || d.out_bytes == 0);
  }

  /// Picks L1 buffers to spill so `need` more bytes fit: least recently used first (then
  /// oldest), never an input of `c` nor one a ready or running command reads (a ready one's
  /// only when `spill_ready_inputs`: nothing runs then).
  bool choose_spills(const CommandSlab& slab, const Command& c, std::uint64_t need,
                     bool spill_ready_inputs, Placement& p) const {
    std::vector<std::uint32_t> candidates;
    for (std::uint32_t r : l1_residents_) {
      const Command& b = slab[r];
      bool input = false;
      for (std::size_t i = 0; i < c.inputs.size() && !input; ++i) {
        input = source(slab, c.inputs[i]) == r;
      }
      if (!input && (b.hot == 0 || spill_ready_inputs) && b.done()) candidates.push_back(r);
    }
    std::sort(candidates.begin(), candidates.end(), [&](std::uint32_t a, std::uint32_t b) {
      const Command& x = slab[a];
      const Command& y = slab[b];
      return x.last_use != y.last_use ? x.last_use < y.last_use : x.id < y.id;
    });
    std::uint64_t free = l1_capacity_ - l1_used_;
    for (std::uint32_t r : candidates) {
      if (free >= need) break;
      p.spills.push_back(r);
      p.spill_bytes += slab[r].out_bytes;
      free += slab[r].out_bytes;
    }
    return free >= need;
  }

  std::uint64_t dram_capacity_;
  std::uint64_t l1_capacity_;
  std::uint64_t dram_used_ = 0;
  std::uint64_t l1_used_ = 0;
  std::uint64_t peak_dram_ = 0;
  std::uint64_t peak_l1_ = 0;
  std::vector<std::uint32_t> l1_residents_;  // slots whose L1 buffers are in L1 now
  // L1 buffers allocated (in L1 or spilled), and those spilled: while there are none, placing
  // a command need not look at its inputs.
  std::size_t l1_buffers_ = 0;
  std::size_t spilled_ = 0;
};

}  // namespace ferry::detail
