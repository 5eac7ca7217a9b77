#pragma once
// Reading an array in tests: its elements as a plain vector, to compare with a reference, and
// the buffer that holds a device array's value, to see whether an op wrote in place.

#include <cstddef>
#include <vector>

#include <ferry/ferry.hpp>

namespace ferry_test {

/// `h`'s elements in row-major order.
template <class T>
std::vector<T> values_of(const ferry::HostArray<T>& h) {
  return std::vector<T>(h.data().begin(), h.data().end());
}

/// `a`'s elements in row-major order, exported to the host (so computed first).
template <class T>
std::vector<T> values_of(const ferry::DeviceArray<T>& a) {
  return values_of(a.to_host());
}

/// The start of the buffer under `a`'s value, once it is computed: equal for two arrays when
/// one was written into the other's memory (a donation, a view).
template <class T>
const std::byte* buffer_of(const ferry::DeviceArray<T>& a) {
  ferry::wait(a);
  return ferry::detail::ArrayAccess::step(a)->output().data();
}

}  // namespace ferry_test
