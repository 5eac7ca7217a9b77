#pragma once
// optim::Optimizer: what every optimizer shares. It checks a step's parameters and gradients
// (all of them, before anything is submitted) and hands the update the parameters' own
// handles, so that each update can give its parameter away and overwrite it in place. It owns
// the learning rate (a number or a schedule) and the per-parameter state, so saving and
// restoring a run's optimizer (state_dict, load_state_dict) is written once for every kind.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/any_array.hpp"
#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/moved_from.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/device.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/optim/mesh_parameters.hpp"
#include "ferry/optim/schedule.hpp"
#include "ferry/transfer.hpp"

namespace ferry::optim {

namespace detail {
class OptimizerState;  // optim/updates.hpp
}

/// The base of SGD, Adam and AdamW. State (momentum, moments) is made at the first step, on
/// each parameter's device, and belongs to the parameters by position (and, stepped through a
/// module, by name): step the same parameters, in the same order, every time. Movable, not copyable
/// (a copy would share the state's buffers, and no update could then overwrite them in place).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(Optimizer&&) noexcept = default;
  Optimizer& operator=(Optimizer&&) noexcept = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of `module`'s parameters by `grads`, given in named_parameters() order with
  /// the same names. Inside ferry::jit it is traced when the program was given both the module
  /// and this optimizer (`jit(fn, ferry::updates(model, opt))`): the learning rate and the
  /// other numbers of the step count are then inputs of the trace. Otherwise it refuses the
  /// trace (its state and step count live outside it, so a replay could not repeat it) and the
  /// program runs its function on every call. Returns at once: the
  /// updates run on the device, each overwriting its parameter in place when nothing else holds
  /// it (so do not keep copies of the parameters across steps). Throws, before anything is
  /// submitted, InvalidArgument naming both names for a gradient out of place (or a count that
  /// differs, or an empty gradient) or for a parameter whose name is not the one its state is
  /// for (a state loaded for another model), ShapeError naming the parameter and both shapes,
  /// DeviceMismatch naming it and both devices, InvalidArgument naming the optimizer for a
  /// learning rate from a schedule that is negative or not finite, and what the schedule throws.
  FERRY_DECL void step(nn::Module& module, const nn::NamedParameters& grads);

  /// One update of `params` (overwritten, in place where nothing else holds them) by `grads`,
  /// position by position. Throws like the other step, naming positions (and checking no names).
  FERRY_DECL void step(std::span<DeviceArray<float>> params,
                       std::span<const DeviceArray<float>> grads);

  /// One update of mesh-array parameters (a tensor-parallel layer's parameter_slots(), pointers
  /// to the arrays to overwrite) by `grads`, position by position, each gradient placed as its
  /// parameter (what nn::value_and_grad over mesh parameters returns). Every shard is updated on
  /// its own device by the same rule as a DeviceArray parameter, in place where nothing else
  /// holds it, with state of its own made there at the first step (see mesh_state()); the
  /// copies along a Replicate axis, given equal gradients, stay equal bit for bit. An optimizer
  /// steps either mesh parameters or DeviceArray ones, the same ones every time. Throws, before
  /// anything is submitted, InvalidArgument naming the optimizer for counts that differ, an
  /// empty or unplaced parameter or gradient, a Partial parameter, a gradient on another mesh,
  /// parameters other than those its state is for (other meshes, shapes or placements, or
  /// DeviceArray parameters stepped or loaded before); ShapeError naming both global shapes;
  /// PlacementError naming both placements; and, like the other steps, what the schedule throws.
  FERRY_DECL void step(std::span<MeshArray<float>* const> params,
                       std::span<const MeshArray<float>> grads);

  /// The same, for mesh parameters held in one vector of the caller's: each is overwritten.
  void step(std::span<MeshArray<float>> params, std::span<const MeshArray<float>> grads) {
    std::vector<MeshArray<float>*> ps(params.size());
    for (std::size_t k = 0; k < params.size(); ++k) ps[k] = &params[k];
    step(std::span<MeshArray<float>* const>(ps), grads);
  }

  /// The state of mesh parameters: "<mesh parameter position>.<key>" ("1.exp_avg") and the
  /// shards of each device as one mesh array, placed as its parameter (each device's shard of
  /// the state beside its shard of the parameter); empty before the first step. New handles,
  /// as state() gives: drop them before the next step. Throws InvalidArgument naming
  /// "<optimizer>::mesh_state" for an optimizer whose state is for DeviceArray parameters.
  std::vector<std::pair<std::string, MeshArray<float>>> mesh_state() const {
    if (known_ && mesh_.empty()) {
      ferry::detail::fail<InvalidArgument>(name_ + "::mesh_state", "the state is for DeviceArray "
                                                                   "parameters: see state()");
    }
    std::vector<std::pair<std::string, MeshArray<float>>> out;
    std::size_t next = 0;  // the first shard of parameter k
    for (std::size_t k = 0; k < mesh_.size(); ++k) {
      const detail::MeshLayout& l = mesh_[k];
      const auto n = static_cast<std::size_t>(l.mesh.size());
      for (std::size_t key = 0; key < keys_.size(); ++key) {
        std::vector<DeviceArray<float>> shards(
            state_[key].begin() + static_cast<std::ptrdiff_t>(next),
            state_[key].begin() + static_cast<std::ptrdiff_t>(next + n));
        out.emplace_back(std::to_string(k) + "." + keys_[key],
                         MeshArray<float>::from_shards(l.mesh, std::move(shards), l.global_shape,
                                                       l.placements));
      }
      next += n;
    }
    return out;
  }

  /// How many steps were taken (or restored by load_state_dict). Never throws.
  std::int64_t steps() const noexcept { return steps_; }

  /// The learning rate of the next step: the number set, or the schedule's value at steps().
  /// Throws what the schedule throws.
  double lr() const { return lr_(steps_); }

  /// Sets the learning rate of the next steps: a number, or a schedule of the step count (see
  /// LearningRate), which then runs on from steps(). Throws InvalidArgument naming the
  /// optimizer for a number that is negative or not finite (a schedule's values are checked at
  /// each step).
  void set_lr(LearningRate lr) {
    if (!lr.is_schedule()) require_non_negative("lr", lr(0));
    lr_ = std::move(lr);
  }

  /// The state arrays, named "<parameter position>.<key>" with PyTorch's keys
  /// ("0.momentum_buffer", "3.exp_avg"); empty before the first step. New handles to the
  /// state's buffers: drop them before the next step, or its updates cannot overwrite those
  /// buffers in place. Throws InvalidArgument naming "<optimizer>::state" when the state is of
  /// mesh parameters (mesh_state() gives it).
  nn::NamedParameters state() const {
    refuse_mesh("state", "see mesh_state()");
    nn::NamedParameters out;
    for (std::size_t i = 0; i < state_parameters(); ++i) {
      for (std::size_t k = 0; k < keys_.size(); ++k) {
        out.emplace_back(std::to_string(i) + "." + keys_[k], state_[k][i]);
      }
    }
    return out;
  }

  /// The state to save with save_safetensors: each parameter's state under "<parameter
  /// name>.<key>" ("0.weight.exp_avg", "0.weight.exp_avg_sq"; the position "3" stands for the
  /// name of a parameter stepped by position), parameter by parameter in order, then the step
  /// count as an int64 scalar "step" (on Device::cpu()). Before the first step it holds "step"
  /// alone. The state arrays are new handles to the state's buffers, as state() returns: drop
  /// them before the next step. Never blocks. Throws InvalidArgument naming
  /// "<optimizer>::state_dict" when the state is of mesh parameters: one array per device, which
  /// a file of named arrays does not place (mesh_state() gives it, to save shard by shard).
  NamedArrays state_dict() const;

  /// Restores a state that state_dict() gave (load_safetensors's result, on any device: each
  /// array moves to its parameter's device at the next step), so that the next steps continue
  /// the saved run exactly; the learning rate set here stays (a schedule continues from the
  /// restored step count). An optimizer that has stepped (or loaded) knows its parameters, and
  /// the state must hold every key of every one of them, of its shape; a new one takes its
  /// parameters from the state, and its next step checks them (see step). Reads "step" (an
  /// export). The optimizer keeps handles to the given arrays: drop the NamedArrays, so the
  /// next updates can overwrite them in place. All or nothing: a load that throws changes
  /// nothing. Throws InvalidArgument naming "<optimizer>::load_state_dict" for an optimizer that
  /// stepped mesh parameters, and naming it and the entry for an
  /// empty array, a name given twice, an entry that is no key of this optimizer's state (or of
  /// no parameter it has), a parameter missing a key or missing altogether, a state array that
  /// is not float32, a "step" missing, not int64 or negative; ShapeError naming the entry for a
  /// state array whose shape is not its parameter's (or its other keys') or a "step" that is not
  /// a scalar; the error of a failed step "step" depends on, as to_host does.
  void load_state_dict(const NamedArrays& saved);

 protected:
  /// `keys` name the state each parameter has, as PyTorch's state does ("exp_avg"). Throws
  /// InvalidArgument naming the optimizer for a learning rate that is a negative or non-finite
  /// number.
  Optimizer(std::string name, LearningRate lr, std::vector<std::string> keys)
      : name_(std::move(name)), lr_(std::move(lr)), keys_(std::move(keys)), state_(keys_.size()) {
    if (!lr_.is_schedule()) require_non_negative("lr", lr_(0));
  }

  /// The numbers of this step that the update reads, appended to `out`, from the step's
  /// learning rate `lr` (checked) and steps(): by default `lr` alone. A traced step receives
  /// them as inputs of the trace, so each is computed on the host in double, as an untraced
  /// step computes it.
  virtual void step_numbers(double lr, std::vector<double>& out) const { out.push_back(lr); }

  /// Submits one update with this step's `numbers` (step_numbers(), symbols of the trace in a
  /// traced step); everything else was checked. `first` is true at the first step, when the
  /// state is to be made: each state_of(k) then holds one empty array per parameter.
  virtual void update(std::span<DeviceArray<float>* const> params,
                      std::span<const DeviceArray<float>* const> grads, bool first,
                      std::span<const SymFloat> numbers) = 0;

  const std::string& name() const noexcept { return name_; }

  /// The learning rate as set: a number or a schedule. Never throws.
  const LearningRate& learning_rate() const noexcept { return lr_; }

  /// The state under key `k` (of those the constructor was given), one array per parameter.
  std::vector<DeviceArray<float>>& state_of(std::size_t k) noexcept { return state_[k]; }

  /// Throws InvalidArgument naming the optimizer unless `value` is finite and >= 0.
  void require_non_negative(const char* what, double value) const {
    if (!(value >= 0) || !std::isfinite(value)) {
      ferry::detail::fail<InvalidArgument>(name_, "invalid ", what, " ", value,
                                           ": it must be finite and not negative");
    }
  }

  /// `state` moved to `param`'s device if it is not there (the module was moved after the
  /// first step, or the state was loaded elsewhere): state follows its parameter.
  static void follow(DeviceArray<float>& state, const DeviceArray<float>& param) {
    const Device d = param.device();
    if (state.device() != d) state = state.to(d);
  }

 private:
  template <class Label>
  void run(std::span<DeviceArray<float>* const> params,
           std::span<const DeviceArray<float>* const> grads, const std::vector<std::string>* names,
           Label label, bool on_mesh = false) {
    if (moved_.moved_from()) {  // its name and state went with it
      ferry::detail::fail<InvalidArgument>("optimizer", "was moved from: step the optimizer it "
                                                        "was moved into");
    }
    // Traced only as one step of a program given this optimizer (and its parameters' owner:
    // end_trace checks), once per call.
    const bool traced = ferry::detail::t_recorder != nullptr && tracing_ && traced_steps_++ == 0;
    if (tracing_) stepped_.insert(stepped_.end(), params.begin(), params.end());
    if (!traced && tracing_ && ferry::detail::t_recorder != nullptr) {
      ferry::detail::t_recorder->refuse(stepped_twice());
    }
    if (!traced) ferry::detail::note_side_effect(name_ + "::step");
    const bool first = !known_;
    if (!first && !on_mesh && !mesh_.empty()) {
      ferry::detail::fail<InvalidArgument>(name_, "its state is for ", detail::layouts_text(mesh_),
                                           ": step them, or give DeviceArray parameters to an "
                                           "optimizer of their own");
    }
    if (!first && params.size() != shapes_.size()) {
      ferry::detail::fail<InvalidArgument>(name_, "its state is for ", shapes_.size(),
                                           " parameters, but ", params.size(),
                                           " were given: step the same parameters every time");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const DeviceArray<float>& p = *params[i];
      const DeviceArray<float>& g = *grads[i];
      if (!p.valid()) ferry::detail::fail<InvalidArgument>(name_, label(i), " is an empty array");
      if (!g.valid())
        ferry::detail::fail<InvalidArgument>(name_, "the gradient of ", label(i),
                                             " is an empty array");
      if (p.shape() != g.shape()) {
        ferry::detail::fail<ShapeError>(name_, label(i), " has shape ", p.shape(),
                                        ", its gradient ", g.shape());
      }
      if (!first && names != nullptr && !names_[i].empty() && (*names)[i] != names_[i]) {
        ferry::detail::fail<InvalidArgument>(name_, "parameter ", i, " is '", (*names)[i],
                                             "', but its state is for '", names_[i], "'");
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
    std::vector<SymFloat> numbers;
    if (traced) {
      numbers = traced_;
    } else {
      for (const double v : host_numbers()) numbers.emplace_back(v);
    }
    if (first) {
      for (std::size_t i = 0; i < params.size(); ++i) {
        shapes_.push_back(params[i]->shape());
        names_.push_back(names != nullptr ? (*names)[i] : std::string());
      }
      for (std::vector<DeviceArray<float>>& s : state_)
        s.assign(params.size(), DeviceArray<float>());
      known_ = true;
    }
    update(params, grads, first, numbers);
    ++steps_;
  }

  std::string stepped_twice() const {
    return "the function stepped " + name_ +
           " more than once in one call: a traced call steps an optimizer once";
  }

  /// This step's learning rate, checked, and the numbers its update reads.
  std::vector<double> host_numbers() const {
    const double lr = lr_(steps_);
    if (!(lr >= 0) || !std::isfinite(lr)) {
      ferry::detail::fail<InvalidArgument>(name_, "invalid lr ", lr, " from the schedule at step ",
                                           steps_, ": it must be finite and not negative");
    }
    std::vector<double> out;
    step_numbers(lr, out);
    return out;
  }

  /// Throws InvalidArgument naming "<optimizer>::<what>" when the state is of mesh parameters:
  /// a state_dict names a parameter's state by the parameter, but a mesh parameter's is one
  /// array per device, which neither a name nor a safetensors file places.
  void refuse_mesh(const char* what, const char* instead) const {
    if (!mesh_.empty()) {
      ferry::detail::fail<InvalidArgument>(name_ + "::" + what, "the state is of ",
                                           detail::layouts_text(mesh_),
                                           ", one array per device, which this does not hold: ",
                                           instead);
    }
  }

  /// "'<parameter>.exp_avg', '<parameter>.exp_avg_sq' and 'step'": for an error message.
  std::string entry_forms() const;

  /// How many parameters have state arrays: none before the first step.
  std::size_t state_parameters() const noexcept {
    return state_.empty() ? 0 : state_.front().size();
  }

  /// Parameter i's name in a state_dict: its module name, or its position.
  std::string parameter_name(std::size_t i) const {
    return names_[i].empty() ? std::to_string(i) : names_[i];
  }


  std::string name_;
  LearningRate lr_;
  std::vector<std::string> keys_;                       // the state's keys, as PyTorch names them
  std::vector<std::vector<DeviceArray<float>>> state_;  // [key][parameter]
  bool known_ = false;              // the parameters are known: from the first step or a load
  std::vector<std::string> names_;  // their names; empty for one stepped by position
  std::vector<Shape> shapes_;       // their shapes
  std::vector<detail::MeshLayout> mesh_;  // stepped as mesh parameters: theirs (state_ per shard)
  std::int64_t steps_ = 0;
  // Such an optimizer refuses to step rather than read the state it no longer has.
  ferry::detail::MovedFromMark moved_;

  // While a program given this optimizer traces a call (detail::OptimizerState):
  friend class detail::OptimizerState;
  bool tracing_ = false;
  std::vector<SymFloat> traced_;  // host_numbers() as the trace sees them
  int traced_steps_ = 0;          // steps taken in the traced call
  std::vector<const DeviceArray<float>*> stepped_;  // the parameters they updated
};

#if FERRY_DEFINES_DECLS
FERRY_DECL void Optimizer::step(std::span<MeshArray<float>* const> params,
                                std::span<const MeshArray<float>> grads) {
  detail::FlatMeshStep flat = detail::flatten_mesh_step(name_, params, grads);
  if (known_ && !(flat.layouts == mesh_)) {
    if (mesh_.empty()) {
      ferry::detail::fail<InvalidArgument>(name_,
                                           "its state is for DeviceArray parameters "
                                           "(stepped or loaded): step mesh parameters "
                                           "with an optimizer of their own");
    }
    ferry::detail::fail<InvalidArgument>(name_, "its state is for ", detail::layouts_text(mesh_),
                                         "; got ", detail::layouts_text(flat.layouts),
                                         ": step the same parameters every time");
  }
  run(
      flat.params, flat.grads, nullptr, [&](std::size_t i) { return flat.labels[i]; }, true);
  if (mesh_.empty()) mesh_ = std::move(flat.layouts);
}
#endif

#if FERRY_DEFINES_DECLS
FERRY_DECL void Optimizer::step(std::span<DeviceArray<float>> params,
                                std::span<const DeviceArray<float>> grads) {
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
  run(ps, gs, nullptr, [](std::size_t i) { return "parameter " + std::to_string(i); });
}
#endif

#if FERRY_DEFINES_DECLS
FERRY_DECL void Optimizer::step(nn::Module& module, const nn::NamedParameters& grads) {
  std::vector<nn::detail::ParameterSlot> slots = nn::detail::ModuleAccess::slots(module);
  if (grads.size() != slots.size()) {
    ferry::detail::fail<InvalidArgument>(name_, "the module has ", slots.size(),
                                         " parameters, but ", grads.size(),
                                         " gradients were given");
  }
  std::vector<DeviceArray<float>*> params(slots.size());
  std::vector<const DeviceArray<float>*> gs(slots.size());
  std::vector<std::string> names(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (grads[i].first != slots[i].name) {
      ferry::detail::fail<InvalidArgument>(name_, "gradient ", i, " is named '", grads[i].first,
                                           "' but parameter ", i, " is '", slots[i].name, "'");
    }
    params[i] = slots[i].array;
    gs[i] = &grads[i].second;
    names[i] = slots[i].name;
  }
  run(params, gs, &names, [&](std::size_t i) { return "parameter '" + slots[i].name + "'"; });
}
#endif

}  // namespace ferry::optim

#include "ferry/optim/state_dict.hpp"  // IWYU pragma: keep
