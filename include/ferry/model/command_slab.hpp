#pragma once
// CommandSlab: where the simulator keeps its commands. A slot names a command from its
// submission until nothing refers to it any more; a later command then reuses the slot.
//
// The commands live in blocks that never move. One growing array moved every command (400-odd
// bytes, with lists and exceptions inside) at each doubling while a long program had tens of
// thousands in flight, a few hundred instructions a step; and a command's address now stays
// valid for as long as its slot is taken, so the critical-path walk follows inputs by pointer.
// The trace's labels, when kept, live beside the commands in blocks of their own.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/model/blocks.hpp"
#include "ferry/model/command.hpp"

namespace ferry::detail {

class CommandSlab {
 public:
  /// `labelled`: a label is kept beside every command (when a trace is kept).
  explicit CommandSlab(bool labelled) : labelled_(labelled) {}

  Command& operator[](std::uint64_t slot) noexcept { return commands_[slot]; }
  const Command& operator[](std::uint64_t slot) const noexcept { return commands_[slot]; }
  /// One past the highest slot ever taken: every slot below it holds a command or is free.
  std::size_t size() const noexcept { return commands_.size(); }

  /// A slot for a new command, a recycled one first; its Command is left as the last command
  /// to use it left it (Command::reuse makes it fresh), with `slot` set. `fresh` says whether
  /// the slot is new, its Command just built (nothing to reset: a long program that exports
  /// rarely takes a new slot a step).
  FERRY_DECL std::uint32_t take(bool& fresh);

  /// Nothing names the command in `slot` any more: the slot is free for a later command.
  void give_back(std::uint64_t slot) {
    commands_[slot].failure = nullptr;  // let go of the exception now
    free_.push_back(static_cast<std::uint32_t>(slot));
  }

  bool labelled() const noexcept { return labelled_; }
  CommandLabel& label(std::uint64_t slot) noexcept { return labels_[slot]; }
  const CommandLabel& label(std::uint64_t slot) const noexcept { return labels_[slot]; }

 private:
  Blocks<Command> commands_;
  Blocks<CommandLabel> labels_;
  std::vector<std::uint32_t> free_;  // slots no command uses
  bool labelled_;
};

#if FERRY_DEFINES_DECLS
FERRY_DECL std::uint32_t CommandSlab::take(bool& fresh) {
  fresh = free_.empty();
  if (!fresh) {
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  const auto slot = static_cast<std::uint32_t>(commands_.size());
  commands_.cover(slot + 1);
  if (labelled_) labels_.cover(slot + 1);
  commands_[slot].slot = slot;
  return slot;
}
#endif

}  // namespace ferry::detail
