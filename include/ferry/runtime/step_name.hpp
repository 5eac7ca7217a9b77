#pragma once
// StepName: the op name a step keeps (StepInfo::name), for the trace and for messages. Every
// step of an eager loop names one of a few ops, so the name is built and moved for each step:
// as a std::string that cost some 80 instructions a step (its construction and a move, each
// copying the characters through a call to memcpy). An op whose name has static storage (a
// binary op's literal) lends it, and the step only points at it; any other name is copied into
// the step, inline up to kInline characters (as a std::string would keep it), on the heap
// beyond. Moving a name copies a pointer, a size and the inline characters, without a call.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace ferry::detail {

class StepName {
 public:
  StepName() noexcept = default;
  /// A copy of `name`. Implicit, as the std::string it replaces took any string.
  StepName(std::string_view name) { assign(name); }  // NOLINT(google-explicit-constructor)
  StepName(const std::string& name) : StepName(std::string_view(name)) {}  // NOLINT
  StepName(const char* name) : StepName(std::string_view(name)) {}  // NOLINT

  /// `name` itself, not a copy: it must outlive every step named by it (static storage: a
  /// string literal).
  static StepName of_static(std::string_view name) noexcept {
    StepName n;
    n.data_ = name.data();
    n.size_ = name.size();
    return n;
  }

  StepName(StepName&& o) noexcept { take(o); }
  StepName(const StepName& o) {
    if (o.data_ == o.inline_ || o.heap_) {
      assign(o.view());
    } else {
      data_ = o.data_;  // a static name stays lent
      size_ = o.size_;
    }
  }
  StepName& operator=(StepName&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  StepName& operator=(const StepName& o) {
    if (this != &o) *this = StepName(o);
    return *this;
  }
  ~StepName() { release(); }

  std::string_view view() const noexcept { return {data_, size_}; }
  operator std::string_view() const noexcept { return view(); }  // NOLINT
  std::string to_string() const { return std::string(view()); }  // for messages (detail::fail)
  bool empty() const noexcept { return size_ == 0; }
  /// Whether the name is lent (of_static): its characters stay where they are for good, so
  /// its address alone tells it from another name (NameTable::intern_static).
  bool lent() const noexcept { return !heap_ && data_ != inline_; }

  friend bool operator==(const StepName& a, std::string_view b) noexcept { return a.view() == b; }

 private:
  static constexpr std::size_t kInline = 16;

  /// Takes `o`'s name, leaving `o` empty if it held a heap copy (which is now ours).
  void take(StepName& o) noexcept {
    data_ = o.data_;
    size_ = o.size_;
    heap_ = std::exchange(o.heap_, false);
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, kInline);  // all of it: a fixed size needs no call
      data_ = inline_;
    } else if (heap_) {
      o.data_ = "";
      o.size_ = 0;
    }
  }
  void release() noexcept {
    if (std::exchange(heap_, false)) delete[] data_;
    data_ = "";
    size_ = 0;
  }
  void assign(std::string_view name) {
    size_ = name.size();
    if (name.size() <= kInline) {
      if (!name.empty()) std::memcpy(inline_, name.data(), name.size());
      data_ = inline_;
    } else {
      char* heap = new char[name.size()];
      std::memcpy(heap, name.data(), name.size());
      data_ = heap;
      heap_ = true;
    }
  }

  const char* data_ = "";
  std::size_t size_ = 0;
  bool heap_ = false;  // data_ is ours, from new[]
  char inline_[kInline] = {};
};

}  // namespace ferry::detail
