#pragma once
// SymTable: the expressions of a traced program. Leaves are the sizes of its input arrays and
// its SymInt and SymFloat arguments; inner nodes are SymOps. Nodes are hash-consed, so the same
// expression built twice is one node and "x == x" folds to a constant without a guard. Nodes only
// ever point at earlier nodes, so evaluating them in order evaluates every operand first.
//
// Every node evaluates to a 64-bit word: an integer, or a double's bits for a floating node
// (core/sym_float.hpp's float_word), so that one vector holds a call's values and a guard
// compares words. How to print them is program/sym_text.hpp's.

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"

namespace ferry::detail {

class SymTable {
 public:
  /// to_float: the integer node `a` as a double.
  enum class Kind : std::uint8_t { constant, input_dim, argument, op, to_float };

  struct Node {
    Kind kind = Kind::constant;
    SymOp op = SymOp::add;
    std::uint32_t a = 0;  // input_dim: the input; argument: its index; op, to_float: first operand
    std::uint32_t b = 0;  // input_dim: the dimension; op: second operand
    std::int64_t value = 0;  // constant: the value (a double's bits when floating)
    /// constant, argument: the value is a double; op: the operands are doubles (the result is
    /// one too, but for a comparison's 0 or 1); to_float: always.
    bool floating = false;
  };

  SymTable() { nodes_.push_back({}); }  // node 0 stands for "a constant", never evaluated

  std::uint32_t constant(std::int64_t v) {
    return intern({Kind::constant, SymOp::add, 0, 0, v, false});
  }
  std::uint32_t float_constant(double v) {
    return intern({Kind::constant, SymOp::add, 0, 0, float_word(v), true});
  }
  std::uint32_t input_dim(std::size_t input, std::size_t dim) {
    return intern({Kind::input_dim, SymOp::add, static_cast<std::uint32_t>(input),
                   static_cast<std::uint32_t>(dim), 0, false});
  }
  /// Scalar argument `index`: an integer, or a double (its word the double's bits).
  std::uint32_t argument(std::size_t index, bool floating = false) {
    return intern({Kind::argument, SymOp::add, static_cast<std::uint32_t>(index), 0, 0, floating});
  }
  /// The node of `op(a, b)` on integers, or 0 where the answer is the same for every value
  /// (x == x).
  std::uint32_t op(SymOp op, std::uint32_t a, std::uint32_t b) {
    if (a == b) {
      if (op == SymOp::eq || op == SymOp::le) return 0;
      if (op == SymOp::ne || op == SymOp::lt) return 0;
    }
    return intern({Kind::op, op, a, b, 0, false});
  }
  /// The node of `op(a, b)` on doubles, or 0 for x < x (false for every value, NaN too: the
  /// other comparisons of x with itself depend on whether x is NaN).
  std::uint32_t float_op(SymOp op, std::uint32_t a, std::uint32_t b) {
    if (a == b && op == SymOp::lt) return 0;
    return intern({Kind::op, op, a, b, 0, true});
  }
  /// The node of integer node `a` as a double.
  std::uint32_t to_float(std::uint32_t a) {
    return intern({Kind::to_float, SymOp::add, a, 0, 0, true});
  }

  std::size_t size() const noexcept { return nodes_.size(); }
  const Node& node(std::uint32_t i) const noexcept { return nodes_[i]; }

  /// Whether node `i`'s word is a double's bits (else an integer, a comparison's included).
  bool holds_float(std::uint32_t i) const noexcept {
    const Node& n = nodes_[i];
    return n.floating && !(n.kind == Kind::op && is_comparison(n.op));
  }

  static bool is_comparison(SymOp op) noexcept {
    return op == SymOp::eq || op == SymOp::ne || op == SymOp::lt || op == SymOp::le;
  }

  /// Every node's value for inputs of `shapes` and arguments `args`, into `out`.
  void evaluate(std::span<const Shape* const> shapes, std::span<const std::int64_t> args,
                std::vector<std::int64_t>& out) const {
    out.resize(nodes_.size());
    for (std::size_t i = 1; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];
      switch (n.kind) {
        case Kind::constant: out[i] = n.value; break;
        case Kind::input_dim: out[i] = ShapeAccess::plain(*shapes[n.a]).dims()[n.b]; break;
        case Kind::argument: out[i] = args[n.a]; break;
        case Kind::op:
          out[i] = n.floating ? float_result(n.op, word_float(out[n.a]), word_float(out[n.b]))
                              : apply_sym_op(n.op, out[n.a], out[n.b]);
          break;
        case Kind::to_float: out[i] = float_word(static_cast<double>(out[n.a])); break;
      }
    }
  }

 private:
  /// The word of a floating op: a comparison's 0 or 1, else the double's bits.
  static std::int64_t float_result(SymOp op, double a, double b) noexcept {
    const double r = apply_float_op(op, a, b);
    return is_comparison(op) ? static_cast<std::int64_t>(r != 0) : float_word(r);
  }

  // Out of the class, so that a unit of the separate mode does not instantiate the map's
  // insertion (see FERRY_DECL).
  FERRY_DECL std::uint32_t intern(const Node& n);

  std::vector<Node> nodes_;
  std::map<std::tuple<Kind, SymOp, std::uint32_t, std::uint32_t, std::int64_t, bool>, std::uint32_t>
      index_;
};

#if FERRY_DEFINES_DECLS
FERRY_DECL std::uint32_t SymTable::intern(const Node& n) {
  const auto key = std::make_tuple(n.kind, n.op, n.a, n.b, n.value, n.floating);
  const auto [it, fresh] = index_.try_emplace(key, static_cast<std::uint32_t>(nodes_.size()));
  if (fresh) nodes_.push_back(n);
  return it->second;
}
#endif

}  // namespace ferry::detail
