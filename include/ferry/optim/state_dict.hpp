#pragma once
// Saving and restoring an optimizer's state (Optimizer::state_dict, load_state_dict; declared
// and documented in optim/optimizer.hpp): the state under PyTorch's names, and a load that
// checks every entry before it takes any, so that a load that throws changes nothing.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/optim/optimizer.hpp"

namespace ferry::optim {

inline NamedArrays Optimizer::state_dict() const {
  refuse_mesh("state_dict", "see mesh_state()");
  NamedArrays out;
  for (std::size_t i = 0; i < state_parameters(); ++i) {
    for (std::size_t k = 0; k < keys_.size(); ++k) {
      out.emplace_back(parameter_name(i) + "." + keys_[k], state_[k][i]);
    }
  }
  out.emplace_back("step", to_device(Device::cpu(), std::vector<std::int64_t>{steps_}, Shape{}));
  return out;
}

inline void Optimizer::load_state_dict(const NamedArrays& saved) {
  const std::string op = name_ + "::load_state_dict";
  refuse_mesh("load_state_dict", "load state only into an optimizer of DeviceArray parameters");
  ferry::detail::note_side_effect(op);
  // Sort the entries: "step", or "<parameter>.<key>".
  struct Entry {
    std::string_view parameter;
    const AnyDeviceArray* array;
  };
  std::unordered_map<std::string_view, std::size_t> given;
  std::vector<Entry> entries;
  const AnyDeviceArray* count_entry = nullptr;
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const auto& [name, array] = saved[i];
    if (!given.emplace(name, i).second)
      ferry::detail::fail<InvalidArgument>(op, "'", name, "' is given twice");
    if (!array.valid()) ferry::detail::fail<InvalidArgument>(op, "'", name, "' is an empty array");
    if (name == "step") {
      count_entry = &array;
      continue;
    }
    const std::size_t dot = name.rfind('.');
    bool is_key = false;
    if (dot != std::string::npos && dot > 0) {
      const std::string_view key = std::string_view(name).substr(dot + 1);
      for (const std::string& k : keys_) is_key = is_key || key == k;
    }
    if (!is_key) {
      ferry::detail::fail<InvalidArgument>(op, "'", name, "' is no entry of ", name_,
                                           "'s state, which holds ", entry_forms());
    }
    if (array.dtype() != DType::float32) {
      ferry::detail::fail<InvalidArgument>(op, "'", name, "' holds ", name_of(array.dtype()),
                                           ", not float32");
    }
    entries.push_back({std::string_view(name).substr(0, dot), &array});
  }
  if (count_entry == nullptr) ferry::detail::fail<InvalidArgument>(op, "the state has no 'step'");
  if (count_entry->dtype() != DType::int64) {
    ferry::detail::fail<InvalidArgument>(op, "'step' holds ", name_of(count_entry->dtype()),
                                         ", not int64");
  }
  if (count_entry->shape().rank() != 0) {
    ferry::detail::fail<ShapeError>(op, "'step' has shape ", count_entry->shape(),
                                    ", not () (a scalar)");
  }

  // The parameters the state is for: those the optimizer knows, or else those it names.
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  if (known_) {
    for (std::size_t i = 0; i < shapes_.size(); ++i) names.push_back(parameter_name(i));
    shapes = shapes_;
  } else {
    std::unordered_set<std::string_view> seen;
    for (const Entry& e : entries) {
      if (seen.insert(e.parameter).second) {
        names.emplace_back(e.parameter);
        shapes.push_back(e.array->shape());
      }
    }
  }
  // [key][parameter]: every key of every parameter, of its shape.
  std::vector<std::vector<const AnyDeviceArray*>> chosen(
      keys_.size(), std::vector<const AnyDeviceArray*>(names.size()));
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t k = 0; k < keys_.size(); ++k) {
      const std::string entry = names[i] + "." + keys_[k];
      const auto it = given.find(entry);
      if (it == given.end()) {
        ferry::detail::fail<InvalidArgument>(op, "the state has no '", entry, "' for parameter '",
                                             names[i], "'");
      }
      const AnyDeviceArray& a = saved[it->second].second;
      if (a.shape() != shapes[i]) {
        ferry::detail::fail<ShapeError>(op, "'", entry, "' has shape ", a.shape(), ", parameter '",
                                        names[i], "' ", shapes[i]);
      }
      chosen[k][i] = &a;
    }
  }
  if (entries.size() != names.size() * keys_.size()) {  // every key was found: the rest are unknown
    for (const Entry& e : entries) {
      bool known = false;
      for (const std::string& n : names) known = known || n == e.parameter;
      if (!known) {
        ferry::detail::fail<InvalidArgument>(op, "the state is for a parameter '", e.parameter,
                                             "', which ", name_, " does not step");
      }
    }
  }
  const std::int64_t count = count_entry->as<std::int64_t>().to_host()();
  if (count < 0)
    ferry::detail::fail<InvalidArgument>(op, "'step' is ", count, ": it must not be negative");

  // Everything was checked: take it over, built aside first so that a throw changes nothing.
  std::vector<std::vector<DeviceArray<float>>> taken(keys_.size());
  for (std::size_t k = 0; k < keys_.size(); ++k) {
    taken[k].reserve(names.size());
    for (const AnyDeviceArray* a : chosen[k]) taken[k].push_back(a->as<float>());
  }
  if (!known_ && !names.empty()) {
    names_ = std::move(names);
    shapes_ = std::move(shapes);
    known_ = true;
  }
  state_ = std::move(taken);
  steps_ = count;
}

inline std::string Optimizer::entry_forms() const {
  if (keys_.empty()) return "'step' only";
  std::string out;
  for (const std::string& k : keys_) out += "'<parameter>." + k + "', ";
  out.replace(out.size() - 2, 2, " and ");
  return out + "'step'";
}

}  // namespace ferry::optim
