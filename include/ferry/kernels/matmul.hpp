#pragma once
// Matrix multiplication of one row-major pair, blocked for the cache. Every output element sums
// its products in increasing k, the order a textbook loop uses, so results do not depend on the
// blocking. Accumulation: float for float and bfloat16, double for double, and unsigned
// (wrapping) for integers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ferry/core/bfloat16.hpp"

namespace ferry::kernels {

template <class T>
struct matmul_acc {
  using type = T;
};
template <>
struct matmul_acc<bfloat16> {
  using type = float;
};
template <>
struct matmul_acc<std::int32_t> {
  using type = std::uint32_t;
};
template <>
struct matmul_acc<std::int64_t> {
  using type = std::uint64_t;
};
template <class T>
using matmul_acc_t = typename matmul_acc<T>::type;

/// c (m x n) = a (m x k) * b (k x n), all contiguous row-major.
template <class T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  using A = matmul_acc_t<T>;
  // Panels sized so one block of b (kKBlock x kNBlock accumulators) stays in L2 while every
  // row of a streams past it.
  constexpr std::int64_t kKBlock = 128;
  constexpr std::int64_t kNBlock = 512;
  const auto mn = static_cast<std::size_t>(m * n);
  std::vector<A> acc(mn, A(0));
  std::vector<A> b_conv;
  const A* bp = nullptr;
  if constexpr (std::is_same_v<A, T>) {
    bp = b;
  } else {
    b_conv.resize(static_cast<std::size_t>(k * n));
    for (std::size_t i = 0; i < b_conv.size(); ++i) b_conv[i] = static_cast<A>(b[i]);
    bp = b_conv.data();
  }
  for (std::int64_t j0 = 0; j0 < n; j0 += kNBlock) {
    const std::int64_t j1 = std::min(n, j0 + kNBlock);
    for (std::int64_t p0 = 0; p0 < k; p0 += kKBlock) {
      const std::int64_t p1 = std::min(k, p0 + kKBlock);
      for (std::int64_t i = 0; i < m; ++i) {
        A* row = acc.data() + i * n;
        for (std::int64_t p = p0; p < p1; ++p) {
          const A av = static_cast<A>(a[i * k + p]);
          const A* brow = bp + p * n;
          for (std::int64_t j = j0; j < j1; ++j) row[j] += av * brow[j];
        }
      }
    }
  }
  for (std::size_t i = 0; i < mn; ++i) c[i] = static_cast<T>(acc[i]);
}

}  // namespace ferry::kernels
