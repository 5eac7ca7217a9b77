#pragma once
// optim::Optimizer: what every optimizer shares. It checks a step's parameters and gradients
// (all of them, before anything is submitted) and hands the update the parameters' own
// handles, so that each update can give its parameter away and overwrite it in place.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/module.hpp"

namespace ferry::optim {

/// The base of SGD, Adam and AdamW. State (momentum, moments) is made at the first step, on
/// each parameter's device, and belongs to the parameters by position: step the same
/// parameters, in the same order, every time. Movable, not copyable (a copy would share the
/// state's buffers, and no update could then overwrite them in place).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(Optimizer&&) noexcept = default;
  Optimizer& operator=(Optimizer&&) noexcept = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of `module`'s parameters by `grads`, given in named_parameters() order with
  /// the same names. Inside ferry::jit a step refuses the trace (its state and step count live
  /// outside it, so a replay could not repeat it): the program then runs its function on every
  /// call; to trace an update, write it with ops and return the parameters. Returns at once: the updates run on the device, each overwriting its
  /// parameter in place when nothing else holds it (so do not keep copies of the parameters
  /// across steps). Throws, before anything is submitted, InvalidArgument naming both names
  /// for a gradient out of place (or a count that differs, or an empty gradient), ShapeError
  /// naming the parameter and both shapes, DeviceMismatch naming it and both devices.
  void step(nn::Module& module, const nn::NamedParameters& grads) {
    std::vector<nn::detail::ParameterSlot> slots = nn::detail::ModuleAccess::slots(module);
    if (grads.size() != slots.size()) {
      ferry::detail::fail<InvalidArgument>(name_, "the module has ", slots.size(),
                                           " parameters, but ", grads.size(), " gradients were given");
    }
    std::vector<DeviceArray<float>*> params(slots.size());
    std::vector<const DeviceArray<float>*> gs(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (grads[i].first != slots[i].name) {
        ferry::detail::fail<InvalidArgument>(name_, "gradient ", i, " is named '", grads[i].first,
                                             "' but parameter ", i, " is '", slots[i].name, "'");
      }
      params[i] = slots[i].array;
      gs[i] = &grads[i].second;
    }
    run(params, gs, [&](std::size_t i) { return "parameter '" + slots[i].name + "'"; });
  }

  /// One update of `params` (overwritten, in place where nothing else holds them) by `grads`,
  /// position by position. Throws like the other step, naming positions.
  void step(std::span<DeviceArray<float>> params, std::span<const DeviceArray<float>> grads) {
    if (grads.size() != params.size()) {
      ferry::detail::fail<InvalidArgument>(name_, params.size(), " parameters but ", grads.size(),
                                           " gradients were given");
    }
    std::vector<DeviceArray<float>*> ps(params.size());
    std::vector<const DeviceArray<float>*> gs(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      ps[i] = &params[i];
      gs[i] = &grads[i];
    }
    run(ps, gs, [](std::size_t i) { return "parameter " + std::to_string(i); });
  }

  /// How many steps were taken. Never throws.
  std::int64_t steps() const noexcept { return steps_; }

  /// The state arrays, named "<parameter position>.<key>" with PyTorch's keys
  /// ("0.momentum_buffer", "3.exp_avg"); empty before the first step. New handles to the
  /// state's buffers: drop them before the next step, or its updates cannot overwrite those
  /// buffers in place. Never throws but std::bad_alloc.
  virtual nn::NamedParameters state() const = 0;

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}

  /// Submits one update; everything was checked. `first` is true at the first step, when the
  /// state is to be made.
  virtual void update(std::span<DeviceArray<float>* const> params,
                      std::span<const DeviceArray<float>* const> grads, bool first) = 0;

  const std::string& name() const noexcept { return name_; }

  /// Throws InvalidArgument naming the optimizer unless `value` is finite and >= 0.
  void require_non_negative(const char* what, double value) const {
    if (!(value >= 0) || !std::isfinite(value)) {
      ferry::detail::fail<InvalidArgument>(name_, "invalid ", what, " ", value,
                                           ": it must be finite and not negative");
    }
  }

  /// `state` moved to `param`'s device if it is not there (the module was moved after the
  /// first step): state follows its parameter.
  static void follow(DeviceArray<float>& state, const DeviceArray<float>& param) {
    const Device d = param.device();
    if (state.device() != d) state = state.to(d);
  }

 private:
  template <class Label>
  void run(std::span<DeviceArray<float>* const> params,
           std::span<const DeviceArray<float>* const> grads, Label label) {
    ferry::detail::note_side_effect(name_ + "::step");
    const bool first = shapes_.empty() && steps_ == 0;
    if (!first && params.size() != shapes_.size()) {
      ferry::detail::fail<InvalidArgument>(name_, "its state is for ", shapes_.size(),
                                           " parameters, but ", params.size(),
                                           " were given: step the same parameters every time");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const DeviceArray<float>& p = *params[i];
      const DeviceArray<float>& g = *grads[i];
      if (!p.valid()) ferry::detail::fail<InvalidArgument>(name_, label(i), " is an empty array");
      if (!g.valid()) ferry::detail::fail<InvalidArgument>(name_, "the gradient of ", label(i), " is an empty array");
      if (p.shape() != g.shape()) {
        ferry::detail::fail<ShapeError>(name_, label(i), " has shape ", p.shape(),
                                        ", its gradient ", g.shape());
      }
      if (!first && p.shape() != shapes_[i]) {
        ferry::detail::fail<ShapeError>(name_, label(i), " has shape ", p.shape(),
                                        ", its state ", shapes_[i]);
      }
      if (p.device() != g.device()) {
        ferry::detail::fail<DeviceMismatch>(name_, label(i), " lives on ", p.device().name(),
                                            ", its gradient on ", g.device().name());
      }
    }
    if (first) {
      for (const DeviceArray<float>* p : params) shapes_.push_back(p->shape());
    }
    update(params, grads, first);
    ++steps_;
  }

  std::string name_;
  std::vector<Shape> shapes_;  // the parameters' shapes at the first step
  std::int64_t steps_ = 0;
};

}  // namespace ferry::optim
