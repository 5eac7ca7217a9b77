#pragma once
// Gradient checks through the collectives: functions of one array a device of a mesh (a
// std::vector of shards, shard i on device i), their value_and_grad against central finite
// differences, and vector-Jacobian products of a collective's four shards. Shared by the tests
// of tensor parallelism and of gradients through collectives.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/gradcheck.hpp"

namespace ferry_test {

using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Placements;

/// On each device of `mesh`, a (2, 4) array of small multiples of 1/4 (exact sums).
inline std::vector<D> quarters(const Mesh& mesh, int salt) {
  std::vector<D> out;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    std::vector<double> v(8);
    for (std::size_t e = 0; e < v.size(); ++e) {
      v[e] =
          static_cast<double>((static_cast<int>(e) * 5 + static_cast<int>(i) * 3 + salt) % 13 - 6) *
          0.25;
    }
    out.push_back(ferry::to_device(mesh.device(i), v, Shape{2, 4}));
  }
  return out;
}

inline std::vector<HostArray<double>> hosts(const std::vector<D>& v) {
  std::vector<HostArray<double>> out;
  for (const D& d : v) out.push_back(d.to_host());
  return out;
}

/// ferry::vjp of `collective` (of the four shards, giving four) at `xs` with cotangents `cs`.
template <class F>
std::vector<D> vjp_of(const Mesh& mesh, F collective, const std::vector<D>& xs,
                      const std::vector<D>& cs) {
  auto f = [&](const std::vector<D>& in) {
    const MeshArray<double> out = collective(MeshArray<double>::from_shards(mesh, in));
    return std::tuple{out.shard(0), out.shard(1), out.shard(2), out.shard(3)};
  };
  auto [ys, dxs] = ferry::vjp(f, xs, std::tuple{cs[0], cs[1], cs[2], cs[3]});
  for (std::size_t i = 0; i < dxs.size(); ++i)
    EXPECT_EQ(dxs[i].device(), mesh.device(static_cast<std::int64_t>(i)));
  return dxs;
}

/// sum over devices i of (i + 1) * sum(shard i * weights), on device 0: a scalar that weighs
/// every element of every shard differently.
inline D total(const MeshArray<double>& y) {
  const Mesh mesh = y.mesh();
  D acc;
  for (std::int64_t i = 0; i < y.size(); ++i) {
    const D part = (weighed(y.shard(i)) * static_cast<double>(i + 1)).to(mesh.device(0));
    acc = acc.valid() ? acc + part : part;
  }
  return acc;
}

/// value_and_grad of total(collective(shards)), shard i on device i drawn of shape
/// `shapes[i]`, against central differences within a relative 1e-6 (as ferry_test::check).
template <class F>
void check_through(const Mesh& mesh, const std::vector<Shape>& shapes, F collective) {
  std::vector<Input> inputs;
  for (const Shape& s : shapes) inputs.push_back(draw(s));
  auto place = [&]() {
    std::vector<D> v;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      v.push_back(ferry::to_device(mesh.device(static_cast<std::int64_t>(i)), inputs[i].values,
                                   inputs[i].shape));
    }
    return v;
  };
  auto f = [&](const std::vector<D>& xs) {
    return total(collective(MeshArray<double>::from_shards(mesh, xs)));
  };
  auto [value, grads] = ferry::value_and_grad(f)(place());
  EXPECT_DOUBLE_EQ(scalar(value), scalar(f(place())));
  ASSERT_EQ(grads.size(), inputs.size());
  const double h = 1e-5;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    SCOPED_TRACE("shard " + std::to_string(k));
    EXPECT_EQ(grads[k].device(), mesh.device(static_cast<std::int64_t>(k)));
    ASSERT_EQ(grads[k].shape(), inputs[k].shape);
    const std::vector<double> analytic = host(grads[k]);
    for (std::size_t e = 0; e < inputs[k].values.size(); ++e) {
      const double v = inputs[k].values[e];
      inputs[k].values[e] = v + h;
      const double up = scalar(f(place()));
      inputs[k].values[e] = v - h;
      const double down = scalar(f(place()));
      inputs[k].values[e] = v;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[e], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "element " << e;
    }
  }
}

inline std::vector<Shape> four(Shape s) { return {s, s, s, s}; }

/// `a`'s shards placed as an array of shape `global` by `from`, redistributed to `to`.
inline auto redistributed(Shape global, Placements from, Placements to) {
  return [=](const MeshArray<double>& a) {
    return ferry::redistribute(MeshArray<double>::from_shards(a.mesh(), a.shards(), global, from),
                               to);
  };
}

}  // namespace ferry_test
