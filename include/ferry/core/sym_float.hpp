#pragma once
// SymFloat: a floating scalar that may be an input of a traced program (a learning rate, a
// scale), SymInt's floating sibling. Outside a trace it is a plain double: every operation first
// checks that neither operand carries a symbol, and the symbolic path is out of line. Inside a
// trace (see program/trace.hpp) a symbolic SymFloat keeps both the value of the call being
// traced and the expression that computes it from the program's inputs. Its expressions live in
// the table SymInt's do, so a comparison of SymFloats is a SymBool and guards as one, and every
// place the value turns into a C++ fact records a guard.

#include <bit>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>

#include "ferry/core/error.hpp"
#include "ferry/core/sym_int.hpp"

namespace ferry {

class SymFloat;

namespace detail {

/// What the trace recording on this thread implements beside SymContext to build floating
/// expressions. Node 0 means "a constant", as there.
class SymFloatContext {
 public:
  /// The node of `op(a, b)` on doubles (a comparison gives the integer 0 or 1); either operand
  /// may be a constant (node 0, its value given).
  virtual std::uint32_t combine_float(SymOp op, std::uint32_t a, double a_value, std::uint32_t b,
                                      double b_value) = 0;
  /// The node of the integer expression `node` (a SymInt's) as a double.
  virtual std::uint32_t int_to_float(std::uint32_t node) = 0;

 protected:
  SymFloatContext() = default;
  ~SymFloatContext() = default;
};

/// The floating side of the trace recording on this thread (set with t_sym_context, by the
/// same scope), or null.
inline thread_local SymFloatContext* t_sym_float_context = nullptr;

/// The floating context a symbol of trace `trace` and node `node` belongs to, when that trace is
/// the one recording now; null when the symbol is a constant for this thread.
inline SymFloatContext* live_float_context(std::uint32_t trace, std::uint32_t node) noexcept {
  return live_context(trace, node) != nullptr ? t_sym_float_context : nullptr;
}

/// A double as the 64-bit word a trace's table, guards and op parameters hold (its bits, so
/// that "the same value" is exact, -0.0 and NaN included), and back.
inline std::int64_t float_word(double v) noexcept { return std::bit_cast<std::int64_t>(v); }
inline double word_float(std::int64_t w) noexcept { return std::bit_cast<double>(w); }

/// The value of `op(a, b)` on doubles: what both the traced call and every replay compute.
/// Arithmetic is IEEE (a division by zero gives an infinity or NaN, as for double); min and max
/// are std::min's and std::max's (the first operand when the comparison fails, so NaN may
/// pass); comparisons give 1 or 0. There is no remainder.
inline double apply_float_op(SymOp op, double a, double b) noexcept {
  switch (op) {
    case SymOp::add:
      return a + b;
    case SymOp::sub:
      return a - b;
    case SymOp::mul:
      return a * b;
    case SymOp::div:
      return a / b;
    case SymOp::min:
      return b < a ? b : a;
    case SymOp::max:
      return a < b ? b : a;
    case SymOp::eq:
      return a == b ? 1 : 0;
    case SymOp::ne:
      return a != b ? 1 : 0;
    case SymOp::lt:
      return a < b ? 1 : 0;
    case SymOp::le:
      return a <= b ? 1 : 0;
    case SymOp::mod:
      break;
  }
  return 0;
}

/// The shortest text that reads back as `v` ("0.1", "1e-05", "inf").
inline std::string float_text(double v) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, v);
  return std::string(text, r.ptr);
}

/// An integer type a SymFloat converts from and to (every one but bool).
template <class I>
concept NonBoolIntegral = std::integral<I> && !std::same_as<I, bool>;

struct SymFloatAccess;

}  // namespace detail

/// A double that may stand for a scalar input of a traced program. Arithmetic (+ - * /, min,
/// max) with SymFloats, plain numbers and SymInts builds expressions, and comparisons give
/// SymBool; `static_cast` to a floating or integral type gives the value and, in a trace, guards
/// that it stays equal. Outside a trace it is a plain double, with double's arithmetic.
class SymFloat {
 public:
  constexpr SymFloat() noexcept = default;
  template <std::floating_point F>
  constexpr SymFloat(F value) noexcept  // NOLINT: implicit, like a double
      : value_(static_cast<double>(value)) {}
  template <detail::NonBoolIntegral I>
  constexpr SymFloat(I value) noexcept  // NOLINT: implicit, as an integer converts to double
      : value_(static_cast<double>(value)) {}
  /// `n` as a double (rounded to the nearest double past 2^53); symbolic when `n` is.
  SymFloat(const SymInt& n)  // NOLINT: implicit, as an integer converts to double
      : value_(static_cast<double>(detail::SymAccess::value(n))) {
    if (const std::uint32_t node = detail::SymAccess::node(n); node != 0) [[unlikely]] {
      from_int(node);
    }
  }

  /// The value as `F`, rounded as static_cast rounds a double; in a trace, guards that it
  /// stays this value. Never throws.
  template <std::floating_point F>
  explicit operator F() const {
    guard();
    return static_cast<F>(value_);
  }

  /// The value truncated toward zero, as static_cast truncates a double; in a trace, guards that
  /// the SymFloat stays this value. Throws InvalidArgument naming SymFloat when the value is NaN
  /// or its integer part does not fit in `I` (where static_cast would be undefined).
  template <detail::NonBoolIntegral I>
  explicit operator I() const {
    // Both limits are exact as doubles: the minimum is 0 or a power of two, and the first value
    // past the maximum is one.
    constexpr auto lo = static_cast<double>(std::numeric_limits<I>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<I>::max() / 2 + 1) * 2.0;
    if (!(std::trunc(value_) >= lo && value_ < hi)) {
      detail::fail<InvalidArgument>("SymFloat", "value ", value_, " does not fit the integer type");
    }
    guard();
    return static_cast<I>(value_);
  }

  /// True while this value is symbolic in the trace recording on this thread.
  bool symbolic() const noexcept { return detail::live_context(trace_, node_) != nullptr; }

  friend SymFloat operator+(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::add, a, b);
  }
  friend SymFloat operator-(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::sub, a, b);
  }
  friend SymFloat operator*(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::mul, a, b);
  }
  /// IEEE division: by zero it gives an infinity or NaN, as double does (no error, no guard).
  friend SymFloat operator/(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::div, a, b);
  }
  /// -a, exactly (the sign of a zero flips too).
  friend SymFloat operator-(const SymFloat& a) {
    return make(detail::SymOp::mul, a, SymFloat(-1.0));
  }
  friend SymFloat min(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::min, a, b);
  }
  friend SymFloat max(const SymFloat& a, const SymFloat& b) {
    return make(detail::SymOp::max, a, b);
  }
  SymFloat& operator+=(const SymFloat& b) { return *this = *this + b; }
  SymFloat& operator-=(const SymFloat& b) { return *this = *this - b; }
  SymFloat& operator*=(const SymFloat& b) { return *this = *this * b; }
  SymFloat& operator/=(const SymFloat& b) { return *this = *this / b; }

  /// Comparisons as double compares (false with NaN, but for !=); converting the result to bool
  /// is a guard in a trace.
  friend SymBool operator==(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::eq, a, b);
  }
  friend SymBool operator!=(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::ne, a, b);
  }
  friend SymBool operator<(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::lt, a, b);
  }
  friend SymBool operator<=(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::le, a, b);
  }
  friend SymBool operator>(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::lt, b, a);
  }
  friend SymBool operator>=(const SymFloat& a, const SymFloat& b) {
    return compare(detail::SymOp::le, b, a);
  }

  /// The value of this call as the shortest text that reads back as it (printing is not a
  /// guard).
  std::string to_string() const { return detail::float_text(value_); }
  /// Prints to_string() (printing is not a guard).
  friend std::ostream& operator<<(std::ostream& os, const SymFloat& s) {
    return os << s.to_string();
  }

 private:
  friend struct detail::SymFloatAccess;

  // The symbolic halves: only reached when an operand carries a symbol.
  void from_int(std::uint32_t int_node) {
    if (detail::SymFloatContext* f = detail::t_sym_float_context) {
      trace_ = detail::t_sym_context->id();
      node_ = f->int_to_float(int_node);
    }
  }

  void link(detail::SymOp op, const SymFloat& a, const SymFloat& b) {
    const bool live_a = detail::live_context(a.trace_, a.node_) != nullptr;
    const bool live_b = detail::live_context(b.trace_, b.node_) != nullptr;
    detail::SymFloatContext* f = detail::t_sym_float_context;
    if ((!live_a && !live_b) || f == nullptr) return;
    trace_ = detail::t_sym_context->id();
    node_ = f->combine_float(op, live_a ? a.node_ : 0, a.value_, live_b ? b.node_ : 0, b.value_);
  }

  void guard() const {
    if (node_ != 0) [[unlikely]] {
      if (detail::SymContext* c = detail::live_context(trace_, node_)) {
        c->guard(node_, detail::float_word(value_));
      }
    }
  }

  static SymFloat make(detail::SymOp op, const SymFloat& a, const SymFloat& b) {
    SymFloat out(detail::apply_float_op(op, a.value_, b.value_));
    if ((a.node_ | b.node_) != 0) [[unlikely]]
      out.link(op, a, b);
    return out;
  }

  static SymBool compare(detail::SymOp op, const SymFloat& a, const SymFloat& b) {
    const SymFloat r = make(op, a, b);
    return detail::SymAccess::make_bool(r.value_ != 0, r.trace_, r.node_);
  }

  double value_ = 0;
  std::uint32_t trace_ = 0;
  std::uint32_t node_ = 0;
};

namespace detail {

/// What the library itself reads of a SymFloat: the value of this call without a guard (a
/// kernel runs for any value), and the symbol behind it.
struct SymFloatAccess {
  static double value(const SymFloat& s) noexcept { return s.value_; }
  /// The node of `s` in the trace recording now, or 0 when it is a constant there.
  static std::uint32_t node(const SymFloat& s) noexcept {
    return live_context(s.trace_, s.node_) != nullptr ? s.node_ : 0;
  }
  static SymFloat make(double value, std::uint32_t trace, std::uint32_t node) noexcept {
    SymFloat s(value);
    s.trace_ = trace;
    s.node_ = node;
    return s;
  }
  /// `s` as a parameter of a recorded op (OpCall::params, runtime/recorder.hpp): parameters are
  /// 64-bit words a replay evaluates from the trace's table, and a floating one is its double's
  /// bits (float_word); the op reads it back with word_float.
  static SymInt word(const SymFloat& s) noexcept {
    const std::uint32_t n = node(s);
    return SymAccess::make(float_word(s.value_), n != 0 ? s.trace_ : 0, n);
  }
};

}  // namespace detail
}  // namespace ferry
