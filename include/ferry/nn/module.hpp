#pragma once
// nn::Module: a base owning named float32 parameters and named submodules, the unit an optimizer
// steps and a checkpoint saves. Parameters live in the module itself (subclasses reach theirs by
// index) and submodules on the heap, so moving a module never leaves a reference dangling.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/io/safetensors.hpp"
#include "ferry/runtime/recorder.hpp"

namespace ferry::nn {

/// Parameters by name, in registration order, depth first: "0.weight", "layers.1.bias".
using NamedParameters = std::vector<std::pair<std::string, DeviceArray<float>>>;

class Module;

namespace detail {

/// A parameter as its module stores it: what an optimizer overwrites in place. Holding the
/// module's own handle (not a copy) is what lets an update be the array's only reference, so
/// its buffer is reused.
struct ParameterSlot {
  std::string name;
  DeviceArray<float>* array;
};

struct ModuleAccess {
  static std::vector<ParameterSlot> slots(Module& m);
};

/// Throws `e` again as the same type, renamed for `op` (Sequential::load) and naming `path`:
/// "[load_safetensors] cannot open 'm.st': ..." becomes "[Sequential::load] cannot open
/// 'm.st': ...", and a message that does not name the file gets "'m.st': " in front. A type
/// it does not know (a DeviceFault, which carries its step) is thrown again unchanged. Call it
/// only from a catch block, whose exception `e` is.
[[noreturn]] inline void rethrow_for_load(std::string_view op, const std::string& path,
                                          const Error& e) {
  std::string_view text = e.what();
  if (const std::size_t end = text.find("] ");
      text.starts_with('[') && end != std::string_view::npos) {
    text.remove_prefix(end + 2);
  }
  std::string rest(text);
  const std::string quoted = "'" + path + "'";
  if (rest.find(quoted) == std::string::npos) rest = quoted + ": " + rest;
  const std::string message = ferry::detail::message(op, rest);
  const std::type_info& type = typeid(e);
  if (type == typeid(FileError)) throw FileError(message);
  if (type == typeid(FormatError)) throw FormatError(message);
  if (type == typeid(InvalidArgument)) throw InvalidArgument(message);
  if (type == typeid(ShapeError)) throw ShapeError(message);
  if (type == typeid(DeviceMismatch)) throw DeviceMismatch(message);
  if (type == typeid(UseAfterFree)) throw UseAfterFree(message);
  if (type == typeid(OutOfDeviceMemory)) throw OutOfDeviceMemory(message);
  if (type == typeid(OutOfHostMemory)) {
    // Its message is "cannot allocate N bytes of host memory: why"; the reason is kept.
    constexpr std::string_view kReason = "host memory: ";
    const std::size_t at = rest.find(kReason);
    const std::string why = at == std::string::npos ? rest : rest.substr(at + kReason.size());
    throw OutOfHostMemory(std::string(op), static_cast<const OutOfHostMemory&>(e).bytes(),
                          why + ", loading " + quoted);
  }
  throw;
}

}  // namespace detail

/// A layer or a model: named parameters (all on one device) and named submodules, called as
/// `module(x)`. Movable, not copyable: a copy would share parameter buffers, and an in-place
/// update of one would then have to copy them.
class Module {
 public:
  virtual ~Module() = default;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The module applied to `x`. Throws InvalidArgument for an empty `x` or a module moved
  /// from, and DeviceMismatch naming the module when its parameters live on another device
  /// than `x`, both before anything is submitted; otherwise throws what forward() throws
  /// (ShapeError for an input it cannot take).
  DeviceArray<float> operator()(const DeviceArray<float>& x) const {
    check_input(x);
    return forward(x);
  }

  /// The module's type as error messages name it: "Linear", "Sequential". Never throws.
  virtual std::string_view type_name() const = 0;

  /// Every parameter with its full name, in registration order, depth first: this module's
  /// own, then each submodule's under "name.". The arrays are new handles to the same buffers.
  /// Never throws but std::bad_alloc.
  NamedParameters named_parameters() const {
    NamedParameters out;
    visit("", [&](std::string name, const DeviceArray<float>& a) {
      out.emplace_back(std::move(name), a);
    });
    return out;
  }

  /// The parameters alone, in named_parameters() order. Never throws but std::bad_alloc.
  std::vector<DeviceArray<float>> parameters() const {
    std::vector<DeviceArray<float>> out;
    visit("", [&](const std::string&, const DeviceArray<float>& a) { out.push_back(a); });
    return out;
  }

  /// How many elements the parameters hold in all. Throws UseAfterFree if one was freed by
  /// deallocate(force).
  std::int64_t parameter_count() const {
    std::int64_t n = 0;
    visit("", [&](const std::string&, const DeviceArray<float>& a) { n += a.shape().numel(); });
    return n;
  }

  /// Puts this module and every submodule in training mode (`mode` true) or evaluation mode
  /// (false); returns *this. Modules start in training mode, as PyTorch's do; only those that
  /// compute differently in the two (Dropout) read it. A module registered later keeps its own
  /// mode. A program (jit) whose trace read a module's mode replays only while the mode is the
  /// one it traced; after train() or eval() it traces again (PyTorch's compiled modules guard
  /// on `training` alike). Never throws.
  Module& train(bool mode = true) noexcept {
    if (!moved_from()) training_->store(mode, std::memory_order_relaxed);
    for (auto& [name, m] : modules_) m->train(mode);
    return *this;
  }

  /// train(false): evaluation mode for this module and every submodule; returns *this. Never
  /// throws.
  Module& eval() noexcept { return train(false); }

  /// Whether this module is in training mode. Inside a program's trace, the program notes
  /// that it read it (see train()). Never throws.
  bool is_training() const noexcept {
    if (moved_from()) return true;
    const bool mode = training_->load(std::memory_order_relaxed);
    ferry::detail::note_flag_read(training_, mode);
    return mode;
  }

  /// Moves every parameter to `device` (asynchronously, with DeviceArray::to), where they stay
  /// resident; returns *this. Throws what DeviceArray::to throws.
  Module& to(const Device& device) {
    for (auto& [name, p] : parameters_) p = p.to(device);
    for (auto& [name, m] : modules_) m->to(device);
    return *this;
  }

  /// The device the parameters live on. Throws InvalidArgument for a module without any,
  /// UseAfterFree if one was freed by deallocate(force).
  Device device() const {
    std::optional<Device> d = find_device();
    if (!d) ferry::detail::fail<InvalidArgument>(type_name(), "has no parameters, so no device");
    return *d;
  }

  /// Replaces every parameter at once, by name (in any order): what an optimizer or a
  /// checkpoint loader writes. Everything is checked before anything is assigned, so a throw
  /// changes nothing: InvalidArgument naming the parameter for a missing, unknown or repeated
  /// name or an empty array, ShapeError naming it and both shapes, DeviceMismatch naming it
  /// and both devices; each names `<Type>::set_parameters`.
  void set_parameters(const NamedParameters& values) {
    assign(std::string(type_name()) + "::set_parameters", values, "", "the new value");
  }

  /// Saves every parameter to a safetensors file at `path`, under its name ("0.weight"): the
  /// file PyTorch's and JAX's tools read. An export (one sync for all parameters). Throws what
  /// save_safetensors throws.
  void save(const std::string& path) const {
    NamedArrays arrays;
    for (auto& [name, p] : named_parameters()) arrays.emplace_back(std::move(name), p);
    save_safetensors(path, arrays);
  }

  /// Loads every parameter from the safetensors file at `path` onto the module's device (the
  /// host CPU device for a module without parameters): each named as the module names it, of
  /// its shape, float32 (float64, bfloat16 and float16 tensors are converted, as PyTorch's
  /// load_state_dict does), no name missing and none unknown. All or nothing: a load that
  /// throws keeps every old parameter. Every error names the call (`Sequential::load`) and the
  /// file: FileError when it cannot be opened or read, FormatError when it breaks the format
  /// (see load_safetensors), OutOfHostMemory; InvalidArgument naming the parameter for a
  /// missing or unknown name or an integer or bool tensor; ShapeError naming it and both shapes
  /// for a shape that differs.
  void load(const std::string& path) {
    const std::string op = std::string(type_name()) + "::load";
    const std::string where = "'" + path + "': ";
    NamedArrays arrays;
    try {
      arrays = load_safetensors(path, find_device().value_or(Device::cpu()));
    } catch (const Error& e) {
      detail::rethrow_for_load(op, path, e);
    }
    NamedParameters values;
    values.reserve(arrays.size());
    for (auto& [name, a] : arrays) {
      if (a.dtype() == DType::float32) {
        values.emplace_back(std::move(name), a.as<float>());
      } else if (a.dtype() == DType::float64) {
        values.emplace_back(std::move(name),
                            ferry::detail::ArrayAccess::convert<float>(a.as<double>()));
      } else if (a.dtype() == DType::bfloat16) {
        values.emplace_back(std::move(name),
                            ferry::detail::ArrayAccess::convert<float>(a.as<bfloat16>()));
      } else if (a.dtype() == DType::float16) {  // a Hugging Face fp16 checkpoint
        values.emplace_back(std::move(name),
                            ferry::detail::ArrayAccess::convert<float>(a.as<float16>()));
      } else {
        ferry::detail::fail<InvalidArgument>(op, where, "parameter '", name, "' is stored as ",
                                             name_of(a.dtype()),
                                             ", not as a floating-point tensor");
      }
    }
    assign(op, values, where, "the file's");
  }

 protected:
  Module() = default;

  /// The module's computation; operator() has checked the input's device already.
  virtual DeviceArray<float> forward(const DeviceArray<float>& x) const = 0;

  /// Checks an input at the call, before anything is submitted: InvalidArgument naming the
  /// module for a module moved from (its parameters and submodules went with it) or an empty
  /// handle, DeviceMismatch naming it when the parameters live on another device. operator()
  /// calls it, and a module's own call operator of one input (Embedding's); one of several
  /// (MultiheadAttention's query, key and value) calls check_inputs.
  template <Element T>
  void check_input(const DeviceArray<T>& x) const {
    (void)check_inputs<T>({&x});
  }

  /// check_input of each of `inputs` in turn, looking the parameters' device up once: returns
  /// it (none for a module without parameters) for the call's own checks.
  template <Element T>
  std::optional<Device> check_inputs(std::initializer_list<const DeviceArray<T>*> inputs) const {
    if (moved_from()) {
      ferry::detail::fail<InvalidArgument>(type_name(), "was moved from: call the module it "
                                                        "was moved into");
    }
    std::optional<Device> own;
    for (auto it = inputs.begin(); it != inputs.end(); ++it) {
      const DeviceArray<T>& x = **it;
      if (!x.valid()) ferry::detail::fail<InvalidArgument>(type_name(), "got an empty input array");
      // Looked up where check_input of the first input alone would, so a parameter freed by
      // deallocate(force) throws UseAfterFree at the same point.
      if (it == inputs.begin()) own = find_device();
      if (!own) continue;
      const Device input = x.device();
      if (input != *own) {
        ferry::detail::fail<DeviceMismatch>(type_name(), "input lives on ", input.name(),
                                            ", parameters on ", own->name());
      }
    }
    return own;
  }

  /// Adds a parameter and returns its index for parameter(). Throws InvalidArgument for an
  /// empty array or a name that is empty, holds '.', or is taken; DeviceMismatch when the
  /// module already has parameters on another device.
  std::size_t register_parameter(std::string name, DeviceArray<float> value) {
    check_name(name, false);
    if (!value.valid()) {
      ferry::detail::fail<InvalidArgument>(type_name(), "parameter '", name, "' is an empty array");
    }
    check_device(value.device());
    parameters_.emplace_back(std::move(name), std::move(value));
    return parameters_.size() - 1;
  }

  /// Adds a submodule, taking it over, and returns it. Its name may be a dotted path
  /// ("layers.0"), so that a flat module carries a PyTorch checkpoint's nested names as they
  /// are; its parts must not be empty. Throws InvalidArgument for a null pointer, a name that
  /// is empty, has an empty part or is taken, or one that would give two parameters the same
  /// full name ("layers.0" beside a "layers" holding a "0"); DeviceMismatch when its parameters
  /// live on another device than the module's.
  Module& register_module(std::string name, std::unique_ptr<Module> module) {
    check_name(name, true);
    if (!module)
      ferry::detail::fail<InvalidArgument>(type_name(), "submodule '", name, "' is null");
    if (const std::optional<Device> d = module->find_device()) check_device(*d);
    check_full_names(name, *module);
    modules_.emplace_back(std::move(name), std::move(module));
    return *modules_.back().second;
  }

  /// Adds a submodule moved in (`register_module("layers", Sequential(...))`) and returns it.
  template <class M>
    requires std::derived_from<M, Module> && (!std::is_lvalue_reference_v<M>)
  M& register_module(std::string name, M&& module) {
      return static_cast<M&>(
          register_module(std::move(name), std::make_unique<M>(std::move(module))));
  }

  /// Parameter `index` (from register_parameter); no bounds check. An empty handle once the
  /// module was moved from (its parameters went with it), so that an accessor built on this
  /// one (Linear::weight) gives what a moved-from array is rather than reading past the list.
  const DeviceArray<float>& parameter(std::size_t index) const {
    return moved_from() ? kMovedAway : parameters_[index].second;
  }
  /// Submodule `index`, in registration order; no bounds check.
  const Module& submodule(std::size_t index) const { return *modules_[index].second; }
  Module& submodule(std::size_t index) { return *modules_[index].second; }
  std::size_t submodule_count() const noexcept { return modules_.size(); }

 private:
  friend struct detail::ModuleAccess;

  // What parameter() gives once the module was moved from: a class constant, so the hot path
  // pays no guard of a function-local static.
  static inline const DeviceArray<float> kMovedAway{};

  /// Whether the module was moved from: its parameters, submodules and mode went with the move
  /// (a moved-from shared_ptr is null), so a call on it is refused rather than reading them.
  bool moved_from() const noexcept { return training_ == nullptr; }

  // Recursion is fine here: module trees are a few levels deep, unlike the op graph.
  template <class F>
  void visit(const std::string& prefix, F&& f) const {
    for (const auto& [name, p] : parameters_) f(prefix + name, p);
    for (const auto& [name, m] : modules_) m->visit(prefix + name + ".", f);
  }

  void collect(const std::string& prefix, std::vector<detail::ParameterSlot>& out) {
    for (auto& [name, p] : parameters_) out.push_back({prefix + name, &p});
    for (auto& [name, m] : modules_) m->collect(prefix + name + ".", out);
  }

  /// The device of the first parameter found; every other one is on it too (registration
  /// checks it, and to() and set_parameters() keep it so).
  std::optional<Device> find_device() const {
    if (!parameters_.empty()) return parameters_.front().second.device();
    for (const auto& [name, m] : modules_) {
      if (std::optional<Device> d = m->find_device()) return d;
    }
    return std::nullopt;
  }

  /// A parameter's name is one word; a submodule's (`path`) may be words joined by '.'.
  void check_name(const std::string& name, bool path) const {
    if (!path && (name.empty() || name.find('.') != std::string::npos)) {
      ferry::detail::fail<InvalidArgument>(type_name(), "the name '", name,
                                           "' is empty or holds a '.'");
    }
    if (path && (name.empty() || name.front() == '.' || name.back() == '.' ||
                 name.find("..") != std::string::npos)) {
      ferry::detail::fail<InvalidArgument>(type_name(), "the submodule name '", name,
                                           "' is empty or has an empty part");
    }
    for (const auto& entry : parameters_) {
      if (entry.first == name)
        ferry::detail::fail<InvalidArgument>(type_name(), "the name '", name, "' is taken");
    }
    for (const auto& entry : modules_) {
      if (entry.first == name)
        ferry::detail::fail<InvalidArgument>(type_name(), "the name '", name, "' is taken");
    }
  }

  void check_device(const Device& d) const {
    if (const std::optional<Device> own = find_device(); own && *own != d) {
      ferry::detail::fail<DeviceMismatch>(type_name(), "parameters live on ", own->name(),
                                          ", the new one on ", d.name());
    }
  }

  /// With dotted submodule names, two submodules can reach one full name ("layers.0.weight"
  /// from "layers.0" and from "layers" holding "0"); a checkpoint could not tell them apart.
  void check_full_names(const std::string& name, const Module& module) const {
    std::unordered_set<std::string> taken;
    visit("", [&](std::string full, const DeviceArray<float>&) { taken.insert(std::move(full)); });
    module.visit(name + ".", [&](const std::string& full, const DeviceArray<float>&) {
      if (taken.contains(full)) {
        ferry::detail::fail<InvalidArgument>(type_name(), "submodule '", name,
                                             "' would name a second parameter '", full, "'");
      }
    });
  }

  /// set_parameters and load: `op` names the call in errors, `where` ("" or "'path': ") starts
  /// each message, `source` names what the new values are ("the new value", "the file's").
  void assign(const std::string& op, const NamedParameters& values, const std::string& where,
              std::string_view source) {
    std::vector<detail::ParameterSlot> slots = detail::ModuleAccess::slots(*this);
    std::unordered_map<std::string_view, std::size_t> given;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!given.emplace(values[i].first, i).second) {
        ferry::detail::fail<InvalidArgument>(op, where, "parameter '", values[i].first,
                                             "' is given twice");
      }
    }
    std::vector<const DeviceArray<float>*> chosen;
    chosen.reserve(slots.size());
    for (const detail::ParameterSlot& slot : slots) {
      const auto it = given.find(slot.name);
      if (it == given.end()) {
        ferry::detail::fail<InvalidArgument>(op, where, "parameter '", slot.name, "' is missing");
      }
      const DeviceArray<float>& v = values[it->second].second;
      if (!v.valid()) {
        ferry::detail::fail<InvalidArgument>(op, where, "parameter '", slot.name,
                                             "' is an empty array");
      }
      if (v.shape() != slot.array->shape()) {
        ferry::detail::fail<ShapeError>(op, where, "parameter '", slot.name, "' has shape ",
                                        slot.array->shape(), ", ", source, " ", v.shape());
      }
      const Device from = v.device();
      const Device own = slot.array->device();
      if (from != own) {
        ferry::detail::fail<DeviceMismatch>(op, where, "parameter '", slot.name, "' lives on ",
                                            own.name(), ", ", source, " on ", from.name());
      }
      chosen.push_back(&v);
    }
    if (values.size() != slots.size()) {  // every own name was found: the rest are unknown
      for (const auto& [name, v] : values) {
        bool known = false;
        for (const detail::ParameterSlot& slot : slots) known = known || slot.name == name;
        if (!known)
          ferry::detail::fail<InvalidArgument>(op, where, "no parameter is named '", name, "'");
      }
    }
    for (std::size_t i = 0; i < slots.size(); ++i) *slots[i].array = *chosen[i];
  }

  std::vector<std::pair<std::string, DeviceArray<float>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> modules_;
  // Shared with the program traces that read it, which check it before each replay (an
  // atomic: a replay on another thread may read it while this thread calls train()). Null
  // once the module was moved from: see moved_from().
  std::shared_ptr<std::atomic<bool>> training_ = std::make_shared<std::atomic<bool>>(true);
};

namespace detail {

inline std::vector<ParameterSlot> ModuleAccess::slots(Module& m) {
  std::vector<ParameterSlot> out;
  m.collect("", out);
  return out;
}

}  // namespace detail
}  // namespace ferry::nn
