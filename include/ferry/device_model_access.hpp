#pragma once
// The definitions of the seam device.hpp declares between a Device and its model: the model is
// a detail::DeviceModel, built and asked here, so that only this file (and what it includes:
// the simulator, the cost model, the timeline) needs the model's code. Header-only, device.hpp
// includes it; in the separate-compilation mode, ferry/src.hpp does, in one unit.

#include <memory>
#include <string>

#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/model/device_model.hpp"

namespace ferry::detail {

namespace model_access {
/// The simulator of a modeled device; InvalidArgument for an observer that is not ferry's model
/// (a device made through DeviceAccess::make with a model of its own).
inline Simulator& simulator_of(StepObserver& model, const std::string& device) {
  auto* m = dynamic_cast<DeviceModel*>(&model);
  if (m == nullptr) fail<InvalidArgument>("Device", device, " has no timing model");
  return m->simulator();
}
}  // namespace model_access

FERRY_DECL std::unique_ptr<StepObserver> make_device_model(const DeviceSpec& spec,
                                                           const std::string& name) {
  return std::make_unique<DeviceModel>(spec, name);
}

FERRY_DECL DeviceSpec model_spec(StepObserver& model, const std::string& device) {
  return model_access::simulator_of(model, device).spec();
}

FERRY_DECL Duration model_solo_duration(StepObserver& model, const Cost& cost, DType dtype) {
  auto* m = dynamic_cast<DeviceModel*>(&model);
  if (m == nullptr) return Duration::zero();
  return step_duration(m->simulator().spec(), StepKind::compute, cost, dtype);
}

FERRY_DECL DeviceStats model_stats(StepObserver& model, const std::string& device) {
  return model_access::simulator_of(model, device).stats();
}

FERRY_DECL void model_reset_stats(StepObserver& model, const std::string& device) {
  model_access::simulator_of(model, device).reset_stats();
}

FERRY_DECL std::string model_trace_json(StepObserver& model, const std::string& device) {
  return model_access::simulator_of(model, device).trace_json();
}

FERRY_DECL std::string model_timeline_text(StepObserver& model, const std::string& device) {
  return model_access::simulator_of(model, device).timeline_text();
}

}  // namespace ferry::detail
