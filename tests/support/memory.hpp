#pragma once
// Memory in tests: the bytes ferry's buffers really hold, once the workers have let go, and
// what a device's model says it holds.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <ferry/ferry.hpp>

namespace ferry_test {

/// Buffer::allocated_bytes() once it is back at `level`, or whatever it is after 30 s: when an
/// export returns, workers may still be letting go of the last inputs they read.
inline std::size_t allocated_bytes_back_at(std::size_t level) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ferry::detail::Buffer::allocated_bytes() != level &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ferry::detail::Buffer::allocated_bytes();
}

/// Buffer::allocated_bytes() once no buffer has come or gone for 20 ms (or whatever it is after
/// 30 s): the level to measure a program against when earlier arrays were just dropped, whose
/// last references workers may still be letting go of.
inline std::size_t settled_allocated_bytes() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::size_t level = ferry::detail::Buffer::allocated_bytes();
  for (int still = 0; still < 20 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::size_t now = ferry::detail::Buffer::allocated_bytes();
    still = now == level ? still + 1 : 0;
    level = now;
  }
  return level;
}

/// A device's modeled memory in use: {DRAM, L1} bytes.
using DeviceMemoryInUse = std::pair<std::uint64_t, std::uint64_t>;

/// Several devices' DeviceMemoryInUse, in their order (a mesh's: row-major).
using MemoryInUse = std::vector<DeviceMemoryInUse>;

/// What `dev`'s model holds now, once it has decided what can progress (its stats()): take it
/// before a program and compare once the program's arrays are gone.
inline DeviceMemoryInUse memory_in_use(const ferry::Device& dev) {
  const ferry::DeviceStats s = dev.stats();
  return {s.dram_bytes_in_use, s.l1_bytes_in_use};
}

/// Runs `program` on `dev` and checks the model's books once its arrays (its locals) are gone:
/// the device's memory back to where it was, and no schedule shorter than its lower bound (the
/// one-device form of meshes.hpp's expect_balanced_after).
template <class Program>
void expect_balanced_after(const ferry::Device& dev, Program&& program) {
  const DeviceMemoryInUse before = memory_in_use(dev);
  program();
  EXPECT_EQ(memory_in_use(dev), before) << "{DRAM, L1} bytes in use on " << dev.name();
  const ferry::DeviceStats s = dev.stats();
  EXPECT_LE(s.lower_bound, s.makespan) << dev.name();
}

}  // namespace ferry_test
