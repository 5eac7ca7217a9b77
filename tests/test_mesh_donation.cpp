// Donation through a collective: all_reduce, broadcast and permute given their operand
// (std::move) write each member's result into that member's input buffer, really (the same
// memory) and in the model (the device's peak DRAM drops by one shard); values are those of
// the call that keeps its operand, and of a plain loop (ferry::sum, max, min, mean over the
// shards stacked for all_reduce); a shard another handle or a view still reads is never
// overwritten; a failed shard reaches the results it reached before; every program gives its
// memory back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/io/json.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/files.hpp"
#include "support/memory.hpp"
#include "support/meshes.hpp"
#include "support/temp_dir.hpp"

namespace test_mesh_donation {

namespace {

using ferry_test::buffer_of;
using ferry_test::values_of;

using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::ReduceOp;
using ferry::Shape;

/// Member i's shard of `shape`: element k = (7i + 3k) mod 23 - 11, times 1/4 (exact sums).
template <class T>
MeshArray<T> shards_of(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<T>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    std::vector<T> v;
    for (std::int64_t k = 0; k < shape.numel(); ++k) {
      const auto x = static_cast<float>((7 * i + 3 * k) % 23 - 11);
      v.push_back(static_cast<T>(std::is_floating_point_v<T> ? x * 0.25F : x));
    }
    shards.push_back(ferry::to_device(mesh.device(i), v, shape));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

class MeshDonation : public ::testing::TestWithParam<int> {
 protected:
  Mesh ring(std::int64_t n) const {
    return Mesh::modeled(ferry_test::ring(n), ferry_test::executor_for(GetParam()));
  }
};
INSTANTIATE_TEST_SUITE_P(Executors, MeshDonation, ::testing::Values(0, 1, 2, 4),
                         ferry_test::executor_name);

TEST_P(MeshDonation, AGivenOperandHoldsItsResultAndThePeakFalls) {
  // A ring of 4, shards of 256 x 4 floats: S = 4,096 bytes, parts of S / 4. Each member
  // receives part p of the other three shards (3 S / 4) and reduces it with its own into its
  // part of the result (S / 4), step by step: each reduce-scatter step brings S / 4 (halves
  // of 512 bytes, 612 ns with the hop), which a tiny chip reduces in 3,082 ns (3 S / 4 of
  // DRAM and 10 ns), longer than the step, so each partial's message streams behind its
  // reduction: from the first message, reductions 612-3,694, 3,794-6,876 and the fold
  // 6,976-10,058, and the all-gather half's first messages arrive a hop after the fold ends
  // (10,158), its last at 11,382. What a member receives holds no memory of its own: the
  // reduce-scatter's parts pass through the ring's staging buffers into its partial (bytes on
  // the links), and the all-gather's reduced parts land where they belong in the result. The
  // ring's staging is a partial of S / 4 a step: two from 3,794 to 6,876 (the second
  // reduction reads the first's partial), then the last partial and the part (S / 4) while it
  // folds. So while it reduces a member holds S + 2 S / 4, and while it joins its part into
  // the result S + S / 4 and the result: 9 S / 4 = 9,216 bytes when the caller keeps the
  // operand; when it gives it, the result is the input's buffer, so the peak is the
  // reductions' 6 S / 4 = 6,144. (5 S / 4 before the staging was counted; before that the
  // received parts held memory: 3 S kept, 2 S given.) Afterwards: the operand and the result
  // (2 S), or the result alone (S).
  constexpr std::uint64_t kShard = 256 * 4 * sizeof(float);
  const Shape shape{256, 4};
  std::vector<std::vector<float>> kept_values;
  {
    const Mesh mesh = ring(4);
    ferry_test::expect_balanced_after(mesh, [&] {
      const auto a = shards_of<float>(mesh, shape);
      ferry::wait(a);
      const std::size_t level = ferry_test::settled_allocated_bytes();
      const auto r = ferry::all_reduce(a);
      ferry::wait(r);
      EXPECT_EQ(ferry_test::allocated_bytes_back_at(level + 4 * kShard), level + 4 * kShard)
          << "a result buffer a device";
      for (std::int64_t i = 0; i < 4; ++i) {
        const ferry::DeviceStats s = mesh.device(i).stats();
        EXPECT_EQ(s.peak_dram_bytes, 9 * kShard / 4) << mesh.device(i).name();
        EXPECT_EQ(s.dram_bytes_in_use, 2 * kShard) << mesh.device(i).name();
        EXPECT_EQ(s.donations, 0u) << mesh.device(i).name();
        EXPECT_NE(buffer_of(r.shard(i)), buffer_of(a.shard(i)));
        kept_values.push_back(values_of(r.shard(i)));
      }
    });
  }
  const Mesh mesh = ring(4);
  ferry_test::expect_balanced_after(mesh, [&] {
    auto a = shards_of<float>(mesh, shape);
    ferry::wait(a);
    const std::size_t level = ferry_test::settled_allocated_bytes();
    std::vector<const std::byte*> inputs;
    for (std::int64_t i = 0; i < 4; ++i) inputs.push_back(buffer_of(a.shard(i)));
    const auto r = ferry::all_reduce(std::move(a));
    ferry::wait(r);
    EXPECT_EQ(ferry_test::allocated_bytes_back_at(level), level) << "no new buffer";
    for (std::int64_t i = 0; i < 4; ++i) {
      const ferry::DeviceStats s = mesh.device(i).stats();
      EXPECT_EQ(s.peak_dram_bytes, 6 * kShard / 4) << mesh.device(i).name();
      EXPECT_EQ(s.dram_bytes_in_use, kShard) << mesh.device(i).name();
      EXPECT_EQ(s.donations, 1u) << mesh.device(i).name();
      EXPECT_EQ(buffer_of(r.shard(i)), inputs[static_cast<std::size_t>(i)]);
      EXPECT_EQ(values_of(r.shard(i)), kept_values[static_cast<std::size_t>(i)]);
    }
  });
}

/// Expects all_reduce(std::move(a), op, axis), for shards made by `make`, to equal the call
/// that keeps its operand and a plain loop over the members in group order (accumulated in
/// double, rounded once, as ferry::sum).
template <class T>
void expect_donated_as_kept(const Mesh& mesh, ReduceOp op, int axis) {
  const Shape shape{3, 5};
  const auto kept_in = shards_of<T>(mesh, shape);
  const auto kept = ferry::all_reduce(kept_in, op, axis).to_host();
  const auto in = kept_in.to_host();
  const auto given = ferry::all_reduce(shards_of<T>(mesh, shape), op, axis).to_host();
  std::uint64_t donations = 0;
  for (const ferry::Device& d : mesh.devices()) donations += d.stats().donations;
  EXPECT_EQ(donations, static_cast<std::uint64_t>(mesh.size()));
  const ferry::MeshShape& ms = mesh.shape();
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    // The members of i's group, in order along the axis (all of them for the whole mesh).
    std::vector<std::int64_t> group;
    for (std::int64_t j = 0; j < mesh.size(); ++j) {
      bool same = true;
      for (std::size_t x = 0; axis >= 0 && x < ms.rank(); ++x) {
        same = same && (static_cast<int>(x) == axis ||
                        ms.coordinate_of(i).indices()[x] == ms.coordinate_of(j).indices()[x]);
      }
      if (same) group.push_back(j);
    }
    for (std::int64_t k = 0; k < shape.numel(); ++k) {
      const auto e = static_cast<std::size_t>(k);
      double acc = op == ReduceOp::sum || op == ReduceOp::mean
                       ? 0.0
                       : static_cast<double>(in[static_cast<std::size_t>(group[0])].data()[e]);
      for (std::int64_t j : group) {
        const auto x = static_cast<double>(in[static_cast<std::size_t>(j)].data()[e]);
        acc = op == ReduceOp::max   ? std::max(acc, x)
              : op == ReduceOp::min ? std::min(acc, x)
                                    : acc + x;
      }
      if (op == ReduceOp::mean) acc /= static_cast<double>(group.size());
      const auto want = static_cast<T>(acc);
      const auto at = static_cast<std::size_t>(i);
      EXPECT_EQ(given[at].data()[e], want) << "device " << i << ", element " << k;
      EXPECT_EQ(given[at].data()[e], kept[at].data()[e]) << "device " << i << ", element " << k;
    }
  }
}

TEST_P(MeshDonation, ADonatedAllReduceEqualsTheKeptOneAndAPlainLoop) {
  for (int axis : {-1, 0, 1}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + ", op " + std::to_string(static_cast<int>(op)));
      const Mesh mesh =
          Mesh::modeled(ferry_test::grid(2, 3), ferry_test::executor_for(GetParam()));
      ferry_test::expect_balanced_after(mesh,
                                        [&] { expect_donated_as_kept<float>(mesh, op, axis); });
      if (op == ReduceOp::mean) continue;
      const Mesh ints = Mesh::modeled(ferry_test::grid(2, 3), ferry_test::executor_for(GetParam()));
      ferry_test::expect_balanced_after(
          ints, [&] { expect_donated_as_kept<std::int32_t>(ints, op, axis); });
    }
  }
}

TEST_P(MeshDonation, TheFoldIsFerrySumOfTheStackedShardsBitForBit) {
  // Values whose sum depends on the order of the additions: on 17 members, 2^60 on member 0,
  // 1 on member 1 and -2^60 on member 16. ferry::sum folds a one-element column as 16
  // interleaved lanes (member 16 beside member 0: the sum is 1), a longer one member after
  // member (2^60 + 1 rounds to 2^60 in double: the sum is 0); the collective, donated or not,
  // must give what ferry::sum of the shards stacked on the member gives.
  for (std::int64_t width : {1, 2}) {
    SCOPED_TRACE("width " + std::to_string(width));
    const Mesh mesh = Mesh::modeled(ferry_test::line_of(17), ferry_test::executor_for(GetParam()));
    ferry_test::expect_balanced_after(mesh, [&] {
      auto make = [&] {
        std::vector<DeviceArray<float>> shards;
        for (std::int64_t i = 0; i < 17; ++i) {
          const float x = i == 0    ? std::ldexp(1.0F, 60)
                          : i == 1  ? 1.0F
                          : i == 16 ? -std::ldexp(1.0F, 60)
                                    : 0.0F;
          shards.push_back(ferry::full<float>(mesh.device(i), Shape{width}, x));
        }
        return MeshArray<float>::from_shards(mesh, std::move(shards));
      };
      const auto kept_in = make();
      const auto kept = ferry::all_reduce(kept_in);
      const auto given = ferry::all_reduce(make());
      for (std::int64_t i : {0, 5, 16}) {
        std::vector<DeviceArray<float>> here;
        for (const auto& s : kept_in.shards()) here.push_back(s.to(mesh.device(i)));
        const auto want = values_of(ferry::sum(ferry::stack(here, 0), {0}));
        EXPECT_EQ(want[0], width == 1 ? 1.0F : 0.0F) << "the orders this test tells apart";
        EXPECT_EQ(values_of(kept.shard(i)), want) << "device " << i;
        EXPECT_EQ(values_of(given.shard(i)), want) << "device " << i;
      }
      EXPECT_EQ(mesh.device(3).stats().donations, 1u);
    });
  }
}

TEST_P(MeshDonation, AShardStillHeldElsewhereKeepsItsValue) {
  const Mesh mesh = ring(4);
  ferry_test::expect_balanced_after(mesh, [&] {
    auto a = shards_of<float>(mesh, Shape{8});
    const auto before = a.to_host();
    const DeviceArray<float> held = a.shard(0);                   // a second handle
    const DeviceArray<float> view = ferry::reshape(a.shard(1), Shape{2, 4});  // a view
    const DeviceArray<float> reader = a.shard(2) * 2.0f;           // a reader submitted before
    const std::byte* held_buffer = buffer_of(held);
    const auto kept = ferry::all_reduce(a);                         // an lvalue: a copy
    const auto r = ferry::all_reduce(std::move(a));
    EXPECT_EQ(ferry::to_host(r.shard(0)), ferry::to_host(kept.shard(0)));
    for (std::int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(ferry::to_host(r.shard(i)), ferry::to_host(kept.shard(i))) << "device " << i;
    EXPECT_NE(buffer_of(r.shard(0)), held_buffer);
    const std::vector<float> original(before[0].data().begin(), before[0].data().end());
    EXPECT_EQ(values_of(held), original);
    const std::vector<float> one(before[1].data().begin(), before[1].data().end());
    EXPECT_EQ(values_of(ferry::reshape(view, Shape{8})), one);
    std::vector<float> twice(before[2].data().begin(), before[2].data().end());
    for (float& x : twice) x *= 2.0f;
    EXPECT_EQ(values_of(reader), twice);
    // Device 0 and 1 keep their shards (a handle, a view); 2 and 3 take theirs over.
    EXPECT_EQ(mesh.device(0).stats().donations, 0u);
    EXPECT_EQ(mesh.device(1).stats().donations, 0u);
    EXPECT_EQ(mesh.device(2).stats().donations, 1u);
    EXPECT_EQ(mesh.device(3).stats().donations, 1u);
  });
}

TEST_P(MeshDonation, AGivenOperandStillReadsTheOldValuesWhereOtherMembersNeedThem) {
  // Each member's shard is read by the other members' receives before its own reduction
  // overwrites it; two all-reduces in a row on the donated results see every value once.
  const Mesh mesh = ring(4);
  ferry_test::expect_balanced_after(mesh, [&] {
    auto a = shards_of<float>(mesh, Shape{64});
    const auto in = a.to_host();
    auto once = ferry::all_reduce(std::move(a));
    const auto twice = ferry::all_reduce(std::move(once)).to_host();
    for (std::size_t e = 0; e < 64; ++e) {
      double sum = 0;
      for (const auto& h : in) sum += static_cast<double>(h.data()[e]);
      for (std::size_t i = 0; i < 4; ++i)
        EXPECT_EQ(twice[i].data()[e], static_cast<float>(4 * sum));
    }
    for (const ferry::Device& d : mesh.devices()) EXPECT_EQ(d.stats().donations, 2u) << d.name();
  });
}

// ---- broadcast and permute ----

/// Each shard's values, on the host, in mesh order.
std::vector<std::vector<float>> host_values(const MeshArray<float>& a) {
  std::vector<std::vector<float>> out;
  for (const auto& h : a.to_host()) out.emplace_back(h.data().begin(), h.data().end());
  return out;
}

/// What a permute of `in` (host values in group order) by `pairs` gives, by a plain loop: the
/// source's values on each target, zeros of the member's size elsewhere.
std::vector<std::vector<float>> permuted(
    const std::vector<std::vector<float>>& in,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs) {
  std::vector<std::vector<float>> out;
  for (const auto& v : in) out.emplace_back(v.size(), 0.0F);
  for (const auto& [s, t] : pairs)
    out[static_cast<std::size_t>(t)] = in[static_cast<std::size_t>(s)];
  return out;
}

/// Runs `collective` on shards of 256 x 4 floats (S = 4,096 bytes) twice, each time on a new
/// mesh `make()` (its figures from the start): keeping the operand, then giving it. Expects, device
/// by device, the peaks and the memory in use after (in shards) `kept` and `given`, the donations
/// `donations` in the given run, each given result in its input's buffer where it donated, no new
/// buffer at all, and equal values equal to `want` (a plain loop over the inputs' host values).
template <class MakeMesh, class Collective, class Want>
void expect_moves_donate(MakeMesh make, Collective collective, Want want,
                         const std::vector<std::uint64_t>& kept_peak,
                         const std::vector<std::uint64_t>& kept_in_use,
                         const std::vector<std::uint64_t>& donations) {
  constexpr std::uint64_t kShard = 256 * 4 * sizeof(float);
  const Shape shape{256, 4};
  std::vector<std::vector<float>> kept_values;
  const Mesh kept_mesh = make();
  const auto n = static_cast<std::size_t>(kept_mesh.size());
  ferry_test::expect_balanced_after(kept_mesh, [&] {
    const Mesh& mesh = kept_mesh;
    const auto a = shards_of<float>(mesh, shape);
    ferry::wait(a);
    const auto r = collective(a);
    ferry::wait(r);
    for (std::size_t i = 0; i < n; ++i) {
      const ferry::DeviceStats s = mesh.device(static_cast<std::int64_t>(i)).stats();
      EXPECT_EQ(s.peak_dram_bytes, kept_peak[i] * kShard) << "kept, device " << i;
      EXPECT_EQ(s.dram_bytes_in_use, kept_in_use[i] * kShard) << "kept, device " << i;
      EXPECT_EQ(s.donations, 0u) << "kept, device " << i;
    }
    kept_values = host_values(r);
    EXPECT_EQ(kept_values, want(host_values(a)));
  });
  const Mesh mesh = make();
  ferry_test::expect_balanced_after(mesh, [&] {
    auto a = shards_of<float>(mesh, shape);
    ferry::wait(a);
    const std::size_t level = ferry_test::settled_allocated_bytes();
    std::vector<const std::byte*> inputs;
    for (std::size_t i = 0; i < n; ++i)
      inputs.push_back(buffer_of(a.shard(static_cast<std::int64_t>(i))));
    const auto r = collective(std::move(a));
    ferry::wait(r);
    EXPECT_EQ(ferry_test::allocated_bytes_back_at(level), level) << "no new buffer";
    for (std::size_t i = 0; i < n; ++i) {
      const ferry::DeviceStats s = mesh.device(static_cast<std::int64_t>(i)).stats();
      // One shard throughout: the input, then the result in its buffer.
      EXPECT_EQ(s.peak_dram_bytes, kShard) << "given, device " << i;
      EXPECT_EQ(s.dram_bytes_in_use, kShard) << "given, device " << i;
      EXPECT_EQ(s.donations, donations[i]) << "given, device " << i;
      EXPECT_EQ(buffer_of(r.shard(static_cast<std::int64_t>(i))), inputs[i]) << "device " << i;
    }
    EXPECT_EQ(host_values(r), kept_values);
    // The trace, whose slices now include the in_flight and land steps, is strict JSON.
    const ferry_test::TempDir dir("ferry_donation");
    const std::string path = dir.file("mesh.json");
    mesh.write_trace(path);
    ferry_test::expect_strict_json("the trace", ferry_test::read_text(path));
  });
}

TEST_P(MeshDonation, AGivenBroadcastHoldsEachResultInItsMembersShard) {
  // Root 1 keeps its shard (its result is its input: one shard, no donation); each other
  // member holds its input and the root's data when the operand is kept (2 S, and 2 S after),
  // its input alone when it is given (the result lands in it: S).
  expect_moves_donate([&] { return ring(4); },
                      [](auto a) { return ferry::broadcast(std::forward<decltype(a)>(a), 1); },
                      [](const std::vector<std::vector<float>>& in) {
                        return std::vector<std::vector<float>>(4, in[1]);
                      },
                      {2, 1, 2, 2}, {2, 1, 2, 2}, {1, 0, 1, 1});
}

TEST_P(MeshDonation, AGivenRingShiftHoldsEachResultInItsMembersShard) {
  // Every member sends and receives: kept, it holds its input and what it received (2 S);
  // given, what it received lands in its input once its own data has left (S).
  const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  expect_moves_donate(
      [&] { return ring(4); },
      [&](auto a) { return ferry::permute(std::forward<decltype(a)>(a), shift); },
      [&](const std::vector<std::vector<float>>& in) { return permuted(in, shift); }, {2, 2, 2, 2},
      {2, 2, 2, 2}, {1, 1, 1, 1});
}

TEST_P(MeshDonation, AGivenChainPermuteFillsZerosAndReceivesInPlace) {
  // {0, 1}, {1, 2} on a line of 4: member 0 only sends (zeros in its shard once its data has
  // left), 1 sends and receives, 2 only receives, 3 neither (zeros). Kept, each holds its
  // input and a new result (2 S); given, its input alone (S).
  const std::vector<std::pair<std::int64_t, std::int64_t>> chain{{0, 1}, {1, 2}};
  expect_moves_donate(
      [&] { return Mesh::modeled(ferry_test::line_of(4), ferry_test::executor_for(GetParam())); },
      [&](auto a) { return ferry::permute(std::forward<decltype(a)>(a), chain); },
      [&](const std::vector<std::vector<float>>& in) { return permuted(in, chain); },
      {2, 2, 2, 2}, {2, 2, 2, 2}, {1, 1, 1, 1});
}

TEST_P(MeshDonation, AGivenMoveAlongAnAxisEqualsTheKeptOneAndAPlainLoop) {
  // A 2 x 3 grid: each row a shift by one along axis 1, each column a broadcast from row 1
  // along axis 0; several rounds on the donated results, 0-size shards too.
  for (const Shape& shape : {Shape{3, 5}, Shape{0, 5}}) {
    SCOPED_TRACE(shape.to_string());
    const Mesh mesh = Mesh::modeled(ferry_test::grid(2, 3), ferry_test::executor_for(GetParam()));
    ferry_test::expect_balanced_after(mesh, [&] {
      const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 0}};
      auto a = shards_of<float>(mesh, shape);
      const auto in = host_values(a);
      const auto kept = host_values(ferry::broadcast(ferry::permute(a, shift, 1), 1, 0));
      auto r = ferry::broadcast(ferry::permute(std::move(a), shift, 1), 1, 0);
      // A plain loop: device (row, col) gets row 1's shard from col - 1.
      for (std::int64_t i = 0; i < 6; ++i) {
        const std::int64_t col = i % 3;
        const auto want = in[static_cast<std::size_t>(3 + (col + 2) % 3)];
        EXPECT_EQ(kept[static_cast<std::size_t>(i)], want) << "device " << i;
        EXPECT_EQ(host_values(r)[static_cast<std::size_t>(i)], want) << "device " << i;
      }
      // The given permute donates on all six; each broadcast (given a temporary, the kept run's
      // too) on the three of row 0.
      std::vector<std::uint64_t> donations;
      for (const ferry::Device& d : mesh.devices()) donations.push_back(d.stats().donations);
      EXPECT_EQ(donations, (std::vector<std::uint64_t>{3, 3, 3, 1, 1, 1}));
      r = ferry::permute(std::move(r), {{0, 2}, {2, 1}}, 1);  // column 0 gets zeros
      const auto twice = host_values(r);
      for (std::int64_t i = 0; i < 6; ++i) {
        const std::int64_t col = i % 3;
        const auto want = col == 0
                              ? std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.0F)
                              : in[static_cast<std::size_t>(3 + (col == 1 ? 1 : 2))];
        EXPECT_EQ(twice[static_cast<std::size_t>(i)], want) << "device " << i;
      }
    });
  }
}

TEST_P(MeshDonation, AGivenMoveKeepsAShardStillHeldElsewhere) {
  const Mesh mesh = ring(4);
  ferry_test::expect_balanced_after(mesh, [&] {
    const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
    auto a = shards_of<float>(mesh, Shape{8});
    const auto before = host_values(a);
    const DeviceArray<float> held = a.shard(0);                                // a second handle
    const DeviceArray<float> view = ferry::reshape(a.shard(1), Shape{2, 4});  // a view
    const std::byte* held_buffer = buffer_of(held);
    const auto r = ferry::permute(std::move(a), shift);
    EXPECT_EQ(host_values(r), permuted(before, shift));
    EXPECT_NE(buffer_of(r.shard(0)), held_buffer);
    EXPECT_EQ(values_of(held), before[0]);
    EXPECT_EQ(values_of(ferry::reshape(view, Shape{8})), before[1]);
    const std::vector<std::uint64_t> want{0, 0, 1, 1};
    for (std::int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(mesh.device(i).stats().donations, want[static_cast<std::size_t>(i)]) << i;
  });
}

TEST_P(MeshDonation, AGivenMoveDonatesOnlyBetweenRowMajorShardsInDram) {
  // A ring shift: member p receives member p - 1's shard into its own. A shard that is tiled or
  // in L1 neither takes a result (member p keeps its buffer) nor is carried as it lies into
  // another's (member p + 1 gets a new buffer too): the links carry a row-major shard's bytes.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  const std::vector<std::pair<ferry::Layout, std::vector<std::uint64_t>>> cases{
      {{ferry::MemorySpace::dram, ferry::Order::tiled}, {0, 0, 1, 1}},
      {{ferry::MemorySpace::l1, ferry::Order::row_major}, {0, 0, 1, 1}}};
  for (const auto& c : cases) {
    const ferry::Layout layout = c.first;  // (clang 14 captures no structured binding)
    const std::vector<std::uint64_t>& want = c.second;
    SCOPED_TRACE(layout.space == ferry::MemorySpace::l1 ? "L1" : "tiled");
    const Mesh mesh = ring(4);
    ferry_test::expect_balanced_after(mesh, [&] {
      auto a = shards_of<float>(mesh, Shape{4, 8});
      std::vector<DeviceArray<float>> shards = std::move(a).shards();
      shards[0] = ferry::to_layout(shards[0], layout);
      a = MeshArray<float>::from_shards(mesh, std::move(shards));
      const auto before = host_values(a);
      std::vector<const std::byte*> inputs;
      for (std::int64_t i = 0; i < 4; ++i) inputs.push_back(buffer_of(a.shard(i)));
      const auto r = ferry::permute(std::move(a), shift);
      EXPECT_EQ(host_values(r), permuted(before, shift));
      for (std::int64_t i = 0; i < 4; ++i) {
        const auto k = static_cast<std::size_t>(i);
        EXPECT_EQ(mesh.device(i).stats().donations, want[k]) << "device " << i;
        // (A buffer freed during the collective may come back from the cache: only a donor's
        // identity is certain.)
        if (want[k] == 1) {
          EXPECT_EQ(buffer_of(r.shard(i)), inputs[k]) << "device " << i;
        }
      }
    });
  }
}

TEST_P(MeshDonation, AGivenBroadcastGivesTheRootsShardWhateverEachMembersShape) {
  // Member 2's shard is 3 x 4, the others' 2 x 4: every member gets the root's shard, kept or
  // given. Given, a member whose shard has the root's shape holds it in that shard's buffer;
  // one of another shape cannot, and gets the root's shape in a buffer of its own.
  const auto shape_of = [](std::int64_t i) { return i == 2 ? Shape{3, 4} : Shape{2, 4}; };
  const std::vector<std::pair<std::int64_t, std::vector<std::uint64_t>>> cases{
      {0, {0, 1, 0, 1}}, {2, {0, 0, 0, 0}}};
  for (const auto& c : cases) {
    const std::int64_t root = c.first;  // (clang 14 captures no structured binding)
    const std::vector<std::uint64_t>& donations = c.second;
    SCOPED_TRACE("root " + std::to_string(root));
    const Mesh mesh = ring(4);
    ferry_test::expect_balanced_after(mesh, [&] {
      std::vector<DeviceArray<float>> shards;
      for (std::int64_t i = 0; i < 4; ++i) {
        std::vector<float> v(static_cast<std::size_t>(shape_of(i).numel()));
        for (std::size_t k = 0; k < v.size(); ++k)
          v[k] = static_cast<float>(10 * i) + 0.5F * static_cast<float>(k);
        shards.push_back(ferry::to_device(mesh.device(i), v, shape_of(i)));
      }
      auto a = MeshArray<float>::from_shards(mesh, std::move(shards));
      const auto in = host_values(a);
      const std::vector<std::vector<float>> want(4, in[static_cast<std::size_t>(root)]);
      const auto kept = ferry::broadcast(a, root);
      const auto given = ferry::broadcast(std::move(a), root);
      EXPECT_EQ(host_values(kept), want);
      EXPECT_EQ(host_values(given), want);
      for (std::int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(kept.shard(i).shape(), shape_of(root)) << "kept, device " << i;
        EXPECT_EQ(given.shard(i).shape(), shape_of(root)) << "given, device " << i;
        EXPECT_EQ(mesh.device(i).stats().donations, donations[static_cast<std::size_t>(i)])
            << "device " << i;
      }
    });
  }
}

TEST_P(MeshDonation, AFailedShardReachesWhatItReachedWhenKept) {
  // Device 2's first step (its shard's import) fails: given or kept, a shift by one fails
  // position 3 alone (2's shard, failed, takes nothing: 2 gets a new buffer), and a broadcast
  // from 0 fails nobody; a broadcast from 2 fails everybody.
  ferry::MeshSpec spec = ferry_test::ring(4);
  spec.devices[2].faults.fail_steps = {0};
  const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  for (bool give : {false, true}) {
    SCOPED_TRACE(give ? "given" : "kept");
    // A mesh each: the fault is its device 2's first step.
    auto run = [&](auto f, auto check) {
      const Mesh mesh = Mesh::modeled(spec, ferry_test::executor_for(GetParam()));
      ferry_test::expect_balanced_after(mesh, [&] {
        auto a = shards_of<float>(mesh, Shape{8});
        check(give ? f(std::move(a)) : f(a));
      });
    };
    run([&](auto a) { return ferry::permute(std::forward<decltype(a)>(a), shift); },
        [](const MeshArray<float>& r) {
          for (std::int64_t i = 0; i < 3; ++i) EXPECT_NO_THROW(r.shard(i).to_host()) << i;
          EXPECT_THROW(r.shard(3).to_host(), ferry::DeviceFault);
        });
    run([](auto a) { return ferry::broadcast(std::forward<decltype(a)>(a), 0); },
        [](const MeshArray<float>& r) {
          for (std::int64_t i = 0; i < 4; ++i) EXPECT_NO_THROW(r.shard(i).to_host()) << i;
        });
    run([](auto a) { return ferry::broadcast(std::forward<decltype(a)>(a), 2); },
        [](const MeshArray<float>& r) {
          for (std::int64_t i = 0; i < 4; ++i)
            EXPECT_THROW(r.shard(i).to_host(), ferry::DeviceFault) << i;
        });
  }
}

}  // namespace

}  // namespace test_mesh_donation
