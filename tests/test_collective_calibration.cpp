// The model of a collective against measured collectives: the table's reader (good rows, and
// each bad one refused by type and message naming file, line and field), calibrate recovering
// known link figures from rows the model itself generated, the fit on tt-metal's measured
// Wormhole collectives, and the shipped t3000() preset's figures and fit.
//
// The measured table is read from FERRY_CCL_CSV, or from shared/data/devices/wormhole_ccl.csv
// beside this checkout; the tests that need it are skipped, saying so, where it is absent.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"

namespace test_collective_calibration {

namespace {

using ferry::Collective;
using ferry::CollectiveMeasurement;
using ferry::CollectiveMeasurements;
using ferry::Topology;
using ferry_test::expect_error;
using std::chrono::nanoseconds;

std::string ccl_csv() {
  if (const char* env = std::getenv("FERRY_CCL_CSV")) return env;
  const std::filesystem::path here = std::filesystem::path(__FILE__).parent_path();
  return (here / ".." / ".." / "shared" / "data" / "devices" / "wormhole_ccl.csv")
      .lexically_normal()
      .string();
}

#define FERRY_NEED_CCL_CSV(path)                                                                   \
  if (!std::filesystem::exists(path)) {                                                            \
    GTEST_SKIP() << "no measured collectives at " << (path) << " (set FERRY_CCL_CSV to the path " \
                 << "of shared/data/devices/wormhole_ccl.csv)";                                    \
  }

constexpr const char* kHeader = "topology,devices,op,bytes,device_us\n";

TEST(CollectiveMeasurements, ReadsRowsCommentsAndCarriageReturns) {
  const CollectiveMeasurements m = CollectiveMeasurements::parse_csv(
      std::string("# a comment\n\n") + kHeader +
      "ring,8,all_gather,16384,17.61\r\nline,2,all_reduce,4096,12.82\n" +
      "fully_connected,4,all_to_all,1024,3\nline,4,reduce_scatter,65536,1e2\n");
  ASSERT_EQ(m.size(), 4u);
  const CollectiveMeasurement& r = m.rows()[0];
  EXPECT_EQ(r.topology, Topology::ring);
  EXPECT_EQ(r.devices, 8);
  EXPECT_EQ(r.op, Collective::all_gather);
  EXPECT_EQ(r.bytes, 16384);
  EXPECT_DOUBLE_EQ(r.device_us, 17.61);
  EXPECT_EQ(r.line, 4u);
  EXPECT_EQ(r.label(), "ring 8 all_gather 16384 B");
  EXPECT_EQ(m.rows()[1].op, Collective::all_reduce);
  EXPECT_EQ(m.rows()[2].topology, Topology::fully_connected);
  EXPECT_EQ(m.rows()[3].op, Collective::reduce_scatter);
  EXPECT_DOUBLE_EQ(m.rows()[3].device_us, 100);
}

TEST(CollectiveMeasurements, BadRowsAreRefusedNamingFileLineAndField) {
  const std::string at = "[CollectiveMeasurements::parse_csv] table.csv line 2: ";
  const auto refused = [&](const std::string& row, const std::string& why) {
    expect_error<ferry::InvalidArgument>(
        [&] { return CollectiveMeasurements::parse_csv(kHeader + row + "\n", "table.csv"); },
        at + why + " in '" + row + "'");
  };
  refused("ring,8,all_gather,16384", "expected 5 fields, got 4");
  refused("ring,8,all_gather,16384,1,2", "expected 5 fields, got 6");
  refused("torus,8,all_gather,16384,1", "topology is not ring, line or fully_connected: 'torus'");
  refused("ring,eight,all_gather,16384,1", "devices is not a positive integer: 'eight'");
  refused("ring,2,all_gather,16384,1", "devices must be at least 3 for a ring, got 2");
  refused("line,1,all_gather,16384,1", "devices must be at least 2 for a line, got 1");
  refused("ring,8,broadcast,16384,1",
          "op is not all_gather, reduce_scatter, all_reduce or all_to_all: 'broadcast'");
  refused("ring,8,all_gather,-4,1", "bytes is not a positive integer: '-4'");
  refused("ring,8,all_gather,16.5,1", "bytes is not a positive integer: '16.5'");
  // Sizes bounded as Measurements' are (2^53): probed, a row of INT64_MAX bytes overflowed
  // calibrate's thresholds. Groups bounded at 256 devices: probed, a ring of 2^40 parsed and
  // its plan grew without bound, and a ring all-to-all of 1200 took minutes.
  refused("ring,8,all_gather,9007199254740993,1",
          "bytes must be at most 2^53, got 9007199254740993");
  refused("ring,8,all_gather,9223372036854775807,1",
          "bytes must be at most 2^53, got 9223372036854775807");
  refused("ring,1099511627776,all_gather,1000000,5",
          "devices must be at most 256 (a plan grows with the cube of its group), got "
          "1099511627776");
  refused("line,257,all_to_all,1000000,5",
          "devices must be at most 256 (a plan grows with the cube of its group), got 257");
  EXPECT_EQ(CollectiveMeasurements::parse_csv(std::string(kHeader) +
                                              "fully_connected,256,all_gather,9007199254740992,1\n")
                .size(),
            1u);
  refused("ring,8,all_gather,16384,0", "device_us is not a positive number: '0'");
  refused("ring,8,all_gather,16384,", "device_us is not a positive number: ''");
  refused("ring,8,all_gather,16384,fast", "device_us is not a positive number: 'fast'");
  expect_error<ferry::InvalidArgument>(
      [] { return CollectiveMeasurements::parse_csv("op,bytes\nring,8\n", "table.csv"); },
      "[CollectiveMeasurements::parse_csv] table.csv line 1: expected the header "
      "'topology,devices,op,bytes,device_us', got 'op,bytes'");
  expect_error<ferry::InvalidArgument>(
      [] { return CollectiveMeasurements::parse_csv("# only\n", "table.csv"); },
      "[CollectiveMeasurements::parse_csv] table.csv: no header line");
  expect_error<ferry::InvalidArgument>(
      [] { return CollectiveMeasurements::read_csv("/nonexistent/ccl.csv"); },
      "[CollectiveMeasurements::read_csv] cannot read '/nonexistent/ccl.csv'");
  const std::string dir = std::filesystem::temp_directory_path().string();
  expect_error<ferry::InvalidArgument>([&] { return CollectiveMeasurements::read_csv(dir); },
                                       "[CollectiveMeasurements::read_csv] cannot read '" + dir +
                                           "'");
  // A file names its path and line.
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "ferry_ccl_bad.csv";
  std::ofstream(path) << "# c\n" << kHeader << "ring,8,all_gather,16384,1\nline,2,all_gather,x,1\n";
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements::read_csv(path.string()); },
      "[CollectiveMeasurements::read_csv] " + path.string() +
          " line 4: bytes is not a positive integer: 'x' in 'line,2,all_gather,x,1'");
  std::filesystem::remove(path);
}

TEST(CollectiveMeasurements, RowsBuiltInCodeAreRefusedAsAFilesRowsAre) {
  // Before, a table built in code took any row: one time of 0 made every error term infinite,
  // and calibrate handed back the spec it started from as a fit.
  CollectiveMeasurement ok;
  ok.topology = Topology::ring;
  ok.devices = 8;
  ok.op = Collective::all_gather;
  ok.bytes = 16384;
  ok.device_us = 10;
  const auto with = [&](const auto& change) {
    CollectiveMeasurement r = ok;
    change(r);
    return std::vector<CollectiveMeasurement>{ok, r};
  };
  EXPECT_EQ(CollectiveMeasurements(with([](auto&) {})).size(), 2u);
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements(with([](auto& r) { r.device_us = -1; })); },
      "[CollectiveMeasurements] row 1 (ring 8 all_gather 16384 B): device_us must be a positive "
      "number, got -1");
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements(with([](auto& r) { r.devices = 2; })); },
      "[CollectiveMeasurements] row 1 (ring 2 all_gather 16384 B): devices must be at least 3 "
      "for a ring, got 2");
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements(with([](auto& r) { r.bytes = -5; })); },
      "[CollectiveMeasurements] row 1 (ring 8 all_gather -5 B): bytes must be positive, got -5");
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements(with([](auto& r) { r.op = Collective::permute; })); },
      "[CollectiveMeasurements] row 1 (ring 8 permute 16384 B): op must be all_gather, "
      "reduce_scatter, all_reduce or all_to_all");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return CollectiveMeasurements(with([](auto& r) { r.bytes = (std::int64_t{1} << 53) + 1; }));
      },
      "[CollectiveMeasurements] row 1 (ring 8 all_gather 9007199254740993 B): bytes must be at "
      "most 2^53, got 9007199254740993");
  expect_error<ferry::InvalidArgument>(
      [&] { return CollectiveMeasurements(with([](auto& r) { r.devices = 1200; })); },
      "[CollectiveMeasurements] row 1 (ring 1200 all_gather 16384 B): devices must be at most 256 "
      "(a plan grows with the cube of its group), got 1200");
  // predict of one row needs no time, but a plan that can serve it.
  CollectiveMeasurement pair = ok;
  pair.devices = 2;
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::predict(ferry::specs::t3000(), pair); },
      "[predict] row (ring 2 all_gather 16384 B): devices must be at least 3 for a ring, got 2");
  CollectiveMeasurement wide = ok;
  wide.devices = 4096;
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::predict(ferry::specs::t3000(), wide); },
      "[predict] row (ring 4096 all_gather 16384 B): devices must be at most 256 (a plan grows "
      "with the cube of its group), got 4096");
}

/// Probed: at 1 byte a second, a row of 2^62 bytes once predicted a negative time (llround
/// past the int64 range), and a measured time near 1e300 us became a negative duration.
TEST(CollectiveCalibration, TimesPastWhatTheModelCountsAreRefusedOrSaturated) {
  ferry::MeshSpec slow = ferry::specs::t3000();
  slow.link.bytes_per_second = 1;
  slow.link.efficiency = 1;
  slow.link.pair_rate_factor = 1;
  const CollectiveMeasurements rows = CollectiveMeasurements::parse_csv(
      std::string(kHeader) + "line,2,all_gather,9007199254740992,5\n");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::predict(slow, rows); },
      "[predict] all_gather of 9007199254740992 B over 2 devices (line) would take "
      "4.503599627370496e+24 ns, longer than the model times one step (2^53 ns, about 104 days)");
  const CollectiveMeasurements late = CollectiveMeasurements::parse_csv(
      std::string(kHeader) + "line,2,all_gather,16384,1e299\n");
  const std::vector<ferry::CollectivePrediction> p = ferry::predict(ferry::specs::t3000(), late);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].measured, nanoseconds(std::int64_t{1} << 62));
  EXPECT_GT(p[0].predicted, nanoseconds(0));
}

/// On a link of 50 bytes a second, rows measured far slower than the line rate pulled
/// efficiency and pair_rate_factor to their floor of 0.01 each: a rate of 0.005 bytes a second,
/// which Mesh::modeled refuses (at least 1 byte a second). The fit keeps to what validation
/// accepts, and the spec it returns opens a mesh.
TEST(CollectiveCalibration, ASlowLinksFitKeepsARateTheMeshAccepts) {
  ferry::MeshSpec slow = ferry::specs::t3000();
  slow.link.bytes_per_second = 50;
  slow.link.efficiency = 1;
  slow.link.pair_rate_factor = 1;
  slow.link.links_per_pair = 1;
  std::vector<CollectiveMeasurement> rows;
  for (const auto& [n, op] : {std::pair{2, Collective::all_gather},
                              std::pair{2, Collective::all_reduce},
                              std::pair{4, Collective::all_gather}}) {
    for (std::int64_t bytes = 4096; bytes <= 65536; bytes *= 4) {
      CollectiveMeasurement r;
      r.topology = Topology::line;
      r.devices = n;
      r.op = op;
      r.bytes = bytes;
      r.device_us = 1e12 * static_cast<double>(bytes);  // 1e-6 bytes a second
      rows.push_back(r);
    }
  }
  const ferry::MeshSpec fitted = ferry::calibrate(slow, CollectiveMeasurements(rows));
  const ferry::LinkSpec& f = fitted.link;
  EXPECT_GE(f.bytes_per_second * f.efficiency, 1);
  EXPECT_GE(f.bytes_per_second * f.efficiency * f.pair_rate_factor, 1);
  EXPECT_LE(f.bytes_per_second * f.efficiency * f.pair_rate_factor, 1.01);  // as slow as allowed
  EXPECT_NO_THROW(ferry::detail::validate(fitted, "Mesh::modeled"));
  EXPECT_NO_THROW((void)ferry::Mesh::modeled(fitted, ferry::model_only));
}

TEST(CollectiveCalibration, PredictIsTheIdealTimeOfTheRowsPlan) {
  const ferry::MeshSpec t3000 = ferry::specs::t3000();
  CollectiveMeasurement row;
  row.topology = Topology::ring;
  row.devices = 8;
  row.op = Collective::all_reduce;
  row.bytes = 1 << 24;
  row.device_us = 1;
  EXPECT_EQ(ferry::predict(t3000, row),
            ferry::ideal_time(ferry::plan_all_reduce(Topology::ring, 8, 1 << 24, t3000.link),
                              t3000.link));
  ferry::MeshSpec broken = t3000;
  broken.link.pair_rate_factor = 0;
  expect_error<ferry::InvalidArgument>([&] { return ferry::predict(broken, row); },
                                       "[predict] link.pair_rate_factor must be in (0, 1], got 0");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::calibrate(t3000, CollectiveMeasurements{}); },
      "[calibrate] the table has no rows");
}

TEST(CollectiveCalibration, TheNewTermsCostWhatTheyDocument) {
  // Between two chips the busiest link's bytes take 1 / pair_rate_factor as long (a line or
  // a ring of two); a longer line runs at the ring's rate; a composite stepped all-reduce pays
  // its call twice; a one-shot one, once.
  ferry::LinkSpec l;
  l.bytes_per_second = 1e9;
  l.efficiency = 1;
  l.call_overhead = nanoseconds(1000);
  l.pair_rate_factor = 0.5;
  const auto line_ag = ferry::plan_all_gather(Topology::line, 2, 2000, l);  // 1000 B each way
  EXPECT_EQ(ferry::ideal_time(line_ag, l), nanoseconds(1000 + 2000));
  const auto pair_ag = ferry::plan_all_gather(Topology::ring, 2, 2000, l);
  EXPECT_EQ(ferry::ideal_time(pair_ag, l), nanoseconds(1000 + 2000));
  const auto ring_ag = ferry::plan_all_gather(Topology::ring, 4, 8000, l);  // 3 steps of 1000 B
  EXPECT_EQ(ferry::ideal_time(ring_ag, l), nanoseconds(1000 + 3000));
  // A line of 4 sends each 1000 B shard both ways, a link a step: the end links carry 3 of
  // them one way, in 3 steps, at the full rate.
  const auto line4_ag = ferry::plan_all_gather(Topology::line, 4, 4000, l);
  EXPECT_EQ(ferry::ideal_time(line4_ag, l), nanoseconds(1000 + 3000));
  l.pair_rate_factor = 1;
  l.composite_all_reduce = true;
  const auto ar = ferry::plan_all_reduce(Topology::ring, 4, 8000, l);  // 6 steps of 1000 B
  EXPECT_EQ(ferry::ideal_time(ar, l), nanoseconds(2 * 1000 + 6000));
  l.one_shot_bytes = 1 << 20;
  const auto shot = ferry::plan_all_reduce(Topology::ring, 4, 8000, l);  // 2 x 8000 B a link
  EXPECT_EQ(ferry::ideal_time(shot, l), nanoseconds(1000 + 16000));
}

TEST(CollectiveCalibration, RecoversKnownFiguresFromRowsTheModelGenerated) {
  ferry::MeshSpec truth = ferry::specs::t3000();
  truth.link.efficiency = 0.7;
  truth.link.pair_rate_factor = 0.6;
  truth.link.hop_latency = nanoseconds(900);
  truth.link.step_overhead = nanoseconds(1500);
  truth.link.call_overhead = nanoseconds(4000);
  truth.link.one_shot_bytes = 65536;
  truth.link.composite_all_reduce = true;
  std::vector<CollectiveMeasurement> rows;
  for (const auto& [topology, n, op] : {std::tuple{Topology::ring, 8, Collective::all_gather},
                                        std::tuple{Topology::ring, 8, Collective::reduce_scatter},
                                        std::tuple{Topology::line, 2, Collective::all_reduce},
                                        std::tuple{Topology::line, 4, Collective::all_gather}}) {
    for (std::int64_t bytes = 4096; bytes <= (std::int64_t{1} << 28); bytes *= 4) {
      CollectiveMeasurement r;
      r.topology = topology;
      r.devices = n;
      r.op = op;
      r.bytes = bytes;
      r.device_us = static_cast<double>(ferry::predict(truth, r).count()) / 1e3;
      rows.push_back(r);
    }
  }
  const CollectiveMeasurements table(rows);
  ferry::MeshSpec start = ferry::specs::t3000();
  start.link.composite_all_reduce = false;
  const ferry::MeshSpec fitted = ferry::calibrate(start, table);
  const ferry::LinkSpec& f = fitted.link;
  EXPECT_NEAR(f.efficiency, 0.7, 0.7 * 0.01);
  EXPECT_NEAR(f.pair_rate_factor, 0.6, 0.6 * 0.01);
  EXPECT_NEAR(static_cast<double>(f.hop_latency.count()), 900, 900 * 0.05);
  EXPECT_NEAR(static_cast<double>(f.step_overhead.count()), 1500, 1500 * 0.05);
  EXPECT_NEAR(static_cast<double>(f.call_overhead.count()), 4000, 4000 * 0.05);
  EXPECT_EQ(f.one_shot_bytes, 65536);
  EXPECT_TRUE(f.composite_all_reduce);
  EXPECT_DOUBLE_EQ(f.bytes_per_second, truth.link.bytes_per_second);
  EXPECT_EQ(f.links_per_pair, 1);
  const ferry::CollectiveFit fit = ferry::fit_of(ferry::predict(fitted, table));
  EXPECT_LT(fit.median, 0.005);
  EXPECT_LT(fit.worst, 1.01);
  // Deterministic: the same table, the same spec.
  const ferry::MeshSpec again = ferry::calibrate(start, table);
  EXPECT_EQ(again.link.efficiency, f.efficiency);
  EXPECT_EQ(again.link.call_overhead, f.call_overhead);
}

TEST(CollectiveCalibration, FitsTheMeasuredWormholeTable) {
  const std::string path = ccl_csv();
  FERRY_NEED_CCL_CSV(path);
  const CollectiveMeasurements table = CollectiveMeasurements::read_csv(path);
  ASSERT_GE(table.size(), 30u);
  const ferry::MeshSpec fitted = ferry::calibrate(ferry::specs::t3000(), table);
  const ferry::CollectiveFit fit = ferry::fit_of(ferry::predict(fitted, table));
  EXPECT_LE(fit.median, 0.15);
  EXPECT_LE(fit.worst, 2.0);
  // Two chips reach less of the line rate than the ring, and the all-reduce composes.
  EXPECT_LT(fitted.link.pair_rate_factor, 0.9);
  EXPECT_TRUE(fitted.link.composite_all_reduce);
}

TEST(CollectiveCalibration, TheShippedT3000IsCalibratedOnTheTable) {
  // The figures wormhole_ethernet() ships, as calibrate() fitted them on wormhole_ccl.csv.
  const ferry::LinkSpec l = ferry::specs::t3000().link;
  EXPECT_DOUBLE_EQ(l.bytes_per_second, 12.5e9);
  EXPECT_EQ(l.links_per_pair, 1);
  EXPECT_TRUE(l.composite_all_reduce);
  EXPECT_EQ(l.one_shot_bytes, 0);
  EXPECT_EQ(ferry::specs::galaxy().link.pair_rate_factor, l.pair_rate_factor);
  const std::string path = ccl_csv();
  FERRY_NEED_CCL_CSV(path);
  const CollectiveMeasurements table = CollectiveMeasurements::read_csv(path);
  const ferry::CollectiveFit fit = ferry::fit_of(ferry::predict(ferry::specs::t3000(), table));
  EXPECT_LE(fit.median, 0.15);
  EXPECT_LE(fit.worst, 2.0);
  // And calibrating the shipped preset again moves none of its figures by more than 2%.
  const ferry::LinkSpec again = ferry::calibrate(ferry::specs::t3000(), table).link;
  EXPECT_NEAR(again.efficiency, l.efficiency, 0.02 * l.efficiency);
  EXPECT_NEAR(again.pair_rate_factor, l.pair_rate_factor, 0.02 * l.pair_rate_factor);
  EXPECT_EQ(again.one_shot_bytes, l.one_shot_bytes);
}

}  // namespace

}  // namespace test_collective_calibration
