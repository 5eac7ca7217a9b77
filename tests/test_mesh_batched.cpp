// The batched receive of all_gather, all_to_all and all_reduce: with no tape, trace or other
// process watching and every shard row-major in DRAM, a member receives the others' data in one
// step and concatenates (or reduces) it with its own where it lies. The same program run with
// one receive per part (detail::t_receive_each, the path a tape or a trace takes, and a mesh
// over processes) gives the same values, the same messages on the links and the same slices on
// every engine, to the nanosecond; only the receives differ (they draw no slice): one per
// member where there was one per other member, and each device's memory over time is the same
// (a part's buffer held until it has arrived on every member). Every program gives its memory
// back and stays above its lower bound.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/files.hpp"
#include "support/meshes.hpp"
#include "support/temp_dir.hpp"
#include "support/timeline.hpp"

namespace test_mesh_batched {

namespace {

using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Shape;

/// Member i's shard of `shape`: exact small values, different on each member.
MeshArray<float> shards_of(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i)
    shards.push_back(ferry::to_device(mesh.device(i), ferry_test::values(shape, 5 * i)));
  return MeshArray<float>::from_shards(mesh, std::move(shards));
}

/// What one run of a program left: each result shard's values, the links' messages by op,
/// each device's slices (name, track, start, end) and how many steps were submitted to it (a
/// receive is one, though it takes no engine time, draws no slice and is not in stats().steps).
struct Run {
  std::vector<std::vector<float>> values;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> links;
  std::vector<std::vector<std::tuple<std::string, std::size_t, long long, long long>>> slices;
  std::vector<std::uint64_t> steps;
  long long makespan = 0;
  std::vector<std::uint64_t> peaks;  // each device's peak DRAM
  /// Each device's engine slices as (name, bytes), in start order.
  std::vector<std::vector<std::pair<std::string, double>>> bytes;
  /// The trace's memory counters (each device's DRAM and L1 in use at each change), in order.
  std::vector<std::string> memory;
};

using Program = std::function<MeshArray<float>(const Mesh&)>;

/// `program` on a fresh mesh of `spec`, one receive per part when `each`.
Run run(const ferry::MeshSpec& spec, const Program& program, bool each) {
  const Mesh mesh = Mesh::modeled(spec);
  Run r;
  ferry_test::expect_balanced_after(mesh, [&] {
    ferry::detail::t_receive_each = each;
    const MeshArray<float> out = program(mesh);
    ferry::detail::t_receive_each = false;
    for (std::int64_t i = 0; i < out.size(); ++i) {
      const auto h = out.shard(i).to_host();
      r.values.emplace_back(h.data().begin(), h.data().end());
    }
  });
  r.links = ferry_test::link_ops(mesh);
  const ferry_test::TempDir dir("mesh_batched");
  mesh.write_trace(dir.file("trace.json"));
  std::istringstream trace(ferry_test::read_text(dir.file("trace.json")));
  for (std::string line; std::getline(trace, line);) {
    if (line.find("\"device memory\"") != std::string::npos) r.memory.push_back(line);
  }
  r.makespan = static_cast<long long>(mesh.stats().makespan.count());
  for (const ferry::Device& d : mesh.devices()) {
    r.steps.push_back(ferry::detail::DeviceAccess::state(d)->submitted_steps());
    r.peaks.push_back(d.stats().peak_dram_bytes);
    r.slices.emplace_back();
    r.bytes.emplace_back();
    for (const auto& s : ferry_test::slices_of(d)) {
      r.slices.back().emplace_back(s.name, s.track, s.start.count(), s.end.count());
      if (s.track != 0) r.bytes.back().emplace_back(s.name, s.bytes);
    }
  }
  return r;
}

/// The batched run equals the one with a receive per part, but for the receives: each member
/// got `fewer` steps fewer (for a group of n: one receive where there were n - 1, and for an
/// all_to_all no views of the n parts of its shard).
void expect_same_with_fewer_receives(const ferry::MeshSpec& spec, const Program& program,
                                     std::uint64_t fewer) {
  const Run batched = run(spec, program, false);
  const Run each = run(spec, program, true);
  EXPECT_EQ(batched.values, each.values);
  EXPECT_EQ(batched.links, each.links);
  EXPECT_EQ(batched.slices, each.slices);
  EXPECT_EQ(batched.makespan, each.makespan);
  EXPECT_EQ(batched.memory, each.memory);
  ASSERT_EQ(batched.steps.size(), each.steps.size());
  for (std::size_t i = 0; i < each.steps.size(); ++i)
    EXPECT_EQ(batched.steps[i] + fewer, each.steps[i]) << "device " << i;
}

TEST(MeshBatched, AnAllGatherReceivesOncePerMemberAndKeepsItsTimeline) {
  for (int dim : {0, 1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    expect_same_with_fewer_receives(
        ferry_test::ring(4),
        [dim](const Mesh& mesh) { return ferry::all_gather(shards_of(mesh, Shape{3, 5}), dim); },
        2);
  }
}

TEST(MeshBatched, AnAllGatherAlongOneAxisBesideAKernel) {
  // Along the rows of a 2 x 4 (mesh axis 1), while each device multiplies: the gather's
  // concatenation shares the compute units with the matmul.
  expect_same_with_fewer_receives(
      ferry_test::grid(2, 4),
      [](const Mesh& mesh) {
        const MeshArray<float> x = shards_of(mesh, Shape{16, 8});
        std::vector<DeviceArray<float>> busy;
        for (std::int64_t i = 0; i < mesh.size(); ++i)
          busy.push_back(ferry::matmul(x.shard(i), ferry::transpose(x.shard(i))));
        MeshArray<float> g = ferry::all_gather(x, 1, 1);
        std::vector<DeviceArray<float>> out;
        for (std::int64_t i = 0; i < mesh.size(); ++i)
          out.push_back(ferry::matmul(busy[static_cast<std::size_t>(i)], g.shard(i)));
        return MeshArray<float>::from_shards(mesh, std::move(out));
      },
      2);
}

TEST(MeshBatched, AnAllToAllReceivesOncePerMemberAndKeepsItsTimeline) {
  // split 0 of (8, 3): each part is a block of its shard; split 1 of (1, 8, 2): also, the
  // dims before it being of size 1.
  expect_same_with_fewer_receives(
      ferry_test::ring(4),
      [](const Mesh& mesh) { return ferry::all_to_all(shards_of(mesh, Shape{8, 3}), 0, 1); }, 6);
  expect_same_with_fewer_receives(
      ferry_test::line_of(4),
      [](const Mesh& mesh) { return ferry::all_to_all(shards_of(mesh, Shape{1, 8, 2}), 1, 2); },
      6);
}

TEST(MeshBatched, AnAllToAllOfPartsThatAreNoBlockKeepsAReceivePerPart) {
  // split 1 of (2, 8): each part is two rows' pieces, cut by a slice on its own device on
  // both paths.
  expect_same_with_fewer_receives(
      ferry_test::ring(4),
      [](const Mesh& mesh) { return ferry::all_to_all(shards_of(mesh, Shape{2, 8}), 1, 0); }, 0);
}

TEST(MeshBatched, TheBatchedAllToAllEqualsAPlainLoop) {
  const Mesh mesh = Mesh::modeled(ferry_test::ring(4));
  ferry_test::expect_balanced_after(mesh, [&] {
    const Shape shape{8, 3};
    const MeshArray<float> out = ferry::all_to_all(shards_of(mesh, shape), 0, 1);
    for (std::int64_t p = 0; p < 4; ++p) {
      // Member p: rows [2p, 2p + 2) of every member's shard, side by side in member order.
      const auto got = out.shard(p).to_host();
      ASSERT_EQ(got.shape(), (Shape{2, 12}));
      for (std::int64_t m = 0; m < 4; ++m) {
        const auto src = ferry_test::values(shape, 5 * m);
        for (std::int64_t r = 0; r < 2; ++r) {
          for (std::int64_t c = 0; c < 3; ++c) {
            EXPECT_EQ(got.data()[static_cast<std::size_t>(r * 12 + m * 3 + c)],
                      src.data()[static_cast<std::size_t>((2 * p + r) * 3 + c)]);
          }
        }
      }
    }
  });
}

TEST(MeshBatched, AnAllReduceInPartsReceivesTwicePerMemberAndKeepsItsTimeline) {
  // Its reduce-scatter receives part p of the 3 other shards in one step (3 on the other
  // path) and its all-gather the 3 other reduced parts in one (3): 4 fewer receives. The other
  // path cuts each part out of a flat view of its shard: each shard is viewed for each of the 3
  // other members, as a slice of a reshape (6 views on its device the batched path does not
  // make; 24 elements, parts of 6), or of the shard itself when it is flat already (3; 7
  // elements, parts of 2, 2, 2 and 1).
  for (const auto& [shape, views] : {std::pair{Shape{8, 3}, 6}, std::pair{Shape{7}, 3}}) {
    SCOPED_TRACE(shape.to_string());
    expect_same_with_fewer_receives(
        ferry_test::ring(4),
        [s = shape](const Mesh& mesh) { return ferry::all_reduce(shards_of(mesh, s)); },
        4 + static_cast<std::uint64_t>(views));
  }
  // Along each row of a 2 x 3 beside a matmul: groups of 3, 2 receives fewer (one a phase
  // where there were two) and 4 views (a reshape and a slice for each of 2 other members).
  expect_same_with_fewer_receives(
      ferry_test::grid(2, 3),
      [](const Mesh& mesh) {
        const MeshArray<float> x = shards_of(mesh, Shape{16, 8});
        std::vector<DeviceArray<float>> busy;
        for (std::int64_t i = 0; i < mesh.size(); ++i)
          busy.push_back(ferry::matmul(x.shard(i), ferry::transpose(x.shard(i))));
        const MeshArray<float> r = ferry::all_reduce(x, ferry::ReduceOp::sum, 1);
        std::vector<DeviceArray<float>> out;
        for (std::int64_t i = 0; i < mesh.size(); ++i)
          out.push_back(ferry::matmul(busy[static_cast<std::size_t>(i)], r.shard(i)));
        return MeshArray<float>::from_shards(mesh, std::move(out));
      },
      6);
}

TEST(MeshBatched, EmptyShardsAndOneMember) {
  expect_same_with_fewer_receives(
      ferry_test::ring(4),
      [](const Mesh& mesh) { return ferry::all_gather(shards_of(mesh, Shape{0, 4}), 0); }, 2);
  // A group of one: its own shard, nothing received.
  expect_same_with_fewer_receives(
      ferry_test::line_of(1),
      [](const Mesh& mesh) {
        const MeshArray<float> x = shards_of(mesh, Shape{2, 2});
        return ferry::all_gather(x, 0);
      },
      0);
}

/// The bytes of each engine slice named `op` on each device of a ring of 4 that ran
/// `program` (run: its books balanced), one receive per part when `each`.
std::vector<std::vector<double>> join_bytes(const std::string& op, const Program& program,
                                            bool each) {
  std::vector<std::vector<double>> out;
  for (const auto& device : run(ferry_test::ring(4), program, each).bytes) {
    out.emplace_back();
    for (const auto& [name, bytes] : device) {
      if (name == op) out.back().push_back(bytes);
    }
  }
  return out;
}

TEST(MeshBatched, AJoinCopiesOnlyItsOwnPart) {
  // The links write each received part where it belongs in the result, as a real library's
  // do: the one kernel a member runs copies its own part, read and written (2 x its bytes).
  using Bytes = std::vector<std::vector<double>>;
  for (bool each : {false, true}) {
    SCOPED_TRACE(each ? "a receive per part" : "batched");
    // (3, 5) floats gathered along dim 1: its own shard, 60 bytes.
    EXPECT_EQ(join_bytes(
                  "all_gather",
                  [](const Mesh& mesh) { return ferry::all_gather(shards_of(mesh, {3, 5}), 1); },
                  each),
              Bytes(4, {120.0}));
    // (8, 3) split along 0 into parts of (2, 3): 24 bytes.
    EXPECT_EQ(join_bytes(
                  "all_to_all",
                  [](const Mesh& mesh) { return ferry::all_to_all(shards_of(mesh, {8, 3}), 0, 1); },
                  each),
              Bytes(4, {48.0}));
    // Member i holds i + 1 rows of 2 floats (the per-member path): 8 (i + 1) bytes its own.
    EXPECT_EQ(join_bytes(
                  "all_gather",
                  [](const Mesh& mesh) {
                    std::vector<DeviceArray<float>> shards;
                    for (std::int64_t i = 0; i < mesh.size(); ++i) {
                      shards.push_back(ferry::to_device(mesh.device(i),
                                                        ferry_test::values(Shape{i + 1, 2}, i)));
                    }
                    return ferry::all_gather(MeshArray<float>::from_shards(mesh, shards), 0);
                  },
                  each),
              (Bytes{{16.0}, {32.0}, {48.0}, {64.0}}));
  }
}

/// Each device's peak DRAM on a ring of 4 that ran `program` (run: its books balanced), one
/// receive per part when `each`.
std::vector<std::uint64_t> peaks(const Program& program, bool each) {
  return run(ferry_test::ring(4), program, each).peaks;
}

TEST(MeshBatched, ReceivedPartsHoldNoMemoryBesideTheResult) {
  // What a member receives for a concatenation lands in its result, as the links of a real
  // library write it, and what a ring's member reduces passes through its staging buffers: a
  // device holds its shard and its result, not the received parts too.
  using Peaks = std::vector<std::uint64_t>;
  for (bool each : {false, true}) {
    SCOPED_TRACE(each ? "a receive per part" : "batched");
    // (3, 5) floats: a shard of 60 bytes and a result of 240 (300; 480 with the parts).
    EXPECT_EQ(peaks([](const Mesh& mesh) { return ferry::all_gather(shards_of(mesh, {3, 5}), 1); },
                    each),
              Peaks(4, 300));
    // (8, 3) floats: a shard of 96 bytes and a result of 96 (192; 264 with the parts).
    EXPECT_EQ(
        peaks([](const Mesh& mesh) { return ferry::all_to_all(shards_of(mesh, {8, 3}), 0, 1); },
              each),
        Peaks(4, 192));
    // A ring's reduce-scatter reduces step by step as the parts pass through its staging
    // buffers: a shard of 96 bytes and two chunks of 24 while a step's reduction reads the
    // partial before it and writes its own, or the last partial and the part (24) while the
    // last step folds (144; 120 before the staging was counted, 192 with the 3 parts received
    // held as well).
    EXPECT_EQ(peaks(
                  [](const Mesh& mesh) {
                    return ferry::reduce_scatter(shards_of(mesh, {8, 3}), 0);
                  },
                  each),
              Peaks(4, 144));
  }
}

}  // namespace

}  // namespace test_mesh_batched
