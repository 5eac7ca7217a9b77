#pragma once
// Real memory in tests: the bytes ferry's buffers hold, once the workers have let go.

#include <chrono>
#include <cstddef>
#include <thread>

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

}  // namespace ferry_test
