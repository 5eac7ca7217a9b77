// all_reduce's data path (mesh/all_reduce_parts.hpp): on a stepped plan each member reduces
// one part (array_split of the flat shard) and gathers the others' reduced parts; on a
// one-shot plan it reduces the whole shards. Either way, for every shape (a scalar, an empty
// shard, fewer elements than members, uneven parts, parts longer than the kernel's blocks), op
// and element type, kept or given, every member's result is ferry::sum (max, min, mean) of the
// shards stacked on one device, bit for bit; and the device's reduction kernel reads one part's
// worth on the stepped plan.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/meshes.hpp"
#include "support/timeline.hpp"

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
  // {3, 700}: parts of whole blocks of the reduction kernel (256 elements) and a remainder.
  const std::vector<Shape> shapes = {Shape{},     Shape{0}, Shape{3},       Shape{2, 1},
                                     Shape{5, 3}, Shape{7}, Shape{2, 0, 3}, Shape{3, 700}};
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
  // 64 floats (256 bytes) on a ring of 4. Stepped (one_shot_bytes 0): the reduce-scatter
  // half's three steps each bring a member two half parts, 64 bytes (16 elements), which it
  // reduces into its partial: 32 elements read (the partial and what arrived), 128 bytes read
  // and 64 written (192); the third is the fold that computes part p of the 4 shards, costed
  // as that step. Then the join copies its own part only (64 bytes read, 64 written: 128, no
  // flops): the other three landed where they belong, as a real library's links write them.
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
    const Kernels want =
        one_shot ? Kernels{{256.0, 1280.0}}
                 : Kernels{{32.0, 192.0}, {32.0, 192.0}, {32.0, 192.0}, {0, 128.0}};
    for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(kernels_of(mesh, d), want) << "device " << d;
  }
}

/// A ring of 4 tiny chips on links of 1 byte every 10 ns, 100 ns a hop.
ferry::MeshSpec slow_ring() {
  ferry::LinkSpec slow = ferry_test::round_link();
  slow.bytes_per_second = 1e8;
  return ferry_test::line_of(4, ferry::Topology::ring, "ring", slow);
}

/// When the first message of `mesh`'s window left, in ns.
std::int64_t first_message(const Mesh& mesh) {
  auto& net = *ferry::detail::MeshAccess::state(mesh).net;
  std::lock_guard lock(net.mutex);
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (const auto& u : net.links.uses()) t0 = std::min(t0, u.start.count());
  return t0;
}

/// Member i's shard of `mesh` (a slow_ring), 1,600 floats of value i, made and waited for, and
/// the mesh's window started after them.
std::vector<DeviceArray<float>> ready_shards(Mesh& mesh) {
  std::vector<DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < 4; ++i)
    shards.push_back(ferry::full<float>(mesh.device(i), Shape{1600}, static_cast<float>(i)));
  ferry::wait(shards);
  mesh.reset_stats();
  return shards;
}

TEST(AllReduceParts, EachReductionRunsWhileTheAllGatherHalfsMessagesFly) {
  // A ring of 4 tiny chips (DRAM 1 byte a ns) on links of 1 byte every 10 ns, 100 ns a hop,
  // shards of 1,600 floats (S = 6,400 bytes), parts of S / 4 sent in halves both ways: 800
  // bytes a link a step, 8,000 ns on the link and a hop, 8,100 ns a step. From the first
  // message (t0): the reduce-scatter half's steps end at 8,100, 16,200 and 24,300, when each
  // member holds the four inputs of its part, and the all-gather half's at 48,600. After each
  // step a member reduces the two halves it received (S / 4, 1,600 bytes) into its partial:
  // 3,200 bytes read, 1,600 written, 4,800 ns at 1 byte a ns and 10 ns of kernel latency:
  // 8,100-12,910, 16,200-21,010 and 24,300-29,110, the last the fold that computes its part.
  // Each is shorter than a step, so the partials' messages (streaming behind them, arriving a
  // hop after they end: 13,010 and 21,110) arrive when the links alone would bring them, as
  // do the all-gather half's first messages, behind the last reduction (29,210 < 32,400). The
  // join starts at 48,600, when the reduced parts have all arrived. (One fold of the 4 parts
  // at 24,300, the model before, read 4 parts and wrote 1: 8,010 ns, to 32,310.) Given its
  // operand, a member then holds at most 6 S / 4: its shard, and the ring's staging while it
  // reduces (the halves it receives pass through it into its partial: bytes on the links, no
  // memory of their own), a partial of S / 4 a step, two while the second reduction reads the
  // first's and writes its own, then the last partial and its part (S / 4) while it folds;
  // its shard (the result) and its part while it joins, the other 3 S / 4 landing in the
  // result. (5 S / 4 before the staging was counted; 2 S before the parts passed through it
  // and landed in the result, the 3 S / 4 it received held in both.)
  Mesh mesh = Mesh::modeled(slow_ring());
  constexpr std::int64_t kShard = 1600 * sizeof(float);
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards = ready_shards(mesh);
  const MeshArray<float> out =
        ferry::all_reduce(MeshArray<float>::from_shards(mesh, std::move(shards)));
    for (std::int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(values_of(out.shard(i)), std::vector<float>(1600, 6.0f)) << "device " << i;
  });
  const std::int64_t t0 = first_message(mesh);
  for (std::int64_t d = 0; d < 4; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    std::vector<ferry_test::Slice> reductions;
    std::vector<ferry_test::Slice> joins;
    for (const ferry_test::Slice& s : ferry_test::named(ferry_test::slices_of(mesh.device(d)),
                                                        "all_reduce")) {
      if (s.flops > 0) reductions.push_back(s);
      else if (s.bytes > 0) joins.push_back(s);  // the receives move no bytes on the chip
    }
    ASSERT_EQ(reductions.size(), 3u);
    ASSERT_EQ(joins.size(), 1u);
    EXPECT_EQ(ferry_test::span_of(reductions[0]),
              std::make_pair(t0 + 8'100LL, t0 + 12'910LL));
    EXPECT_EQ(ferry_test::span_of(reductions[1]),
              std::make_pair(t0 + 16'200LL, t0 + 21'010LL));
    EXPECT_EQ(ferry_test::span_of(reductions[2]),
              std::make_pair(t0 + 24'300LL, t0 + 29'110LL));
    EXPECT_EQ(joins[0].start.count() - t0, 48'600);
    const ferry::DeviceStats stats = mesh.device(d).stats();
    EXPECT_EQ(stats.peak_dram_bytes, static_cast<std::uint64_t>(6 * kShard / 4));
    EXPECT_EQ(stats.donations, 1u);
  }
}

TEST(AllReduceParts, WorkSubmittedAfterTheCallRunsBesideIt) {
  // The ring above, and a kernel of 10,000 ns on each chip submitted after the call, reading
  // nothing the collective makes: it runs beside the collective, from when the links start
  // (t0), on one of the chip's two units while the first step's reduction (8,100-12,910,
  // DRAM-bound: a fixed-time kernel takes no bandwidth) runs on the other; the reductions
  // start at 8,100, 16,200 and 24,300 as on an idle chip. A collective that waited for the
  // chips' reductions at the call (to time the partials' and the reduced parts' messages)
  // would decide each chip's schedule up to its last reduction (29,110) there, and the kernel
  // could only run after it: a data-parallel backward's next layer would hide none of its
  // gradients' all-reduce.
  Mesh mesh = Mesh::modeled(slow_ring());
  const auto nothing = [](ferry::KernelArgs<float>) {};
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards = ready_shards(mesh);
    const MeshArray<float> out = ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards));
    std::vector<DeviceArray<float>> work;
    for (std::int64_t i = 0; i < 4; ++i) {
      work.push_back(ferry::custom<float>(mesh.device(i), "work", {}, Shape{1}, nothing,
                                          ferry::Cost::fixed(std::chrono::nanoseconds(10'000))));
    }
    ferry::wait(work);
    ferry::wait(out);
  });
  const std::int64_t t0 = first_message(mesh);
  for (std::int64_t d = 0; d < 4; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    const auto all = ferry_test::slices_of(mesh.device(d));
    const auto work = ferry_test::named(all, "work");
    ASSERT_EQ(work.size(), 1u);
    EXPECT_EQ(ferry_test::span_of(work[0]), std::make_pair(t0 + 0LL, t0 + 10'000LL));
    std::vector<std::int64_t> reductions;
    for (const ferry_test::Slice& s : ferry_test::named(all, "all_reduce")) {
      if (s.flops > 0) reductions.push_back(s.start.count() - t0);
    }
    EXPECT_EQ(reductions, (std::vector<std::int64_t>{8'100, 16'200, 24'300}));
  }
  EXPECT_GT(mesh.stats().communication_overlap, std::chrono::nanoseconds(0));
}

/// all_reduce of 1,600 ones on each chip of `mesh`, the parts received one step a member (or,
/// `each`, one a part).
MeshArray<float> all_reduce_ones(const Mesh& mesh, bool each) {
  std::vector<DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < 4; ++i)
    shards.push_back(ferry::full<float>(mesh.device(i), Shape{1600}, 1.0f));
  ferry::detail::t_receive_each = each;
  MeshArray<float> out = ferry::all_reduce(MeshArray<float>::from_shards(mesh, std::move(shards)));
  ferry::detail::t_receive_each = false;
  return out;
}

TEST(AllReduceParts, AFaultInOneMembersReductionFailsEveryResultThatNeedsIt) {
  // Device 2's reduction failing fails every member's result, since each joins part 2, with
  // the error the reduction failed with (naming device 2 and the collective): the model knows
  // it at the call without deciding device 2's schedule there. Its first receive of the others'
  // reduced parts failing fails its own result only. The reduction's submission index on
  // device 2 is read from the same program on a mesh without faults; the receives (no slice:
  // they take no time on the chip) are the steps between it and the join.
  for (const bool each : {false, true}) {
    std::uint64_t reduction = 0;
    std::uint64_t join = 0;
    {
      const Mesh clean = Mesh::modeled(slow_ring());
      ferry::wait(all_reduce_ones(clean, each));
      for (const ferry_test::Slice& s :
           ferry_test::named(ferry_test::slices_of(clean.device(2)), "all_reduce")) {
        (s.flops > 0 ? reduction : join) = s.id;
      }
      ASSERT_EQ(join, reduction + (each ? 4u : 2u));  // three receives, or one
    }
    const std::uint64_t receive = reduction + 1;
    for (const std::uint64_t failing : {reduction, receive}) {
      SCOPED_TRACE(std::string(each ? "one receive a part" : "one receive a member") +
                   ", device 2's step " + std::to_string(failing) + " fails");
      ferry::MeshSpec spec = slow_ring();
      spec.devices[2].faults.fail_steps = {failing};
      const Mesh mesh = Mesh::modeled(spec);
      ferry_test::expect_balanced_after(mesh, [&] {
        const MeshArray<float> out = all_reduce_ones(mesh, each);
        for (std::int64_t i = 0; i < 4; ++i) {
          SCOPED_TRACE("device " + std::to_string(i));
          if (i != 2 && failing == receive) {
            EXPECT_EQ(values_of(out.shard(i)), std::vector<float>(1600, 4.0f));
            continue;
          }
          try {
            static_cast<void>(out.shard(i).to_host());
            ADD_FAILURE() << "no DeviceFault";
          } catch (const ferry::DeviceFault& e) {
            EXPECT_EQ(std::string(e.what()),
                      "[all_reduce] step " + std::to_string(failing) + " on " +
                          mesh.device(2).name() + " failed: injected fault: step " +
                          std::to_string(failing) + " is in fail_steps");
          }
        }
      });
    }
  }
}

TEST(AllReduceParts, AMemberOutOfMemoryNamesItsDeviceAndTheCollective) {
  // A two-chip line of tiny() chips (1 MiB of DRAM each), shards of 65,536 floats (256 KiB),
  // chip 1's DRAM filled by three more live arrays of that size: its part's reduction (128
  // KiB) can never get memory while the host waits for chip 1's result.
  const Mesh mesh = Mesh::modeled(ferry_test::line_of(2));
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 2; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{65536}, static_cast<float>(i)));
    std::vector<DeviceArray<float>> filling;
    for (int k = 0; k < 3; ++k)
      filling.push_back(ferry::zeros<float>(mesh.device(1), Shape{65536}));
    ferry::wait(shards);
    ferry::wait(filling);
    const MeshArray<float> out = ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards));
    try {
      static_cast<void>(out.shard(1).to_host());
      ADD_FAILURE() << "no OutOfDeviceMemory";
    } catch (const ferry::OutOfDeviceMemory& e) {
      EXPECT_EQ(std::string(e.what()),
                "[all_reduce] step 5 on " + mesh.device(1).name() +
                    " needs 131072 bytes of DRAM while 1048576 of 1048576 bytes of DRAM and 0 of "
                    "65536 bytes of L1 are held by arrays still in use, and nothing running can "
                    "free them");
    }
  });
}
}  // namespace

}  // namespace test_all_reduce_parts
