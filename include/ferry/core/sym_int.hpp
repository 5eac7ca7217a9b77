#pragma once
// SymInt: a size or scalar that may be symbolic while a program is traced. Outside a trace it is
// a plain integer: every operation first checks that neither operand carries a symbol, and the
// symbolic path is out of line. Inside a trace (see program/trace.hpp) a symbolic SymInt keeps
// both the value of the call being traced and the expression that computes it from the
// program's inputs, and every place the value turns into a C++ fact records a guard.

#include <concepts>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>

#include "ferry/core/error.hpp"

namespace ferry {

class SymInt;
class SymBool;

namespace detail {

/// The operations a symbolic expression is built from. Comparisons give 0 or 1.
enum class SymOp : std::uint8_t { add, sub, mul, div, mod, min, max, eq, ne, lt, le };

/// The seam between the vocabulary and the program layer: the trace recording on this thread
/// builds expression nodes and records guards. Node 0 means "a constant".
class SymContext {
 public:
  /// The node of `op(a, b)`; either operand may be a constant (node 0, its value given).
  virtual std::uint32_t combine(SymOp op, std::uint32_t a, std::int64_t a_value, std::uint32_t b,
                                std::int64_t b_value) = 0;
  /// Records that the program relies on `node` having the value `expected`.
  virtual void guard(std::uint32_t node, std::int64_t expected) = 0;
  /// Identifies the trace, so that a symbol kept after its trace ended reads as a constant.
  std::uint32_t id() const noexcept { return id_; }

 protected:
  explicit SymContext(std::uint32_t id) noexcept : id_(id) {}
  ~SymContext() = default;

 private:
  std::uint32_t id_;
};

/// The trace recording on this thread, or null (almost always).
inline thread_local SymContext* t_sym_context = nullptr;

/// The context a symbol of trace `trace` and node `node` belongs to, when that trace is the one
/// recording now; null when the symbol is a constant for this thread.
inline SymContext* live_context(std::uint32_t trace, std::uint32_t node) noexcept {
  SymContext* c = t_sym_context;
  return node != 0 && c != nullptr && c->id() == trace ? c : nullptr;
}

inline std::int64_t wrap_add(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrap_sub(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
inline std::int64_t wrap_mul(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}

/// The value of `op(a, b)` on plain integers: what both the traced call and every replay
/// compute. Division and remainder truncate toward zero, like C++; the caller has excluded a
/// zero divisor and the one quotient that overflows.
inline std::int64_t apply_sym_op(SymOp op, std::int64_t a, std::int64_t b) noexcept {
  switch (op) {
    case SymOp::add: return wrap_add(a, b);
    case SymOp::sub: return wrap_sub(a, b);
    case SymOp::mul: return wrap_mul(a, b);
    case SymOp::div:
      return b == 0 || (b == -1 && a == std::numeric_limits<std::int64_t>::min()) ? 0 : a / b;
    case SymOp::mod: return b == 0 || b == -1 ? 0 : a % b;
    case SymOp::min: return a < b ? a : b;
    case SymOp::max: return a < b ? b : a;
    case SymOp::eq: return a == b;
    case SymOp::ne: return a != b;
    case SymOp::lt: return a < b;
    case SymOp::le: return a <= b;
  }
  return 0;
}

struct SymAccess;

}  // namespace detail

/// The result of comparing SymInts (or SymFloats, core/sym_float.hpp). Converting it to bool is
/// a fact the program relies on: in a trace, that records a guard (the comparison must come out
/// the same for a replay).
class SymBool {
 public:
  constexpr SymBool(bool value) noexcept : value_(value) {}  // NOLINT: implicit, like bool

  /// Inside a trace, records the guard "this comparison is `value`".
  operator bool() const {  // NOLINT: implicit, so `if (n > 5)` reads naturally
    if (node_ != 0) [[unlikely]] {
      if (detail::SymContext* c = detail::live_context(trace_, node_)) c->guard(node_, value_);
    }
    return value_;
  }

 private:
  friend class SymInt;
  friend struct detail::SymAccess;
  bool value_ = false;
  std::uint32_t trace_ = 0;
  std::uint32_t node_ = 0;
};

/// An integer that may stand for a size or scalar of a traced program. Arithmetic (+ - * / %,
/// min, max) builds expressions and comparisons give SymBool; `static_cast` to an integral type
/// gives the value and, in a trace, guards that it stays equal. Outside a trace it is a plain
/// int64: + - * wrap on overflow (two's complement, eagerly and in a replay alike), and a
/// comparison reads the wrapped value.
class SymInt {
 public:
  constexpr SymInt() noexcept = default;
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  constexpr SymInt(I value) : value_(checked(value)) {}  // NOLINT: implicit, like an integer

  /// The value as `I`; in a trace, guards that it stays this value. Throws InvalidArgument when
  /// it does not fit in `I`.
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  explicit operator I() const {
    if (value_ < static_cast<std::int64_t>(std::numeric_limits<I>::min()) ||
        (value_ > 0 && static_cast<std::uint64_t>(value_) > std::numeric_limits<I>::max())) {
      detail::fail<InvalidArgument>("SymInt", "value ", value_, " does not fit the integer type");
    }
    if (node_ != 0) [[unlikely]] {
      if (detail::SymContext* c = detail::live_context(trace_, node_)) c->guard(node_, value_);
    }
    return static_cast<I>(value_);
  }

  /// True while this value is symbolic in the trace recording on this thread.
  bool symbolic() const noexcept { return detail::live_context(trace_, node_) != nullptr; }

  friend SymInt operator+(const SymInt& a, const SymInt& b) {
    return make(detail::SymOp::add, a, b);
  }
  friend SymInt operator-(const SymInt& a, const SymInt& b) {
    return make(detail::SymOp::sub, a, b);
  }
  friend SymInt operator*(const SymInt& a, const SymInt& b) {
    return make(detail::SymOp::mul, a, b);
  }
  /// Truncates toward zero. Throws InvalidArgument for a zero divisor; in a trace, a symbolic
  /// divisor is guarded to stay non-zero.
  friend SymInt operator/(const SymInt& a, const SymInt& b) {
    return divide(detail::SymOp::div, a, b);
  }
  friend SymInt operator%(const SymInt& a, const SymInt& b) {
    return divide(detail::SymOp::mod, a, b);
  }
  friend SymInt operator-(const SymInt& a) { return SymInt(0) - a; }
  friend SymInt min(const SymInt& a, const SymInt& b) { return make(detail::SymOp::min, a, b); }
  friend SymInt max(const SymInt& a, const SymInt& b) { return make(detail::SymOp::max, a, b); }
  SymInt& operator+=(const SymInt& b) { return *this = *this + b; }
  SymInt& operator-=(const SymInt& b) { return *this = *this - b; }
  SymInt& operator*=(const SymInt& b) { return *this = *this * b; }

  friend SymBool operator==(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::eq, a, b);
  }
  friend SymBool operator!=(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::ne, a, b);
  }
  friend SymBool operator<(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::lt, a, b);
  }
  friend SymBool operator<=(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::le, a, b);
  }
  friend SymBool operator>(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::lt, b, a);
  }
  friend SymBool operator>=(const SymInt& a, const SymInt& b) {
    return compare(detail::SymOp::le, b, a);
  }

  /// The value of this call as text (printing is not a guard).
  std::string to_string() const { return std::to_string(value_); }
  /// Prints the value of this call (printing is not a guard).
  friend std::ostream& operator<<(std::ostream& os, const SymInt& s) { return os << s.value_; }

 private:
  friend struct detail::SymAccess;

  template <std::integral I>
  static constexpr std::int64_t checked(I v) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) {
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        detail::fail<InvalidArgument>("SymInt", "value ", v, " does not fit in int64");
      }
    }
    return static_cast<std::int64_t>(v);
  }

  // The symbolic half of an operation: only reached when an operand carries a symbol.
  static void link(SymInt& out, detail::SymOp op, const SymInt& a, const SymInt& b) {
    detail::SymContext* c = detail::live_context(a.trace_, a.node_);
    if (c == nullptr) c = detail::live_context(b.trace_, b.node_);
    if (c == nullptr) return;
    const std::uint32_t na = detail::live_context(a.trace_, a.node_) ? a.node_ : 0;
    const std::uint32_t nb = detail::live_context(b.trace_, b.node_) ? b.node_ : 0;
    out.trace_ = c->id();
    out.node_ = c->combine(op, na, a.value_, nb, b.value_);
  }

  static SymInt make(detail::SymOp op, const SymInt& a, const SymInt& b) {
    SymInt out(detail::apply_sym_op(op, a.value_, b.value_));
    if ((a.node_ | b.node_) != 0) [[unlikely]] link(out, op, a, b);
    return out;
  }

  static SymInt divide(detail::SymOp op, const SymInt& a, const SymInt& b) {
    if (b.value_ == 0) {
      detail::fail<InvalidArgument>("SymInt", op == detail::SymOp::div ? "division" : "remainder",
                                    " by zero (", a.value_, " by 0)");
    }
    if (b.node_ != 0) [[unlikely]] static_cast<void>(static_cast<bool>(b != 0));
    return make(op, a, b);
  }

  static SymBool compare(detail::SymOp op, const SymInt& a, const SymInt& b) {
    const SymInt r = make(op, a, b);
    SymBool out(r.value_ != 0);
    out.trace_ = r.trace_;
    out.node_ = r.node_;
    return out;
  }

  std::int64_t value_ = 0;
  std::uint32_t trace_ = 0;
  std::uint32_t node_ = 0;
};

namespace detail {

/// What the library itself reads of a SymInt: the value of this call without a guard (a kernel
/// runs for any size), and the symbol behind it.
struct SymAccess {
  static std::int64_t value(const SymInt& s) noexcept { return s.value_; }
  /// The node of `s` in the trace recording now, or 0 when it is a constant there.
  static std::uint32_t node(const SymInt& s) noexcept {
    return live_context(s.trace_, s.node_) != nullptr ? s.node_ : 0;
  }
  static std::uint32_t node(const SymBool& s) noexcept {
    return live_context(s.trace_, s.node_) != nullptr ? s.node_ : 0;
  }
  static SymInt make(std::int64_t value, std::uint32_t trace, std::uint32_t node) noexcept {
    SymInt s;
    s.value_ = value;
    s.trace_ = trace;
    s.node_ = node;
    return s;
  }
  /// The comparison of node `node` of trace `trace`, `value` in this call: how SymFloat's
  /// comparisons (core/sym_float.hpp) give the SymBool SymInt's give.
  static SymBool make_bool(bool value, std::uint32_t trace, std::uint32_t node) noexcept {
    SymBool b(value);
    b.trace_ = trace;
    b.node_ = node;
    return b;
  }
};

}  // namespace detail
}  // namespace ferry
