#pragma once
// nn::ModuleList: modules held in order and named "0", "1", ... as PyTorch's nn.ModuleList, so
// a model's "layers.3.weight" is its list "layers", entry 3. Unlike a Sequential it has no
// forward of its own: the module holding it decides how its entries are called.

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/nn/module.hpp"

namespace ferry::nn {

namespace detail {

/// What a ModuleList and a Sequential share: modules in order, appended under "0", "1", ...
class ModuleSequence : public Module {
 public:
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
};

}  // namespace detail

/// Modules in order, registered as "0", "1", ...; indexed, not called.
class ModuleList : public detail::ModuleSequence {
 public:
  ModuleList() = default;

  /// The given modules, moved in, in order: `ModuleList(Linear(4, 4), Linear(4, 4))`. One
  /// ModuleList given alone is moved, not nested: nest it with append(). Throws DeviceMismatch
  /// when the modules' parameters live on different devices.
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           ((std::derived_from<Ms, Module> &&
             !std::is_lvalue_reference_v<Ms>)&&...)) explicit ModuleList(Ms&&... modules) {
    (append(std::move(modules)), ...);
  }

  std::string_view type_name() const override { return "ModuleList"; }

 protected:
  /// Throws InvalidArgument naming ModuleList: a list is not called (PyTorch's has no
  /// forward either); call its modules.
  DeviceArray<float> forward(const DeviceArray<float>&) const override {
    ferry::detail::fail<InvalidArgument>("ModuleList",
                                         "has no forward: call its modules, list[i](x)");
  }
};

}  // namespace ferry::nn
