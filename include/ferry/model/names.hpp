#pragma once
// NameTable: the op names a model has seen, each stored once. Commands and trace slices hold
// views of them, so submitting a step builds no string. A device's program names the same few
// ops over and over, in turn (a layer's matmul, gelu, transpose, and its collectives' receives
// and reductions): the last name found, then the last few names kept, are checked first, by
// length and then bytes, before the name is hashed to look it up in the set.

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace ferry::detail {

class NameTable {
 public:
  /// A view of `name` that lives as long as the table.
  std::string_view intern(std::string_view name) {
    if (recent_[last_].size() == name.size() && recent_[last_] == name) return recent_[last_];
    for (std::size_t i = 0; i < kRecent; ++i) {
      if (recent_[i].size() == name.size() && recent_[i] == name) {
        last_ = i;
        return recent_[i];
      }
    }
    auto it = names_.find(name);
    if (it == names_.end()) it = names_.emplace(name).first;
    last_ = next_;
    recent_[last_] = *it;  // nodes never move: views stay valid as the set grows
    next_ = next_ + 1 == kRecent ? 0 : next_ + 1;
    return recent_[last_];
  }

  /// As intern, for a name with static storage (StepName::lent): the last such one is known
  /// by its address and size, without comparing its characters (a chain names one op).
  std::string_view intern_static(std::string_view name) {
    if (name.data() == static_.data() && name.size() == static_.size()) return static_interned_;
    static_interned_ = intern(name);
    static_ = name;
    return static_interned_;
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_set<std::string, Hash, std::equal_to<>> names_;
  // The names kept last, replaced in turn: more than one device's layer names.
  static constexpr std::size_t kRecent = 8;
  std::array<std::string_view, kRecent> recent_{};
  std::size_t next_ = 0;  // the one the next new name replaces
  std::size_t last_ = 0;  // the last name found: checked first (a chain names one op)
  std::string_view static_;           // the last name intern_static was given (static storage)
  std::string_view static_interned_;  // and the view intern gave for it
};

}  // namespace ferry::detail
