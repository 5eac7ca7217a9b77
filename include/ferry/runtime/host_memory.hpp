#pragma once
// Host memory: how much the machine has, and the one place large blocks are taken from the
// system, so that running out of it is a ferry::OutOfHostMemory naming the op.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <string_view>

#include "ferry/core/error.hpp"

namespace ferry::detail {

/// The host's physical memory in bytes (read once, from /proc/meminfo), or 0 where the system
/// does not say. Reading a file keeps the library on the standard library alone; C's stdio
/// reads it because <fstream> would cost every unit that includes ferry a tenth of a second.
inline std::uint64_t host_memory_bytes() noexcept {
  static const std::uint64_t bytes = []() noexcept -> std::uint64_t {
    std::FILE* in = std::fopen("/proc/meminfo", "r");
    if (in == nullptr) return 0;
    char line[256];
    unsigned long long kib = 0;
    std::uint64_t found = 0;
    while (found == 0 && std::fgets(line, sizeof line, in) != nullptr) {
      if (std::sscanf(line, "MemTotal: %llu kB", &kib) == 1) found = kib * 1024;
    }
    std::fclose(in);
    return found;
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

/// What `take` returns, where `take` asks the system for `bytes` of host memory (a new block, a
/// vector's reserve). Throws OutOfHostMemory naming `op` when the host cannot give them: before
/// calling it past what the host has, and for the std::bad_alloc it throws.
template <class Take>
decltype(auto) take_host(std::size_t bytes, std::string_view op, Take&& take) {
  refuse_beyond_host(bytes, op);
  try {
    return take();
  } catch (const std::bad_alloc&) {
    throw OutOfHostMemory(std::string(op), bytes, "the system refused it");
  }
}

/// `bytes` (> 0) from the system, aligned to `alignment`. Throws OutOfHostMemory naming `op`
/// when the host cannot give them.
inline void* allocate_host(std::size_t bytes, std::size_t alignment, std::string_view op) {
  return take_host(bytes, op, [&] { return ::operator new(bytes, std::align_val_t{alignment}); });
}

}  // namespace ferry::detail
