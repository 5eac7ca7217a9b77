#pragma once
// SymTable: the expressions of a traced program. Leaves are the sizes of its input arrays and
// its SymInt arguments; inner nodes are SymOps. Nodes are hash-consed, so the same expression
// built twice is one node and "x == x" folds to a constant without a guard. Nodes only ever
// point at earlier nodes, so evaluating them in order evaluates every operand first.

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/core/shape.hpp"
#include "ferry/core/sym_int.hpp"

namespace ferry::detail {

class SymTable {
 public:
  enum class Kind : std::uint8_t { constant, input_dim, argument, op };

  struct Node {
    Kind kind = Kind::constant;
    SymOp op = SymOp::add;
    std::uint32_t a = 0;  // input_dim: the input; argument: its index; op: first operand
    std::uint32_t b = 0;  // input_dim: the dimension; op: second operand
    std::int64_t value = 0;  // constant: the value
  };

  SymTable() { nodes_.push_back({}); }  // node 0 stands for "a constant", never evaluated

  std::uint32_t constant(std::int64_t v) { return intern({Kind::constant, SymOp::add, 0, 0, v}); }
  std::uint32_t input_dim(std::size_t input, std::size_t dim) {
    return intern({Kind::input_dim, SymOp::add, static_cast<std::uint32_t>(input),
                   static_cast<std::uint32_t>(dim), 0});
  }
  std::uint32_t argument(std::size_t index) {
    return intern({Kind::argument, SymOp::add, static_cast<std::uint32_t>(index), 0, 0});
  }
  /// The node of `op(a, b)`, or 0 where the answer is the same for every value (x == x).
  std::uint32_t op(SymOp op, std::uint32_t a, std::uint32_t b) {
    if (a == b) {
      if (op == SymOp::eq || op == SymOp::le) return 0;
      if (op == SymOp::ne || op == SymOp::lt) return 0;
    }
    return intern({Kind::op, op, a, b, 0});
  }

  std::size_t size() const noexcept { return nodes_.size(); }
  const Node& node(std::uint32_t i) const noexcept { return nodes_[i]; }

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
        case Kind::op: out[i] = apply_sym_op(n.op, out[n.a], out[n.b]); break;
      }
    }
  }

  /// The expression as text: "in0.shape[1]", "arg1", "(in0.shape[0] - 2)".
  std::string describe(std::uint32_t i) const {
    const Node& n = nodes_[i];
    switch (n.kind) {
      case Kind::constant: return std::to_string(n.value);
      case Kind::input_dim: return "in" + std::to_string(n.a) + ".shape[" + std::to_string(n.b) + "]";
      case Kind::argument: return "arg" + std::to_string(n.a);
      case Kind::op: break;
    }
    const std::string a = describe(n.a);
    const std::string b = describe(n.b);
    switch (n.op) {
      case SymOp::min: return "min(" + a + ", " + b + ")";
      case SymOp::max: return "max(" + a + ", " + b + ")";
      default: return "(" + a + " " + std::string(symbol(n.op)) + " " + b + ")";
    }
  }

  /// The guard "node `i` has value `expected`" as text: a comparison reads as the comparison
  /// that held ("in0.shape[0] > 5", "arg1 != 1"), anything else as an equality.
  std::string describe_guard(std::uint32_t i, std::int64_t expected) const {
    const Node& n = nodes_[i];
    if (n.kind == Kind::op && is_comparison(n.op) && (expected == 0 || expected == 1)) {
      const std::string a = describe(n.a);
      const std::string b = describe(n.b);
      // "5 < arg0" (how `arg0 > 5` is built) reads better with the symbol first.
      if (nodes_[n.a].kind == Kind::constant && (n.op == SymOp::eq || n.op == SymOp::ne)) {
        return b + ((n.op == SymOp::eq) == (expected == 1) ? " == " : " != ") + a;
      }
      if ((n.op == SymOp::lt || n.op == SymOp::le) && nodes_[n.a].kind == Kind::constant) {
        const bool lt = n.op == SymOp::lt;
        return b + (expected == 1 ? (lt ? " > " : " >= ") : (lt ? " <= " : " < ")) + a;
      }
      if (expected == 1) return a + " " + std::string(symbol(n.op)) + " " + b;
      switch (n.op) {
        case SymOp::eq: return a + " != " + b;
        case SymOp::ne: return a + " == " + b;
        case SymOp::lt: return a + " >= " + b;
        case SymOp::le: return a + " > " + b;
        default: break;
      }
    }
    return describe(i) + " == " + std::to_string(expected);
  }

 private:
  static bool is_comparison(SymOp op) noexcept {
    return op == SymOp::eq || op == SymOp::ne || op == SymOp::lt || op == SymOp::le;
  }
  static std::string_view symbol(SymOp op) noexcept {
    switch (op) {
      case SymOp::add: return "+";
      case SymOp::sub: return "-";
      case SymOp::mul: return "*";
      case SymOp::div: return "/";
      case SymOp::mod: return "%";
      case SymOp::eq: return "==";
      case SymOp::ne: return "!=";
      case SymOp::lt: return "<";
      case SymOp::le: return "<=";
      default: return "?";
    }
  }

  std::uint32_t intern(const Node& n) {
    const auto key = std::make_tuple(n.kind, n.op, n.a, n.b, n.value);
    const auto [it, fresh] = index_.try_emplace(key, static_cast<std::uint32_t>(nodes_.size()));
    if (fresh) nodes_.push_back(n);
    return it->second;
  }

  std::vector<Node> nodes_;
  std::map<std::tuple<Kind, SymOp, std::uint32_t, std::uint32_t, std::int64_t>, std::uint32_t> index_;
};

}  // namespace ferry::detail
