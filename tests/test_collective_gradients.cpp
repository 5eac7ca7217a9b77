// Gradients through reduce_scatter and all_to_all, and the redistributions made of them (Partial
// to Shard, Shard(i) to Shard(j)), against central finite differences, and the reduce-scatter's
// vector-Jacobian product as an all-gather of the cotangents.
//
// Both collectives cut each member's shard before sending it; the cut must be recorded on the
// tape (detail::recorded_slice, in mesh/collective_support.hpp), or every gradient through them is
// silently zero, as it was before these checks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/mesh_gradcheck.hpp"
#include "support/meshes.hpp"

namespace {

using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::ReduceOp;
using ferry::Shape;
using ferry::Shard;
using ferry::Topology;
using ferry_test::check_through;
using ferry_test::D;
using ferry_test::four;
using ferry_test::hosts;
using ferry_test::quarters;
using ferry_test::redistributed;
using ferry_test::vjp_of;

using ferry_test::ring;
using ferry_test::square;

TEST(CollectiveGradients, ReduceScattersCotangentIsAnAllGather) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // The slices the tape records around the cut (detail::recorded_slice) go with it.
  ferry_test::expect_balanced_after(mesh, [&] {
    const std::vector<D> xs = quarters(mesh, 1);
    std::vector<D> cs;
    for (const D& a : quarters(mesh, 3)) cs.push_back(ferry::slice(a, 1, 0, 1));  // (2, 1)
    const auto dxs = vjp_of(
        mesh, [](MeshArray<double> a) { return ferry::reduce_scatter(a, 1); }, xs, cs);
    EXPECT_EQ(hosts(dxs),
              hosts(ferry::all_gather(MeshArray<double>::from_shards(mesh, cs), 1).shards()));
  });
}

TEST(CollectiveGradients, ReduceScatterAndAllToAllMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // Every evaluation's arrays, and the tape's, are freed.
  ferry_test::expect_balanced_after(mesh, [&] {
    check_through(mesh, four(Shape{4, 2}),
                  [](MeshArray<double> a) { return ferry::reduce_scatter(a, 0); });
    check_through(mesh, four(Shape{2, 4}),
                  [](MeshArray<double> a) { return ferry::reduce_scatter(a, 1, ReduceOp::mean); });
    check_through(mesh, four(Shape{4, 2}),
                  [](MeshArray<double> a) { return ferry::all_to_all(a, 0, 1); });
  });
  const Mesh sq = Mesh::modeled(square());
  ferry_test::expect_balanced_after(sq, [&] {
    check_through(sq, four(Shape{2, 3}), [](MeshArray<double> a) {
      return ferry::reduce_scatter(a, 0, ReduceOp::sum, 0);
    });
  });
}

TEST(CollectiveGradients, RedistributionsThroughThemMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  {
    SCOPED_TRACE("Partial to Shard: a reduce-scatter, padded");
    check_through(mesh, four(Shape{5, 2}), redistributed(Shape{5, 2}, {Partial{}}, {Shard{0}}));
  }
  {
    SCOPED_TRACE("Shard(0) to Shard(1): an all-to-all");
    check_through(mesh, four(Shape{1, 4}), redistributed(Shape{4, 4}, {Shard{0}}, {Shard{1}}));
  }
}

}  // namespace
