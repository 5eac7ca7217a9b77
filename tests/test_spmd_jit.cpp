// jit(spmd(mesh, fn)): an spmd function traced once per device and replayed. Replays against the
// untraced spmd run bit for bit, for new values and a new batch size without running the
// function again; every named collective through a replay; a collective whose result nothing
// reads still runs; the timeline and link traffic of replayed calls equal the untraced calls';
// what cannot be traced runs untraced, with the reason in explain(); errors as spmd's.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/meshes.hpp"
#include "support/spmd_cases.hpp"
#include "support/temp_dir.hpp"

namespace test_spmd_jit {

namespace {

using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Shape;
using ferry_test::expect_error;
using ferry_test::expect_same_bits;
using ferry_test::grid2x2;
using ferry_test::ring4;
using ferry_test::rounding_shards;
using ferry_test::rounding_values;
using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

/// A tensor-parallel layer: a matmul, an all-reduce, a scale by the device's position.
struct Layer {
  std::atomic<int>* runs;
  DeviceArray<float> operator()(const DeviceArray<float>& x, const DeviceArray<float>& w) const {
    ++*runs;
    const auto h = ferry::all_reduce(ferry::matmul(x, w), "i");
    return ferry::relu(h) * static_cast<float>(ferry::axis_index("i") + 1);
  }
};

TEST(SpmdJit, TracedOnceAndReplayedForNewValuesAndANewBatchSize) {
  const Mesh mesh = Mesh::modeled(ring4());
  ferry_test::expect_balanced_after(mesh, [&] {
    std::atomic<int> runs{0};
    std::atomic<int> plain_runs{0};
    const auto program = ferry::jit(ferry::spmd(mesh, Layer{&runs}));
    const auto plain = ferry::spmd(mesh, Layer{&plain_runs});
    const auto w = rounding_shards(mesh, 8, 8, 100);
    for (const auto& [rows, salt] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {8, 0}, {8, 10}, {16, 20}, {3, 30}}) {
      SCOPED_TRACE("batch " + std::to_string(rows) + ", salt " + std::to_string(salt));
      const auto x = rounding_shards(mesh, rows, 8, salt);
      expect_same_bits(program(x, w), plain(x, w));
    }
    // The function ran once per device, at the first call; the rest were replays of one entry.
    EXPECT_EQ(runs.load(), 4);
    EXPECT_EQ(plain_runs.load(), 16);
    EXPECT_EQ(program.cache_misses(), 1U);
    EXPECT_EQ(program.cache_hits(), 3U);
    EXPECT_EQ(program.cache_size(), 1U);
    const std::string text = program.explain();
    EXPECT_NE(text.find("entry 0, device 3:"), std::string::npos) << text;
    EXPECT_NE(text.find("all_reduce(v"), std::string::npos) << text;

    // A number argument is a constant of the traces: a new value traces anew.
    const auto scaled = ferry::jit(ferry::spmd(mesh, [](const DeviceArray<float>& x, float s) {
      return ferry::all_reduce(x * s, "i");
    }));
    const auto x = rounding_shards(mesh, 2, 3);
    const auto want = [&](float s) {
      return ferry::spmd(mesh, [](const DeviceArray<float>& v, float f) {
        return ferry::all_reduce(v * f, "i");
      })(x, s);
    };
    expect_same_bits(scaled(x, 0.5F), want(0.5F));
    expect_same_bits(scaled(x, 3.0F), want(3.0F));
    expect_same_bits(scaled(x, 0.5F), want(0.5F));
    EXPECT_EQ(scaled.cache_misses(), 2U);
    EXPECT_EQ(scaled.cache_hits(), 1U);
  });
}

TEST(SpmdJit, EveryNamedCollectiveReplaysBitForBit) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  ferry_test::expect_balanced_after(mesh, [&] {
    std::atomic<int> runs{0};
    const auto fn = [&runs](const DeviceArray<float>& x) {
      ++runs;
      auto y = ferry::all_gather(x, "tp", 1);                  // (r, 8)
      y = ferry::reduce_scatter(y, "dp", 0);                    // (r / 2, 8)
      y = ferry::all_to_all(y, "tp", 1, 0);                     // (r, 4)
      y = ferry::broadcast(y, "dp", 1) + ferry::all_reduce(y, "tp", ferry::ReduceOp::max);
      return std::pair{ferry::permute(y, "tp", Pairs{{0, 1}}),
                       ferry::all_reduce(y, "dp", ferry::ReduceOp::mean)};
    };
    const auto program = ferry::jit(ferry::spmd(mesh, fn));
    const auto plain = ferry::spmd(mesh, fn);
    for (const std::int64_t rows : {4, 4, 8, 8}) {
      SCOPED_TRACE("rows " + std::to_string(rows));
      const auto x = rounding_shards(mesh, rows, 4, rows);
      const auto got = program(x);
      const auto want = plain(x);
      expect_same_bits(got.first, want.first);
      expect_same_bits(got.second, want.second);
    }
    // The collectives that change sizes guard their operands' sizes: a new batch size traces
    // once more, then replays.
    EXPECT_EQ(program.cache_misses(), 2U);
    EXPECT_EQ(program.cache_hits(), 2U);
    EXPECT_EQ(program.cache_size(), 2U);
    EXPECT_EQ(runs.load(), 2 * 4 + 4 * 4);
  });
}

/// The mesh's timeline_text and Chrome trace, without the device-memory counters: a replay holds the operand of a collective until the collective
/// has been submitted, so an all-reduce that eagerly wrote into the buffer of a temporary
/// operand (donation) writes into a fresh one when replayed, one buffer more for a while.
std::string timeline_and_trace(const Mesh& mesh) {
  const ferry_test::TempDir dir("spmd_jit");
  mesh.write_trace(dir.file("trace.json"));
  std::istringstream in(ferry_test::read_text(dir.file("trace.json")));
  std::string steps;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"device memory\"") == std::string::npos) steps += line + "\n";
  }
  return mesh.timeline_text() + steps;
}

/// Three calls of a two-layer tensor-parallel step on a fresh mesh, each with new inputs, the
/// third on a larger batch, jitted or not; the timeline and the link traffic after them. The
/// second layer's all-gather result is read by nothing: a replay must still make the call.
std::pair<std::string, std::map<std::string, std::pair<std::int64_t, std::int64_t>>> three_steps(
    bool jitted) {
  const Mesh mesh = Mesh::modeled(ring4());
  std::string timeline;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> links;
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto fn = [](const DeviceArray<float>& x, const DeviceArray<float>& wk) {
      auto h = ferry::all_reduce(ferry::matmul(x, wk), "i");
      h = ferry::matmul(h, wk) + x;
      (void)ferry::all_gather(h, "i", 0);
      return ferry::reduce_scatter(ferry::sum(h, {1}, true), "i", 0);
    };
    const auto plain = ferry::spmd(mesh, fn);
    const auto program = ferry::jit(plain);
    const auto w = rounding_shards(mesh, 8, 8, 50);
    for (const std::int64_t rows : {8, 8, 16}) {
      const auto x = rounding_shards(mesh, rows, 8, rows);
      ferry::wait(jitted ? program(x, w) : plain(x, w));
    }
    if (jitted) {
      EXPECT_EQ(program.cache_hits(), 1U);
      EXPECT_EQ(program.cache_misses(), 2U);  // reduce_scatter guards the batch size
    }
    timeline = timeline_and_trace(mesh);
    links = ferry_test::link_ops(mesh);
  });
  return {timeline, links};
}

TEST(SpmdJit, AReplayHasTheTimelineAndLinkTrafficOfTheUntracedRun) {
  const auto plain = three_steps(false);
  const auto jitted = three_steps(true);
  EXPECT_NE(plain.first.find("matmul"), std::string::npos);
  EXPECT_NE(plain.first.find("all_gather"), std::string::npos);
  EXPECT_EQ(plain.second.at("all_gather").first, jitted.second.at("all_gather").first);
  EXPECT_EQ(plain.second, jitted.second);
  EXPECT_EQ(plain.first, jitted.first);
}

TEST(SpmdJit, AFunctionThatCannotBeTracedRunsUntracedAndExplainSaysWhy) {
  const Mesh mesh = Mesh::modeled(ring4());
  ferry_test::expect_balanced_after(mesh, [&] {
    std::atomic<int> runs{0};
    const auto program = ferry::jit(ferry::spmd(mesh, [&runs](const DeviceArray<float>& x) {
      ++runs;
      const float first = x.to_host().data()[0];  // a value the host sees: no guard can check it
      return ferry::all_reduce(x * first, "i");
    }));
    const auto x = rounding_shards(mesh, 2, 2);
    const auto a = program(x);
    const auto b = program(x);
    expect_same_bits(a, b);
    EXPECT_EQ(runs.load(), 8);
    EXPECT_EQ(program.cache_size(), 0U);
    EXPECT_EQ(program.cache_misses(), 2U);
    const std::string text = program.explain();
    EXPECT_NE(text.find("not cached: device 0: "), std::string::npos) << text;

    // Under a gradient tape a program runs its function, so the tape sees every op.
    const auto w = ferry::to_device(mesh.device(0), std::vector<float>{0.5F, -1.25F}, Shape{2});
    const auto doubled = ferry::jit(ferry::spmd(mesh, [](const DeviceArray<float>& v) {
      return ferry::all_reduce(v * v, "i");
    }));
    const auto loss = [&](const DeviceArray<float>& v) {
      std::vector<DeviceArray<float>> copies;
      for (std::int64_t k = 0; k < 4; ++k) copies.push_back(v.to(mesh.device(k)));
      return ferry::sum(doubled(MeshArray<float>::from_shards(mesh, copies)).shard(0));
    };
    const auto [value, grad] = ferry::value_and_grad(loss)(w);
    EXPECT_FLOAT_EQ(value.to_host().data()[0], 4 * (0.25F + 1.5625F));
    EXPECT_FLOAT_EQ(grad.to_host().data()[0], 4.0F);
    EXPECT_FLOAT_EQ(grad.to_host().data()[1], -10.0F);
    EXPECT_EQ(doubled.cache_size(), 0U);
  });
}

TEST(SpmdJit, ErrorsAreSpmdsAtTheTraceAndAtAReplay) {
  const Mesh mesh = Mesh::modeled(ring4());
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto dev = [&](std::int64_t k) {
      return "device " + std::to_string(k) + " (" + mesh.device(k).name() + ")";
    };
    // A device that skips the collective: the others' calls fail as under spmd; nothing cached.
    const auto skipping = ferry::jit(ferry::spmd(mesh, [](const DeviceArray<float>& x) {
      return ferry::axis_index("i") == 2 ? x : ferry::all_reduce(x, "i");
    }));
    const auto x = rounding_shards(mesh, 2, 3);
    expect_error<ferry::InvalidArgument>(
        [&] { return skipping(x); },
        "[all_reduce] under spmd, " + dev(0) +
            " calls all_reduce(float32 (2, 3), 'i', sum) (collective 1 of its program), but " +
            dev(2) +
            " returned before reaching it: every device must make the same collective calls");
    EXPECT_EQ(skipping.cache_size(), 0U);

    // Shards whose shapes differ between devices at a replay: the all-reduce's own ShapeError.
    const auto program = ferry::jit(ferry::spmd(mesh, [](const DeviceArray<float>& v) {
      return ferry::all_reduce(v, "i");
    }));
    (void)program(x);
    std::vector<DeviceArray<float>> uneven;
    for (std::int64_t k = 0; k < 4; ++k) {
      const std::int64_t rows = k == 1 ? 3 : 2;
      uneven.push_back(
          ferry::to_device(mesh.device(k), rounding_values(rows * 3, k), Shape{rows, 3}));
    }
    const auto bad = MeshArray<float>::from_shards(mesh, uneven);
    const std::string want = ferry_test::message_of<ferry::ShapeError>(
        [&] { return ferry::spmd(mesh, [](const DeviceArray<float>& v) {
                return ferry::all_reduce(v, "i");
              })(bad); });
    EXPECT_FALSE(want.empty());
    expect_error<ferry::ShapeError>([&] { return program(bad); }, want);
    EXPECT_EQ(program.cache_hits(), 1U);

    // A DeviceArray argument: spmd's error.
    expect_error<ferry::InvalidArgument>(
        [&] { return program(x.shard(0)); },
        "[spmd] argument 0 is a DeviceArray on " + mesh.device(0).name() +
            ", which one device holds: give a MeshArray (ferry::distribute or "
            "MeshArray::from_shards) so each device gets its own shard");
  });
}

}  // namespace

}  // namespace test_spmd_jit
