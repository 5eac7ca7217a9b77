#pragma once
// Small meshes the mesh tests share: tiny devices on links whose timings are round numbers, so
// a test can work its link times out by hand.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include <ferry/ferry.hpp>

namespace ferry_test {

/// `n` tiny devices on a ring of links at 1 byte a nanosecond, 100 ns a hop.
inline ferry::MeshSpec ring(std::int64_t n) {
  ferry::MeshSpec m;
  m.name = "ring";
  m.devices.assign(static_cast<std::size_t>(n), ferry::specs::tiny());
  m.shape = ferry::MeshShape{n};
  m.topology = {ferry::Topology::ring};
  m.link.bytes_per_second = 1e9;
  m.link.hop_latency = std::chrono::nanoseconds(100);
  return m;
}

/// Four tiny devices as 2 x 2, each axis a line, on ring(4)'s links.
inline ferry::MeshSpec square() {
  ferry::MeshSpec m = ring(4);
  m.name = "square";
  m.shape = ferry::MeshShape{2, 2};
  m.topology = {ferry::Topology::line, ferry::Topology::line};
  return m;
}

}  // namespace ferry_test
