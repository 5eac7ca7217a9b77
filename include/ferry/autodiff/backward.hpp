#pragma once
// The backward pass: the nodes a tape recorded, walked from last to first, each node's rule
// turning its output's cotangent into its inputs', summed where an array feeds several ops.
// Every rule submits ops and returns at once, so the whole pass is a graph like any other: it
// runs while the host goes on, and only an export of a gradient waits.

#include <cstddef>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry::detail {

/// a + b for two cotangents of one array (of a floating element type).
inline Handle add_cotangents(Handle a, Handle b) {
  auto sum = [&]<class T>(Tag<T>) {
    return handle_of(ArrayAccess::wrap<T>(std::move(a)) + ArrayAccess::wrap<T>(std::move(b)));
  };
  switch (a.get()->dtype()) {
    case DType::float32: return sum(Tag<float>{});
    case DType::float64: return sum(Tag<double>{});
    case DType::bfloat16: return sum(Tag<bfloat16>{});
    default: break;
  }
  fail<NotDifferentiable>("grad", "a cotangent of element type ", name_of(a.get()->dtype()));
}

/// The cotangents of `wrt` given cotangent `seed` for `output` (same order; an empty handle
/// where `output` does not depend on one). Releases each node's forward values as soon as its
/// rule has used them. Throws NotDifferentiable naming the op when a cotangent reaches an op
/// without a rule, and what a rule throws.
inline std::vector<Handle> backward(Tape& tape, Step& output, Handle seed,
                                    std::span<Step* const> wrt) {
  std::unordered_map<const Step*, Handle> cotangents;
  cotangents.emplace(&output, std::move(seed));
  const std::unordered_set<const Step*> wanted(wrt.begin(), wrt.end());
  std::vector<Step*> inputs;
  std::vector<Handle> grads;
  std::vector<TapeNode>& nodes = tape.nodes();
  for (auto node = nodes.rbegin(); node != nodes.rend(); ++node) {
    Step& out = *node->output.get();
    const auto found = cotangents.find(&out);
    if (found == cotangents.end()) continue;
    Handle g = found->second;
    if (!wanted.contains(&out)) cotangents.erase(found);
    if (!node->backward) {
      fail<NotDifferentiable>(out.info().name, "has no gradient, and the differentiated value "
                                               "depends on it (a custom step takes a backward "
                                               "rule as its last argument)");
    }
    inputs.clear();
    for (const Handle& in : node->inputs) inputs.push_back(in.get());
    grads.assign(inputs.size(), Handle());
    GradCall call{inputs, out, g, grads};
    node->backward(call);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!grads[i]) continue;
      const auto [at, fresh] = cotangents.try_emplace(inputs[i], grads[i]);
      if (!fresh) at->second = add_cotangents(std::move(at->second), std::move(grads[i]));
    }
    *node = TapeNode{};
  }
  std::vector<Handle> result;
  result.reserve(wrt.size());
  for (Step* v : wrt) {
    const auto found = cotangents.find(v);
    result.push_back(found != cotangents.end() ? found->second : Handle());
  }
  return result;
}

}  // namespace ferry::detail
