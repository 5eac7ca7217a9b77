#pragma once
// Reading a modeled device's timeline in tests: the slice of each command, by op name.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/model/device_model.hpp>  // not in ferry.hpp's parse in the separate mode

namespace ferry_test {

using Slice = ferry::detail::Timeline::Slice;

/// Every slice of `dev`'s current window, oldest first (host waits on track 0).
inline std::vector<Slice> slices_of(const ferry::Device& dev) {
  return ferry::detail::DeviceAccess::state(dev)->with_observer([](ferry::detail::StepObserver& o) {
    return dynamic_cast<ferry::detail::DeviceModel&>(o).simulator().slices();
  });
}

/// The engine slices (not host waits) named `name`, in start order.
inline std::vector<Slice> named(const std::vector<Slice>& all, const std::string& name) {
  std::vector<Slice> out;
  for (const Slice& s : all) {
    if (s.track != 0 && s.name == name) out.push_back(s);
  }
  return out;
}

/// [start, end) of a slice in nanoseconds, for EXPECT_EQ against hand-computed pairs.
inline std::pair<long long, long long> span_of(const Slice& s) {
  return {static_cast<long long>(s.start.count()), static_cast<long long>(s.end.count())};
}

/// The track of engine `name` ("h2d", "compute 0", ...) on a device with `units` compute units.
inline std::size_t track_of(const std::string& name) {
  if (name == "h2d") return 1;
  if (name == "d2h") return 2;
  if (name == "d2d") return 3;
  return 4 + static_cast<std::size_t>(std::stoi(name.substr(std::string("compute ").size())));
}

}  // namespace ferry_test
