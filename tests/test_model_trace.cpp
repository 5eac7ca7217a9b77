// What the user sees of the model: the Chrome trace, the text Gantt chart, and determinism:
// the same program on the same spec gives the same stats and the same trace bytes whatever the
// executor, thread count or run.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include <ferry/model/device_model.hpp>  // not in ferry.hpp's parse in the separate mode

#include "support/devices.hpp"
#include "support/files.hpp"

namespace test_model_trace {

namespace {

using ferry::Shape;
using std::chrono::nanoseconds;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// A small program with imports, kernels of several kinds, views, handles dropped mid-way, a
/// mid-way export and a batched one.
void program(const ferry::Device& dev) {
  std::vector<float> v(64);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 8;
  auto x = ferry::to_device(dev, std::span<const float>(v), Shape{8, 8});
  auto w = ferry::ones<float>(dev, Shape{8, 8});
  auto h = ferry::relu(ferry::matmul(x, w) - 10.0f);
  (void)h.to_host();
  for (int i = 0; i < 5; ++i) h = ferry::tanh(ferry::matmul(h, w) * 0.01f);
  auto flat = ferry::reshape(h, Shape{64});
  auto [a, b] = ferry::to_host(ferry::sum(flat), ferry::softmax(h, -1));
  (void)a;
  (void)b;
}

std::string trace_of(const ferry::Device& dev, const std::string& tag) {
  const auto path = std::filesystem::temp_directory_path() / ("ferry_trace_" + tag + ".json");
  dev.write_trace(path);
  std::string text = ferry_test::read_text(path.string());
  std::filesystem::remove(path);
  return text;
}

TEST(ModelTrace, TheTraceHasTracksSlicesArrowsAndMemory) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  program(dev);
  const std::string json = trace_of(dev, "format");
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"spec\":\"tiny\"", 0), 0u);
  for (const char* track : {"\"host\"", "\"h2d\"", "\"d2h\"", "\"compute 0\"", "\"compute 1\""}) {
    EXPECT_NE(json.find(std::string("\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":")),
              std::string::npos);
    EXPECT_NE(json.find(track), std::string::npos) << track;
  }
  // Only the tracks something ran on are named: a device of 132 units shows the lanes used.
  EXPECT_EQ(json.find("\"d2d\""), std::string::npos);
  EXPECT_EQ(json.find("\"compute 2\""), std::string::npos);
  // The counters: units in use and DRAM bandwidth in use.
  EXPECT_NE(json.find("{\"name\":\"compute units in use\",\"ph\":\"C\""), std::string::npos);
  EXPECT_NE(json.find("{\"name\":\"DRAM bandwidth in use\",\"ph\":\"C\""), std::string::npos);
  // One slice per engine command: 1 import, 1 fill, 2 + 5 x 3 kernels... counted by name.
  EXPECT_EQ(count(json, "\"name\":\"matmul\""), 6u);
  EXPECT_EQ(count(json, "\"name\":\"to_device\""), 1u);
  EXPECT_EQ(count(json, "\"name\":\"reshape\""), 0u);  // views take no engine time
  // The first matmul: 8x8x8, 2 x 512 flops, reading two 256-byte arrays, writing one.
  EXPECT_NE(json.find("\"name\":\"matmul\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":1,\"tid\":4,"),
            std::string::npos);
  EXPECT_NE(json.find("\"shape\":\"(8, 8)\",\"dtype\":\"float32\",\"bytes\":768,\"flops\":1024"),
            std::string::npos);
  // Arrows: a start and a finish for each dependency between recorded slices.
  EXPECT_GT(count(json, "\"ph\":\"s\""), 10u);
  EXPECT_EQ(count(json, "\"ph\":\"s\""), count(json, "\"ph\":\"f\""));
  EXPECT_GT(count(json, "\"name\":\"device memory\",\"ph\":\"C\""), 5u);
  // The host's waits, on track 0.
  EXPECT_EQ(count(json, "\"cat\":\"host\""), 2u);
  EXPECT_EQ(json.substr(json.size() - 4), "\n]}\n");
}

TEST(ModelTrace, TheSameProgramGivesTheSameStatsAndTraceWhateverTheExecutor) {
  std::vector<std::string> traces;
  std::vector<ferry::DeviceStats> stats;
  for (int threads : {0, 1, 2, 8}) {
    ferry::Device dev =
        ferry::Device::modeled(ferry::specs::pcie_accelerator(),
                               threads == 0 ? ferry::Executor(ferry::ManualExecutor())
                                            : ferry::Executor(static_cast<std::size_t>(threads)));
    program(dev);
    stats.push_back(dev.stats());
    traces.push_back(trace_of(dev, std::to_string(threads)));
  }
  for (std::size_t i = 1; i < traces.size(); ++i) {
    EXPECT_EQ(traces[i], traces[0]) << "trace " << i << " differs";
    EXPECT_EQ(stats[i].makespan, stats[0].makespan);
    EXPECT_EQ(stats[i].lower_bound, stats[0].lower_bound);
    EXPECT_EQ(stats[i].overlap, stats[0].overlap);
    EXPECT_EQ(stats[i].host_stall, stats[0].host_stall);
    EXPECT_EQ(stats[i].peak_dram_bytes, stats[0].peak_dram_bytes);
    EXPECT_EQ(stats[i].steps, stats[0].steps);
  }
  EXPECT_GT(stats[0].makespan, nanoseconds(0));
  // No wall time, address or process-specific name: a device made later writes the same.
  ferry::Device later = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  program(later);
  EXPECT_EQ(trace_of(later, "later"), traces[0]);
}

TEST(ModelTrace, TheTextChartShowsBusyEnginesOverTheWindow) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  auto y = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4}) + 1.0f;
  (void)y.to_host();
  const std::string text = dev.timeline_text();
  EXPECT_EQ(
      text.rfind(
          "tiny: makespan 274 ns, lower bound 274 ns, efficiency 1.00, 3 steps, 1 host syncs\n", 0),
      0u)
      << text;
  // 64 columns of 274/64 ns: h2d is busy for the first 116 ns, 27.09 columns: 27 full ones
  // and a 28th busy for less than half of it.
  EXPECT_NE(
      text.find("h2d       |###########################+....................................|"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("compute 0 |"), std::string::npos);
  EXPECT_EQ(text.find("compute 1 |"), std::string::npos);  // idle tracks are left out
  EXPECT_NE(text.find("(2 tracks idle, not shown)"), std::string::npos);
}

TEST(ModelTrace, OnlyTheMostRecentStepsAreKept) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.trace_steps = 3;
  ferry::Device dev = ferry::Device::modeled(spec);
  auto x = ferry::zeros<float>(dev, Shape{4});
  for (int i = 0; i < 10; ++i) x = x + 1.0f;
  ferry::wait(x);
  const std::string json = trace_of(dev, "bounded");
  EXPECT_NE(json.find("\"dropped_slices\":9"), std::string::npos);  // 11 kernels + 1 wait, 3 kept
  EXPECT_EQ(count(json, "\"ph\":\"X\""), 3u);
  // The three kept are the last three, oldest first: the adds of steps 9 and 10, then the
  // host's wait (its own "step":10}), after the ring has gone round its three slots.
  const std::size_t add9 = json.find("\"step\":9,");
  const std::size_t add10 = json.find("\"step\":10,");
  EXPECT_NE(add9, std::string::npos);
  EXPECT_LT(add9, add10);
  EXPECT_LT(add10, json.find("\"step\":10}"));
  EXPECT_EQ(json.find("\"step\":8,"), std::string::npos);
  spec.trace_steps = 0;
  ferry::Device silent = ferry::Device::modeled(spec);
  ferry::wait(ferry::zeros<float>(silent, Shape{4}) + 1.0f);
  EXPECT_EQ(count(trace_of(silent, "silent"), "\"ph\":\"X\""), 0u);
  EXPECT_EQ(silent.stats().steps, 2u);  // stats do not depend on the trace
}

// An arrow goes from an input's slice only: when that slice has been dropped, the host's wait
// for the same step (which names it, and made nothing) does not stand in for it.
TEST(ModelTrace, AnInputWhoseSliceWasDroppedGetsNoArrow) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.trace_steps = 3;
  ferry::Device dev = ferry::Device::modeled(spec);
  auto a = ferry::to_device(dev, std::vector<float>{1, 2, 3, 4}, Shape{4});
  auto b = a + 1.0f;
  ferry::wait(b);
  auto c = b * 2.0f;  // reads b, whose slice the ring drops; the host's wait for b is kept
  ferry::wait(c);
  const std::string json = trace_of(dev, "dropped_input");
  EXPECT_EQ(count(json, "\"ph\":\"X\""), 3u);
  EXPECT_NE(json.find("{\"name\":\"wait\",\"cat\":\"host\""), std::string::npos);
  EXPECT_NE(json.find("{\"name\":\"multiply\",\"cat\":\"step\""), std::string::npos);
  EXPECT_EQ(json.find("\"name\":\"add\""), std::string::npos);
  EXPECT_EQ(count(json, "\"cat\":\"dependency\""), 0u) << json;
  // With every slice kept, each arrow starts on a command's track, never the host's (tid 0):
  // the copy's into the add, the add's into the multiply.
  spec.trace_steps = 100;
  ferry::Device whole = ferry::Device::modeled(spec);
  auto b2 = ferry::to_device(whole, std::vector<float>{1, 2, 3, 4}, Shape{4}) + 1.0f;
  ferry::wait(b2);
  ferry::wait(b2 * 2.0f);
  const std::string kept = trace_of(whole, "kept_input");
  const std::string from = "\"cat\":\"dependency\",\"ph\":\"s\"";
  std::size_t arrows = 0;
  for (std::size_t at = kept.find(from); at != std::string::npos; at = kept.find(from, at + 1)) {
    ++arrows;
    const std::size_t tid = kept.find("\"tid\":", at);
    EXPECT_NE(kept.compare(tid, 8, "\"tid\":0,"), 0) << kept.substr(at, 100);
  }
  EXPECT_EQ(arrows, 2u) << kept;
}

/// The shapes `dev`'s model holds for its labels and slices (ShapeTable).
std::size_t shapes_held(const ferry::Device& dev) {
  return ferry::detail::DeviceAccess::state(dev)->with_observer([](ferry::detail::StepObserver& o) {
    return dynamic_cast<ferry::detail::DeviceModel&>(o).simulator().shapes_held();
  });
}

// A program whose shapes keep changing (a decoder's sequence growing a token a step, read back
// at every step) names a new shape at every step: the model lets go of the shapes that no kept
// slice and no command in flight names, so it holds fewer than the table's sweep floor, not
// one per shape ever named (12,288 here); and the slices it keeps still print theirs.
TEST(ModelTrace, ShapesThatKeepChangingAreNotAllKept) {
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.trace_steps = 8;
  const ferry::Device dev = ferry::Device::modeled(spec, ferry::model_only);
  constexpr auto kFloor = static_cast<std::int64_t>(ferry::detail::ShapeTable::kSweepFloor);
  const std::int64_t last = 3 * kFloor;
  for (std::int64_t n = 1; n <= last; ++n) ferry::wait(ferry::zeros<float>(dev, Shape{n, 2}));
  EXPECT_LT(shapes_held(dev), ferry::detail::ShapeTable::kSweepFloor);
  // The eight slices kept are the last four zeros, each with its own shape, and their waits;
  // the trace written after the sweeps is strict JSON.
  const std::string json = trace_of(dev, "changing_shapes");
  EXPECT_NO_THROW(static_cast<void>(ferry::detail::parse_json(json)));
  EXPECT_EQ(count(json, "\"ph\":\"X\""), 8u);
  for (std::int64_t n = last - 3; n <= last; ++n) {
    const std::string shape = "\"shape\":\"" + Shape{n, 2}.to_string() + "\"";
    EXPECT_EQ(count(json, shape), 1u) << shape;
  }
  // A shape named again after the sweeps is interned afresh and printed right.
  ferry::wait(ferry::zeros<float>(dev, Shape{1, 2}));
  EXPECT_EQ(count(trace_of(dev, "changing_shapes_again"),
                  "\"shape\":\"" + Shape{1, 2}.to_string() + "\""),
            1u);
}

TEST(ModelTrace, AnUnwritablePathThrows) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  EXPECT_THROW(dev.write_trace("/nonexistent-directory/for/ferry/trace.json"), ferry::Error);
}

/// The issue's program: a layout conversion that ends while a matmul draws on DRAM.
void conversion_beside_matmul(const ferry::Device& dev) {
  auto w1 = ferry::to_device(dev, std::vector<float>(256 * 512, 0.01f), Shape{256, 512});
  auto w2 = ferry::to_device(dev, std::vector<float>(512 * 64, 0.01f), Shape{512, 64},
                             ferry::Layout{.order = ferry::Order::tiled});
  ferry::wait(w1, w2);
  auto x = ferry::to_device(dev, std::vector<float>(32 * 256, 0.1f), Shape{32, 256});
  (void)ferry::matmul(ferry::matmul(x, w1), w2).to_host();
}

/// Every "bytes_per_second" of the DRAM bandwidth counter, as parsed.
std::vector<double> bandwidth_samples(const ferry::detail::Json& trace) {
  std::vector<double> out;
  for (const ferry::detail::Json& event : trace.find("traceEvents")->items) {
    const ferry::detail::Json* name = event.find("name");
    if (name == nullptr || name->text != "DRAM bandwidth in use") continue;
    const ferry::detail::Json& v = *event.find("args")->find("bytes_per_second");
    EXPECT_TRUE(v.kind == ferry::detail::Json::Kind::integer ||
                v.kind == ferry::detail::Json::Kind::number);
    out.push_back(std::stod(v.kind == ferry::detail::Json::Kind::integer ? std::to_string(v.integer)
                                                                         : v.text));
  }
  return out;
}

TEST(ModelTrace, EveryPresetsTraceIsStrictJsonWithFiniteCounters) {
  for (const ferry::DeviceSpec& spec :
       {ferry::specs::pcie_accelerator(), ferry::specs::mesh_accelerator(),
        ferry::specs::h100_sxm(), ferry::specs::tiny(), ferry::specs::host_cpu(),
        ferry::specs::wormhole_b0()}) {
    SCOPED_TRACE(spec.name);
    ferry::Device dev = ferry::Device::modeled(spec);
    try {
      conversion_beside_matmul(dev);
    } catch (const ferry::OutOfDeviceMemory&) {  // tiny's 1 MiB: the trace must parse all the same
      EXPECT_EQ(spec.name, "tiny");
    }
    // The model's bookkeeping after the program: its memory is back, no schedule beats the bound.
    const ferry::DeviceStats stats = dev.stats();
    EXPECT_EQ(stats.dram_bytes_in_use, 0u);
    EXPECT_EQ(stats.l1_bytes_in_use, 0u);
    EXPECT_LE(stats.lower_bound, stats.makespan);
    const std::string json = trace_of(dev, "strict_" + spec.name);
    EXPECT_EQ(json.find("nan"), std::string::npos);
    ferry::detail::Json trace;
    ASSERT_NO_THROW(trace = ferry::detail::parse_json(json));  // RFC 8259, nothing more
    const std::vector<double> samples = bandwidth_samples(trace);
    EXPECT_FALSE(samples.empty());
    for (double b : samples) {
      EXPECT_GE(b, 0);
      EXPECT_LE(b, spec.dram_bytes_per_second * 1.000001);  // a pool gives at most what it has
    }
  }
}

TEST(ModelTrace, NamesAreEscapedInTheTrace) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  auto odd = ferry::custom<float>(dev, "say \"hi\"\\\n", {}, Shape{4},
                                  [](ferry::KernelArgs<float> args) {
                                    for (float& v : args.output) v = 1.0f;
                                  },
                                  ferry::Cost::fixed(nanoseconds(100)));
  (void)odd.to_host();
  const std::string json = trace_of(dev, "escaped");
  EXPECT_NE(json.find(R"("name":"say \"hi\"\\\n")"), std::string::npos);
  const ferry::detail::Json trace = ferry::detail::parse_json(json);
  bool found = false;
  for (const ferry::detail::Json& event : trace.find("traceEvents")->items) {
    const ferry::detail::Json* name = event.find("name");
    found = found || (name != nullptr && name->text == "say \"hi\"\\\n");
  }
  EXPECT_TRUE(found);
}

/// JSON text is UTF-8: a name that is not (a Latin-1 e-acute, a cut sequence) is written with
/// U+FFFD in place of each bad byte, and the trace still parses (the reader refuses bad UTF-8);
/// a well-formed multi-byte name is written as it is.
TEST(ModelTrace, NamesThatAreNotUtf8StillGiveStrictJson) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto one = [](ferry::KernelArgs<float> args) {
    for (float& v : args.output) v = 1.0f;
  };
  for (const char* name : {"caf\xe9", "cut \xe2\x82", "caf\xc3\xa9 \xe2\x82\xac"}) {
    (void)ferry::custom<float>(dev, name, {}, Shape{4}, one, ferry::Cost::fixed(nanoseconds(100)))
        .to_host();
  }
  const std::string json = trace_of(dev, "utf8");
  const ferry::detail::Json trace = ferry::detail::parse_json(json);
  std::vector<std::string> names;
  for (const ferry::detail::Json& event : trace.find("traceEvents")->items) {
    const ferry::detail::Json* name = event.find("name");
    if (name != nullptr) names.push_back(name->text);
  }
  for (const std::string want : {"caf\xef\xbf\xbd", "cut \xef\xbf\xbd\xef\xbf\xbd",
                                 "caf\xc3\xa9 \xe2\x82\xac"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST(ModelTrace, AHostWaitBeforeTheWindowIsNotInTheTraceAsInTheStats) {
  // The durations of a trace's host waits, in microseconds as the trace spells them.
  const auto host_waits = [](const std::string& json) {
    std::vector<std::string> waits;
    const ferry::detail::Json trace = ferry::detail::parse_json(json);
    for (const ferry::detail::Json& event : trace.find("traceEvents")->items) {
      const ferry::detail::Json* cat = event.find("cat");
      if (cat != nullptr && cat->text == "host") waits.push_back(event.find("dur")->text);
    }
    return waits;
  };
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto x = ferry::full<float>(dev, Shape{1000}, 1.0f);  // a 4010 ns kernel
  dev.reset_stats();  // the model runs it: the window starts after it ended
  ferry::wait(x);     // the host had not waited for it: a wait before the window
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.host_stall.count(), 0);
  EXPECT_EQ(s.makespan.count(), 0);
  const std::string json = trace_of(dev, "window_wait");
  EXPECT_EQ(host_waits(json), std::vector<std::string>{}) << json;
  // A wait inside the window is in both, from the window's start.
  const auto y = ferry::full<float>(dev, Shape{1000}, 2.0f);
  ferry::wait(y);
  EXPECT_EQ(dev.stats().host_stall.count(), 4010);
  const std::string after = trace_of(dev, "window_wait_2");
  EXPECT_EQ(host_waits(after), std::vector<std::string>{"4.010"}) << after;
}

TEST(ModelTrace, TheJsonWriterSpellsNoNonFiniteNumber) {
  std::string out;
  for (double v : {std::nan(""), -std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    out.clear();
    ferry::detail::append_json_number(out, v);
    EXPECT_EQ(out, "null");
  }
  out.clear();
  ferry::detail::append_json_number(out, 0.1);
  EXPECT_EQ(out, "0.1");
  out.clear();
  ferry::detail::append_json_number(out, 3e9);
  EXPECT_EQ(out, "3e+09");  // the shortest spelling that reads back exactly
}

}  // namespace

}  // namespace test_model_trace
