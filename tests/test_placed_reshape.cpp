// reshape of placed mesh arrays (mesh/mesh_shape_ops.hpp) through splits and merges of a sharded
// dim: [B, S, H * D] Shard(2) into [B, S, H, D] and back when the heads divide by the devices, a
// batch dim split or merged whole, Partial and Replicate passing; the result's placements, each
// shard's shape and the global values against the host's row-major order; every refusal by
// exact type and message, and the redistribute each one names made and reshaped to prove it
// works.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_placed_reshape {

namespace {

using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::PlacementError;
using ferry::Placements;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry_test::expect_balanced_after;
using ferry_test::expect_error;
using ferry_test::ring;
using ferry_test::square;

/// Two tiny devices on a line (a ring needs three).
MeshSpec two() { return ferry_test::line_of(2); }

/// Distinct values 0, 1, 2, ... in row-major order: a reshape must keep that order.
HostArray<float> iota(const Shape& shape) {
  HostArray<float> h(shape);
  for (std::int64_t k = 0; k < shape.numel(); ++k)
    h.data()[static_cast<std::size_t>(k)] = static_cast<float>(k);
  return h;
}

/// Expects reshape(a placed `from` on `spec`, to) to be placed `want` and to hold the global
/// values in their row-major order, each shard its block.
void expect_reshape(const MeshSpec& spec, const Shape& global, const Placements& from,
                    const Shape& to, const Placements& want) {
  SCOPED_TRACE(global.to_string() + " " + ferry::detail::placements_text(from) + " into " +
               to.to_string());
  const Mesh mesh = Mesh::modeled(spec);
  expect_balanced_after(mesh, [&] {
    const HostArray<float> h = iota(global);
    const MeshArray<float> r = ferry::reshape(ferry::distribute(h, mesh, from), to);
    EXPECT_EQ(r.placements(), want);
    EXPECT_EQ(r.global_shape(), to);
    const HostArray<float> got = ferry::to_host(r);
    EXPECT_EQ(got.shape(), to);
    EXPECT_EQ(std::vector<float>(got.data().begin(), got.data().end()),
              std::vector<float>(h.data().begin(), h.data().end()));
    // Each shard is the block its placements give it (distribute of the reshaped host values).
    const HostArray<float> flat_to(to, std::vector<float>(h.data().begin(), h.data().end()));
    const MeshArray<float> direct = ferry::distribute(flat_to, mesh, want);
    for (std::int64_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r.shard(i).to_host(), direct.shard(i).to_host()) << "shard " << i;
    }
  });
}

TEST(PlacedReshape, SplittingAShardedDimIntoWholeHeadsKeepsTheShard) {
  // [B, S, H * D] into [B, S, H, D]: 4 heads of 2 on 4 devices, one head each.
  expect_reshape(ring(4), Shape{2, 3, 8}, {Shard{2}}, Shape{2, 3, 4, 2}, {Shard{2}});
  // 8 heads of 1 on 4 devices: two heads each.
  expect_reshape(ring(4), Shape{2, 3, 8}, {Shard{-1}}, Shape{2, 3, 8, 1}, {Shard{2}});
  // And merged back.
  expect_reshape(ring(4), Shape{2, 3, 4, 2}, {Shard{2}}, Shape{2, 3, 8}, {Shard{2}});
  // Along one axis of a 2 x 2 mesh, the batch sharded along the other.
  expect_reshape(square(), Shape{2, 3, 12}, {Shard{0}, Shard{2}}, Shape{2, 3, 2, 6},
                 {Shard{0}, Shard{2}});
  expect_reshape(square(), Shape{2, 3, 2, 6}, {Shard{0}, Shard{2}}, Shape{2, 3, 12},
                 {Shard{0}, Shard{2}});
  // Heads and head_dim split at once, the head_dim further cut (the dims after the shard).
  expect_reshape(two(), Shape{3, 12}, {Shard{1}}, Shape{3, 2, 3, 2}, {Shard{1}});
}

TEST(PlacedReshape, SizeOneDimsAndUnevenBlocksThatStayWhole) {
  // array_split's 2, 2, 1, 1 of 6 with a size-1 dim after: the blocks stay whole.
  expect_reshape(ring(4), Shape{2, 6}, {Shard{1}}, Shape{2, 6, 1}, {Shard{1}});
  expect_reshape(ring(4), Shape{2, 1, 6}, {Shard{2}}, Shape{2, 6}, {Shard{1}});
  // A size-1 dim before the sharded one joins its group without cutting it.
  expect_reshape(two(), Shape{1, 8}, {Shard{1}}, Shape{2, 4}, {Shard{0}});
}

TEST(PlacedReshape, ABatchDimSplitOrMergedWholeKeepsItsShard) {
  // 8 rows on 2 devices into (4, 2): each device's 4 rows are 2 whole entries of the new dim 0.
  expect_reshape(two(), Shape{8, 5}, {Shard{0}}, Shape{4, 2, 5}, {Shard{0}});
  // (4, 6) rows cut 2 and 2, merged with the dim after: 12 whole entries each.
  expect_reshape(two(), Shape{4, 6, 3}, {Shard{0}}, Shape{24, 3}, {Shard{0}});
  // The old rule's cases: dims after the last sharded one reshaped freely.
  expect_reshape(square(), Shape{4, 6, 4}, {Shard{0}, Replicate{}}, Shape{4, 3, 8},
                 {Shard{0}, Replicate{}});
  expect_reshape(square(), Shape{4, 6, 4}, {Shard{1}, Shard{0}}, Shape{4, 6, 2, 2},
                 {Shard{1}, Shard{0}});
  // A shard moves to its dim's new place when dims before it merge.
  expect_reshape(square(), Shape{2, 3, 4}, {Replicate{}, Shard{2}}, Shape{6, 4},
                 {Replicate{}, Shard{1}});
}

TEST(PlacedReshape, PartialAndReplicatePassUnchanged) {
  const Mesh mesh = Mesh::modeled(square());
  expect_balanced_after(mesh, [&] {
    const HostArray<float> h = iota(Shape{4, 6});
    const MeshArray<float> a = ferry::distribute(h, mesh, {Partial{}, Shard{0}});
    const MeshArray<float> r = ferry::reshape(a, Shape{2, 2, 3, 2});
    EXPECT_EQ(r.placements(), (Placements{Partial{}, Shard{0}}));
    const HostArray<float> got = ferry::to_host(r);
    EXPECT_EQ(std::vector<float>(got.data().begin(), got.data().end()),
              std::vector<float>(h.data().begin(), h.data().end()));
  });
  expect_reshape(ring(4), Shape{3, 4}, {Replicate{}}, Shape{2, 6}, {Replicate{}});
}

TEST(PlacedReshape, AnEmptyArrayKeepsAShardOnlyOnADimKeptAsItIs) {
  expect_reshape(two(), Shape{4, 0}, {Shard{0}}, Shape{4, 0, 3}, {Shard{0}});
  const Mesh mesh = Mesh::modeled(two());
  expect_balanced_after(mesh, [&] {
    expect_error<PlacementError>(
        [&] {
          return ferry::reshape(ferry::distribute(iota(Shape{4, 0}), mesh, {Shard{0}}),
                                Shape{2, 2, 0});
        },
        "[reshape] a global (4, 0) placed (Shard(0)) cannot become (2, 2, 0) shard by shard: "
        "Shard(0) on mesh axis 0 cuts dim 0 (4) into 2 blocks, which do not land on whole entries "
        "of one dim of the result as array_split cuts it; call redistribute(a, (Replicate())) "
        "first");
  });
}

/// Expects reshape(a placed `from`, to) to throw PlacementError `message`, and reshape of
/// redistribute(a, fix) (the call the message names) to work.
void expect_refused(const MeshSpec& spec, const Shape& global, const Placements& from,
                    const Shape& to, const Placements& fix, const std::string& message) {
  SCOPED_TRACE(global.to_string() + " " + ferry::detail::placements_text(from) + " into " +
               to.to_string());
  const Mesh mesh = Mesh::modeled(spec);
  expect_balanced_after(mesh, [&] {
    const HostArray<float> h = iota(global);
    const MeshArray<float> a = ferry::distribute(h, mesh, from);
    expect_error<PlacementError>([&] { return ferry::reshape(a, to); }, message);
    const MeshArray<float> r = ferry::reshape(ferry::redistribute(a, fix), to);
    const HostArray<float> got = ferry::to_host(r);
    EXPECT_EQ(std::vector<float>(got.data().begin(), got.data().end()),
              std::vector<float>(h.data().begin(), h.data().end()));
  });
}

TEST(PlacedReshapeBadInput, BlocksThatWouldNotBeWholeEntriesAreRefused) {
  // 8 columns on 4 devices are 2 each: not whole heads of 4.
  expect_refused(ring(4), Shape{2, 3, 8}, {Shard{2}}, Shape{2, 3, 2, 4}, {Replicate{}},
                 "[reshape] a global (2, 3, 8) placed (Shard(2)) cannot become (2, 3, 2, 4) "
                 "shard by shard: Shard(2) on mesh axis 0 cuts dim 2 (8) into 4 blocks, which do "
                 "not land on whole entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Replicate())) first");
  // 6 on 4 devices is 2, 2, 1, 1: the last two blocks are half a head of 2.
  expect_refused(ring(4), Shape{2, 6}, {Shard{1}}, Shape{2, 3, 2}, {Replicate{}},
                 "[reshape] a global (2, 6) placed (Shard(1)) cannot become (2, 3, 2) shard by "
                 "shard: Shard(1) on mesh axis 0 cuts dim 1 (6) into 4 blocks, which do not land "
                 "on whole entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Replicate())) first");
  // 3 rows on 2 devices are 2 and 1, so merged they would be 4 and 2 of 6: not array_split's
  // 3 and 3.
  expect_refused(two(), Shape{3, 2}, {Shard{0}}, Shape{6}, {Replicate{}},
                 "[reshape] a global (3, 2) placed (Shard(0)) cannot become (6) shard by shard: "
                 "Shard(0) on mesh axis 0 cuts dim 0 (3) into 2 blocks, which do not land on "
                 "whole entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Replicate())) first");
  // A merge with the sharded dim after another: each device's block would be strided.
  expect_refused(square(), Shape{4, 6, 4}, {Shard{0}, Shard{2}}, Shape{4, 24},
                 {Shard{0}, Replicate{}},
                 "[reshape] a global (4, 6, 4) placed (Shard(0), Shard(2)) cannot become (4, 24) "
                 "shard by shard: Shard(2) on mesh axis 1 cuts dim 2 (4) into 2 blocks, which do "
                 "not land on whole entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Shard(0), Replicate())) first");
  // Two sharded dims merged into one: the first may follow, the second cannot.
  expect_refused(square(), Shape{4, 6, 4}, {Shard{1}, Shard{2}}, Shape{4, 24},
                 {Shard{1}, Replicate{}},
                 "[reshape] a global (4, 6, 4) placed (Shard(1), Shard(2)) cannot become (4, 24) "
                 "shard by shard: Shard(2) on mesh axis 1 cuts dim 2 (4) into 2 blocks, which do "
                 "not land on whole entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Shard(1), Replicate())) first");
  // Both axes refused at once.
  expect_refused(square(), Shape{3, 6}, {Shard{0}, Shard{1}}, Shape{2, 9},
                 {Replicate{}, Replicate{}},
                 "[reshape] a global (3, 6) placed (Shard(0), Shard(1)) cannot become (2, 9) "
                 "shard by shard: Shard(0) on mesh axis 0 cuts dim 0 (3) into 2 blocks; Shard(1) "
                 "on mesh axis 1 cuts dim 1 (6) into 2 blocks, which do not land on whole "
                 "entries of one dim of the result as array_split cuts it; call "
                 "redistribute(a, (Replicate(), Replicate())) first");
}

}  // namespace

}  // namespace test_placed_reshape
