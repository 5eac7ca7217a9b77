#pragma once
// SymText: how a program's expressions and guards read in explain(), simplified as a person
// would write them: `in0.shape[0] % 2 == 0`, not `(((1 * in0.shape[0]) * 8) % 16) == 0`. An
// integer expression is first put in the form constant + sum of coefficient * term (so products
// by constants, added zeros and repeated terms fold), and a divisibility guard drops the factor
// its modulus shares with the coefficient. Only the text simplifies: a guard still evaluates the
// nodes the trace recorded (program/sym_table.hpp). The folding uses the table's wrapping
// arithmetic, so the text equals the expression wherever no intermediate value overflows.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/program/sym_table.hpp"

namespace ferry::detail {

class SymText {
 public:
  explicit SymText(const SymTable& table)
      : table_(table), texts_(table.size()), linears_(table.size()) {}

  /// Node `i` as text: "in0.shape[1]", "arg1", "in0.shape[0] * 4 - 2", "min(arg0, 8)".
  std::string expression(std::uint32_t i) { return text(i).s; }

  /// The guard "node `i` has value `expected`" as text: a comparison reads as the comparison
  /// that held ("in0.shape[0] > 5", "arg1 != 1", "arg0 > 0.01"), a divisibility as its
  /// simplest modulus ("in0.shape[0] % 2 == 0"), anything else as an equality ("arg0 == 0.1"
  /// for a floating node).
  std::string guard(std::uint32_t i, std::int64_t expected) {
    using Kind = SymTable::Kind;
    const SymTable::Node& n = table_.node(i);
    if (n.kind == Kind::op && SymTable::is_comparison(n.op) && (expected == 0 || expected == 1)) {
      const bool holds = expected == 1;
      // A comparison that failed reads as its complement; for doubles that leaves NaN aside
      // (the guard itself, "not a < b", holds for NaN too).
      if (n.op == SymOp::eq || n.op == SymOp::ne) {
        const bool equal = (n.op == SymOp::eq) == holds;
        std::optional<std::string> d = divisibility(n.a, n.b);
        if (!d) d = divisibility(n.b, n.a);
        if (d) return *d + (equal ? " == 0" : " != 0");
      }
      const std::string a = side(n.a);
      const std::string b = side(n.b);
      // "5 < arg0" (how `arg0 > 5` is built) reads better with the symbol first.
      if (table_.node(n.a).kind == Kind::constant && (n.op == SymOp::eq || n.op == SymOp::ne)) {
        return b + ((n.op == SymOp::eq) == holds ? " == " : " != ") + a;
      }
      if ((n.op == SymOp::lt || n.op == SymOp::le) && table_.node(n.a).kind == Kind::constant) {
        const bool lt = n.op == SymOp::lt;
        return b + (holds ? (lt ? " > " : " >= ") : (lt ? " <= " : " < ")) + a;
      }
      if (holds) return a + " " + std::string(symbol(n.op)) + " " + b;
      switch (n.op) {
        case SymOp::eq:
          return a + " != " + b;
        case SymOp::ne:
          return a + " == " + b;
        case SymOp::lt:
          return a + " >= " + b;
        case SymOp::le:
          return a + " > " + b;
        default:
          break;
      }
    }
    if (table_.holds_float(i)) return text(i).s + " == " + float_text(word_float(expected));
    if (expected == 0 && n.kind == Kind::op && !n.floating && n.op == SymOp::mod) {
      if (const std::optional<std::string> d = modulus_text(i)) return *d + " == 0";
    }
    return text(i).s + " == " + std::to_string(expected);
  }

 private:
  /// How tightly a text binds: it needs parentheses as an operand of anything tighter.
  enum Level : int { kComparison = 0, kSum = 1, kProduct = 2, kAtom = 3 };

  struct Text {
    std::string s;
    int level = kAtom;
  };

  /// constant + the sum of coefficient * term, terms in the order they first appear.
  struct Linear {
    std::int64_t constant = 0;
    std::vector<std::pair<Text, std::int64_t>> terms;  // never a zero coefficient
  };

  static std::string_view symbol(SymOp op) noexcept {
    switch (op) {
      case SymOp::add:
        return "+";
      case SymOp::sub:
        return "-";
      case SymOp::mul:
        return "*";
      case SymOp::div:
        return "/";
      case SymOp::mod:
        return "%";
      case SymOp::eq:
        return "==";
      case SymOp::ne:
        return "!=";
      case SymOp::lt:
        return "<";
      case SymOp::le:
        return "<=";
      default:
        return "?";
    }
  }

  /// `t` as an operand that must bind at least as tightly as `level`.
  static std::string operand(const Text& t, int level) {
    return t.level < level ? "(" + t.s + ")" : t.s;
  }

  /// A side of a comparison: anything but another comparison stands bare.
  std::string side(std::uint32_t i) { return operand(text(i), kSum); }

  /// |v| as text (the magnitude of the most negative int64 included).
  static std::string magnitude(std::int64_t v) {
    const auto u = static_cast<std::uint64_t>(v);
    return std::to_string(v < 0 ? std::uint64_t{0} - u : u);
  }

  const Text& text(std::uint32_t i) {
    if (!texts_[i]) texts_[i] = make_text(i);
    return *texts_[i];
  }

  Text make_text(std::uint32_t i) {
    using Kind = SymTable::Kind;
    const SymTable::Node& n = table_.node(i);
    switch (n.kind) {
      case Kind::constant:
        return n.floating ? Text{float_text(word_float(n.value)), kAtom}
                          : Text{std::to_string(n.value), kAtom};
      case Kind::input_dim:
        return {"in" + std::to_string(n.a) + ".shape[" + std::to_string(n.b) + "]", kAtom};
      case Kind::argument:
        return {"arg" + std::to_string(n.a), kAtom};
      case Kind::to_float:
        return text(n.a);  // the conversion is implicit, as in C++
      case Kind::op:
        break;
    }
    if (!n.floating && !SymTable::is_comparison(n.op)) return render(linear(i));
    return op_text(i);
  }

  /// An op that is no sum of terms: a division, a remainder, min, max, a comparison, a product
  /// of two symbols, or any floating op (written as built: floating arithmetic does not
  /// reassociate).
  Text op_text(std::uint32_t i) {
    const SymTable::Node& n = table_.node(i);
    const Text a = text(n.a);
    const Text b = text(n.b);
    switch (n.op) {
      case SymOp::min:
        return {"min(" + a.s + ", " + b.s + ")", kAtom};
      case SymOp::max:
        return {"max(" + a.s + ", " + b.s + ")", kAtom};
      case SymOp::add:
      case SymOp::sub:
        return {operand(a, kSum) + " " + std::string(symbol(n.op)) + " " + operand(b, kSum + 1),
                kSum};
      case SymOp::mul:
        // SymFloat's unary minus is a product by -1.
        if (n.floating && table_.node(n.b).kind == SymTable::Kind::constant &&
            table_.node(n.b).value == float_word(-1.0)) {
          return {"-" + operand(a, kProduct), kProduct};
        }
        [[fallthrough]];
      case SymOp::div:
      case SymOp::mod:
        return {
            operand(a, kProduct) + " " + std::string(symbol(n.op)) + " " + operand(b, kProduct + 1),
            kProduct};
      case SymOp::eq:
      case SymOp::ne:
      case SymOp::lt:
      case SymOp::le:
        return {operand(a, kSum) + " " + std::string(symbol(n.op)) + " " + operand(b, kSum),
                kComparison};
    }
    return {"?", kAtom};
  }

  const Linear& linear(std::uint32_t i) {
    if (!linears_[i]) linears_[i] = make_linear(i);
    return *linears_[i];
  }

  /// Integer node `i` as a Linear: constants, sums, differences and products by a constant
  /// fold; anything else is one term.
  Linear make_linear(std::uint32_t i) {
    using Kind = SymTable::Kind;
    const SymTable::Node& n = table_.node(i);
    if (n.kind == Kind::constant) return {n.value, {}};
    if (n.kind == Kind::op && !n.floating) {
      if (n.op == SymOp::add || n.op == SymOp::sub) {
        return sum(linear(n.a), linear(n.b), n.op == SymOp::add ? 1 : -1);
      }
      if (n.op == SymOp::mul) {
        const Linear& a = linear(n.a);
        const Linear& b = linear(n.b);
        if (a.terms.empty()) return scale(b, a.constant);
        if (b.terms.empty()) return scale(a, b.constant);
      }
    }
    Linear one;
    one.terms.push_back({n.kind == Kind::op ? op_text(i) : make_text(i), 1});
    return one;
  }

  static Linear sum(const Linear& a, const Linear& b, std::int64_t sign) {
    Linear out = a;
    out.constant = wrap_add(a.constant, wrap_mul(sign, b.constant));
    for (const auto& [term, c] : b.terms) {
      const std::int64_t add = wrap_mul(sign, c);
      bool found = false;
      for (auto& [t, oc] : out.terms) {
        if (t.s == term.s) {
          oc = wrap_add(oc, add);
          found = true;
          break;
        }
      }
      if (!found) out.terms.push_back({term, add});
    }
    std::erase_if(out.terms, [](const auto& t) { return t.second == 0; });
    return out;
  }

  static Linear scale(const Linear& a, std::int64_t k) {
    Linear out;
    if (k == 0) return out;
    out.constant = wrap_mul(a.constant, k);
    for (const auto& [term, c] : a.terms) out.terms.push_back({term, wrap_mul(c, k)});
    return out;
  }

  static Text render(const Linear& l) {
    if (l.terms.empty()) return {std::to_string(l.constant), kAtom};
    if (l.terms.size() == 1 && l.constant == 0 && l.terms[0].second == 1) return l.terms[0].first;
    std::string s;
    int level = kProduct;
    for (std::size_t k = 0; k < l.terms.size(); ++k) {
      const auto& [term, c] = l.terms[k];
      const bool one = c == 1 || c == -1;
      if (k > 0) {
        s += c < 0 ? " - " : " + ";
        level = kSum;
      } else if (c < 0) {
        s += "-";
      }
      s += one ? operand(term, kProduct) : operand(term, kProduct) + " * " + magnitude(c);
    }
    if (l.constant != 0) {
      s += (l.constant < 0 ? " - " : " + ") + magnitude(l.constant);
      level = kSum;
    }
    return {s, level};
  }

  /// "t % m" for the remainder node `mod` when `zero` is the constant 0 and the remainder is of
  /// a single term times a coefficient: (c * t + k) % m == 0, with k a multiple of m, holds
  /// exactly when t % (m / gcd(c, m)) == 0. Nothing where that modulus would be 1 (the
  /// guard always holds: it reads best as written).
  std::optional<std::string> divisibility(std::uint32_t mod, std::uint32_t zero) {
    const SymTable::Node& z = table_.node(zero);
    if (z.kind != SymTable::Kind::constant || z.floating || z.value != 0) return std::nullopt;
    const SymTable::Node& n = table_.node(mod);
    if (n.kind != SymTable::Kind::op || n.floating || n.op != SymOp::mod) return std::nullopt;
    return modulus_text(mod);
  }

  std::optional<std::string> modulus_text(std::uint32_t mod) {
    const SymTable::Node& n = table_.node(mod);
    const SymTable::Node& m = table_.node(n.b);
    if (m.kind != SymTable::Kind::constant || m.floating || m.value == 0) return std::nullopt;
    const Linear& l = linear(n.a);
    if (l.terms.size() != 1) return std::nullopt;
    const auto abs = [](std::int64_t v) {
      const auto u = static_cast<std::uint64_t>(v);
      return v < 0 ? std::uint64_t{0} - u : u;
    };
    const std::uint64_t modulus = abs(m.value);
    if (abs(l.constant) % modulus != 0) return std::nullopt;
    const std::uint64_t reduced = modulus / std::gcd(abs(l.terms[0].second), modulus);
    if (reduced == 1) return std::nullopt;
    return operand(l.terms[0].first, kProduct) + " % " + std::to_string(reduced);
  }

  const SymTable& table_;
  std::vector<std::optional<Text>> texts_;
  std::vector<std::optional<Linear>> linears_;
};

}  // namespace ferry::detail
