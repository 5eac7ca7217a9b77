#pragma once
// NameTable: the op names a model has seen, each stored once. Commands and trace slices hold
// views of them, so submitting a step builds no string (an eager loop names the same few ops
// over and over: the last name is checked first).

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
    if (name == last_) return last_;
    auto it = names_.find(name);
    if (it == names_.end()) it = names_.emplace(name).first;
    last_ = *it;  // nodes never move: views stay valid as the set grows
    return last_;
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_set<std::string, Hash, std::equal_to<>> names_;
  std::string_view last_;
};

}  // namespace ferry::detail
