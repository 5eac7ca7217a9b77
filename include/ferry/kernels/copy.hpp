#pragma once
// Data movement kernels: a strided gather (transpose and permute), and the block copies behind
// slice and concat.

#include <array>
#include <cstdint>
#include <cstring>
#include <span>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// out (contiguous, of `shape`) gathers `in` read through `in_strides`.
template <class T>
void gather(const T* in, T* out, const Shape& shape, const Strides& in_strides) {
  const std::array<Strides, 2> strides{detail::row_major_strides(shape), in_strides};
  for_each_run(shape, strides, [&](const auto& off, const auto& step, std::int64_t n) {
    T* o = out + off[0];
    const T* src = in + off[1];
    for (std::int64_t i = 0; i < n; ++i) o[i] = src[i * step[1]];
  });
}

/// Copies `count` contiguous blocks of `block` bytes, block i from src + i * src_pitch to
/// dst + i * dst_pitch. Slice and concat are this with different pitches.
inline void copy_blocks(const std::byte* src, std::int64_t src_pitch, std::byte* dst,
                        std::int64_t dst_pitch, std::int64_t count, std::int64_t block) noexcept {
  if (block == 0) return;
  for (std::int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + i * dst_pitch, src + i * src_pitch, static_cast<std::size_t>(block));
  }
}

}  // namespace ferry::kernels
