#pragma once
// nn::Sequential: modules applied one after another, named "0", "1", ... as PyTorch names them,
// so parameter names ("0.weight", "2.bias") match a PyTorch model of the same layers; or named
// by the caller ("layers.0"), so a flat Sequential loads the checkpoint of a nested PyTorch model
// under its names as they are.

#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/nn/module_list.hpp"

namespace ferry::nn {

/// A module and the name a Sequential registers it under: `{"layers.0", Linear(4, 4)}`.
class NamedModule {
 public:
  /// `module` moved in, to be named `name`. Never throws but std::bad_alloc.
  template <class M>
    requires std::derived_from<M, Module> && (!std::is_lvalue_reference_v<M>)
  NamedModule(std::string name, M&& module)  // NOLINT: implicit, so a braced pair converts
      : name_(std::move(name)), module_(std::make_unique<M>(std::move(module))) {}

  /// `module` taken over, to be named `name` (a null pointer is refused where it is used).
  /// Never throws.
  NamedModule(std::string name, std::unique_ptr<Module> module) noexcept
      : name_(std::move(name)), module_(std::move(module)) {}

 private:
  friend class Sequential;
  std::string name_;
  // Mutable: an initializer_list's elements are const, and Sequential moves the module out.
  mutable std::unique_ptr<Module> module_;
};

/// Modules in order; calling it feeds each one's output to the next.
class Sequential : public detail::ModuleSequence {
 public:
  Sequential() = default;

  /// The given modules, in order, each under its name:
  /// `Sequential({{"layers.0", Linear(4, 8)}, {"act", ReLU()}, {"layers.1", Linear(8, 1)}})`
  /// gives "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias". A name may
  /// be a dotted path (see Module::register_module). Throws InvalidArgument for a null module,
  /// a name that is empty, has an empty part or is given twice, or two modules that would give
  /// one full parameter name twice; DeviceMismatch when the modules' parameters live on
  /// different devices.
  explicit Sequential(std::initializer_list<NamedModule> modules) {
    for (const NamedModule& m : modules) register_module(m.name_, std::move(m.module_));
  }

  /// The given modules, moved in, in order: `Sequential(Linear(4, 8), ReLU(), Linear(8, 1))`.
  /// One Sequential given alone is moved, not nested (the move constructor wins): nest it with
  /// append(). Throws DeviceMismatch when the modules' parameters live on different devices.
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           ((std::derived_from<Ms, Module> &&
             !std::is_lvalue_reference_v<Ms>)&&...)) explicit Sequential(Ms&&... modules) {
    (append(std::move(modules)), ...);
  }

  std::string_view type_name() const override { return "Sequential"; }

  /// register_module(name, module): adds a module at the end under `name` (a dotted path
  /// allowed: "layers.0"), moved in or taken over, and returns it. Throws like the
  /// initializer-list constructor.
  using Module::register_module;

 protected:
  /// Throws what the modules throw; an empty Sequential returns x.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    DeviceArray<float> y = x;
    for (std::size_t i = 0; i < submodule_count(); ++i) y = submodule(i)(y);
    return y;
  }
};

}  // namespace ferry::nn
