// all_reduce's data path (mesh/all_reduce_parts.hpp): on a stepped plan each member reduces
// one part (array_split of the flat shard) and gathers the others' reduced parts; on a
// one-shot plan it reduces the whole shards. Either way, for every shape (a scalar, an empty
// shard, fewer elements than members, uneven parts), op and element type, kept or given, every
// member's result is ferry::sum (max, min, mean) of the shards stacked on one device, bit for
// bit; and the device's reduction kernel reads one part's worth on the stepped plan.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/meshes.hpp"

namespace test_all_reduce_parts {

namespace {

using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::ReduceOp;
using ferry::Shape;
using ferry_test::values_of;

TEST(AllReduceParts, ArraySplitCutsTheFirstPartsOneLonger) {
  using ferry::detail::split_part;
  // 10 over 4: 3, 3, 2, 2.
  EXPECT_EQ(split_part(10, 4, 0).begin, 0);
  EXPECT_EQ(split_part(10, 4, 0).size, 3);
  EXPECT_EQ(split_part(10, 4, 1).begin, 3);
  EXPECT_EQ(split_part(10, 4, 2).begin, 6);
  EXPECT_EQ(split_part(10, 4, 2).size, 2);
  EXPECT_EQ(split_part(10, 4, 3).begin, 8);
  EXPECT_EQ(split_part(10, 4, 3).size, 2);
  // Fewer elements than parts: 1, 1, 0, 0, the empty ones at the end.
  EXPECT_EQ(split_part(2, 4, 1).begin, 1);
  EXPECT_EQ(split_part(2, 4, 1).size, 1);
  EXPECT_EQ(split_part(2, 4, 3).begin, 2);
  EXPECT_EQ(split_part(2, 4, 3).size, 0);
  EXPECT_EQ(split_part(0, 3, 2).size, 0);
}

/// Member i's shard of `shape`: values whose float sums depend on the order of the additions.
template <class T>
MeshArray<T> shards_of(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<T>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    std::vector<T> v;
    for (std::int64_t k = 0; k < shape.numel(); ++k) {
      const auto x = static_cast<float>((7 * k + 13 * i) % 17 - 8);
      v.push_back(static_cast<T>(std::is_floating_point_v<T> ? x * 0.1F / static_cast<float>(i + 3)
                                                              : x));
    }
    shards.push_back(ferry::to_device(mesh.device(i), v, shape));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

/// ferry::sum (max, min, mean) over a new leading axis of `in`'s shards on one device.
template <class T>
std::vector<T> reference(const MeshArray<T>& in, ReduceOp op) {
  std::vector<DeviceArray<T>> here;
  for (const auto& s : in.shards()) here.push_back(s.to(ferry::Device::cpu()));
  const DeviceArray<T> stacked = ferry::stack(here, 0);
  if (op == ReduceOp::max) return values_of(ferry::max(stacked, {0}));
  if (op == ReduceOp::min) return values_of(ferry::min(stacked, {0}));
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::mean) return values_of(ferry::mean(stacked, {0}));
  }
  return values_of(ferry::sum(stacked, {0}));
}

template <class T>
void expect_as_stacked(const ferry::MeshSpec& spec, const Shape& shape, ReduceOp op) {
  const Mesh mesh = Mesh::modeled(spec);
  ferry_test::expect_balanced_after(mesh, [&] {
    const MeshArray<T> kept_in = shards_of<T>(mesh, shape);
    const std::vector<T> want = reference(kept_in, op);
    const MeshArray<T> kept = ferry::all_reduce(kept_in, op);
    const MeshArray<T> given = ferry::all_reduce(shards_of<T>(mesh, shape), op);
    for (std::int64_t i = 0; i < mesh.size(); ++i) {
      EXPECT_EQ(kept.shard(i).shape(), shape) << "device " << i;
      EXPECT_EQ(given.shard(i).shape(), shape) << "device " << i;
      EXPECT_EQ(values_of(kept.shard(i)), want) << "kept, device " << i;
      EXPECT_EQ(values_of(given.shard(i)), want) << "given, device " << i;
    }
  });
}

/// Links that take the one-shot algorithm below 1 MiB.
ferry::LinkSpec one_shot_link() {
  ferry::LinkSpec l = ferry_test::round_link();
  l.one_shot_bytes = std::int64_t{1} << 20;
  return l;
}

TEST(AllReduceParts, EveryShapeOpAndTypeIsTheReductionOfTheStackedShardsBitForBit) {
  const std::vector<std::pair<std::string, ferry::MeshSpec>> specs = {
      {"ring of 4", ferry_test::ring(4)},
      {"line of 3", ferry_test::line_of(3)},
      {"switch of 4", ferry_test::line_of(4, ferry::Topology::fully_connected)},
      {"one member", ferry_test::line_of(1)},
      {"one-shot ring of 4", ferry_test::line_of(4, ferry::Topology::ring, "ring",
                                                 one_shot_link())}};
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{3}, Shape{2, 1}, Shape{5, 3},
                                     Shape{7}, Shape{2, 0, 3}};
  for (const auto& [name, spec] : specs) {
    for (const Shape& shape : shapes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean}) {
        SCOPED_TRACE(name + ", shape " + shape.to_string() + ", op " +
                     std::to_string(static_cast<int>(op)));
        expect_as_stacked<float>(spec, shape, op);
        if (op != ReduceOp::mean) expect_as_stacked<std::int32_t>(spec, shape, op);
      }
    }
  }
}

TEST(AllReduceParts, TiledAndL1ShardsReduceAsRowMajorOnes) {
  // A shard tiled or in L1 takes the path of one receive a part (the batched receive reads
  // row-major DRAM only) and is converted where its kernels need row-major data; the result
  // is the same, kept or given, on every member.
  using ferry::MemorySpace;
  using ferry::Order;
  for (const ferry::Layout layout : {ferry::Layout{MemorySpace::dram, Order::tiled},
                                     ferry::Layout{MemorySpace::l1, Order::row_major}}) {
    SCOPED_TRACE(layout.space == ferry::MemorySpace::l1 ? "L1" : "tiled");
    const Mesh mesh = Mesh::modeled(ferry_test::ring(4));
    ferry_test::expect_balanced_after(mesh, [&] {
      const Shape shape{5, 7};
      const MeshArray<float> plain = shards_of<float>(mesh, shape);
      const std::vector<float> want = reference(plain, ReduceOp::sum);
      auto laid = [&] {
        std::vector<DeviceArray<float>> shards = shards_of<float>(mesh, shape).shards();
        shards[1] = ferry::to_layout(shards[1], layout);
        return MeshArray<float>::from_shards(mesh, std::move(shards));
      };
      const MeshArray<float> kept_in = laid();
      const MeshArray<float> kept = ferry::all_reduce(kept_in);
      const MeshArray<float> given = ferry::all_reduce(laid());
      for (std::int64_t i = 0; i < mesh.size(); ++i) {
        EXPECT_EQ(values_of(kept.shard(i)), want) << "kept, device " << i;
        EXPECT_EQ(values_of(given.shard(i)), want) << "given, device " << i;
      }
    });
  }
}

/// The compute slices named all_reduce on device `d` of `mesh`, as (flops, bytes).
std::vector<std::pair<double, double>> kernels_of(const Mesh& mesh, std::int64_t d) {
  std::vector<std::pair<double, double>> out;
  ferry::detail::MeshState::with_simulator(mesh.device(d), [&](ferry::detail::Simulator& sim) {
    for (const auto& s : sim.slices()) {
      if (s.name == "all_reduce" && s.bytes > 0) out.emplace_back(s.flops, s.bytes);
    }
  });
  return out;
}

TEST(AllReduceParts, TheDataPathFollowsTheAlgorithmOnTheLinks) {
  // 64 floats (256 bytes) on a ring of 4. Stepped (one_shot_bytes 0): the reduction folds
  // part p of the 4 shards, 16 elements each: 64 additions, 4 x 64 bytes read and 64 written
  // (320); then the join writes the 4 parts (256 bytes read, 256 written: 512, no flops).
  // One-shot (below 1 MiB): one reduction of the 4 whole shards: 256 additions, 1,024 bytes
  // read and 256 written (1,280), and no join.
  for (bool one_shot : {false, true}) {
    SCOPED_TRACE(one_shot ? "one-shot" : "stepped");
    const Mesh mesh = Mesh::modeled(
        one_shot ? ferry_test::line_of(4, ferry::Topology::ring, "ring", one_shot_link())
                 : ferry_test::ring(4));
    ferry_test::expect_balanced_after(mesh, [&] {
      ferry::wait(ferry::all_reduce(shards_of<float>(mesh, Shape{64})));
    });
    using Kernels = std::vector<std::pair<double, double>>;
    const Kernels want = one_shot ? Kernels{{256.0, 1280.0}} : Kernels{{64.0, 320.0}, {0, 512.0}};
    for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(kernels_of(mesh, d), want) << "device " << d;
  }
}

}  // namespace

}  // namespace test_all_reduce_parts
