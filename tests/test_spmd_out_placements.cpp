// ferry::spmd(mesh, fn, out_placements): spmd's results placed as JAX's out_specs place
// shard_map's. The global shape comes from the shards (array_split's sizes along a Shard axis);
// the placed result against the same program on the whole array; jit of a placed spmd; a loss
// placed Replicate by spmd taken by value_and_grad; shards that cannot form the global array,
// and placements of the wrong count, as typed errors naming spmd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"
#include "support/spmd_cases.hpp"

namespace test_spmd_out_placements {

namespace {

using ferry::DeviceArray;
using ferry::HostArray;
using ferry::InvalidArgument;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Partial;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry::ShapeError;
using ferry_test::expect_error;
using ferry_test::grid2x2;
using ferry_test::ring4;
using ferry_test::values;
using D = const DeviceArray<float>&;

std::vector<float> all(const HostArray<float>& h) { return {h.data().begin(), h.data().end()}; }

TEST(SpmdOutPlacements, ResultsArePlacedWithTheGlobalShapeTheirShardsForm) {
  // 10 rows on 4 devices: array_split's 3, 3, 2, 2.
  Mesh mesh = Mesh::modeled(ring4());
  const HostArray<float> hx = values(Shape{10, 3}, 1);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}});
  ferry_test::expect_balanced_after(mesh, [&] {
    auto [twice, total, local] = ferry::spmd(
        mesh,
        [](D s) {
          const DeviceArray<float> part = ferry::sum(s);
          return std::tuple{s * 2.0, ferry::all_reduce(part, "i"), part};
        },
        {{Shard{0}}, {Replicate{}}, {Partial{}}})(x);
    EXPECT_EQ(twice.global_shape(), (Shape{10, 3}));
    EXPECT_EQ(twice.placements(), (ferry::Placements{Shard{0}}));
    EXPECT_EQ(total.global_shape(), Shape{});
    EXPECT_EQ(local.placements(), (ferry::Placements{Partial{}}));
    float sum = 0;
    std::vector<float> want(hx.data().begin(), hx.data().end());
    for (float& v : want) {
      sum += v;  // multiples of 1/4: every order of additions gives this float
      v *= 2;
    }
    EXPECT_EQ(all(ferry::to_host(twice)), want);
    EXPECT_EQ(ferry::to_host(total)(), sum);
    EXPECT_EQ(ferry::to_host(local)(), sum);
    // Without out placements, as before: no global view.
    EXPECT_FALSE(ferry::spmd(mesh, [](D s) { return s * 2.0; })(x).placed());
  });
}

TEST(SpmdOutPlacements, OnTwoAxesAndUnderJit) {
  // Rows cut along dp, copies along tp: each device doubles its block.
  Mesh mesh = Mesh::modeled(grid2x2());
  const HostArray<float> hx = values(Shape{5, 2}, 3);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}, Replicate{}});
  auto fn = ferry::spmd(mesh, [](D s) { return s * 2.0; }, {{Shard{0}, Replicate{}}});
  auto jitted = ferry::jit(fn);
  std::vector<float> want(hx.data().begin(), hx.data().end());
  for (float& v : want) v *= 2;
  ferry::wait(x);
  // The trace and its replay give every device its memory back, each bound below its makespan.
  ferry_test::expect_balanced_after(mesh, [&] {
    for (int run = 0; run < 2; ++run) {  // traced, then replayed
      const MeshArray<float> y = jitted(x);
      EXPECT_EQ(y.global_shape(), (Shape{5, 2}));
      EXPECT_EQ(y.placements(), (ferry::Placements{Shard{0}, Replicate{}}));
      EXPECT_EQ(all(ferry::to_host(y)), want);
    }
    EXPECT_EQ(jitted.cache_hits(), 1U);
    EXPECT_EQ(all(ferry::to_host(fn(x))), want);
  });
}

TEST(SpmdOutPlacements, ALossPlacedReplicateBySpmdIsDifferentiatedOnEveryDevice) {
  // loss = sum(x * x) over the whole array, all-reduced inside spmd: d/dx = 2 x.
  Mesh mesh = Mesh::modeled(ring4());
  const HostArray<float> hx = values(Shape{10, 3}, 1);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}});
  ferry::wait(x);
  ferry_test::expect_balanced_after(mesh, [&] {
    auto [loss, dx] = ferry::value_and_grad([&](const MeshArray<float>& a) {
      return ferry::spmd(mesh, [](D s) { return ferry::all_reduce(ferry::sum(s * s), "i"); },
                         {{Replicate{}}})(a);
    })(x);
    float want_loss = 0;
    std::vector<float> want(hx.data().begin(), hx.data().end());
    for (float& v : want) {
      want_loss += v * v;
      v *= 2;
    }
    EXPECT_EQ(ferry::to_host(loss)(), want_loss);
    EXPECT_EQ(dx.placements(), x.placements());
    EXPECT_EQ(all(ferry::to_host(dx)), want);
  });
}

TEST(SpmdOutPlacements, ShardsThatCannotFormTheGlobalArrayAreTypedErrors) {
  Mesh mesh = Mesh::modeled(ring4());
  const MeshArray<float> x = ferry::distribute(values(Shape{10, 3}, 1), mesh, {Shard{0}});
  // Device k keeps rows [0, k + 1): 1, 2, 3, 4 rows, 10 in all, but array_split gives 3, 3, 2, 2.
  auto ragged = [](D s) {
    return ferry::slice(s, 0, 0, std::min<std::int64_t>(ferry::axis_index("i") + 1, 2));
  };
  expect_error<ShapeError>(
      [&] { ferry::spmd(mesh, [](D s) { return s; }, {{Replicate{}}})(x); },
      "[spmd] result 0 of device 2 has shape (2, 3); out placements (Replicate()) of global "
      "shape (3, 3) (from the shards along each Shard axis) give device 2 (2) the shape (3, 3)");
  expect_error<ShapeError>(
      [&] { ferry::spmd(mesh, ragged, {{Shard{0}}})(x); },
      "[spmd] result 0 of device 0 has shape (1, 3); out placements (Shard(0)) of global "
      "shape (7, 3) (from the shards along each Shard axis) give device 0 (0) the shape (2, 3)");
  expect_error<InvalidArgument>(
      [&] { ferry::spmd(mesh, [](D s) { return s; }, {{Shard{2}}})(x); },
      "[spmd] Shard(2) on mesh axis 0 is out of range for an array of rank 2 (3, 3)");
  expect_error<InvalidArgument>(
      [&] { ferry::spmd(mesh, [](D s) { return s; }, {{Shard{0}, Replicate{}}})(x); },
      "[spmd] placements (Shard(0), Replicate()) give 2 placements for mesh ring (4) of 1 axis; "
      "give one per mesh axis");
  int ran = 0;
  expect_error<InvalidArgument>(
      [&] {
        ferry::spmd(mesh, [&](D s) { ++ran; return std::pair{s, s}; }, {{Shard{0}}})(x);
      },
      "[spmd] out_placements give placements for 1 result, the function returns 2 arrays: "
      "give one Placements per result");
  EXPECT_EQ(ran, 0);  // refused before any device ran
}

}  // namespace

}  // namespace test_spmd_out_placements
