// Meshes, first slice: MeshSpec refuses what no mesh could be (each error by type and message),
// the presets carry the figures their comments cite, every collective's plan moves the bytes
// its definition needs (checked byte by byte on every topology and group size), the hand-worked
// plans and times come out as worked, and the closed form sits beside tt-metal's measurements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"

namespace test_mesh_spec {

namespace {

using ferry::Collective;
using ferry::CollectiveAlgorithm;
using ferry::CollectivePlan;
using ferry::LinkDirection;
using ferry::Topology;
using ferry::Transfer;
using ferry_test::expect_error;
using std::chrono::nanoseconds;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

/// Round numbers for times worked by hand: 1 GB/s a link direction of which the library
/// reaches half, 100 ns a hop, 50 ns a step, 1 us a call, never one-shot.
ferry::LinkSpec round_link() {
  ferry::LinkSpec l;
  l.bytes_per_second = 1e9;
  l.hop_latency = nanoseconds(100);
  l.links_per_pair = 1;
  l.call_overhead = nanoseconds(1000);
  l.step_overhead = nanoseconds(50);
  l.efficiency = 0.5;
  l.one_shot_bytes = 0;
  return l;
}

ferry::LinkSpec always_one_shot() {
  ferry::LinkSpec l = round_link();
  l.one_shot_bytes = std::int64_t{1} << 40;
  return l;
}

ferry::MeshSpec small_mesh() {
  ferry::MeshSpec m;
  m.name = "small";
  m.devices.assign(8, ferry::specs::tiny());
  m.shape = {2, 4};
  m.topology = {Topology::line, Topology::ring};
  m.axis_names = {"dp", "tp"};
  m.link = round_link();
  return m;
}

// --- the vocabulary --------------------------------------------------------------------------

TEST(MeshShape, RowMajorPositionsAndTheirErrors) {
  const ferry::MeshShape shape{2, 4};
  EXPECT_EQ(shape.rank(), 2u);
  EXPECT_EQ(shape.size(), 8);
  EXPECT_EQ(shape[1], 4);
  EXPECT_EQ(shape.to_string(), "(2, 4)");
  EXPECT_EQ(ferry::MeshShape{8}.to_string(), "(8)");
  EXPECT_EQ(shape.index_of({1, 3}), 7);
  EXPECT_EQ(shape.index_of({0, 2}), 2);
  for (std::int64_t i = 0; i < shape.size(); ++i)
    EXPECT_EQ(shape.index_of(shape.coordinate_of(i)), i);
  EXPECT_EQ(shape.coordinate_of(6), (ferry::MeshCoordinate{1, 2}));
  EXPECT_EQ((ferry::MeshCoordinate{1, 2}).to_string(), "(1, 2)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return shape.index_of({2, 0});
      },
      "[MeshShape::index_of] coordinate (2, 0) is outside mesh shape (2, 4) on axis 0");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return shape.index_of({0, -1});
      },
      "[MeshShape::index_of] coordinate (0, -1) is outside mesh shape (2, 4) on axis 1");
  expect_error<ferry::InvalidArgument>(
      [&] { return shape.index_of({1}); },
      "[MeshShape::index_of] coordinate (1) has rank 1, mesh shape (2, 4) has rank 2");
  expect_error<ferry::InvalidArgument>(
      [&] { return shape.coordinate_of(8); },
      "[MeshShape::coordinate_of] index 8 is outside mesh shape (2, 4) of 8 devices");
  expect_error<ferry::InvalidArgument>([&] { return shape[2]; },
                                       "[MeshShape] axis 2 of the rank-2 mesh shape (2, 4)");
  expect_error<ferry::InvalidArgument>([&] { return ferry::MeshCoordinate{1, 3}[2]; },
                                       "[MeshCoordinate] axis 2 of the rank-2 coordinate (1, 3)");
  EXPECT_EQ(ferry::name_of(Topology::fully_connected), "fully_connected");
}

/// Probed: a shape of 2^40 x 2^40 once gave the position of its last device by a signed
/// overflow, and the size of (2^40, 2^40, 0) as the largest int64 rather than 0.
TEST(MeshShape, PositionsPastTheInt64RangeAreRefusedAndAnEmptyAxisEmptiesTheShape) {
  const std::int64_t big = std::int64_t{1} << 40;
  const ferry::MeshShape huge{big, big};
  EXPECT_EQ(huge.size(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(huge.index_of({0, big - 1}), big - 1);
  // (2^23 - 1) * 2^40 + 2^40 - 1: the last position an int64 holds.
  EXPECT_EQ(huge.index_of({(std::int64_t{1} << 23) - 1, big - 1}),
            std::numeric_limits<std::int64_t>::max());
  expect_error<ferry::InvalidArgument>(
      [&] { return huge.index_of({big - 1, big - 1}); },
      "[MeshShape::index_of] coordinate (1099511627775, 1099511627775) of mesh shape "
      "(1099511627776, 1099511627776) has a row-major position past the largest int64");
  expect_error<ferry::InvalidArgument>(
      [&] { return huge.index_of({std::int64_t{1} << 23, 0}); },
      "[MeshShape::index_of] coordinate (8388608, 0) of mesh shape (1099511627776, "
      "1099511627776) has a row-major position past the largest int64");
  EXPECT_EQ((ferry::MeshShape{big, big, 0}).size(), 0);
  EXPECT_EQ((ferry::MeshShape{big, big, -3}).size(), 0);
  EXPECT_EQ((ferry::MeshShape{0, big, big}).size(), 0);
}

void expect_refused(void (*breaks)(ferry::MeshSpec&), const std::string& message) {
  ferry::MeshSpec m = small_mesh();
  breaks(m);
  // Through the call a user makes, which names itself.
  expect_error<ferry::InvalidArgument>([&] { return ferry::Mesh::modeled(m).size(); }, message);
}

TEST(MeshSpec, ImpossibleSpecsAreRefusedNamingTheFieldAndTheValue) {
  EXPECT_NO_THROW(ferry::detail::validate(small_mesh(), "Mesh::modeled"));
  const std::string at = "[Mesh::modeled] mesh spec 'small': ";
  expect_refused([](auto& m) { m.shape = ferry::MeshShape{}; },
                 at + "shape must have at least one axis, got ()");
  expect_refused([](auto& m) { m.shape = {2, 0}; }, at + "shape[1] must be positive, got 0");
  expect_refused([](auto& m) { m.shape = {-2, 4}; }, at + "shape[0] must be positive, got -2");
  expect_refused([](auto& m) { m.shape = {1 << 20, 1 << 20}; },
                 at + "shape (1048576, 1048576) has more devices than a mesh can hold");
  expect_refused([](auto& m) { m.devices.pop_back(); },
                 at + "devices must have one spec per device of shape (2, 4) (8), got 7");
  expect_refused([](auto& m) { m.shape = {4, 4}; },
                 at + "devices must have one spec per device of shape (4, 4) (16), got 8");
  expect_refused([](auto& m) { m.topology = {Topology::line}; },
                 at + "topology must have one entry per axis of shape (2, 4), got 1");
  expect_refused([](auto& m) { m.topology = {Topology::ring, Topology::ring}; },
                 at + "topology[0] is a ring of 2 devices; a ring needs at least 3 (use a line)");
  expect_refused([](auto& m) { m.topology[1] = static_cast<Topology>(7); },
                 at + "topology[1] is not a Topology (7)");
  expect_refused([](auto& m) { m.axis_names = {"dp"}; },
                 at + "axis_names must be empty or have one name per axis of shape (2, 4), got 1");
  expect_refused([](auto& m) { m.axis_names = {"dp", ""}; }, at + "axis_names[1] is empty");
  expect_refused(
      [](auto& m) {
        m.axis_names = {"tp", "tp"};
      },
      at + "axis_names[1] repeats 'tp' of axis_names[0]");
  expect_refused([](auto& m) { m.link.bytes_per_second = 0; },
                 at + "link.bytes_per_second must be positive, got 0");
  expect_refused(
      [](auto& m) { m.link.bytes_per_second = std::numeric_limits<double>::quiet_NaN(); },
      at + "link.bytes_per_second must be positive, got nan");
  // Rates under 1 per second and times past 2^53 ns, as validate(DeviceSpec) refuses them:
  // probed, a rate of 1e-300 (or an efficiency of 1e-300) and a hop latency of Duration::max()
  // were accepted, then the first collective's time was an undefined cast or an overflow.
  expect_refused([](auto& m) { m.link.bytes_per_second = 0.5; },
                 at + "link.bytes_per_second must be at least 1 per second, got 0.5");
  expect_refused([](auto& m) { m.link.bytes_per_second = 1e-300; },
                 at + "link.bytes_per_second must be at least 1 per second, got 1e-300");
  expect_refused([](auto& m) { m.link.efficiency = 1e-300; },
                 at + "link.efficiency x bytes_per_second must be at least 1 per second, got "
                      "1e-291");
  expect_refused([](auto& m) { m.link.pair_rate_factor = 1e-300; },
                 at + "link.pair_rate_factor x efficiency x bytes_per_second must be at least 1 "
                      "per second, got 5e-292");
  expect_refused([](auto& m) { m.link.hop_latency = ferry::Duration::max(); },
                 at + "link.hop_latency must be at most 2^53 ns (about 104 days), got "
                      "9223372036854775807 ns");
  expect_refused(
      [](auto& m) { m.link.call_overhead = ferry::detail::kLongestStep + nanoseconds(1); },
      at + "link.call_overhead must be at most 2^53 ns (about 104 days), got 9007199254740993 ns");
  expect_refused(
      [](auto& m) { m.link.step_overhead = ferry::detail::kLongestStep + nanoseconds(1); },
      at + "link.step_overhead must be at most 2^53 ns (about 104 days), got 9007199254740993 ns");
  expect_refused([](auto& m) { m.link.links_per_pair = 0; },
                 at + "link.links_per_pair must be positive, got 0");
  expect_refused([](auto& m) { m.link.hop_latency = nanoseconds(-1); },
                 at + "link.hop_latency must not be negative, got -1 ns");
  expect_refused([](auto& m) { m.link.call_overhead = std::chrono::microseconds(-2); },
                 at + "link.call_overhead must not be negative, got -2000 ns");
  expect_refused([](auto& m) { m.link.step_overhead = nanoseconds(-5); },
                 at + "link.step_overhead must not be negative, got -5 ns");
  expect_refused([](auto& m) { m.link.efficiency = 0; },
                 at + "link.efficiency must be in (0, 1], got 0");
  expect_refused([](auto& m) { m.link.efficiency = 1.5; },
                 at + "link.efficiency must be in (0, 1], got 1.5");
  expect_refused([](auto& m) { m.link.one_shot_bytes = -1; },
                 at + "link.one_shot_bytes must not be negative, got -1");
  expect_refused([](auto& m) { m.link.pair_rate_factor = 0; },
                 at + "link.pair_rate_factor must be in (0, 1], got 0");
  expect_refused([](auto& m) { m.link.pair_rate_factor = 1.25; },
                 at + "link.pair_rate_factor must be in (0, 1], got 1.25");
  expect_refused([](auto& m) { m.devices[5].dram_bytes = 0; },
                 at + "devices[5]: spec 'tiny': dram_bytes must be positive, got 0");
  expect_refused([](auto& m) { m.devices[2].faults.kernel_failure_rate = 2; },
                 at + "devices[2]: spec 'tiny': faults.kernel_failure_rate must be a probability "
                      "in [0, 1], got 2");

  // What is allowed: no axis names, zero costs, an efficiency of 1, a ring of 3, a switch of
  // 2, axes of one device, devices that differ.
  ferry::MeshSpec ok = small_mesh();
  ok.axis_names.clear();
  ok.link.hop_latency = ok.link.call_overhead = ok.link.step_overhead = nanoseconds(0);
  ok.link.efficiency = 1;
  ok.devices[3] = ferry::specs::pcie_accelerator();
  EXPECT_NO_THROW(ferry::detail::validate(ok, "Mesh::modeled"));
  // The edges: 1 byte a second as the library reaches it, times of 2^53 ns.
  ferry::MeshSpec edge = ok;
  edge.link.bytes_per_second = 4;
  edge.link.efficiency = 0.5;
  edge.link.pair_rate_factor = 0.5;
  edge.link.hop_latency = edge.link.call_overhead = edge.link.step_overhead =
      ferry::detail::kLongestStep;
  EXPECT_NO_THROW(ferry::detail::validate(edge, "Mesh::modeled"));
  ok.shape = {1, 2, 4};
  ok.topology = {Topology::line, Topology::fully_connected, Topology::line};
  EXPECT_NO_THROW(ferry::detail::validate(ok, "Mesh::modeled"));
  ok.shape = {8};
  ok.topology = {Topology::ring};
  EXPECT_NO_THROW(ferry::detail::validate(ok, "Mesh::modeled"));
}

TEST(MeshSpec, PresetsAreValidAndCarryTheirFigures) {
  const ferry::DeviceSpec wh = ferry::specs::wormhole_b0();
  EXPECT_NO_THROW(ferry::detail::validate(wh));
  EXPECT_EQ(wh.compute_units, 64);
  EXPECT_DOUBLE_EQ(wh.unit_flops_per_second.bfloat16 * 64, 65.5e12);  // half an n300's 131 TFLOPS
  EXPECT_DOUBLE_EQ(wh.dram_bytes_per_second, 288e9);
  EXPECT_EQ(wh.l1_bytes, 96 * kMiB);
  EXPECT_DOUBLE_EQ(wh.d2d_bytes_per_second, 12.5e9);
  EXPECT_EQ(wh.policy, ferry::SchedulePolicy::fifo);  // tt-metal's command queue is in order

  const ferry::MeshSpec t3000 = ferry::specs::t3000();
  EXPECT_NO_THROW(ferry::detail::validate(t3000, "Mesh::modeled"));
  EXPECT_EQ(t3000.shape, (ferry::MeshShape{2, 4}));
  EXPECT_EQ(t3000.devices.size(), 8u);
  for (const ferry::DeviceSpec& d : t3000.devices) EXPECT_EQ(d.name, "wormhole_b0");
  EXPECT_EQ(t3000.topology, (std::vector<Topology>{Topology::line, Topology::line}));
  EXPECT_DOUBLE_EQ(t3000.link.bytes_per_second, 12.5e9);
  // calibrate()'s fit on wormhole_ccl.csv, no longer the report's 0.7 us ping read by hand
  // (test_collective_calibration checks the fit itself).
  EXPECT_EQ(t3000.link.hop_latency, nanoseconds(560));
  EXPECT_EQ(t3000.link.links_per_pair, 1);  // the other n300 link is the dispatcher's

  const ferry::MeshSpec galaxy = ferry::specs::galaxy();
  EXPECT_NO_THROW(ferry::detail::validate(galaxy, "Mesh::modeled"));
  EXPECT_EQ(galaxy.shape, (ferry::MeshShape{8, 4}));
  EXPECT_EQ(galaxy.devices.size(), 32u);
  EXPECT_EQ(galaxy.topology, (std::vector<Topology>{Topology::line, Topology::line}));
  EXPECT_EQ(galaxy.link.links_per_pair, 4);
  EXPECT_DOUBLE_EQ(galaxy.link.bytes_per_second, 12.5e9);

  const ferry::MeshSpec dgx = ferry::specs::dgx_h100();
  EXPECT_NO_THROW(ferry::detail::validate(dgx, "Mesh::modeled"));
  EXPECT_EQ(dgx.shape, (ferry::MeshShape{8}));
  EXPECT_EQ(dgx.topology, (std::vector<Topology>{Topology::fully_connected}));
  for (const ferry::DeviceSpec& d : dgx.devices) EXPECT_EQ(d.name, "h100_sxm");
  const double line_rate = dgx.link.bytes_per_second * static_cast<double>(dgx.link.links_per_pair);
  EXPECT_DOUBLE_EQ(line_rate, 450e9);
  EXPECT_NEAR(line_rate * dgx.link.efficiency, 370e9, 1e6);
  // So NCCL's figure comes back out: a large all-reduce's bus bandwidth, nccl-tests' way.
  const std::int64_t bytes = std::int64_t{1} << 30;
  const CollectivePlan plan = ferry::plan_all_reduce(Topology::fully_connected, 8, bytes, dgx.link);
  const double seconds = static_cast<double>(ferry::ideal_time(plan, dgx.link).count()) * 1e-9;
  const double busbw = static_cast<double>(bytes) / seconds * 2 * 7 / 8;
  EXPECT_NEAR(busbw / 370e9, 1.0, 0.01) << busbw;
}

// --- plans worked by hand --------------------------------------------------------------------

/// "0>1 c2" for each transfer of a step, in order.
std::string edges(const ferry::CollectiveStep& step) {
  std::string s;
  for (const Transfer& t : step.transfers) {
    if (!s.empty()) s += ", ";
    s += std::to_string(t.source) + ">" + std::to_string(t.target) + " c" + std::to_string(t.chunk);
  }
  return s;
}

TEST(CollectivePlan, RingAllGatherOfEight1MiBShards) {
  const CollectivePlan plan = ferry::plan_all_gather(Topology::ring, 8, 8 * kMiB, round_link());
  EXPECT_EQ(plan.algorithm, CollectiveAlgorithm::ring);
  EXPECT_EQ(plan.chunks, 8);
  ASSERT_EQ(plan.steps.size(), 7u);  // n-1
  for (const ferry::CollectiveStep& step : plan.steps) {
    ASSERT_EQ(step.transfers.size(), 16u);  // every member, one link each way
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> per_link;
    for (const Transfer& t : step.transfers) {
      EXPECT_EQ(t.bytes, kMiB / 2);  // half a shard each way
      EXPECT_EQ(t.hop, 1);
      EXPECT_FALSE(t.reduce);
      EXPECT_EQ(t.target, (t.source + (t.direction == LinkDirection::forward ? 1 : 7)) % 8);
      per_link[{t.source, t.target}] += t.bytes;
    }
    EXPECT_EQ(per_link.size(), 16u);  // each link direction carries one half, no more
  }
  // Member 3 sends its own shard first, then what its neighbours sent it.
  EXPECT_EQ(edges(plan.steps[0]).substr(0, 6), "0>1 c0");
  const auto sent_by = [&](std::size_t step, std::int64_t member, LinkDirection d) {
    for (const Transfer& t : plan.steps[step].transfers) {
      if (t.source == member && t.direction == d) return t;
    }
    return Transfer{};
  };
  EXPECT_EQ(sent_by(0, 3, LinkDirection::forward).chunk, 3);
  EXPECT_EQ(sent_by(0, 3, LinkDirection::forward).offset, 0);
  EXPECT_EQ(sent_by(0, 3, LinkDirection::backward).chunk, 3);
  EXPECT_EQ(sent_by(0, 3, LinkDirection::backward).offset, kMiB / 2);
  EXPECT_EQ(sent_by(1, 3, LinkDirection::forward).chunk, 2);
  EXPECT_EQ(sent_by(1, 3, LinkDirection::backward).chunk, 4);
  EXPECT_EQ(sent_by(6, 3, LinkDirection::forward).chunk, 5);  // the last: 3-7+1
  EXPECT_EQ(plan.link_bytes(), 8 * 7 * kMiB);
}

TEST(CollectivePlan, LineAllGatherSendsWholeShardsTowardTheEnds) {
  const CollectivePlan plan = ferry::plan_all_gather(Topology::line, 4, 4000, round_link());
  EXPECT_EQ(plan.algorithm, CollectiveAlgorithm::line);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(edges(plan.steps[0]), "0>1 c0, 1>2 c1, 2>3 c2, 3>2 c3, 2>1 c2, 1>0 c1");
  EXPECT_EQ(edges(plan.steps[1]), "1>2 c0, 2>3 c1, 2>1 c3, 1>0 c2");
  EXPECT_EQ(edges(plan.steps[2]), "2>3 c0, 1>0 c3");  // the ends idle on their outer side
  for (const auto& step : plan.steps) {
    for (const Transfer& t : step.transfers) EXPECT_EQ(t.bytes, 1000);
  }
  EXPECT_EQ(plan.link_bytes(), 12 * 1000);
}

TEST(CollectivePlan, ReduceScattersReduceAtEveryReceipt) {
  const CollectivePlan ring = ferry::plan_reduce_scatter(Topology::ring, 4, 4000, round_link());
  ASSERT_EQ(ring.steps.size(), 3u);
  EXPECT_EQ(edges(ring.steps[0]), "0>1 c3, 1>2 c0, 2>3 c1, 3>0 c2, 0>3 c1, 1>0 c2, 2>1 c3, 3>2 c0");
  EXPECT_EQ(edges(ring.steps[2]), "0>1 c1, 1>2 c2, 2>3 c3, 3>0 c0, 0>3 c3, 1>0 c0, 2>1 c1, 3>2 c2");
  for (const auto& step : ring.steps) {
    for (const Transfer& t : step.transfers) {
      EXPECT_TRUE(t.reduce);
      EXPECT_EQ(t.bytes, 500);
    }
  }
  const CollectivePlan line = ferry::plan_reduce_scatter(Topology::line, 4, 4000, round_link());
  ASSERT_EQ(line.steps.size(), 3u);
  EXPECT_EQ(edges(line.steps[0]), "0>1 c3, 3>2 c0");
  EXPECT_EQ(edges(line.steps[1]), "0>1 c2, 1>2 c3, 3>2 c1, 2>1 c0");
  EXPECT_EQ(edges(line.steps[2]), "0>1 c1, 1>2 c2, 2>3 c3, 3>2 c2, 2>1 c1, 1>0 c0");
  const CollectivePlan all = ferry::plan_all_reduce(Topology::ring, 8, 8 * kMiB, round_link());
  EXPECT_EQ(all.steps.size(), 14u);  // reduce-scatter, then all-gather
  EXPECT_TRUE(all.steps[6].transfers[0].reduce);
  EXPECT_FALSE(all.steps[7].transfers[0].reduce);
  EXPECT_EQ(all.link_bytes(), 2 * 7 * 8 * kMiB);
}

TEST(CollectivePlan, OneShotRelaysWholePiecesInOneStep) {
  const CollectivePlan plan = ferry::plan_all_gather(Topology::ring, 8, 8000, always_one_shot());
  EXPECT_EQ(plan.algorithm, CollectiveAlgorithm::one_shot);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].transfers.size(), 56u);
  EXPECT_EQ(plan.steps[0].hops(), 4);
  std::string from0;
  for (const Transfer& t : plan.steps[0].transfers) {
    if (t.origin == 0)
      from0 += std::to_string(t.source) + ">" + std::to_string(t.target) + "@" +
               std::to_string(t.hop) + " ";
  }
  EXPECT_EQ(from0, "0>1@1 1>2@2 2>3@3 3>4@4 0>7@1 7>6@2 6>5@3 ");  // half round each way
  std::int64_t on_0_to_1 = 0;
  for (const Transfer& t : plan.steps[0].transfers)
    on_0_to_1 += (t.source == 0 && t.target == 1) ? t.bytes : 0;
  EXPECT_EQ(on_0_to_1, 4 * 1000);  // the shards of 0, 7, 6 and 5

  const CollectivePlan all =
      ferry::plan_all_reduce(Topology::fully_connected, 4, 4000, always_one_shot());
  EXPECT_EQ(all.algorithm, CollectiveAlgorithm::one_shot);
  EXPECT_EQ(all.chunks, 1);
  ASSERT_EQ(all.steps.size(), 1u);
  EXPECT_EQ(all.steps[0].transfers.size(), 12u);
  for (const Transfer& t : all.steps[0].transfers) {
    EXPECT_EQ(t.bytes, 4000);
    EXPECT_TRUE(t.reduce);
    EXPECT_EQ(t.direction, LinkDirection::switched);
  }
  // Through a switch, the large all-reduce: every part to its member, then every result back.
  const CollectivePlan big =
      ferry::plan_all_reduce(Topology::fully_connected, 4, 4000, round_link());
  EXPECT_EQ(big.algorithm, CollectiveAlgorithm::direct);
  ASSERT_EQ(big.steps.size(), 2u);
  EXPECT_EQ(big.steps[0].transfers.size(), 12u);
  EXPECT_EQ(big.steps[0].transfers[0].bytes, 1000);
}

TEST(CollectivePlan, RoutedPiecesTakeTheShortestWay) {
  const CollectivePlan a2a = ferry::plan_all_to_all(Topology::ring, 4, 4000, round_link());
  EXPECT_EQ(a2a.algorithm, CollectiveAlgorithm::routed);
  ASSERT_EQ(a2a.steps.size(), 1u);
  std::string from0;
  for (const Transfer& t : a2a.steps[0].transfers) {
    if (t.origin != 0) continue;
    from0 += std::to_string(t.source) + ">" + std::to_string(t.target) + " c" +
             std::to_string(t.chunk) + " " + std::to_string(t.bytes) +
             (t.passes_through ? " through" : "") + "; ";
  }
  // To 2, as far one way as the other: half each way, passing through 1 and 3.
  EXPECT_EQ(
      from0,
      "0>1 c1 1000; 0>1 c2 500 through; 1>2 c2 500; 0>3 c2 500 through; 3>2 c2 500; 0>3 c3 1000; ");

  const CollectivePlan shift =
      ferry::plan_permute(Topology::ring, 4, 100, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, round_link());
  ASSERT_EQ(shift.steps.size(), 1u);
  EXPECT_EQ(edges(shift.steps[0]), "0>1 c0, 1>2 c0, 2>3 c0, 3>0 c0");
  for (const Transfer& t : shift.steps[0].transfers) EXPECT_EQ(t.direction, LinkDirection::forward);
  const CollectivePlan none = ferry::plan_permute(Topology::line, 4, 100, {{2, 2}}, round_link());
  EXPECT_EQ(none.algorithm, CollectiveAlgorithm::none);
  EXPECT_TRUE(none.steps.empty());

  const CollectivePlan bcast = ferry::plan_broadcast(Topology::ring, 8, 1000, 2, round_link());
  EXPECT_EQ(bcast.algorithm, CollectiveAlgorithm::ring);
  ASSERT_EQ(bcast.steps.size(), 1u);
  EXPECT_EQ(bcast.steps[0].transfers.size(), 14u);  // a half each way, all the way round
  EXPECT_EQ(bcast.steps[0].hops(), 7);
  EXPECT_EQ(bcast.link_bytes(), 7 * 1000);
  const CollectivePlan chain =
      ferry::plan_broadcast(Topology::fully_connected, 4, 1000, 1, round_link());
  EXPECT_EQ(chain.algorithm, CollectiveAlgorithm::pipeline);
  EXPECT_EQ(edges(chain.steps[0]), "1>2 c0, 2>3 c0, 3>0 c0");
}

// --- invariants of every plan ----------------------------------------------------------------

using Mask = std::uint64_t;  // which members' contributions a byte holds (tests use n <= 8)

/// What each member holds at each byte of the buffer, and what it did with the bytes it got.
struct Holdings {
  std::vector<std::vector<Mask>> data;
  std::vector<std::vector<int>> stored;
  std::vector<std::vector<int>> reduced;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::int64_t>
      kept;  // (target, origin, chunk)

  Holdings(std::int64_t n, std::int64_t bytes)
      : data(static_cast<std::size_t>(n), std::vector<Mask>(static_cast<std::size_t>(bytes))),
        stored(static_cast<std::size_t>(n), std::vector<int>(static_cast<std::size_t>(bytes))),
        reduced(static_cast<std::size_t>(n), std::vector<int>(static_cast<std::size_t>(bytes))) {}
};

std::int64_t distance(Topology topology, std::int64_t n, std::int64_t a, std::int64_t b) {
  if (topology == Topology::fully_connected) return 1;
  const std::int64_t d = a > b ? a - b : b - a;
  if (topology == Topology::line || n < 3) return d;
  return std::min(d, n - d);
}

/// Runs `plan` byte by byte: a hop-1 transfer sends what its source held when the step began,
/// a relay what its source got at the previous hop from the same origin; a reduction must
/// bring contributions its target lacks (so none is counted twice).
void run(const CollectivePlan& plan, Holdings& h, const std::string& what) {
  const std::int64_t n = plan.members;
  for (const ferry::CollectiveStep& step : plan.steps) {
    const std::vector<std::vector<Mask>> start = h.data;
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>,
             std::vector<Mask>>
        got;
    for (std::int64_t hop = 1; hop <= step.hops(); ++hop) {
      for (const Transfer& t : step.transfers) {
        if (t.hop != hop) continue;
        ASSERT_TRUE(t.source >= 0 && t.source < n && t.target >= 0 && t.target < n &&
                    t.source != t.target)
            << what;
        ASSERT_TRUE(t.chunk >= 0 && t.chunk < plan.chunks && t.offset >= 0 && t.bytes >= 0 &&
                    t.offset + t.bytes <= plan.chunk_bytes(t.chunk))
            << what;
        ASSERT_EQ(distance(plan.topology, n, t.source, t.target), 1) << what << ": not neighbours";
        if (t.direction != LinkDirection::switched) {
          const std::int64_t next = (t.source + 1) % n;
          EXPECT_EQ(t.direction == LinkDirection::forward, n > 2 && plan.topology == Topology::ring
                                                              ? t.target == next
                                                              : t.target > t.source)
              << what;
        }
        const auto begin = static_cast<std::size_t>(plan.chunk_offset(t.chunk) + t.offset);
        const auto count = static_cast<std::size_t>(t.bytes);
        std::vector<Mask> payload;
        if (hop == 1) {
          EXPECT_EQ(t.origin, t.source) << what;
          const auto& from = start[static_cast<std::size_t>(t.source)];
          payload.assign(from.begin() + static_cast<std::ptrdiff_t>(begin),
                         from.begin() + static_cast<std::ptrdiff_t>(begin + count));
        } else {
          const auto it = got.find({t.source, t.origin, t.chunk, t.offset, hop - 1});
          ASSERT_NE(it, got.end()) << what << ": a relay of what its source never got";
          payload = it->second;
        }
        got[{t.target, t.origin, t.chunk, t.offset, hop}] = payload;
        if (t.passes_through) continue;
        h.kept[{t.target, t.origin, t.chunk}] += t.bytes;
        const auto target = static_cast<std::size_t>(t.target);
        for (std::size_t b = 0; b < count; ++b) {
          Mask& mine = h.data[target][begin + b];
          if (t.reduce) {
            EXPECT_EQ(mine & payload[b], 0u) << what << ": a contribution reduced twice";
            mine |= payload[b];
            ++h.reduced[target][begin + b];
          } else {
            mine = payload[b];
            ++h.stored[target][begin + b];
          }
        }
      }
    }
  }
}

/// The steps each plan must have.
std::size_t expected_steps(Collective c, Topology topology, std::int64_t n, bool one_shot) {
  if (n == 1) return 0;
  const bool stepped = topology != Topology::fully_connected;
  switch (c) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return one_shot || !stepped ? 1 : static_cast<std::size_t>(n - 1);
    case Collective::all_reduce:
      return one_shot ? 1 : stepped ? static_cast<std::size_t>(2 * (n - 1)) : 2;
    default:
      return 1;
  }
}

TEST(CollectivePlan, EveryPlanMovesWhatItsCollectiveNeeds) {
  for (const Topology topology : {Topology::ring, Topology::line, Topology::fully_connected}) {
    for (const std::int64_t n : {1, 2, 4, 8}) {
      for (const bool one_shot : {false, true}) {
        const ferry::LinkSpec link = one_shot ? always_one_shot() : round_link();
        const std::int64_t bytes = 6 * n + 3;  // slices one byte apart, halves uneven
        const Mask all = (Mask{1} << n) - 1;
        const std::string where = std::string(ferry::name_of(topology)) +
                                  " n=" + std::to_string(n) + (one_shot ? " one-shot" : "");
        std::int64_t routed = 0;  // bytes over links if each slice j goes from every member to j
        {
          const CollectivePlan p = ferry::plan_all_gather(topology, n, bytes, link);
          const std::string what = "all_gather " + where;
          EXPECT_EQ(p.steps.size(), expected_steps(Collective::all_gather, topology, n, one_shot))
              << what;
          Holdings h(n, bytes);
          for (std::int64_t m = 0; m < n; ++m) {
            for (std::int64_t b = 0; b < p.chunk_bytes(m); ++b) {
              h.data[static_cast<std::size_t>(m)][static_cast<std::size_t>(p.chunk_offset(m) + b)] =
                  Mask{1} << m;
            }
          }
          run(p, h, what);
          for (std::int64_t m = 0; m < n; ++m) {
            for (std::int64_t c = 0; c < n; ++c) {
              for (std::int64_t b = p.chunk_offset(c); b < p.chunk_offset(c) + p.chunk_bytes(c);
                   ++b) {
                const auto mi = static_cast<std::size_t>(m);
                const auto bi = static_cast<std::size_t>(b);
                EXPECT_EQ(h.data[mi][bi], Mask{1} << c) << what;
                EXPECT_EQ(h.stored[mi][bi], c == m ? 0 : 1) << what << ": received once";
                EXPECT_EQ(h.reduced[mi][bi], 0) << what;
              }
            }
          }
          EXPECT_EQ(p.link_bytes(), (n - 1) * bytes) << what;
        }
        {
          const CollectivePlan p = ferry::plan_reduce_scatter(topology, n, bytes, link);
          const std::string what = "reduce_scatter " + where;
          EXPECT_EQ(p.steps.size(),
                    expected_steps(Collective::reduce_scatter, topology, n, one_shot))
              << what;
          Holdings h(n, bytes);
          for (std::int64_t m = 0; m < n; ++m) {
            std::fill(h.data[static_cast<std::size_t>(m)].begin(),
                      h.data[static_cast<std::size_t>(m)].end(), Mask{1} << m);
          }
          run(p, h, what);
          for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t b = p.chunk_offset(j); b < p.chunk_offset(j) + p.chunk_bytes(j);
                 ++b) {
              const auto bi = static_cast<std::size_t>(b);
              EXPECT_EQ(h.data[static_cast<std::size_t>(j)][bi], all) << what << ": member " << j;
              int reductions = 0;
              for (std::int64_t m = 0; m < n; ++m)
                reductions += h.reduced[static_cast<std::size_t>(m)][bi];
              EXPECT_EQ(reductions, n - 1) << what << ": each slice reduced n-1 times";
            }
            for (std::int64_t o = 0; o < n; ++o)
              routed += o == j ? 0 : distance(topology, n, o, j) * p.chunk_bytes(j);
          }
          const bool routes = one_shot && topology != Topology::fully_connected && n > 1;
          EXPECT_EQ(p.link_bytes(), routes ? routed : (n - 1) * bytes) << what;
        }
        {
          const CollectivePlan p = ferry::plan_all_reduce(topology, n, bytes, link);
          const std::string what = "all_reduce " + where;
          EXPECT_EQ(p.steps.size(), expected_steps(Collective::all_reduce, topology, n, one_shot))
              << what;
          Holdings h(n, bytes);
          for (std::int64_t m = 0; m < n; ++m) {
            std::fill(h.data[static_cast<std::size_t>(m)].begin(),
                      h.data[static_cast<std::size_t>(m)].end(), Mask{1} << m);
          }
          run(p, h, what);
          for (std::int64_t m = 0; m < n; ++m) {
            for (std::int64_t b = 0; b < bytes; ++b) {
              EXPECT_EQ(h.data[static_cast<std::size_t>(m)][static_cast<std::size_t>(b)], all)
                  << what;
            }
          }
          EXPECT_EQ(p.link_bytes(), one_shot ? n * (n - 1) * bytes : 2 * (n - 1) * bytes) << what;
        }
        {
          const CollectivePlan p = ferry::plan_all_to_all(topology, n, bytes, link);
          const std::string what = "all_to_all " + where;
          EXPECT_EQ(p.steps.size(), expected_steps(Collective::all_to_all, topology, n, one_shot))
              << what;
          Holdings h(n, bytes);
          run(p, h, what);
          std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::int64_t> want;
          for (std::int64_t o = 0; o < n; ++o) {
            for (std::int64_t j = 0; j < n; ++j) {
              if (j != o) want[{j, o, j}] = p.chunk_bytes(j);
            }
          }
          EXPECT_EQ(h.kept, want) << what << ": member j keeps slice j of every other member, once";
          EXPECT_EQ(p.link_bytes(), routed) << what;
        }
        for (const std::int64_t root : {std::int64_t{0}, n - 1}) {
          const CollectivePlan p = ferry::plan_broadcast(topology, n, bytes, root, link);
          const std::string what = "broadcast from " + std::to_string(root) + " " + where;
          EXPECT_EQ(p.steps.size(), expected_steps(Collective::broadcast, topology, n, one_shot))
              << what;
          Holdings h(n, bytes);
          std::fill(h.data[static_cast<std::size_t>(root)].begin(),
                    h.data[static_cast<std::size_t>(root)].end(), Mask{1} << root);
          run(p, h, what);
          for (std::int64_t m = 0; m < n; ++m) {
            for (std::int64_t b = 0; b < bytes; ++b) {
              const auto mi = static_cast<std::size_t>(m);
              const auto bi = static_cast<std::size_t>(b);
              EXPECT_EQ(h.data[mi][bi], Mask{1} << root) << what;
              EXPECT_EQ(h.stored[mi][bi], m == root ? 0 : 1) << what;
            }
          }
          EXPECT_EQ(p.link_bytes(), (n - 1) * bytes) << what;
        }
        for (const bool reverse : {false, true}) {
          std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
          for (std::int64_t p = 0; p < n; ++p)
            pairs.emplace_back(p, reverse ? n - 1 - p : (p + 1) % n);
          const CollectivePlan p = ferry::plan_permute(topology, n, bytes, pairs, link);
          const std::string what = std::string(reverse ? "reversal " : "shift ") + where;
          Holdings h(n, bytes);
          run(p, h, what);
          std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::int64_t> want;
          std::int64_t far = 0;
          for (const auto& [s, t] : pairs) {
            if (s == t) continue;
            want[{t, s, 0}] = bytes;
            far += distance(topology, n, s, t) * bytes;
          }
          EXPECT_EQ(h.kept, want) << what;
          EXPECT_EQ(p.link_bytes(), far) << what;
          EXPECT_EQ(p.steps.size(), want.empty() ? 0u : 1u) << what;
        }
      }
    }
  }
}

TEST(CollectivePlan, EmptyGroupsAndBuffersMoveNothing) {
  for (const CollectivePlan& p :
       {ferry::plan_all_gather(Topology::ring, 1, 100, round_link()),
        ferry::plan_all_reduce(Topology::line, 8, 0, round_link()),
        ferry::plan_broadcast(Topology::fully_connected, 4, 0, 3, round_link())}) {
    EXPECT_EQ(p.algorithm, CollectiveAlgorithm::none);
    EXPECT_TRUE(p.steps.empty());
    EXPECT_EQ(ferry::ideal_time(p, round_link()), nanoseconds(0));
  }
  // A ring of two is a line: one pair, one link each way.
  const CollectivePlan two = ferry::plan_all_gather(Topology::ring, 2, 2000, round_link());
  EXPECT_EQ(two.algorithm, CollectiveAlgorithm::line);
  ASSERT_EQ(two.steps.size(), 1u);
  EXPECT_EQ(edges(two.steps[0]), "0>1 c0, 1>0 c1");
  EXPECT_EQ(two.steps[0].transfers[0].bytes, 1000);
}

TEST(CollectivePlan, BadArgumentsAreRefusedAtTheCall) {
  const ferry::LinkSpec link = round_link();
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_all_gather(Topology::ring, 0, 10, link); },
      "[plan_all_gather] members must be positive, got 0");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_reduce_scatter(Topology::line, 4, -1, link); },
      "[plan_reduce_scatter] bytes must not be negative, got -1");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_all_reduce(static_cast<Topology>(9), 4, 10, link); },
      "[plan_all_reduce] topology is not a Topology (9)");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_broadcast(Topology::ring, 8, 10, 8, link); },
      "[plan_broadcast] root 8 is not a position of a group of 8");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_permute(Topology::ring, 4, 10, {{0, 1}, {2, 1}}, link); },
      "[plan_permute] pairs {0, 1} and {2, 1} share target 1");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_permute(Topology::ring, 4, 10, {{0, 1}, {0, 2}}, link); },
      "[plan_permute] pairs {0, 1} and {0, 2} share source 0");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::plan_permute(Topology::line, 4, 10, {{0, 9}}, link);
      },
      "[plan_permute] pair {0, 9} names a position outside a group of 4");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_collective(Collective::broadcast, Topology::ring, 4, 10, link); },
      "[plan_collective] broadcast needs its root: call plan_broadcast");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::plan_collective(Collective::permute, Topology::ring, 4, 10, link); },
      "[plan_collective] permute needs its pairs: call plan_permute");
  ferry::LinkSpec broken = link;
  broken.efficiency = 0;
  const CollectivePlan p = ferry::plan_all_gather(Topology::ring, 4, 10, link);
  expect_error<ferry::InvalidArgument>([&] { return ferry::ideal_time(p, broken); },
                                       "[ideal_time] link.efficiency must be in (0, 1], got 0");
}

/// Probed: at 1 byte a second, an all-gather of 2^62 bytes once took a negative time (llround
/// of a double past the int64 range). A plan longer than the model times one step is refused,
/// as the device model refuses such a step.
TEST(CollectivePlan, IdealTimePastWhatTheModelTimesIsRefused) {
  ferry::LinkSpec slow = round_link();
  slow.bytes_per_second = 1;
  slow.efficiency = 1;
  const CollectivePlan huge =
      ferry::plan_all_gather(Topology::line, 2, std::int64_t{1} << 62, slow);
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::ideal_time(huge, slow); },
      "[ideal_time] all_gather of 4611686018427387904 B over 2 devices (line) would take "
      "2.305843009213694e+27 ns, longer than the model times one step (2^53 ns, about 104 days)");
  // 8e6 s (8e15 ns), just under 2^53 ns: timed.
  const CollectivePlan long_one = ferry::plan_all_gather(Topology::line, 2, 16'000'000, slow);
  EXPECT_EQ(ferry::ideal_time(long_one, slow), nanoseconds(1150 + 8'000'000'000'000'000));
}

/// The largest plans the collective rows allow (256 devices, 2^53 bytes each) move more bytes
/// than an int64 holds: a one-shot all-reduce through a switch sends every buffer to every
/// other member, 256 x 255 x 2^53 bytes in all (a signed overflow: undefined; link_bytes once
/// wrapped). link_bytes, a statistic, is held at the largest int64. A plan built by hand that
/// puts 2^63 bytes on one link has no time the model can count: ideal_time refuses it, naming
/// the collective, where the link's load once wrapped to a small time.
TEST(CollectivePlan, SumsOfTheLargestPlansBytesAreHeldOrRefused) {
  const std::int64_t most = std::numeric_limits<std::int64_t>::max();
  ferry::LinkSpec link = always_one_shot();
  link.one_shot_bytes = std::int64_t{1} << 54;
  const std::int64_t bytes = std::int64_t{1} << 53;
  const CollectivePlan all = ferry::plan_all_reduce(Topology::fully_connected, 256, bytes, link);
  EXPECT_EQ(all.algorithm, CollectiveAlgorithm::one_shot);
  EXPECT_EQ(all.link_bytes(), most);
  EXPECT_EQ(ferry::plan_all_reduce(Topology::fully_connected, 256, 1 << 20, link).link_bytes(),
            std::int64_t{256} * 255 << 20);  // below the bound, exact
  CollectivePlan by_hand;
  by_hand.topology = Topology::line;
  by_hand.algorithm = CollectiveAlgorithm::line;
  by_hand.members = 2;
  by_hand.bytes = std::int64_t{1} << 62;
  Transfer half;
  half.target = 1;
  half.bytes = std::int64_t{1} << 62;
  by_hand.steps.push_back({{half, half}});
  EXPECT_EQ(by_hand.link_bytes(), most);
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::ideal_time(by_hand, link); },
      "[ideal_time] all_gather of 4611686018427387904 B over 2 devices (line) would carry 2^63 B "
      "or more over one link, longer than the model times one step (2^53 ns, about 104 days)");
}

/// The link model timed a message in double nanoseconds and cast them to int64 unchecked: 2^53
/// bytes at 1 byte a second is 9e24 ns (undefined; once a negative time). A message longer on
/// its link than the model times one step is refused before any of its collective is placed,
/// naming the collective, as a point-to-point copy names its op. Sums the links keep hold at
/// their bounds: the bytes a link carried at the largest int64, its clock at 2^62 ns (what
/// would arrive later, the devices refuse to receive).
TEST(CollectivePlan, TheLinksRefuseAMessageLongerThanTheModelTimes) {
  ferry::MeshSpec slow = small_mesh();
  slow.link.bytes_per_second = 1;
  slow.link.efficiency = 1;
  const std::int64_t bytes = std::int64_t{1} << 53;
  ferry::detail::LinkModel links(slow);
  const CollectivePlan plan = ferry::plan_all_gather(Topology::line, 2, bytes, slow.link);
  const std::vector<std::int64_t> members{0, 1};
  const std::vector<nanoseconds> ready{nanoseconds(0), nanoseconds(0)};
  expect_error<ferry::InvalidArgument>(
      [&] { return links.run(plan, members, ready); },
      "[all_gather] all_gather of 9007199254740992 B over 2 devices (line): a message of "
      "4503599627370496 B at 1 B/s would take 4.503599627370496e+24 ns on its link, longer than "
      "the model times one step (2^53 ns, about 104 days)");
  const std::vector<bool> switched{false};
  expect_error<ferry::InvalidArgument>(
      [&] { return links.carry(members, switched, bytes, nanoseconds(0), "to"); },
      "[to] a message of 9007199254740992 B at 1 B/s would take 9.007199254740992e+24 ns on its "
      "link, longer than the model times one step (2^53 ns, about 104 days)");
  EXPECT_TRUE(links.uses().empty());
  ferry::MeshSpec fast = small_mesh();
  fast.link.bytes_per_second = 1e18;
  fast.link.efficiency = 1;
  ferry::detail::LinkModel wide(fast);
  const std::int64_t quarter = std::int64_t{1} << 62;  // 4.6 s each
  wide.carry(members, switched, quarter, nanoseconds(0), "to");
  wide.carry(members, switched, quarter, nanoseconds(0), "to");
  ASSERT_EQ(wide.links().size(), 1u);
  EXPECT_EQ(wide.links()[0].bytes, std::numeric_limits<std::int64_t>::max());
  const nanoseconds end = ferry::detail::kHorizon;
  EXPECT_EQ(wide.carry(members, switched, 1000, end - nanoseconds(1), "to"), end);
}

// --- the closed form -------------------------------------------------------------------------

TEST(CollectivePlan, IdealTimeByHand) {
  const ferry::LinkSpec link = round_link();  // 1 GB/s at half efficiency: 2 ns a byte
  // Ring all-gather of 8 x 1 MiB: 7 steps, each 512 KiB on every link direction:
  // 50 + 100 + 524288 * 2 = 1048726 ns a step; plus the 1000 ns call.
  const CollectivePlan ring = ferry::plan_all_gather(Topology::ring, 8, 8 * kMiB, link);
  EXPECT_EQ(ferry::ideal_time(ring, link), nanoseconds(1000 + 7 * (50 + 100 + 1048576)));
  // Line all-gather of 4 x 1000 B: 3 steps of one whole shard a link: 3 * (50 + 100 + 2000).
  const CollectivePlan line = ferry::plan_all_gather(Topology::line, 4, 4000, link);
  EXPECT_EQ(ferry::ideal_time(line, link), nanoseconds(1000 + 3 * 2150));
  // One-shot ring all-gather of 8 x 1000 B: one step whose busiest links carry 4 shards, and a
  // chain of 4 hops: 50 + 4 * 100 + 4000 * 2.
  const CollectivePlan shot = ferry::plan_all_gather(Topology::ring, 8, 8000, always_one_shot());
  EXPECT_EQ(ferry::ideal_time(shot, link), nanoseconds(1000 + 50 + 400 + 8000));
  // One-shot all-reduce of 4000 B on a switch of two links a port at full efficiency: each port
  // sends (and receives) 3 x 4000 B at 2 GB/s in one hop: 50 + 100 + 6000.
  ferry::LinkSpec wide = always_one_shot();
  wide.links_per_pair = 2;
  wide.efficiency = 1;
  const CollectivePlan all = ferry::plan_all_reduce(Topology::fully_connected, 4, 4000, wide);
  EXPECT_EQ(ferry::ideal_time(all, wide), nanoseconds(1000 + 50 + 100 + 6000));
}

}  // namespace

}  // namespace test_mesh_spec
