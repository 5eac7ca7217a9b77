#pragma once
// The data the MPI tests compare bit for bit with one process: values whose sums round
// differently in another order (a collective that reduced in any order but the mesh's would not
// match), the same on every rank for the same seed, and the bitwise comparison.

#include <ferry/ferry.hpp>

#include <cstdint>
#include <cstring>

namespace ferry_test {

/// Values of `shape` from `seed`, of magnitudes from 2^-1 to 2^12, the same on every rank.
template <class T>
ferry::HostArray<T> values(const ferry::Shape& shape, std::uint32_t seed) {
  ferry::HostArray<T> out(shape);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : out.data()) {
    x = x * 1664525u + 1013904223u;
    const double mantissa = static_cast<double>(x >> 8) / static_cast<double>(1u << 24);
    v = static_cast<T>(static_cast<float>((mantissa - 0.5) * (1 << (x % 13))));
  }
  return out;
}

/// Whether `a` and `b` have one shape and the same bits. An empty array may have no buffer, and
/// memcmp may not be given a null pointer even for no bytes.
template <class T>
bool same_bits(const ferry::HostArray<T>& a, const ferry::HostArray<T>& b) {
  return a.shape() == b.shape() &&
         (a.data().empty() ||
          std::memcmp(a.data().data(), b.data().data(), a.data().size() * sizeof(T)) == 0);
}

}  // namespace ferry_test
