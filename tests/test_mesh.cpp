// Meshes and collectives: every collective against a plain reference loop for 1, 2, 4 and 8
// devices on every topology, every reduce op and element type, uneven and empty shards; the
// links' timelines worked out by hand (a ring and a line all-gather, two collectives sharing a
// link); failures reaching exactly the results that need them; bad input by exact type and
// message; the mesh's stats, trace and memory bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/io/json.hpp>

#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/meshes.hpp"
#include "support/temp_dir.hpp"
#include "support/timeline.hpp"

namespace test_mesh {

namespace {

using ferry::DeviceArray;
using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::ReduceOp;
using ferry::Shape;
using ferry::Topology;
using ferry_test::expect_error;
using ferry_test::line_of;
using ferry_test::round_link;
using std::chrono::nanoseconds;

/// A value of element type T from a small integer, exact in every type.
template <class T>
T value(std::int64_t k) {
  if constexpr (std::is_same_v<T, ferry::bfloat16>) {
    return ferry::bfloat16(static_cast<float>(k) * 0.5f);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(k) * static_cast<T>(0.25);
  } else {
    return static_cast<T>(k);
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, ferry::bfloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

/// Device i's shard: `rows(i)` x 3, element (r, c) = value(7i + 3r + c - 9).
template <class T, class Rows>
MeshArray<T> shards_of(const Mesh& mesh, Rows rows) {
  std::vector<DeviceArray<T>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    const std::int64_t r = rows(i);
    std::vector<T> v;
    for (std::int64_t k = 0; k < r * 3; ++k) v.push_back(value<T>((7 * i + k) % 19 - 9));
    shards.push_back(ferry::to_device(mesh.device(i), v, Shape{r, 3}));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

template <class T>
std::vector<double> values_of(const HostArray<T>& h) {
  std::vector<double> out;
  for (std::int64_t k = 0; k < h.shape().numel(); ++k)
    out.push_back(as_double(h.data()[static_cast<std::size_t>(k)]));
  return out;
}

struct Group {
  std::int64_t n;
  Topology topology;
};

std::vector<Group> groups() {
  return {{1, Topology::line},
          {2, Topology::line},
          {4, Topology::line},
          {8, Topology::line},
          {4, Topology::ring},
          {8, Topology::ring},
          {1, Topology::fully_connected},
          {2, Topology::fully_connected},
          {8, Topology::fully_connected}};
}

template <class T>
void check_all_reduce(ReduceOp op) {
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    const auto a = shards_of<T>(mesh, [](std::int64_t) { return 2; });
    const auto in = a.to_host();
    const auto out = ferry::all_reduce(a, op).to_host();
    // The reference: the members' elements in order, summed in double (exact here) and rounded
    // once to T, or their max, min or mean.
    std::vector<double> want(6);
    for (std::size_t e = 0; e < 6; ++e) {
      double acc = as_double(in[0].data()[e]);
      for (std::size_t m = 1; m < in.size(); ++m) {
        const double x = as_double(in[m].data()[e]);
        acc = op == ReduceOp::max   ? std::max(acc, x)
              : op == ReduceOp::min ? std::min(acc, x)
                                    : acc + x;
      }
      if (op == ReduceOp::mean) acc /= static_cast<double>(g.n);
      if constexpr (std::is_same_v<T, ferry::bfloat16>) {
        want[e] = as_double(ferry::bfloat16(static_cast<float>(acc)));
      } else {
        want[e] = as_double(static_cast<T>(acc));
      }
    }
    for (std::int64_t d = 0; d < g.n; ++d) {
      EXPECT_EQ(out[static_cast<std::size_t>(d)].shape(), (Shape{2, 3}));
      EXPECT_EQ(values_of(out[static_cast<std::size_t>(d)]), want) << "device " << d;
    }
  }
}

TEST(MeshCollectives, AllReduceOfEveryOpAndTypeIsTheReductionOverTheMembersInOrder) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    check_all_reduce<float>(op);
    check_all_reduce<double>(op);
    check_all_reduce<std::int32_t>(op);
    check_all_reduce<std::int64_t>(op);
    check_all_reduce<ferry::bfloat16>(op);
  }
  check_all_reduce<float>(ReduceOp::mean);
  check_all_reduce<double>(ReduceOp::mean);
}

TEST(MeshCollectives, AllReduceEqualsSumOverTheStackedShardsBitForBit) {
  const Mesh mesh = Mesh::modeled(line_of(8, Topology::ring));
  std::vector<DeviceArray<float>> shards;
  std::vector<DeviceArray<float>> on_one;  // the same values on one device
  for (std::int64_t i = 0; i < 8; ++i) {
    std::vector<float> v;
    for (int k = 0; k < 64; ++k)
      v.push_back(0.1f * static_cast<float>(k + 1) / static_cast<float>(i + 3));
    shards.push_back(ferry::to_device(mesh.device(i), v, Shape{64}));
    on_one.push_back(ferry::to_device(ferry::Device::cpu(), v, Shape{64}));
  }
  const auto out = ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards)).to_host();
  const HostArray<float> want = ferry::sum(ferry::stack(on_one, 0), {0}).to_host();
  for (const auto& h : out) {
    for (int k = 0; k < 64; ++k) EXPECT_EQ(h.data()[k], want.data()[k]);
  }
}

TEST(MeshCollectives, AllGatherConcatenatesUnevenAndEmptyShardsInMemberOrder) {
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    const auto a =
        shards_of<std::int32_t>(mesh, [](std::int64_t i) { return i % 3; });  // 0, 1, 2, 0...
    const auto in = a.to_host();
    std::vector<double> want;
    std::int64_t rows = 0;
    for (const auto& h : in) {
      const auto v = values_of(h);
      want.insert(want.end(), v.begin(), v.end());
      rows += h.shape().dims()[0];
    }
    const auto out = ferry::all_gather(a, 0).to_host();
    for (const auto& h : out) {
      EXPECT_EQ(h.shape(), (Shape{rows, 3}));
      EXPECT_EQ(values_of(h), want);
    }
    // Along the last dim: each row of the result is the members' rows side by side.
    const auto b = shards_of<float>(mesh, [](std::int64_t) { return 2; });
    const auto bin = b.to_host();
    const auto wide = ferry::all_gather(b, -1).to_host();
    for (const auto& h : wide) {
      ASSERT_EQ(h.shape(), (Shape{2, 3 * g.n}));
      for (std::int64_t r = 0; r < 2; ++r) {
        for (std::int64_t m = 0; m < g.n; ++m) {
          for (std::int64_t c = 0; c < 3; ++c)
            EXPECT_EQ(h(r, 3 * m + c), bin[static_cast<std::size_t>(m)](r, c));
        }
      }
    }
  }
}

TEST(MeshCollectives, ReduceScatterKeepsPartPOfTheReductionAtPositionP) {
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    const auto a = shards_of<double>(mesh, [&](std::int64_t) { return 2 * g.n; });
    const auto in = a.to_host();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::mean}) {
      const auto out = ferry::reduce_scatter(a, 0, op).to_host();
      for (std::int64_t p = 0; p < g.n; ++p) {
        const auto& h = out[static_cast<std::size_t>(p)];
        ASSERT_EQ(h.shape(), (Shape{2, 3}));
        for (std::int64_t r = 0; r < 2; ++r) {
          for (std::int64_t c = 0; c < 3; ++c) {
            double acc = in[0](2 * p + r, c);
            for (std::size_t m = 1; m < in.size(); ++m) {
              const double x = in[m](2 * p + r, c);
              acc = op == ReduceOp::max ? std::max(acc, x) : acc + x;
            }
            if (op == ReduceOp::mean) acc /= static_cast<double>(g.n);
            EXPECT_EQ(h(r, c), acc) << "position " << p;
          }
        }
      }
    }
  }
}

TEST(MeshCollectives, AllToAllGivesPositionPThePthPartOfEveryShard) {
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    const auto a = shards_of<std::int64_t>(mesh, [&](std::int64_t) { return g.n; });  // n x 3
    const auto in = a.to_host();
    const auto out = ferry::all_to_all(a, 0, 1).to_host();  // row p of each, side by side
    for (std::int64_t p = 0; p < g.n; ++p) {
      const auto& h = out[static_cast<std::size_t>(p)];
      ASSERT_EQ(h.shape(), (Shape{1, 3 * g.n}));
      for (std::int64_t m = 0; m < g.n; ++m) {
        for (std::int64_t c = 0; c < 3; ++c)
          EXPECT_EQ(h(0, 3 * m + c), in[static_cast<std::size_t>(m)](p, c));
      }
    }
  }
}

TEST(MeshCollectives, BroadcastAndPermuteMoveWholeShards) {
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    const auto a = shards_of<float>(mesh, [](std::int64_t) { return 2; });
    const auto in = a.to_host();
    const std::int64_t root = g.n - 1;
    for (const auto& h : ferry::broadcast(a, root).to_host())
      EXPECT_EQ(values_of(h), values_of(in.back()));
    // A ring shift leaving the last member out: position 0 gets zeros.
    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (std::int64_t p = 0; p + 1 < g.n; ++p) pairs.emplace_back(p, p + 1);
    const auto out = ferry::permute(a, pairs).to_host();
    EXPECT_EQ(values_of(out[0]), std::vector<double>(6, 0.0));
    for (std::int64_t p = 1; p < g.n; ++p) {
      EXPECT_EQ(values_of(out[static_cast<std::size_t>(p)]),
                values_of(in[static_cast<std::size_t>(p - 1)]));
    }
  }
}

TEST(MeshCollectives, AMeshAxisIsItsOwnGroupPerRowOrColumn) {
  MeshSpec spec = line_of(8, Topology::line);
  spec.shape = ferry::MeshShape{2, 4};
  spec.topology = {Topology::line, Topology::ring};
  spec.axis_names = {"dp", "tp"};
  const Mesh mesh = Mesh::modeled(spec);
  EXPECT_EQ(mesh.axis("tp"), 1);
  // Device (r, c) holds 10r + c.
  std::vector<DeviceArray<std::int32_t>> shards;
  for (std::int64_t i = 0; i < 8; ++i) {
    shards.push_back(ferry::full<std::int32_t>(mesh.device(i), Shape{1},
                                               static_cast<std::int32_t>(10 * (i / 4) + i % 4)));
  }
  const auto a = MeshArray<std::int32_t>::from_shards(mesh, shards);
  const auto rows =
      ferry::all_reduce(a, ReduceOp::sum, mesh.axis("tp")).to_host();    // 0+1+2+3, 10+11+12+13
  const auto cols = ferry::all_gather(a, 0, mesh.axis("dp")).to_host();  // {c, 10 + c}
  for (std::int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(rows[static_cast<std::size_t>(i)](0), i < 4 ? 6 : 46);
    EXPECT_EQ(cols[static_cast<std::size_t>(i)](0), i % 4);
    EXPECT_EQ(cols[static_cast<std::size_t>(i)](1), 10 + i % 4);
  }
  EXPECT_EQ(a.shard(ferry::MeshCoordinate{1, 2}).to_host()(0), 12);
}

TEST(MeshCollectives, GradientsFlowBackThroughACollective) {
  // f(x0, x1) = sum(all_reduce(x)[on device 1] * w): the cotangent of each shard is w, sent
  // back to the shard's own device; and through an all-gather each shard gets its own slice.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  using D = DeviceArray<double>;
  const D x0 = ferry::to_device(mesh.device(0), {1.0, 2.0}, Shape{2});
  const D x1 = ferry::to_device(mesh.device(1), {3.0, 4.0}, Shape{2});
  const D w = ferry::to_device(mesh.device(1), {10.0, 20.0}, Shape{2});
  auto [v, g0, g1] = ferry::value_and_grad([&](const D& a, const D& b) {
    const auto summed = ferry::all_reduce(MeshArray<double>::from_shards(mesh, {a, b}));
    return ferry::sum(summed.shard(1) * w);
  })(x0, x1);
  EXPECT_EQ(v.to_host()(), 10.0 * 4 + 20.0 * 6);
  EXPECT_EQ(g0.device(), mesh.device(0));
  EXPECT_EQ(g0.to_host()(0), 10.0);
  EXPECT_EQ(g1.to_host()(1), 20.0);
  auto [u, h0, h1] = ferry::value_and_grad([&](const D& a, const D& b) {
    const auto gathered = ferry::all_gather(MeshArray<double>::from_shards(mesh, {a, b}));
    const D weights = ferry::to_device(mesh.device(0), {1.0, 2.0, 3.0, 4.0}, Shape{4});
    return ferry::sum(gathered.shard(0) * weights);
  })(x0, x1);
  EXPECT_EQ(u.to_host()(), 1.0 + 4.0 + 9.0 + 16.0);
  EXPECT_EQ(h0.to_host()(1), 2.0);
  EXPECT_EQ(h1.to_host()(0), 3.0);
  EXPECT_EQ(h1.to_host()(1), 4.0);
}

// ---- the links' timelines, worked by hand ----

/// The link uses of `mesh`'s window, by link name: {start, end} in ns from the first use.
std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> link_uses(
    const Mesh& mesh) {
  auto& state = ferry::detail::MeshAccess::state(mesh);
  std::lock_guard lock(state.net->mutex);
  std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> out;
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (const auto& u : state.net->links.uses()) first = std::min(first, u.start.count());
  for (const auto& u : state.net->links.uses()) {
    out[state.net->links.links()[u.link].name].emplace_back(u.start.count() - first,
                                                            u.end.count() - first);
  }
  return out;
}

TEST(MeshTimeline, ARingAllGatherSendsHalfShardsBothWaysOneHopAStep) {
  // 4 members, 400-byte shards (100 floats): each step every directed link carries one half
  // shard, 200 bytes: 200 ns on the link, arriving 100 ns (a hop) after its last byte left.
  // The next step starts on arrival. Three steps: links busy 0-200, 300-500, 600-800; done at 900.
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::ring));
  // Memory back and lower_bound <= makespan on every device once the arrays are gone.
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 4; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{100}, 1.0f));
    ferry::wait(ferry::all_gather(MeshArray<float>::from_shards(mesh, shards)));
  });
  const auto uses = link_uses(mesh);
  ASSERT_EQ(uses.size(), 8u);  // both directions of the 4 neighbouring pairs
  for (const auto& [name, spans] : uses) {
    EXPECT_EQ(spans, (std::vector<std::pair<std::int64_t, std::int64_t>>{
                         {0, 200}, {300, 500}, {600, 800}}))
        << name;
  }
  const auto plan = ferry::plan_all_gather(Topology::ring, 4, 1600, round_link());
  EXPECT_EQ(ferry::ideal_time(plan, round_link()), nanoseconds(900));
}

TEST(MeshTimeline, AfterAResetTheMeshsBoundStaysWithinItsMakespanWhereDevicesResetApart) {
  // Device 1 waits for a long kernel before the reset and device 0 does not, so their windows
  // start apart and the mesh's starts at device 1's. Device 0's next kernel then runs before
  // the mesh's start: its own bound is its time, but it bounds nothing of the mesh's window.
  Mesh mesh = Mesh::modeled(line_of(2));
  const ferry::Device d0 = mesh.device(0);
  const ferry::Device d1 = mesh.device(1);
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    const auto big = ferry::full<float>(d1, Shape{256, 256}, 1.0f);
    static_cast<void>(ferry::to_host(ferry::matmul(big, big)));
    mesh.reset_stats();
    static_cast<void>(ferry::to_host(ferry::full<float>(d0, Shape{64}, 1.0f) + 1.0f));
  }
  const ferry::MeshStats s = mesh.stats();
  ASSERT_GT(s.devices[0].lower_bound, nanoseconds(0));
  // Memory back, and lower_bound <= makespan on the mesh and on each device.
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(MeshTimeline, ALinkMessagePlacedBeforeTheWindowBoundsNothingOfIt) {
  // An all-gather waits for two long matmuls; the host does not wait for it, so the reset
  // right after it starts the mesh's window where its messages end (about 17.8 ms), the hosts'
  // clocks still near 0. A broadcast of data ready from the start then finds the link idle long
  // before that, and the link carries it there: 262144 bytes at 1 byte/ns, all of it before the
  // window's start. It is the window's message, whole in the link's own figures (as a device's
  // early work is in its own), but its link time bounds nothing of the mesh's window and is no
  // part of its communication time (it once was: bound 262144 ns in a window of makespan 0).
  MeshSpec spec = line_of(2);
  for (auto& d : spec.devices) d.dram_bytes = 64 << 20;
  Mesh mesh = Mesh::modeled(spec);
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    std::vector<DeviceArray<float>> xs;
    std::vector<DeviceArray<float>> ys;
    for (std::int64_t i = 0; i < 2; ++i) {
      xs.push_back(ferry::full<float>(mesh.device(i), Shape{256, 256}, 1.0f));
      ys.push_back(ferry::matmul(xs.back(), xs.back()));
    }
    const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, ys), 0);
    mesh.reset_stats();
    const auto b = ferry::broadcast(MeshArray<float>::from_shards(mesh, xs), 0);
    EXPECT_EQ(ferry::to_host(b.shard(1)).data()[0], 1.0f);
    const ferry::MeshStats s = mesh.stats();
    EXPECT_EQ(s.communication_time, nanoseconds(0));
    ASSERT_EQ(s.links.size(), 1u);
    EXPECT_EQ(s.links[0].name, "link 0->1");
    EXPECT_EQ(s.links[0].busy, nanoseconds(262144));
    EXPECT_EQ(s.links[0].bytes, 262144);
    EXPECT_LE(s.lower_bound, s.makespan);
    ferry::wait(gathered);
  }
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(MeshTimeline, EachDeviceKeepsItsOwnHostClockAndAStepsMakespanIsTheLoopsPeriod) {
  // Tiny chips: no launch overhead, a fixed kernel takes exactly its time. Each step chip 0
  // runs 100 ns and chip 1 300 ns, and the host waits for each. A wait moves only its own
  // chip's host clock, so chip 0 starts each step where its last one ended: steps at 0, 100,
  // 200 on chip 0 and 0, 300, 600 on chip 1. The mesh's window starts when the later chip's
  // does (0, 300, 600), so every step's makespan is 300 ns, the loop's period, and chip 0's
  // work of steps 1 and 2 (100-200, 200-300) ends before the mesh's window begins.
  Mesh mesh = Mesh::modeled(line_of(2));
  const ferry::Device d0 = mesh.device(0);
  const ferry::Device d1 = mesh.device(1);
  const auto nothing = [](ferry::KernelArgs<float>) {};
  ferry_test::expect_balanced_after(mesh, [&] {
    for (std::int64_t k = 0; k < 3; ++k) {
      mesh.reset_stats();
      const auto a = ferry::custom<float>(d0, "a", {}, Shape{1}, nothing,
                                          ferry::Cost::fixed(nanoseconds(100)));
      const auto b = ferry::custom<float>(d1, "b", {}, Shape{1}, nothing,
                                          ferry::Cost::fixed(nanoseconds(300)));
      ferry::wait(a);
      ferry::wait(b);
      const ferry::MeshStats s = mesh.stats();
      EXPECT_EQ(s.makespan, nanoseconds(300)) << "step " << k;
      const auto a_at = ferry_test::named(ferry_test::slices_of(d0), "a");
      const auto b_at = ferry_test::named(ferry_test::slices_of(d1), "b");
      ASSERT_EQ(a_at.size(), 1u);
      ASSERT_EQ(b_at.size(), 1u);
      EXPECT_EQ(a_at[0].start, nanoseconds(100 * k)) << "step " << k;
      EXPECT_EQ(a_at[0].end, nanoseconds(100 * k + 100)) << "step " << k;
      EXPECT_EQ(b_at[0].start, nanoseconds(300 * k)) << "step " << k;
      EXPECT_EQ(b_at[0].end, nanoseconds(300 * k + 300)) << "step " << k;
    }
  });
}

TEST(MeshTimeline, TheWholeOfA2DMeshIsARingAlongItsLinks) {
  // A 2 x 4 grid of lines (a T3000's shape): its whole-mesh ring is the perimeter 0 1 2 3 7 6 5
  // 4, each step one link (row-major order would step from 3 to 4 and from 7 to 0, which share
  // no link). 8 members, 800-byte shards: each step every directed link of the perimeter
  // carries a half shard, 400 bytes: 400 ns on the link, arriving a hop (100 ns) later, where
  // the next step starts. Seven steps: busy 0-400, 500-900, ..., 3000-3400; done at 3500.
  const Mesh mesh = Mesh::modeled(ferry_test::grid(2, 4));
  // Memory back and lower_bound <= makespan on every device once the arrays are gone.
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 8; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{200}, static_cast<float>(i)));
    const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, shards));
    ferry::wait(gathered);
    std::vector<std::pair<std::int64_t, std::int64_t>> steps;
    for (std::int64_t k = 0; k < 7; ++k) steps.emplace_back(500 * k, 500 * k + 400);
    const auto uses = link_uses(mesh);
    ASSERT_EQ(uses.size(), 16u);  // both directions of the perimeter's 8 links, nothing else
    const std::int64_t ring[] = {0, 1, 2, 3, 7, 6, 5, 4};
    for (std::size_t k = 0; k < 8; ++k) {
      const std::string a = std::to_string(ring[k]);
      const std::string b = std::to_string(ring[(k + 1) % 8]);
      ASSERT_EQ(uses.count("link " + a + "->" + b), 1u) << a << "->" << b;
      EXPECT_EQ(uses.at("link " + a + "->" + b), steps) << a << "->" << b;
      EXPECT_EQ(uses.at("link " + b + "->" + a), steps) << b << "->" << a;
    }
    const auto plan = ferry::plan_all_gather(Topology::ring, 8, 6400, round_link());
    EXPECT_EQ(ferry::ideal_time(plan, round_link()), nanoseconds(3500));
    // The values keep row-major order: device j's shard is the j-th block everywhere.
    for (std::int64_t i = 0; i < 8; ++i) {
      const auto v = gathered.shard(i).to_host();
      for (std::int64_t j = 0; j < 1600; ++j) ASSERT_EQ(v(j), static_cast<float>(j / 200)) << i;
    }
  });
}

/// The row-major coordinates of device `i` of a mesh of `sizes`.
std::vector<std::int64_t> coordinates_of(std::int64_t i, const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> c(sizes.size());
  for (std::size_t a = sizes.size(); a-- > 0;) {
    c[a] = i % sizes[a];
    i /= sizes[a];
  }
  return c;
}

/// Whether devices `a` and `b` of a mesh of `sizes` are one place apart along one axis.
bool neighbours(std::int64_t a, std::int64_t b, const std::vector<std::int64_t>& sizes) {
  const std::vector<std::int64_t> ca = coordinates_of(a, sizes);
  const std::vector<std::int64_t> cb = coordinates_of(b, sizes);
  std::int64_t distance = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) distance += std::abs(ca[k] - cb[k]);
  return distance == 1;
}

TEST(MeshTimeline, TheWholeMeshPathStepsOnlyBetweenNeighbours) {
  // grid_cycle: every step of the path (and the closing one, for a ring) moves one place along
  // one axis, every device once; a ring wherever one size is even, a line where all are odd.
  // A function of the sizes alone: no mesh runs, so there are no books to check after it.
  for (const std::vector<std::int64_t>& sizes : std::vector<std::vector<std::int64_t>>{
           {2, 2}, {2, 4}, {8, 4}, {3, 4}, {4, 3}, {3, 3}, {5, 3}, {2, 3}, {2, 2, 2}, {3, 3, 2},
           {3, 2, 3}, {3, 3, 3}, {2, 4, 3}, {4, 1, 3}, {3, 1, 5}, {2, 3, 2, 3}}) {
    std::string name;
    std::int64_t n = 1;
    bool any_even = false;
    for (std::int64_t size : sizes) {
      name += (name.empty() ? "" : " x ") + std::to_string(size);
      n *= size;
      any_even = any_even || size % 2 == 0;
    }
    SCOPED_TRACE(name);
    const auto [path, closed] = ferry::detail::grid_cycle(sizes);
    EXPECT_EQ(closed, any_even);
    std::vector<std::int64_t> sorted = path;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int64_t> every(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(sorted, every);
    for (std::size_t k = 0; k + 1 < path.size(); ++k)
      EXPECT_TRUE(neighbours(path[k], path[k + 1], sizes)) << path[k] << " " << path[k + 1];
    if (closed) {
      EXPECT_TRUE(neighbours(path.back(), path.front(), sizes));
    }
  }
  // Two axes as before three: the T3000's perimeter.
  EXPECT_EQ(ferry::detail::grid_cycle({2, 4}).first,
            (std::vector<std::int64_t>{0, 1, 2, 3, 7, 6, 5, 4}));
}

TEST(MeshTimeline, TheWholeOfA3DMeshRunsOnlyOverItsLinks) {
  // A 2 x 2 x 3 grid of lines: the whole mesh's ring steps one link at a time (row-major order
  // would step from 2 to 3, from 5 to 6, ..., and from 11 back to 0, which share no link), so
  // only links between neighbours carry anything: the 12 links of its cycle, both directions.
  ferry::MeshSpec spec = ferry_test::line_of(12, Topology::line, "cube");
  spec.shape = ferry::MeshShape{2, 2, 3};
  spec.topology = {Topology::line, Topology::line, Topology::line};
  const Mesh mesh = Mesh::modeled(spec);
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 12; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{50}, static_cast<float>(i)));
    const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, shards));
    ferry::wait(gathered);
    const auto uses = link_uses(mesh);
    EXPECT_EQ(uses.size(), 24u);
    const std::vector<std::int64_t> sizes{2, 2, 3};
    for (const auto& [link, spans] : uses) {
      // "link a->b"
      const std::size_t arrow = link.find("->");
      const std::int64_t a = std::stoll(link.substr(5, arrow - 5));
      const std::int64_t b = std::stoll(link.substr(arrow + 2));
      EXPECT_TRUE(neighbours(a, b, sizes)) << link;
      EXPECT_EQ(spans.size(), 11u) << link;  // n - 1 steps of the ring
    }
    // The values keep row-major order: device j's shard is the j-th block everywhere.
    for (std::int64_t i = 0; i < 12; ++i) {
      const auto v = gathered.shard(i).to_host();
      for (std::int64_t j = 0; j < 600; ++j) ASSERT_EQ(v(j), static_cast<float>(j / 50)) << i;
    }
  });
}

TEST(MeshTimeline, ALineAllGatherSendsWholeShardsAndItsMiddleFinishesFirst) {
  // 4 members, 400-byte shards: each message holds its link 400 ns and arrives 100 ns later.
  // Forward, link p->p+1 carries slices 0..p in steps 1..p+1 (0-400, 500-900, 1000-1400);
  // backward the mirror image. The middle members have everything after step 2 (1000), the
  // ends after step 3 (1500): ideal_time is 1500.
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::line));
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 4; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{100}, 1.0f));
    ferry::wait(ferry::all_gather(MeshArray<float>::from_shards(mesh, shards)));
  });
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const auto uses = link_uses(mesh);
  EXPECT_EQ(uses.at("link 0->1"), (Spans{{0, 400}}));
  EXPECT_EQ(uses.at("link 1->2"), (Spans{{0, 400}, {500, 900}}));
  EXPECT_EQ(uses.at("link 2->3"), (Spans{{0, 400}, {500, 900}, {1000, 1400}}));
  EXPECT_EQ(uses.at("link 3->2"), (Spans{{0, 400}}));
  EXPECT_EQ(uses.at("link 2->1"), (Spans{{0, 400}, {500, 900}}));
  EXPECT_EQ(uses.at("link 1->0"), (Spans{{0, 400}, {500, 900}, {1000, 1400}}));
  const auto stats = mesh.stats();
  EXPECT_EQ(stats.communication_time, nanoseconds(1200));
  ASSERT_EQ(stats.links.size(), 6u);
  for (const auto& l : stats.links) EXPECT_EQ(l.busy.count(), l.bytes) << l.name;  // 1 byte a ns
  EXPECT_LE(stats.lower_bound, stats.makespan);
  EXPECT_EQ(ferry::ideal_time(ferry::plan_all_gather(Topology::line, 4, 1600, round_link()),
                              round_link()),
            nanoseconds(1500));
}

TEST(MeshTimeline, OnAnIdleMeshEachPlanTakesItsClosedFormTime) {
  // The link model and ideal_time agree on the shipped presets (calibrated figures, a line's
  // own rate, the all-reduce's two calls): every stepped plan, each member starting at 0.
  // Each message's time is rounded to a nanosecond, ideal_time's sum once: a few ns apart.
  // The link model runs alone, without devices: no memory and no device schedules to check.
  struct Case {
    ferry::MeshSpec spec;
    ferry::Collective collective;
    std::vector<std::int64_t> members;
    std::int64_t bytes;
  };
  const std::vector<Case> cases = {
      {ferry::specs::t3000(), ferry::Collective::all_gather, {0, 1, 2, 3}, 64 << 20},
      {ferry::specs::t3000(), ferry::Collective::all_reduce, {0, 4}, 1 << 20},
      {ferry::specs::t3000(), ferry::Collective::reduce_scatter, {4, 5, 6, 7}, 3 << 20},
      {ferry::specs::galaxy(),
       ferry::Collective::all_to_all,
       {0, 4, 8, 12, 16, 20, 24, 28},
       8 << 20},
      {ferry::specs::dgx_h100(),
       ferry::Collective::all_gather,
       {0, 1, 2, 3, 4, 5, 6, 7},
       256 << 20},
      {ferry::specs::dgx_h100(),
       ferry::Collective::all_reduce,
       {0, 1, 2, 3, 4, 5, 6, 7},
       256 << 20},
  };
  for (const Case& c : cases) {
    const Topology t = c.spec.topology[c.members[1] - c.members[0] >= c.spec.shape.sizes().back()
                                           ? 0
                                           : c.spec.topology.size() - 1];
    const auto plan = ferry::plan_collective(
        c.collective, t, static_cast<std::int64_t>(c.members.size()), c.bytes, c.spec.link);
    ferry::detail::LinkModel links(c.spec);
    const std::vector<nanoseconds> ready(c.members.size(), nanoseconds(0));
    const auto done = links.run(plan, c.members, ready);
    const nanoseconds last = *std::max_element(done.begin(), done.end());
    const nanoseconds ideal = ferry::ideal_time(plan, c.spec.link);
    SCOPED_TRACE(c.spec.name + " " + std::string(ferry::name_of(c.collective)));
    EXPECT_LE(std::abs((last - ideal).count()),
              static_cast<std::int64_t>(plan.link_bytes() > 0 ? 8 * plan.steps.size() : 0))
        << last.count() << " vs " << ideal.count();
  }
}

TEST(MeshTimeline, AnAllReducesReduceScatterHalfEndsWhereAReduceScatterWould) {
  // LinkModel::run's `reduced` for a stepped all-reduce is when each member has the last
  // message of its own slice: the end of its reduce-scatter half, which is a reduce-scatter of
  // the same buffer. On round links (no library costs), members starting apart, each member's
  // time equals that reduce-scatter's arrival on an idle mesh of its own, on a ring, a line and
  // a switch of 2 to 5; and it comes before the all-reduce's own arrival.
  // The link model runs alone, without devices: no memory and no device schedules to check.
  for (const Topology t : {Topology::ring, Topology::line, Topology::fully_connected}) {
    for (std::int64_t n = 2; n <= 5; ++n) {
      SCOPED_TRACE(std::string(ferry::name_of(t)) + " of " + std::to_string(n));
      const MeshSpec spec = line_of(n, t);
      std::vector<std::int64_t> members;
      std::vector<nanoseconds> ready;
      for (std::int64_t i = 0; i < n; ++i) {
        members.push_back(i);
        ready.push_back(nanoseconds(37 * i));
      }
      const std::int64_t bytes = 1000 * n + 7;  // uneven slices
      ferry::detail::LinkModel together(spec);
      std::vector<nanoseconds> reduced;
      const auto done = together.run(ferry::plan_all_reduce(t, n, bytes, spec.link), members,
                                     ready, &reduced);
      ferry::detail::LinkModel alone(spec);
      const auto scattered =
          alone.run(ferry::plan_reduce_scatter(t, n, bytes, spec.link), members, ready);
      EXPECT_EQ(reduced, scattered);
      for (std::size_t i = 0; i < members.size(); ++i) EXPECT_LT(reduced[i], done[i]) << i;
    }
  }
}

/// A reduce-scatter of four tiny chips on a ring (or `topology`) whose DRAM moves `dram` bytes
/// a ns (no kernel latency), each member's shard 800 floats of 1..4 (member + 1): the links'
/// messages (from the first) and each member's reduction kernels ({start, end} from the first
/// message's start).
struct RingReduction {
  std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> links;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> reductions;
};

/// tiny() with DRAM at `dram` bytes a second and no kernel latency.
ferry::DeviceSpec reducing_chip(double dram) {
  ferry::DeviceSpec d = ferry::specs::tiny();
  d.dram_bytes_per_second = dram;
  d.kernel_latency = nanoseconds(0);
  return d;
}

/// How long reducing_chip(dram) takes alone to reduce 800 bytes received into its partial.
nanoseconds step_reduction(double dram) {
  return ferry::detail::step_duration(reducing_chip(dram), ferry::detail::StepKind::compute,
                                      ferry::detail::step_reduction_cost<float>(800),
                                      ferry::DType::float32);
}

RingReduction ring_reduce_scatter(double dram, Topology topology = Topology::ring) {
  MeshSpec spec = line_of(4, topology);
  for (auto& d : spec.devices) d = reducing_chip(dram);
  const Mesh mesh = Mesh::modeled(spec);
  RingReduction out;
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 4; ++i) {
      shards.push_back(
          ferry::full<float>(mesh.device(i), Shape{800}, static_cast<float>(i + 1)));
    }
    const auto scattered = ferry::reduce_scatter(MeshArray<float>::from_shards(mesh, shards));
    for (std::int64_t i = 0; i < 4; ++i) {
      const auto v = scattered.shard(i).to_host();
      ASSERT_EQ(v.shape(), Shape{200});
      for (std::int64_t j = 0; j < 200; ++j) ASSERT_EQ(v(j), 10.0f) << i;
    }
  });
  out.links = link_uses(mesh);
  std::int64_t first = 0;
  {
    auto& state = ferry::detail::MeshAccess::state(mesh);
    std::lock_guard lock(state.net->mutex);
    first = state.net->links.uses().front().start.count();
  }
  for (std::int64_t i = 0; i < 4; ++i) {
    out.reductions.emplace_back();
    for (const auto& slice : ferry_test::named(ferry_test::slices_of(mesh.device(i)),
                                               "reduce_scatter")) {
      // The reductions compute; the receives and the marks of each step's arrival copy only.
      if (slice.flops > 0) {
        out.reductions.back().emplace_back(slice.start.count() - first,
                                           slice.end.count() - first);
      }
    }
  }
  return out;
}

TEST(MeshTimeline, ARingReduceScatterReducesEachStepAsItsPartialsStreamOn) {
  // 4 members, 3200-byte shards (800 floats): 4 slices of 800 bytes. Each step every member
  // sends half a slice each way, 400 bytes: 400 ns on the link, arriving a hop (100 ns) after
  // its last byte left. Each step every member reduces what it received (two halves, 800
  // bytes, 200 floats) into its partial: read 1600 bytes, write 800, 2400 bytes of DRAM.
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  // DRAM-bound (400 flops on a unit of 1 a ns take at most 400 ns): 2400 bytes at the rate.
  ASSERT_EQ(step_reduction(3e9), nanoseconds(800));
  ASSERT_EQ(step_reduction(6e9), nanoseconds(400));
  {
    // DRAM at 3 bytes a ns: each reduction takes 800 ns, longer than a step's 500 on the
    // links, so each partial's message streams behind the reduction that makes it and arrives
    // a hop after it ends. Step 1 (own halves): links 0-400, arrival 500; reduction 1
    // 500-1300. Step 2: the link is free at 500 and the message starts there (500-900), but
    // arrives at 1300 + 100 = 1400, not 1000; reduction 2 1400-2200. Step 3: 1400-1800 on
    // the link, arriving at 2200 + 100 = 2300; reduction 3 (the last, the member's own slice)
    // 2300-3100. One fold of the 4 slices after the last arrival (the model before) read
    // 3200 bytes and wrote 800: 1334 ns from 1500, to 2834.
    const RingReduction r = ring_reduce_scatter(3e9);
    ASSERT_EQ(r.links.size(), 8u);  // both directions of the 4 neighbouring pairs
    for (const auto& [name, spans] : r.links) {
      EXPECT_EQ(spans, (Spans{{0, 400}, {500, 900}, {1400, 1800}})) << name;
    }
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(r.reductions[i], (Spans{{500, 1300}, {1400, 2200}, {2300, 3100}})) << i;
    }
  }
  {
    // DRAM at 6 bytes a ns: each reduction takes 400 ns, shorter than a step, and hides
    // behind the next step's transfer: the links keep the all-gather's pattern (0-400,
    // 500-900, 1000-1400, the partial of reduction k at 500k + 400, arriving by 500k + 500),
    // and each member reduces 500-900, 1000-1400, 1500-1900: done at 1900, where one fold
    // after the last arrival would end at 1500 + 4000 / 6 = 2167.
    const RingReduction r = ring_reduce_scatter(6e9);
    for (const auto& [name, spans] : r.links) {
      EXPECT_EQ(spans, (Spans{{0, 400}, {500, 900}, {1000, 1400}})) << name;
    }
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(r.reductions[i], (Spans{{500, 900}, {1000, 1400}, {1500, 1900}})) << i;
    }
  }
}

TEST(MeshTimeline, ALineReduceScatterReducesWhereItsMembersReceive) {
  // The chips above (a reduction of 800 bytes received takes 800 ns, of 1,600 bytes 1,600) on
  // a line of 4: whole slices of 800 bytes, 800 ns on a link and a hop. Step 1: 0 sends slice
  // 3 to 1 and 3 slice 0 to 2 (0-800, arriving at 900); 1 and 2 reduce 900-1,700. Step 2: 0
  // sends slice 2 (its own data: 800-1,600 once the link is free) and 1 its partial of slice 3
  // to 2 (900-1,700, arriving at 1,700 + 100 = 1,800 behind its reduction), and the mirror
  // image; 1 and 2 each reduce two slices (1,600 bytes) at 1,800-3,400. Step 3: 0 sends slice 1
  // (1,600-2,400), 1 its partial of slice 2 to 2 and 2 its partial of slice 3 to 3 (1,800-2,600
  // on their links, arriving at 3,400 + 100 = 3,500), and the mirror image: every member holds
  // its slice's last inputs at 3,500 and folds them, the ends one message (800 bytes, to
  // 4,300), the middle two (1,600 bytes, to 5,100). The ends reduce once, where they receive.
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const RingReduction r = ring_reduce_scatter(3e9, Topology::line);
  EXPECT_EQ(r.links.at("link 0->1"), (Spans{{0, 800}, {800, 1600}, {1600, 2400}}));
  EXPECT_EQ(r.links.at("link 1->2"), (Spans{{900, 1700}, {1800, 2600}}));
  EXPECT_EQ(r.links.at("link 2->3"), (Spans{{1800, 2600}}));
  EXPECT_EQ(r.links.at("link 3->2"), (Spans{{0, 800}, {800, 1600}, {1600, 2400}}));
  EXPECT_EQ(r.links.at("link 2->1"), (Spans{{900, 1700}, {1800, 2600}}));
  EXPECT_EQ(r.links.at("link 1->0"), (Spans{{1800, 2600}}));
  EXPECT_EQ(r.reductions[0], (Spans{{3500, 4300}}));
  EXPECT_EQ(r.reductions[1], (Spans{{900, 1700}, {1800, 3400}, {3500, 5100}}));
  EXPECT_EQ(r.reductions[2], (Spans{{900, 1700}, {1800, 3400}, {3500, 5100}}));
  EXPECT_EQ(r.reductions[3], (Spans{{3500, 4300}}));
}

TEST(MeshTimeline, ALinkSearchesOnlyItsLatestSpansForAGap) {
  // One link, 600 messages of 100 bytes (100 ns each at 1 byte a ns), message k ready at
  // 200k ns: each takes [200k, 200k + 100). The link keeps its latest 256 spans (messages
  // 344..599), so a message ready at 0 does not go into the gap at 100 ns: its search starts
  // where the oldest kept span ends, 344 * 200 + 100 = 68,900, and that gap fits it. It is
  // then the oldest span and leaves at once: the next such message starts after message 345.
  // The link model runs alone, without devices: no memory and no device schedules to check.
  const MeshSpec spec = line_of(2);
  ferry::detail::LinkModel links(spec);
  const std::vector<std::int64_t> path{0, 1};
  const std::vector<bool> switched{false};
  for (std::int64_t k = 0; k < 600; ++k)
    links.carry(path, switched, 100, nanoseconds(200 * k), "to");
  EXPECT_EQ(links.carry(path, switched, 100, nanoseconds(0), "to"), nanoseconds(69'100))
      << "68,900 + 100 ns on the link + 100 ns of hop latency";
  links.carry(path, switched, 100, nanoseconds(0), "to");
  const auto& uses = links.uses();
  ASSERT_EQ(uses.size(), 602u);
  EXPECT_EQ(uses[599].start, nanoseconds(119'800));
  EXPECT_EQ(uses[600].start, nanoseconds(68'900));
  EXPECT_EQ(uses[601].start, nanoseconds(69'100));
}

TEST(MeshTimeline, ALinkPlacesEachMessageInTheFirstGapThatFits) {
  // 4,000 messages of 1 to 400 bytes (1 byte a ns) on one link, three times (three seeds),
  // ready at random times that mostly trail the link (messages queue back to back far ahead of
  // when they could start, as collectives issued faster than the links carry them do) and
  // sometimes lead it (leaving gaps that later messages fill). Each must start where a plain
  // search of the link's latest 256 spans puts it: the first gap from when it is ready (or from
  // the oldest kept span's end) that holds it. The link model's search goes past runs of spans
  // it knows hold no such gap; this checks that it finds the same start every time.
  const MeshSpec spec = line_of(2);
  const std::vector<std::int64_t> path{0, 1};
  const std::vector<bool> switched{false};
  using Span = std::pair<std::int64_t, std::int64_t>;
  for (const std::uint64_t seed : {1, 2, 3}) {
    ferry::detail::LinkModel links(spec);
    std::vector<Span> kept;  // the plain search's latest spans, by start
    std::mt19937_64 random(seed);
    std::int64_t clock = 0;
    for (int k = 0; k < 4000; ++k) {
      const auto bytes = static_cast<std::int64_t>(1 + random() % 400);
      const std::uint64_t kind = random() % 10;
      if (kind == 0) clock += static_cast<std::int64_t>(random() % 20'000);  // the link idles
      // Ready well behind the link's end (7 in 10), a little behind, or at the clock.
      const std::int64_t ready = std::max<std::int64_t>(
          0, kind < 7   ? clock - static_cast<std::int64_t>(random() % 50'000)
             : kind < 9 ? clock - static_cast<std::int64_t>(random() % 500)
                        : clock);
      std::int64_t t = ready;
      if (kept.size() == 256) t = std::max(t, kept.front().second);
      for (const auto& [start, end] : kept) {
        if (end <= t) continue;
        if (start >= t + bytes) break;
        t = std::max(t, end);
      }
      const Span placed{t, t + bytes};
      kept.insert(std::upper_bound(kept.begin(), kept.end(), placed), placed);
      if (kept.size() > 256) kept.erase(kept.begin());
      clock = std::max(clock, t + bytes);
      links.carry(path, switched, bytes, nanoseconds(ready), "to");
      ASSERT_EQ(links.uses().back().start, nanoseconds(t)) << "seed " << seed << ", message " << k;
    }
  }
}

TEST(MeshTimeline, TwoCollectivesOnOneLinkTakeItInTurn) {
  // Two all-gathers of a 2-device line, one after the other: each message holds the link
  // 400 ns, and the second waits for the first on both directions of the link.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 2; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{100}, 1.0f));
    const auto a = MeshArray<float>::from_shards(mesh, shards);
    const auto first = ferry::all_gather(a);
    const auto second = ferry::all_gather(a);
    ferry::wait(second);
    static_cast<void>(first);
  });
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const auto uses = link_uses(mesh);
  EXPECT_EQ(uses.at("link 0->1"), (Spans{{0, 400}, {400, 800}}));
  EXPECT_EQ(uses.at("link 1->0"), (Spans{{0, 400}, {400, 800}}));
  const auto stats = mesh.stats();
  EXPECT_EQ(stats.links[0].busy, nanoseconds(800));
  EXPECT_EQ(stats.links[0].bytes, 800);
}

TEST(MeshTimeline, AReductionRunsOnTheDevicesComputeBesideTheirKernels) {
  // The all-reduce's own kernel (the sum over the stacked members) is a kernel of the device:
  // it appears on a compute track, and the receives take no engine time.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  // Memory back and lower_bound <= makespan on every device once the arrays are gone.
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 2; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{1000}, 1.0f));
    const auto out = ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards));
    EXPECT_EQ(out.shard(1).to_host()(0), 2.0f);
  });
  const auto stats = mesh.stats();
  EXPECT_GT(stats.devices[1].steps, 0u);
  EXPECT_GT(stats.communication_time, nanoseconds(0));
}

TEST(MeshTimeline, DataArrivingInADevicesDecidedPastWaitsForItsClock) {
  // A collective settles its inputs: the all-gather decides device 0's schedule up to the end
  // of its long kernel (the add, 66,556-197,638 ns). The all-reduce after it carries data that
  // was ready long before, and the links deliver it to device 0 at a time the model has already
  // decided. Its reduction (one kernel folding the two shards) cannot run there, on units and
  // bandwidth the model already gave away: it waits for the device's clock. Before, the
  // reduction (then a stack and a sum) ran at 34,894 ns on the very lane the full before the
  // add held until 66,556.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    std::vector<DeviceArray<float>> small;
    for (std::int64_t i = 0; i < 2; ++i)
      small.push_back(ferry::full<float>(mesh.device(i), Shape{250}, 1.0f));
    ferry::wait(small);
    const DeviceArray<float> long0 =
        ferry::full<float>(mesh.device(0), Shape{1 << 14}, 1.0f) + 1.0f;
    const DeviceArray<float> short1 = ferry::full<float>(mesh.device(1), Shape{1}, 1.0f);
    const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, {long0, short1}));
    const auto reduced = ferry::all_reduce(MeshArray<float>::from_shards(mesh, small));
    EXPECT_EQ(reduced.shard(0).to_host()(249), 2.0f);
    EXPECT_EQ(gathered.shard(0).to_host()(1 << 14), 1.0f);
  }
  ferry::Duration long_end{-1};
  ferry::Duration reduction_start{-1};
  ferry::detail::MeshState::with_simulator(mesh.device(0), [&](ferry::detail::Simulator& sim) {
    for (const auto& slice : sim.slices()) {
      if (slice.name == "add") long_end = slice.end;
      // The reduction computes; the receives named after the collective copy only.
      if (slice.name == "all_reduce" && slice.flops > 0) reduction_start = slice.start;
    }
  });
  ASSERT_GE(long_end.count(), 0);
  ASSERT_GE(reduction_start.count(), 0);
  EXPECT_GE(reduction_start, long_end);
  // Memory back, and lower_bound <= makespan on the mesh and on each device.
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(MeshTimeline, DataReadyBeforeTheCallLeavesWhenTheHostMakesIt) {
  // Both shards are ready, then chip 0 runs a 10,000 ns kernel and the host waits for it: chip
  // 0's host clock is at H0. An all-gather called then (a line of 2, 400-byte shards: 400 ns
  // on the link, a 100 ns hop) cannot put chip 0's shard on the link before H0: link 0->1
  // carries it over [H0, H0 + 400], and chip 1 has it at H0 + 500. Likewise a to() from chip 1
  // called after the host waited for chip 1 until H1 leaves at H1. (Before, both left when
  // their data was ready, thousands of ns before the host called them, and after a reset the
  // mesh's lower bound passed its makespan.)
  Mesh mesh = Mesh::modeled(line_of(2));
  const ferry::Device d0 = mesh.device(0);
  const ferry::Device d1 = mesh.device(1);
  const auto nothing = [](ferry::KernelArgs<float>) {};
  const auto host_clock = [](const ferry::Device& d) {
    return ferry::detail::MeshState::with_simulator(
        d, [](ferry::detail::Simulator& sim) { return sim.host_time().count(); });
  };
  const auto last_use = [&](const std::string& link) {
    auto& state = ferry::detail::MeshAccess::state(mesh);
    std::lock_guard lock(state.net->mutex);
    std::pair<std::int64_t, std::int64_t> out{-1, -1};
    for (const auto& u : state.net->links.uses()) {
      if (state.net->links.links()[u.link].name == link) out = {u.start.count(), u.end.count()};
    }
    return out;
  };
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    std::vector<DeviceArray<float>> shards{ferry::full<float>(d0, Shape{100}, 1.0f),
                                           ferry::full<float>(d1, Shape{100}, 2.0f)};
    ferry::wait(shards);
    ferry::wait(ferry::custom<float>(d0, "busy", {}, Shape{1}, nothing,
                                     ferry::Cost::fixed(nanoseconds(10'000))));
    const std::int64_t h0 = host_clock(d0);
    mesh.reset_stats();
    const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, shards));
    EXPECT_EQ(last_use("link 0->1"), (std::pair<std::int64_t, std::int64_t>{h0, h0 + 400}));
    EXPECT_EQ(gathered.shard(1).to_host()(0), 1.0f);
    const auto got = ferry_test::named(ferry_test::slices_of(d1), "all_gather");
    ASSERT_FALSE(got.empty());
    EXPECT_GE(got.back().start.count(), h0 + 500);
    ferry::wait(ferry::custom<float>(d1, "busy", {}, Shape{1}, nothing,
                                     ferry::Cost::fixed(nanoseconds(20'000))));
    const std::int64_t h1 = host_clock(d1);
    EXPECT_EQ(shards[1].to(d0).to_host()(0), 2.0f);
    EXPECT_EQ(last_use("link 1->0"), (std::pair<std::int64_t, std::int64_t>{h1, h1 + 400}));
  }
  // Memory back, and lower_bound <= makespan on the mesh and on each device.
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(MeshTimeline, HiddenCommunicationIsCountedWhateverTheTraceKeeps) {
  // A gradient-like all-gather on the links while both chips run a chain of kernels: the time
  // a link and a compute unit were busy at once is the same whether the trace keeps every
  // slice, one, or none.
  auto overlap_with = [](std::int64_t trace_steps) {
    MeshSpec spec = line_of(2, Topology::line);
    for (auto& d : spec.devices) d.trace_steps = trace_steps;
    const Mesh mesh = Mesh::modeled(spec);
    // Memory back and lower_bound <= makespan on every device once the arrays are gone.
    ferry_test::expect_balanced_after(mesh, [&] {
      std::vector<DeviceArray<float>> shards, work;
      for (std::int64_t i = 0; i < 2; ++i) {
        shards.push_back(ferry::full<float>(mesh.device(i), Shape{64, 64}, 1.0f));
        work.push_back(ferry::full<float>(mesh.device(i), Shape{64, 64}, 0.5f));
      }
      const auto gathered = ferry::all_gather(MeshArray<float>::from_shards(mesh, shards));
      for (auto& w : work) {
        for (int k = 0; k < 6; ++k) w = ferry::matmul(w, w);
      }
      ferry::wait(gathered);
      ferry::wait(work);
    });
    const ferry::MeshStats stats = mesh.stats();
    EXPECT_LE(stats.communication_overlap, stats.communication_time);
    return stats.communication_overlap;
  };
  const nanoseconds full = overlap_with(10'000);
  EXPECT_GT(full, nanoseconds(0));
  EXPECT_EQ(overlap_with(1), full);
  EXPECT_EQ(overlap_with(0), full);
}

TEST(MeshTimeline, TheMeshTraceIsStrictJsonWithATrackPerLink) {
  ferry_test::TempDir dir("ferry_test_mesh");
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::ring));
  ferry_test::expect_balanced_after(mesh, [&] {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 4; ++i)
      shards.push_back(ferry::full<float>(mesh.device(i), Shape{64}, 1.0f));
    ferry::wait(ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards)));
  });
  const std::string path = dir.file("mesh.json");
  mesh.write_trace(path);
  const ferry::detail::Json doc =
      ferry::detail::parse_json(ferry_test::read_text(path));  // throws unless strict JSON
  std::size_t link_tracks = 0;
  std::size_t link_slices = 0;
  const auto text_of = [](const ferry::detail::Json& e, const char* key) {
    const ferry::detail::Json* v = e.find(key);
    return v == nullptr ? std::string() : v->text;
  };
  for (const ferry::detail::Json& e : doc.find("traceEvents")->items) {
    if (text_of(e, "ph") == "M" && text_of(e, "name") == "thread_name" &&
        e.find("args")->find("name")->text.rfind("link ", 0) == 0) {
      ++link_tracks;
    }
    if (text_of(e, "ph") == "X" && text_of(e, "cat") == "link") ++link_slices;
  }
  EXPECT_EQ(link_tracks, 8u);
  EXPECT_GT(link_slices, 0u);
  EXPECT_NE(mesh.timeline_text().find("link 0->1: busy"), std::string::npos);
}

TEST(MeshTrace, EachPresetsTraceIsStrictJsonWithOneTrackPerLinkDirection) {
  // An all-reduce along the last axis: each row of a T3000 or a Galaxy is a line of 4 chips
  // (3 neighbouring pairs, both directions), a DGX's 8 GPUs meet at the switch (each GPU's
  // port, both directions).
  struct Preset {
    MeshSpec spec;
    std::size_t link_directions;
  };
  ferry_test::TempDir dir("ferry_test_mesh_presets");
  for (const Preset& p :
       {Preset{ferry::specs::t3000(), 2 * 3 * 2}, Preset{ferry::specs::galaxy(), 8 * 3 * 2},
        Preset{ferry::specs::dgx_h100(), 8 * 2}}) {
    SCOPED_TRACE(p.spec.name);
    const Mesh mesh = Mesh::modeled(p.spec);
    const int last_axis = static_cast<int>(mesh.shape().rank()) - 1;
    // Two sizes: 256 bytes a shard, one-shot on the DGX (below its 256 KiB), and 256 KiB, a
    // reduce-scatter then an all-gather on every preset. The model's memory comes back after
    // them, and no device's schedule beats its bound.
    ferry_test::expect_balanced_after(mesh, [&] {
      for (const std::int64_t n : {std::int64_t{64}, std::int64_t{65536}}) {
        ferry::wait(ferry::all_reduce(shards_of<float>(mesh, [n](std::int64_t) { return n; }),
                                      ReduceOp::sum, last_axis));
      }
    });
    const std::string path = dir.file(p.spec.name + ".json");
    mesh.write_trace(path);
    ferry::detail::Json doc;
    ASSERT_NO_THROW(doc = ferry::detail::parse_json(ferry_test::read_text(path)));  // RFC 8259
    // Members an event may lack read as "" and -1.
    const auto text_of = [](const ferry::detail::Json& e, const char* key) {
      const ferry::detail::Json* v = e.find(key);
      return v == nullptr ? std::string() : v->text;
    };
    const auto integer_of = [](const ferry::detail::Json& e, const char* key) {
      const ferry::detail::Json* v = e.find(key);
      return v == nullptr ? std::int64_t{-1} : v->integer;
    };
    const auto arg_name = [&](const ferry::detail::Json& e) {
      const ferry::detail::Json* args = e.find("args");
      return args == nullptr ? std::string() : text_of(*args, "name");
    };
    // The links process's tracks: their names, by tid.
    std::int64_t links_pid = -1;
    for (const ferry::detail::Json& e : doc.find("traceEvents")->items) {
      if (text_of(e, "name") == "process_name" && arg_name(e) == "links")
        links_pid = integer_of(e, "pid");
    }
    ASSERT_NE(links_pid, -1);
    std::map<std::int64_t, std::string> tracks;
    std::vector<std::int64_t> slice_tracks;
    for (const ferry::detail::Json& e : doc.find("traceEvents")->items) {
      if (integer_of(e, "pid") != links_pid) continue;
      if (text_of(e, "name") == "thread_name") {
        const std::string name = arg_name(e);
        EXPECT_EQ(name.rfind("link ", 0), 0u) << name;
        EXPECT_TRUE(tracks.emplace(integer_of(e, "tid"), name).second) << "tid given twice";
      } else if (text_of(e, "ph") == "X") {
        slice_tracks.push_back(integer_of(e, "tid"));
      }
    }
    EXPECT_FALSE(slice_tracks.empty());
    for (std::int64_t tid : slice_tracks) EXPECT_EQ(tracks.count(tid), 1u) << "unnamed track";
    // One track per link direction: as many as the links that carried the all-reduce, each
    // name once.
    EXPECT_EQ(tracks.size(), p.link_directions);
    std::set<std::string> names;
    for (const auto& [tid, name] : tracks) names.insert(name);
    EXPECT_EQ(names.size(), tracks.size());
    std::set<std::string> used;
    for (const ferry::LinkStats& l : mesh.stats().links) used.insert(l.name);
    EXPECT_EQ(names, used);
  }
}

TEST(MeshMemory, EveryBufferIsFreedWhenTheArraysGo) {
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::ring));
  {
    const auto a = shards_of<float>(mesh, [](std::int64_t) { return 8; });
    const auto r = ferry::all_reduce(a);
    const auto g = ferry::all_gather(r, 1);
    ferry::wait(g);
  }
  for (const auto& d : mesh.devices()) EXPECT_EQ(d.stats().dram_bytes_in_use, 0u) << d.name();
}

TEST(MeshMemory, EveryCollectiveOnEveryTopologyGivesItsMemoryBack) {
  // Each collective keeps its own receive buffers and reduction kernels; kept or given away,
  // and beside a copy over the links, none of them may outlive the arrays.
  for (const Group& g : groups()) {
    SCOPED_TRACE(std::to_string(g.n) + " devices, " + std::string(ferry::name_of(g.topology)));
    const Mesh mesh = Mesh::modeled(line_of(g.n, g.topology));
    ferry_test::expect_balanced_after(mesh, [&] {
      const auto a = shards_of<float>(mesh, [&](std::int64_t) { return 2 * g.n; });
      std::vector<std::pair<std::int64_t, std::int64_t>> shift;
      for (std::int64_t p = 0; p < g.n; ++p) shift.emplace_back(p, (p + 1) % g.n);
      ferry::wait(ferry::all_reduce(a, ReduceOp::mean));
      ferry::wait(ferry::all_gather(a, 1));
      ferry::wait(ferry::reduce_scatter(a, 0, ReduceOp::max));
      ferry::wait(ferry::all_to_all(a, 0, 1));
      ferry::wait(ferry::broadcast(a, g.n - 1));
      ferry::wait(ferry::permute(a, shift));
      ferry::wait(ferry::all_reduce(shards_of<float>(mesh, [](std::int64_t) { return 3; })));
      ferry::wait(a.shard(0).to(mesh.device(g.n - 1)));
    });
  }
}

TEST(MeshMemory, AGivenAwayOperandIsFreedOnceTheCollectiveHasReadIt) {
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::ring));
  constexpr std::uint64_t shard_bytes = 1024 * 3 * sizeof(float);
  const auto held = shards_of<float>(mesh, [](std::int64_t) { return 1024; });
  const auto kept = ferry::all_reduce(held);
  ferry::wait(kept);
  for (const auto& d : mesh.devices())
    EXPECT_EQ(d.stats().dram_bytes_in_use, 2 * shard_bytes) << d.name() << ": operand and result";

  auto given = shards_of<float>(mesh, [](std::int64_t) { return 1024; });
  const auto reduced = ferry::all_reduce(std::move(given));
  ferry::wait(reduced);
  for (const auto& d : mesh.devices()) {
    EXPECT_EQ(d.stats().dram_bytes_in_use, 3 * shard_bytes)
        << d.name() << ": the first pair and the second result only";
  }
  EXPECT_EQ(ferry::to_host(reduced.shard(0)), ferry::to_host(kept.shard(0)));
}

TEST(MeshMemory, AnArraySentOverTheLinksKeepsItsBufferUntilItsDataArrived) {
  // Two tiny chips (1 MiB of DRAM each) on a line. `a`, 600,000 bytes, is filled on chip 0
  // (10 ns of latency, then its bytes at 1 byte a ns: 0-600,010), sent to chip 1 (the link
  // 600,010-1,200,010, arriving a hop later, 1,200,110), and let go of at once. A second
  // array of that size fits beside nothing: its fill waits for `a`'s buffer, which the link
  // reads until the data arrived: 1,200,110-1,800,120, not as soon as `a` was done.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  ferry_test::expect_balanced_after(mesh, [&] {
    DeviceArray<float> sent;
    {
      const auto a = ferry::full<float>(mesh.device(0), Shape{150'000}, 1.0f);
      sent = a.to(mesh.device(1));
    }
    const auto next = ferry::full<float>(mesh.device(0), Shape{150'000}, 2.0f);
    EXPECT_EQ(ferry::to_host(next)(149'999), 2.0f);
    EXPECT_EQ(ferry::to_host(sent)(149'999), 1.0f);
  });
  const auto fills = ferry_test::named(ferry_test::slices_of(mesh.device(0)), "full");
  ASSERT_EQ(fills.size(), 2u);
  EXPECT_EQ(ferry_test::span_of(fills[0]), std::make_pair(0LL, 600'010LL));
  EXPECT_EQ(ferry_test::span_of(fills[1]), std::make_pair(1'200'110LL, 1'800'120LL));
  // (link_uses counts from the first use: 600,010 here.)
  EXPECT_EQ(link_uses(mesh).at("link 0->1"),
            (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 600'000}}));
  EXPECT_EQ(mesh.device(0).stats().peak_dram_bytes, 600'000u);
}

TEST(MeshMemory, AnInPlaceOpWaitsForItsOperandsDataToLeaveOverTheLinks) {
  // `a` (400 bytes, filled 0-410) goes to chip 1 (the link 410-810, arriving 910), then is
  // given to an in-place multiply, which may write over it only once the link has read it.
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  ferry_test::expect_balanced_after(mesh, [&] {
    auto a = ferry::full<float>(mesh.device(0), Shape{100}, 1.0f);
    const auto sent = a.to(mesh.device(1));
    const auto doubled = std::move(a) * 2.0f;
    EXPECT_EQ(ferry::to_host(doubled)(99), 2.0f);
    EXPECT_EQ(ferry::to_host(sent)(99), 1.0f);
  });
  // It reads 400 bytes and writes 400 in place: 10 + 800 ns from 910, not from 410.
  const auto multiplies = ferry_test::named(ferry_test::slices_of(mesh.device(0)), "multiply");
  ASSERT_EQ(multiplies.size(), 1u);
  EXPECT_EQ(ferry_test::span_of(multiplies[0]), std::make_pair(910LL, 1'720LL));
  EXPECT_EQ(mesh.device(0).stats().donations, 1u);
  EXPECT_EQ(mesh.device(0).stats().peak_dram_bytes, 400u);
}

TEST(MeshTimeline, ACopyBetweenTwoChipsTravelsTheLinksOfThePathHopByHop) {
  // A line of 4, 400 bytes from device 0 to device 3: three hops, each holding its link 400 ns,
  // the message streaming through devices 1 and 2 (each hop starts a hop latency after the one
  // before): 0-400, 100-500, 200-600; it arrives a hop after its last byte left: 700.
  const Mesh mesh = Mesh::modeled(line_of(4, Topology::line));
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto a = ferry::full<float>(mesh.device(0), Shape{100}, 2.0f);
    EXPECT_EQ(a.to(mesh.device(3)).to_host()(99), 2.0f);
  });
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const auto uses = link_uses(mesh);
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses.at("link 0->1"), (Spans{{0, 400}}));
  EXPECT_EQ(uses.at("link 1->2"), (Spans{{100, 500}}));
  EXPECT_EQ(uses.at("link 2->3"), (Spans{{200, 600}}));
  // Nothing on device 3's own copy engine: its step completes as the data arrives.
  EXPECT_EQ(mesh.device(3).stats().busy("d2d"), nanoseconds(0));
}

TEST(MeshTimeline, ACopyAcrossTwoAxesGoesAlongTheFirstAxisThenTheSecond) {
  const Mesh mesh = Mesh::modeled(ferry_test::square());
  const Mesh other = Mesh::modeled(line_of(2, Topology::line));
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  const ferry_test::MemoryInUse other_before = ferry_test::memory_in_use(other);
  {
    const auto a = ferry::full<float>(mesh.device(ferry::MeshCoordinate{0, 0}), Shape{100}, 1.0f);
    ferry::wait(a.to(mesh.device(ferry::MeshCoordinate{1, 1})));
    const auto uses = link_uses(mesh);
    ASSERT_EQ(uses.size(), 2u);
    EXPECT_EQ(uses.count("link 0->2"), 1u);  // (0, 0) -> (1, 0) along axis 0
    EXPECT_EQ(uses.count("link 2->3"), 1u);  // (1, 0) -> (1, 1) along axis 1
    // A device of another mesh, or the host, is not reached over these links.
    ferry::wait(a.to(other.device(1)));
    EXPECT_EQ(link_uses(mesh).size(), 2u);
    EXPECT_TRUE(link_uses(other).empty());
  }
  // Memory back, and lower_bound <= makespan, on both meshes once the arrays are gone.
  ferry_test::expect_books_balanced(mesh, before);
  ferry_test::expect_books_balanced(other, other_before);
}

// ---- failures ----

TEST(MeshFaults, AFailedShardReachesExactlyTheResultsThatNeedIt) {
  MeshSpec spec = line_of(4, Topology::ring);
  spec.devices[2].faults.fail_steps = {0};  // device 2's first step: its shard's import
  const Mesh mesh = Mesh::modeled(spec);
  // The failure must not leave a buffer behind on any device either.
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto a = shards_of<float>(mesh, [](std::int64_t) { return 2; });
    // A shift by one: only position 3 reads device 2's shard.
    const auto shifted = ferry::permute(a, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    EXPECT_NO_THROW(shifted.shard(0).to_host());
    EXPECT_NO_THROW(shifted.shard(1).to_host());
    EXPECT_NO_THROW(shifted.shard(2).to_host());
    EXPECT_THROW(shifted.shard(3).to_host(), ferry::DeviceFault);
    // Every member of an all-reduce needs it.
    const auto summed = ferry::all_reduce(a);
    for (const auto& s : summed.shards()) EXPECT_THROW(s.to_host(), ferry::DeviceFault);
  });
}

// ---- bad input ----

TEST(MeshBadInput, ShardsMustBeOnePerDeviceOnThatDevice) {
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  const Mesh other = Mesh::modeled(line_of(2, Topology::line));
  const auto on = [](const Mesh& m, std::int64_t i) {
    return ferry::full<float>(m.device(i), Shape{2}, 1.0f);
  };
  expect_error<ferry::InvalidArgument>(
      [&] { return MeshArray<float>::from_shards(mesh, {on(mesh, 0)}); },
      "[MeshArray::from_shards] mesh row (2) has 2 devices, got 1 shards");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {on(mesh, 1), on(mesh, 1)});
      },
      "[MeshArray::from_shards] shard 0 lives on " + mesh.device(1).name() +
          ", device 1 of the mesh; it must be on device 0 (" + mesh.device(0).name() + ")");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {on(mesh, 0), on(other, 1)});
      },
      "[MeshArray::from_shards] shard 1 lives on " + other.device(1).name() +
          ", not a device of mesh row; it must be on device 1 (" + mesh.device(1).name() + ")");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {on(mesh, 0), DeviceArray<float>()});
      },
      "[MeshArray::from_shards] shard 1 is an empty handle");
  expect_error<ferry::InvalidArgument>([] { return ferry::all_reduce(MeshArray<float>()); },
                                       "[all_reduce] empty mesh array");
}

TEST(MeshBadInput, EmptyHandlesAndCoordinatesOutsideAreRefusedByTheCallMade) {
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  const auto on = [](const Mesh& m, std::int64_t i) {
    return ferry::full<float>(m.device(i), Shape{2}, 1.0f);
  };
  expect_error<ferry::InvalidArgument>([] { return MeshArray<float>().to_host(); },
                                       "[MeshArray::to_host] empty handle");
  // Giving the shards away leaves an empty handle, refused as one: by each accessor naming
  // itself, by an op naming the op. (It kept its mesh and global view: to_host read a shard
  // that was gone, and the collectives named MeshArray::shard.)
  auto given = MeshArray<float>::from_shards(mesh, {on(mesh, 0), on(mesh, 1)}, Shape{4},
                                             {ferry::Shard{0}});
  const std::vector<DeviceArray<float>> taken = std::move(given).shards();
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_FALSE(given.valid());
  EXPECT_FALSE(given.placed());
  expect_error<ferry::InvalidArgument>([&] { return given.shard(0); },
                                       "[MeshArray::shard] empty handle");
  expect_error<ferry::InvalidArgument>([&] { return given.to_host(); },
                                       "[MeshArray::to_host] empty handle");
  expect_error<ferry::InvalidArgument>([&] { return ferry::to_host(given); },
                                       "[to_host] empty mesh array");
  expect_error<ferry::InvalidArgument>([&] { return ferry::all_gather(given, 0); },
                                       "[all_gather] empty mesh array");
  // A coordinate the mesh lacks: named by the accessor it was given to.
  const auto a = MeshArray<float>::from_shards(mesh, {on(mesh, 0), on(mesh, 1)});
  expect_error<ferry::InvalidArgument>(
      [&] { return a.shard(ferry::MeshCoordinate{2}); },
      "[MeshArray::shard] coordinate (2) is outside mesh shape (2) on axis 0");
  expect_error<ferry::InvalidArgument>(
      [&] { return mesh.device(ferry::MeshCoordinate{0, 1}); },
      "[Mesh::device] coordinate (0, 1) has rank 2, mesh shape (2) has rank 1");
}

TEST(MeshBadInput, CollectivesNameTheOpAndTheValues) {
  const Mesh mesh = Mesh::modeled(line_of(2, Topology::line));
  const auto a =
      MeshArray<float>::from_shards(mesh, {ferry::full<float>(mesh.device(0), Shape{2, 3}, 1.0f),
                                           ferry::full<float>(mesh.device(1), Shape{3, 3}, 1.0f)});
  expect_error<ferry::ShapeError>([&] { return ferry::all_reduce(a); },
                                  "[all_reduce] shards differ: (2, 3) on " + mesh.device(0).name() +
                                      ", (3, 3) on " + mesh.device(1).name());
  expect_error<ferry::ShapeError>([&] { return ferry::all_gather(a, 1); },
                                  "[all_gather] shards differ outside dim 1: (2, 3) on " +
                                      mesh.device(0).name() + ", (3, 3) on " +
                                      mesh.device(1).name());
  EXPECT_NO_THROW(ferry::all_gather(a, 0));
  expect_error<ferry::InvalidArgument>([&] { return ferry::all_gather(a, 2); },
                                       "[all_gather] dim 2 is out of range for rank 2");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::all_gather(a, 0, 1); },
      "[all_gather] axis 1 is not an axis of mesh row (2) (give 0..0, or -1 for the whole mesh)");
  // Rows of a 2 x 2 mesh holding shards of two ranks, each row its own group along axis 1: a
  // negative dim would be a different dim in each row, so the ranks must agree mesh-wide.
  const Mesh grid = Mesh::modeled(ferry_test::square());
  std::vector<DeviceArray<float>> mixed;
  for (std::int64_t i = 0; i < 4; ++i) {
    mixed.push_back(ferry::full<float>(grid.device(i), i < 2 ? Shape{1, 2} : Shape{1, 2, 2}, 1.0f));
  }
  const auto ranks = MeshArray<float>::from_shards(grid, mixed);
  const std::string differ = "shards differ in rank: (1, 2) on " + grid.device(0).name() +
                             ", (1, 2, 2) on " + grid.device(2).name() +
                             "; a dim counts in one rank for every member";
  expect_error<ferry::ShapeError>([&] { return ferry::all_gather(ranks, -1, 1); },
                                  "[all_gather] " + differ);
  expect_error<ferry::ShapeError>(
      [&] { return ferry::reduce_scatter(ranks, -1, ReduceOp::sum, 1); },
      "[reduce_scatter] " + differ);
  expect_error<ferry::ShapeError>([&] { return ferry::all_to_all(ranks, -1, 0, 1); },
                                  "[all_to_all] " + differ);
  EXPECT_NO_THROW(ferry::wait(ferry::all_reduce(ranks, ReduceOp::sum, 1)));  // no dim: per group
  const auto b = MeshArray<std::int32_t>::from_shards(
      mesh, {ferry::full<std::int32_t>(mesh.device(0), Shape{3}, 1),
             ferry::full<std::int32_t>(mesh.device(1), Shape{3}, 1)});
  expect_error<ferry::InvalidArgument>([&] { return ferry::reduce_scatter(b, 0); },
                                       "[reduce_scatter] dim 0 of (3) has size 3, which does not "
                                       "divide into 2 parts, one per member");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::all_reduce(b, ReduceOp::mean); },
      "[all_reduce] ReduceOp::mean needs a floating element type, got int32");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::permute(b, {{0, 1}, {1, 1}});
      },
      "[permute] pairs {0, 1} and {1, 1} have one target");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::permute(b, {{0, 1}, {0, 0}});
      },
      "[permute] two pairs have source 0");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::permute(b, {{0, 2}});
      },
      "[permute] pair {0, 2} names a position outside a group of 2 members");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::broadcast(b, 2); },
      "[broadcast] from 2 is not a position of a group of 2 members");
  expect_error<ferry::InvalidArgument>(
      [&] { return mesh.axis("tp"); },
      "[Mesh::axis] mesh row has no axis named 'tp' (its spec names none)");
  expect_error<ferry::InvalidArgument>([&] { return mesh.device(2); },
                                       "[Mesh::device] index 2 is outside mesh row of 2 devices");
}

}  // namespace

}  // namespace test_mesh

