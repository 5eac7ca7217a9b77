#pragma once
// The meshes and shards the spmd tests (test_spmd, test_spmd_jit) run on, and their bitwise
// comparison of two runs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/meshes.hpp"

namespace ferry_test {

/// A ring of 4 tiny devices whose axis is named "i".
inline ferry::MeshSpec ring4() { return with_axes(ring(4), {"i"}); }

/// 2 x 2 tiny devices, axes "dp" and "tp", each a line.
inline ferry::MeshSpec grid2x2() { return with_axes(grid(2, 2), {"dp", "tp"}); }

/// Values whose sums round (so the order of additions shows in the bits).
inline std::vector<float> rounding_values(std::int64_t n, std::int64_t seed) {
  std::vector<float> v;
  for (std::int64_t k = 0; k < n; ++k)
    v.push_back(static_cast<float>(std::sin(0.7 * static_cast<double>(seed * 31 + k)) * 3.1));
  return v;
}

/// Device k's shard: rows x cols of rounding_values(.., salt + k).
inline ferry::MeshArray<float> rounding_shards(const ferry::Mesh& mesh, std::int64_t rows,
                                               std::int64_t cols, std::int64_t salt = 0) {
  std::vector<ferry::DeviceArray<float>> s;
  for (std::int64_t k = 0; k < mesh.size(); ++k) {
    s.push_back(ferry::to_device(mesh.device(k), rounding_values(rows * cols, salt + k),
                                 ferry::Shape{rows, cols}));
  }
  return ferry::MeshArray<float>::from_shards(mesh, std::move(s));
}

/// Expects two mesh arrays to hold the same shapes and the same bits.
inline void expect_same_bits(const ferry::MeshArray<float>& a, const ferry::MeshArray<float>& b) {
  const auto ha = a.to_host();
  const auto hb = b.to_host();
  ASSERT_EQ(ha.size(), hb.size());
  for (std::size_t k = 0; k < ha.size(); ++k) {
    SCOPED_TRACE("device " + std::to_string(k));
    ASSERT_EQ(ha[k].shape(), hb[k].shape());
    EXPECT_EQ(std::memcmp(ha[k].data().data(), hb[k].data().data(),
                          static_cast<std::size_t>(ha[k].shape().numel()) * sizeof(float)),
              0);
  }
}

}  // namespace ferry_test
