#pragma once
// ferry::updates(model, opt, ...): the objects a traced training step updates in place, for
// ferry::jit (program/updates.hpp says how a program uses them). A module gives its parameters;
// an optimizer its state arrays, and its learning rate and the other numbers of its step count
// as floating inputs, and counts a step for each replay.

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/optim/optimizer.hpp"
#include "ferry/program/updates.hpp"

namespace ferry {

namespace nn::detail {

/// A module's parameters, read and replaced by a program.
class ModuleState final : public ferry::detail::ProgramState {
 public:
  explicit ModuleState(Module& module) : module_(module) {}
  std::string name() const override { return "the module"; }
  bool ready() const override { return true; }
  void arrays(std::vector<DeviceArray<float>*>& out) override {
    for (const ParameterSlot& slot : ModuleAccess::slots(module_)) out.push_back(slot.array);
  }
  void scalars(std::vector<double>&) const override {}
  void begin_trace(std::span<const SymFloat>) override {}
  std::string end_trace(std::span<DeviceArray<float>* const>) override { return {}; }
  void replayed() override {}

 private:
  Module& module_;
};

}  // namespace nn::detail

namespace optim::detail {

/// An optimizer's state arrays and step numbers, read and replaced by a program.
class OptimizerState final : public ferry::detail::ProgramState {
 public:
  explicit OptimizerState(Optimizer& opt) : opt_(opt) {}
  std::string name() const override { return opt_.name_; }
  bool ready() const override { return opt_.known_; }
  void arrays(std::vector<DeviceArray<float>*>& out) override {
    for (std::vector<DeviceArray<float>>& key : opt_.state_) {
      for (DeviceArray<float>& a : key) out.push_back(&a);
    }
  }
  void scalars(std::vector<double>& out) const override {
    const std::vector<double> numbers = opt_.host_numbers();
    out.insert(out.end(), numbers.begin(), numbers.end());
  }
  void begin_trace(std::span<const SymFloat> traced) override {
    opt_.tracing_ = true;
    opt_.traced_.assign(traced.begin(), traced.end());
    opt_.traced_steps_ = 0;
    opt_.stepped_.clear();
  }
  std::string end_trace(std::span<DeviceArray<float>* const> updated) override {
    opt_.tracing_ = false;
    opt_.traced_.clear();
    const int steps = opt_.traced_steps_;
    if (steps == 0) {
      return "the function did not step " + opt_.name_ +
             ", which the program updates: a replay would count a step it did not take";
    }
    if (steps > 1) return opt_.stepped_twice();
    for (const DeviceArray<float>* p : opt_.stepped_) {
      if (std::find(updated.begin(), updated.end(), p) == updated.end()) {
        return opt_.name_ + " stepped parameters the program does not update: give their module "
                            "to ferry::updates too, or a replay would leave them as they were";
      }
    }
    return {};
  }
  void replayed() override { ++opt_.steps_; }

 private:
  Optimizer& opt_;
};

}  // namespace optim::detail

namespace detail {

FERRY_DECL void add_updates(Updates& u, nn::Module& m);
FERRY_DECL void add_updates(Updates& u, optim::Optimizer& o);
#if FERRY_DEFINES_DECLS
FERRY_DECL void add_updates(Updates& u, nn::Module& m) {
  u.add(std::make_shared<nn::detail::ModuleState>(m));
}
FERRY_DECL void add_updates(Updates& u, optim::Optimizer& o) {
  u.add(std::make_shared<optim::detail::OptimizerState>(o));
}
#endif

}  // namespace detail

/// The objects a program updates in place, for ferry::jit(fn, ferry::updates(model, opt)):
/// modules (nn::Module, whose parameters the function replaces) and optimizers (whose state,
/// step count and learning rate it advances). They must outlive the program. Give every module
/// whose parameters an optimizer in the program steps, or its steps run untraced.
template <class... Objects>
requires(sizeof...(Objects) > 0 && ((std::is_base_of_v<nn::Module, Objects> ||
                                     std::is_base_of_v<optim::Optimizer, Objects>)&&...)) Updates
    updates(Objects&... objects) {
  Updates u;
  (detail::add_updates(u, objects), ...);
  return u;
}

}  // namespace ferry
