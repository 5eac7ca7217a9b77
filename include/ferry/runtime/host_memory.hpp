#pragma once
// Host memory: how much the machine has, and the one place large blocks are taken from the
// system, so that running out of it is a ferry::OutOfHostMemory naming the op.

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <string_view>

#include "ferry/core/error.hpp"

namespace ferry::detail {

/// The host's physical memory in bytes (read once, from /proc/meminfo), or 0 where the system
/// does not say. Reading a file keeps the library on the standard library alone.
inline std::uint64_t host_memory_bytes() noexcept {
  static const std::uint64_t bytes = []() noexcept -> std::uint64_t {
    try {
      std::ifstream in("/proc/meminfo");
      std::string key;
      std::uint64_t kib = 0;
      while (in >> key >> kib) {
        if (key == "MemTotal:") return kib * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      }
    } catch (...) {  // no memory to read a file with: say nothing
    }
    return 0;
  }();
  return bytes;
}

/// Throws OutOfHostMemory naming `op` when `bytes` is more than the host has: such a request
/// can never be met, and a system that overcommits would grant it and fail at first touch.
inline void refuse_beyond_host(std::size_t bytes, std::string_view op) {
  const std::uint64_t host = host_memory_bytes();
  if (host != 0 && bytes > host) {
    throw OutOfHostMemory(std::string(op), bytes,
                          "more than the host's " + std::to_string(host) + " bytes");
  }
}

/// `bytes` (> 0) from the system, aligned to `alignment`. Throws OutOfHostMemory naming `op`
/// when the host cannot give them.
inline void* allocate_host(std::size_t bytes, std::size_t alignment, std::string_view op) {
  refuse_beyond_host(bytes, op);
  try {
    return ::operator new(bytes, std::align_val_t{alignment});
  } catch (const std::bad_alloc&) {
    throw OutOfHostMemory(std::string(op), bytes, "the system refused it");
  }
}

}  // namespace ferry::detail
