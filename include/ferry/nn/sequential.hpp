#pragma once
// nn::Sequential: modules applied one after another, named "0", "1", ... as PyTorch names them,
// so parameter names ("0.weight", "2.bias") match a PyTorch model of the same layers.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/nn/module.hpp"

namespace ferry::nn {

/// Modules in order; calling it feeds each one's output to the next.
class Sequential : public Module {
 public:
  Sequential() = default;

  /// The given modules, moved in, in order: `Sequential(Linear(4, 8), ReLU(), Linear(8, 1))`.
  /// One Sequential given alone is moved, not nested (the move constructor wins): nest it with
  /// append(). Throws DeviceMismatch when the modules' parameters live on different devices.
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && ((std::derived_from<Ms, Module> && !std::is_lvalue_reference_v<Ms>) && ...))
  explicit Sequential(Ms&&... modules) {
    (append(std::move(modules)), ...);
  }

  std::string_view type_name() const override { return "Sequential"; }

  /// Adds a module at the end, moved in, and returns it. Throws DeviceMismatch when its
  /// parameters live on another device than those already held.
  template <class M>
    requires std::derived_from<M, Module> && (!std::is_lvalue_reference_v<M>)
  M& append(M&& module) {
    return register_module(std::to_string(submodule_count()), std::move(module));
  }

  /// Adds a module at the end, taken over; InvalidArgument for a null pointer, else throws
  /// like the other append.
  Module& append(std::unique_ptr<Module> module) {
    return register_module(std::to_string(submodule_count()), std::move(module));
  }

  /// How many modules it holds. Never throws.
  std::size_t size() const noexcept { return submodule_count(); }
  /// Module `i` (no bounds check, like std::vector's operator[]).
  Module& operator[](std::size_t i) { return submodule(i); }
  const Module& operator[](std::size_t i) const { return submodule(i); }

 protected:
  /// Throws what the modules throw; an empty Sequential returns x.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    DeviceArray<float> y = x;
    for (std::size_t i = 0; i < submodule_count(); ++i) y = submodule(i)(y);
    return y;
  }
};

}  // namespace ferry::nn
