// Faults and fallback on specs::tiny(): an injected fault fails exactly its step and what depends
// on it, as a DeviceFault naming the op, the step and the cause; Fallback::host runs rejected steps
// on the host instead, with the same values and timelines worked out by hand; after any failure
// the device goes on and every byte, modeled and real, comes back.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/files.hpp"
#include "support/memory.hpp"
#include "support/temp_dir.hpp"
#include "support/timeline.hpp"

namespace test_faults {

namespace {

using ferry::Shape;
using ferry_test::executor_for;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;
using std::chrono::nanoseconds;

/// tiny() with `plan` injected and `fallback` for rejected steps.
ferry::DeviceSpec faulty(ferry::FaultPlan plan, ferry::Fallback fallback = ferry::Fallback::none) {
  ferry::DeviceSpec s = ferry::specs::tiny();
  s.faults = std::move(plan);
  s.fallback = fallback;
  return s;
}

class Faults : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device make(ferry::DeviceSpec spec) {
    return ferry::Device::modeled(std::move(spec), executor_for(GetParam()));
  }

  /// A 100 ns kernel writing `n` floats: 1 + the sum of its inputs' first elements.
  static ferry::DeviceArray<float> kernel(const ferry::Device& dev, const std::string& name,
                                          std::vector<ferry::DeviceArray<float>> inputs,
                                          std::int64_t n) {
    return ferry::custom<float>(
        dev, name, std::move(inputs), Shape{n},
        [](ferry::KernelArgs<float> args) {
          float v = 1.0f;
          for (const auto& in : args.inputs) v += in[0];
          for (float& o : args.output) o = v;
        },
        ferry::Cost::fixed(nanoseconds(100)));
  }

  /// The DeviceFault `f` throws (or a failure if it throws none).
  template <class F>
  static ferry::DeviceFault fault_of(F f) {
    try {
      f();
    } catch (const ferry::DeviceFault& e) {
      return e;
    }
    ADD_FAILURE() << "expected a DeviceFault";
    return ferry::DeviceFault("none", 0, "none", "none");
  }
};
FERRY_SWEEP_EXECUTORS(Faults);

TEST_P(Faults, AListedStepFailsItselfAndExactlyWhatDependsOnIt) {
  ferry::Device dev = make(faulty({.fail_steps = {1}}));
  auto a = kernel(dev, "a", {}, 4);   // step 0
  auto b = kernel(dev, "b", {a}, 4);  // step 1: fails
  auto c = kernel(dev, "c", {b}, 4);  // step 2: depends on it
  auto d = kernel(dev, "d", {a}, 4);  // step 3: does not
  auto both = kernel(dev, "both", {c, d}, 4);
  const ferry::DeviceFault f = fault_of([&] { (void)c.to_host(); });
  EXPECT_EQ(std::string(f.what()),
            "[b] step 1 on " + dev.name() + " failed: injected fault: step 1 is in fail_steps");
  EXPECT_EQ(f.op(), "b");
  EXPECT_EQ(f.step(), 1u);
  EXPECT_EQ(f.device(), dev.name());
  EXPECT_EQ(f.cause(), "injected fault: step 1 is in fail_steps");
  EXPECT_EQ(fault_of([&] { (void)b.to_host(); }).step(), 1u);
  EXPECT_EQ(fault_of([&] { ferry::wait(d, both); }).step(), 1u);
  EXPECT_EQ(a.to_host()(0), 1.0f);  // independent work completes
  EXPECT_EQ(d.to_host()(3), 2.0f);
  EXPECT_EQ(dev.stats().faults, 1u);
  EXPECT_EQ(dev.stats().fallbacks, 0u);
}

TEST_P(Faults, TheModelForeseesTheFailuresASubmissionMakesCertain) {
  // What all_reduce reads of another device's reduction at the call: an injected fault, what
  // depends on it, and a size the device can never hold are known as they are submitted,
  // before anything waits, as the errors the exports then throw; nothing for work that runs,
  // and nothing where the host runs what the device rejects.
  const auto foreseen = [](const ferry::DeviceArray<float>& x) {
    const ferry::detail::Step& s = ferry::detail::step_of("test", x);
    return s.device()->foresee(s);
  };
  const auto what = [](const std::exception_ptr& e) -> std::string {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    }
  };
  ferry::Device dev = make(faulty({.fail_steps = {1}}));
  auto a = kernel(dev, "a", {}, 4);                     // step 0
  auto b = kernel(dev, "b", {a}, 4);                    // step 1: fails
  auto c = kernel(dev, "c", {b}, 4);                    // step 2: depends on it
  auto d = kernel(dev, "d", {a}, 4);                    // step 3: does not
  auto huge = ferry::ones<float>(dev, Shape{300'000});  // 1,200,000 bytes: more than the DRAM
  EXPECT_FALSE(foreseen(a));
  EXPECT_FALSE(foreseen(d));
  const std::exception_ptr failed = foreseen(b);
  ASSERT_TRUE(failed);
  EXPECT_EQ(foreseen(c), failed);  // the same error, not a copy
  EXPECT_EQ(what(failed),
            "[b] step 1 on " + dev.name() + " failed: injected fault: step 1 is in fail_steps");
  const std::exception_ptr too_big = foreseen(huge);
  ASSERT_TRUE(too_big);
  EXPECT_THROW(std::rethrow_exception(too_big), ferry::OutOfDeviceMemory);
  try {
    static_cast<void>(huge.to_host());
    ADD_FAILURE() << "no OutOfDeviceMemory";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_EQ(what(too_big), e.what());
  }
  EXPECT_EQ(fault_of([&] { static_cast<void>(c.to_host()); }).what(), what(failed));
  EXPECT_EQ(foreseen(c), failed);  // done: its failure
  EXPECT_FALSE(foreseen(d));

  ferry::Device host = make(faulty({.fail_steps = {1}}, ferry::Fallback::host));
  auto e = kernel(host, "e", {}, 4);
  auto f = kernel(host, "f", {e}, 4);  // rejected: runs on the host
  auto g = ferry::ones<float>(host, Shape{300'000});
  EXPECT_FALSE(foreseen(f));
  EXPECT_FALSE(foreseen(g));
  EXPECT_EQ(f.to_host()(0), 2.0f);
}

TEST_P(Faults, ImportAndExportCopiesFailAsTheirOwnSteps) {
  ferry::Device dev = make(faulty({.fail_steps = {0, 2}}));
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});  // step 0: its copy in fails
  auto y = ferry::to_device(dev, {3.0f, 4.0f}, Shape{2});  // step 1
  const ferry::DeviceFault in = fault_of([&] { (void)(x + y).to_host(); });  // add 2, copy 3
  EXPECT_EQ(in.op(), "to_device");
  EXPECT_EQ(in.step(), 0u);
  // Step 2 is the add above, which failed through x; step 4 is this export's copy: it works.
  EXPECT_EQ(y.to_host()(1), 4.0f);
  ferry::Device dev2 = make(faulty({.fail_steps = {1}}));
  auto z = ferry::to_device(dev2, {5.0f}, Shape{1});                    // step 0
  const ferry::DeviceFault out = fault_of([&] { (void)z.to_host(); });  // step 1: the copy out
  EXPECT_EQ(out.op(), "to_host");
  EXPECT_EQ(out.step(), 1u);
  EXPECT_EQ(z.to_host()(0), 5.0f);  // the data was never lost: a new export reads it
}

TEST_P(Faults, RatesAreDeterministicFromTheSeed) {
  // 400 independent kernels; which fail depends on the seed and the step index only.
  const auto failing = [&](std::uint64_t seed, double rate) {
    ferry::Device dev = make(faulty({.seed = seed, .kernel_failure_rate = rate}));
    auto x = ferry::to_device(dev, {1.0f}, Shape{1});  // step 0
    std::vector<ferry::DeviceArray<float>> ys;
    for (int i = 0; i < 400; ++i) ys.push_back(kernel(dev, "k", {x}, 1));  // steps 1..400
    std::set<std::uint64_t> failed;
    for (const auto& y : ys) {
      try {
        EXPECT_EQ(y.to_host()(0), 2.0f);
      } catch (const ferry::DeviceFault& e) {
        EXPECT_EQ(e.op(), "k");
        EXPECT_EQ(e.cause(), "injected kernel fault (seed " + std::to_string(seed) + ", rate " +
                                 (rate == 1 ? "1" : "0.25") + ")");
        failed.insert(e.step());
      }
    }
    EXPECT_EQ(dev.stats().faults, failed.size());
    return failed;
  };
  const std::set<std::uint64_t> seven = failing(7, 0.25);
  EXPECT_EQ(failing(7, 0.25), seven);
  EXPECT_NE(failing(8, 0.25), seven);
  EXPECT_GT(seven.size(), 60u);  // a quarter of 400 is 100
  EXPECT_LT(seven.size(), 140u);
  EXPECT_EQ(failing(7, 1).size(), 400u);
  EXPECT_EQ(failing(7, 0).size(), 0u);
}

TEST_P(Faults, AFallbackRunsOnTheHostWithTheTimeWorkedOutByHand) {
  ferry::Device dev = make(faulty({.fail_steps = {1}}, ferry::Fallback::host));
  auto a = kernel(dev, "a", {}, 256);   // [0, 100) on compute 0; 1,024 bytes
  auto b = kernel(dev, "b", {a}, 256);  // rejected at 100: on the host
  auto c = kernel(dev, "c", {b}, 256);
  EXPECT_EQ(c.to_host()(0), 3.0f);  // the same values as on the device
  const auto all = slices_of(dev);
  EXPECT_EQ(span_of(named(all, "a")[0]), (Span{0, 100}));
  // Read a back (100 ns + 1,024 bytes at 1 B/ns), run the kernel (100), send b (100 + 1,024).
  const ferry_test::Slice host = named(all, "b")[0];
  EXPECT_EQ(span_of(host), (Span{100, 2448}));
  EXPECT_TRUE(host.fallback);
  EXPECT_EQ(host.track, 4u + 2u);  // after host, h2d, d2h, d2d and the two compute units
  EXPECT_EQ(span_of(named(all, "c")[0]), (Span{2448, 2548}));
  EXPECT_EQ(span_of(named(all, "to_host")[0]), (Span{2548, 3672}));  // 100 + 1,024
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.fallbacks, 1u);
  EXPECT_EQ(s.faults, 1u);
  EXPECT_EQ(s.steps, 3u);  // a, c and the export's copy: the fallback took no engine
  EXPECT_EQ(s.makespan, nanoseconds(3672));
}

TEST_P(Faults, FallbackValuesAreTheDevicesValues) {
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  const auto run = [&](ferry::DeviceSpec spec) {
    ferry::Device dev = make(std::move(spec));
    auto x = ferry::to_device(dev, values, Shape{10, 100});
    auto w = ferry::to_device(dev, values, Shape{100, 10});
    auto y = ferry::tanh(ferry::matmul(x, w) * 0.5f) + ferry::sum(x, {1}, true);
    auto h = y.to_host();
    return std::make_pair(std::vector<float>(h.data().begin(), h.data().end()), dev.stats());
  };
  const auto [clean, clean_stats] = run(ferry::specs::tiny());
  const auto [fell, fell_stats] =
      run(faulty({.h2d_failure_rate = 1, .d2h_failure_rate = 1, .kernel_failure_rate = 1},
                 ferry::Fallback::host));
  EXPECT_EQ(fell, clean);  // bit for bit
  EXPECT_EQ(clean_stats.fallbacks, 0u);
  EXPECT_EQ(fell_stats.fallbacks, 8u);  // 2 imports, matmul, multiply, tanh, sum, add, export
  EXPECT_EQ(fell_stats.faults, fell_stats.fallbacks);
  EXPECT_EQ(fell_stats.steps, 0u);
}

TEST_P(Faults, OnlyTheRejectedStepMoves) {
  ferry::Device dev = make(faulty({.fail_steps = {2}}, ferry::Fallback::host));
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});  // 0
  auto y = ferry::exp(x);                                  // 1
  auto z = y * 2.0f;                                       // 2: on the host
  auto w = z + y;                                          // 3
  auto [hz, hw] = ferry::to_host(z, w);
  EXPECT_FLOAT_EQ(hw(1), 3.0f * std::exp(2.0f));
  const auto all = slices_of(dev);
  for (const ferry_test::Slice& s : all) EXPECT_EQ(s.fallback, s.id == 2) << s.name;
  EXPECT_EQ(dev.stats().fallbacks, 1u);
}

TEST_P(Faults, MemoryTheDeviceCanNeverHaveFallsBackToo) {
  ferry::Device dev = make(faulty({}, ferry::Fallback::host));
  auto huge = ferry::ones<float>(dev, Shape{300'000});  // 1,200,000 bytes: more than the DRAM
  auto total = ferry::sum(huge);
  EXPECT_EQ(total.to_host()(), 300'000.0f);
  EXPECT_EQ(dev.stats().fallbacks, 1u);  // only `huge`: the sum fits
  EXPECT_EQ(dev.stats().faults, 0u);
  EXPECT_EQ(dev.stats().peak_dram_bytes, 4u);
}

TEST_P(Faults, MemoryNothingCanFreeFallsBackOneStepAtATime) {
  ferry::Device dev = make(faulty({}, ferry::Fallback::host));
  constexpr std::int64_t kBig = 150'000;  // 600,000 bytes: two do not fit
  auto held = ferry::ones<float>(dev, Shape{kBig});
  EXPECT_EQ(held.to_host()(0), 1.0f);
  auto blocked = ferry::ones<float>(dev, Shape{kBig});  // waits for `held`, which stays
  auto tripled = blocked * 3.0f;                        // and so does this one
  auto total = ferry::sum(blocked);                     // this one fits
  EXPECT_EQ(tripled.to_host()(kBig - 1), 3.0f);
  EXPECT_EQ(total.to_host()(), static_cast<float>(kBig));
  // Each moves to the host only when the device is stuck on it, in submission order.
  const auto all = slices_of(dev);
  for (const ferry_test::Slice& s : all) {
    if (s.track != 0) {
      EXPECT_EQ(s.fallback, s.id == 2 || s.id == 3) << s.name << " " << s.id;
    }
  }
  EXPECT_EQ(dev.stats().fallbacks, 2u);
}

TEST_P(Faults, AFaultOnOneDeviceReachesTheReadersOnAnother) {
  ferry::Device a = make(faulty({.fail_steps = {1}}));
  ferry::Device b = make(ferry::specs::tiny());
  auto x = ferry::to_device(a, {1.0f, 2.0f}, Shape{2});  // a's step 0
  auto y = ferry::neg(x);                                // a's step 1: fails
  auto moved = y.to(b) + 1.0f;
  const ferry::DeviceFault f = fault_of([&] { (void)moved.to_host(); });
  EXPECT_EQ(f.device(), a.name());
  EXPECT_EQ(f.op(), "neg");
  EXPECT_EQ((x.to(b) * 2.0f).to_host()(1), 4.0f);
}

TEST_P(Faults, AStepOfAnOpMadeOfOthersNamesTheOpCalled) {
  // Every kernel fails: an op made of others fails at its first kernel, whose DeviceFault
  // names the op the program called first, then the step's own op: "[var] step 1 (mean) on".
  // So does OutOfDeviceMemory.
  ferry::Device dev = make(faulty({.kernel_failure_rate = 1}));
  const auto x = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, Shape{2, 3});
  const auto labels = ferry::to_device(dev, std::vector<std::int64_t>{0, 2}, Shape{2});
  const auto half = ferry::to_device(dev, std::vector<ferry::bfloat16>(6), Shape{2, 3});
  using Export = std::function<void()>;
  const std::vector<std::pair<std::string, Export>> composites = {
      {"var", [&] { (void)ferry::var(x).to_host(); }},
      {"std", [&] { (void)ferry::std(x, {1}).to_host(); }},
      {"logsumexp", [&] { (void)ferry::logsumexp(x, {1}).to_host(); }},
      {"log_softmax", [&] { (void)ferry::log_softmax(x, 1).to_host(); }},
      {"layer_norm", [&] { (void)ferry::layer_norm(x).to_host(); }},
      {"layer_norm", [&] { (void)ferry::layer_norm(half).to_host(); }},  // computed in float
      {"rms_norm", [&] { (void)ferry::rms_norm(x).to_host(); }},
      {"eye", [&] { (void)ferry::eye<float>(dev, 3).to_host(); }},
      {"tril", [&] { (void)ferry::tril(x).to_host(); }},
      {"triu", [&] { (void)ferry::triu(x, 1).to_host(); }},
      {"one_hot", [&] { (void)ferry::one_hot(labels, 3).to_host(); }},
      {"any", [&] { (void)ferry::any(x).to_host(); }},
      {"all", [&] { (void)ferry::all(x, {0}).to_host(); }},
      {"cross_entropy", [&] { (void)ferry::cross_entropy(x, labels).to_host(); }},  // log_softmax
      {"sort", [&] { (void)ferry::sort(x).to_host(); }},  // argsort, then picks
      {"topk", [&] { (void)ferry::topk(x, 2).first.to_host(); }},
      {"dropout",
       [&] { (void)ferry::random::dropout(ferry::random::key(dev, 7), x, 0.5).to_host(); }},
  };
  for (const auto& [name, run] : composites) {
    SCOPED_TRACE(name);
    const ferry_test::DeviceMemoryInUse before = ferry_test::memory_in_use(dev);
    const ferry::DeviceFault f = fault_of(run);
    EXPECT_EQ(ferry_test::memory_in_use(dev), before) << "{DRAM, L1} bytes in use";
    EXPECT_EQ(f.called(), name);
    EXPECT_NE(f.op(), name);
    EXPECT_EQ(std::string(f.what()),
              "[" + name + "] step " + std::to_string(f.step()) + " (" + f.op() + ") on " +
                  dev.name() + " failed: " + f.cause());
  }
  // An op of one step, after them: the program called that op, and the message names it once.
  const ferry::DeviceFault f = fault_of([&] { (void)ferry::neg(x).to_host(); });
  EXPECT_EQ(f.called(), "neg");
  EXPECT_EQ(f.op(), "neg");
  EXPECT_EQ(std::string(f.what()), "[neg] step " + std::to_string(f.step()) + " on " +
                                       dev.name() + " failed: " + f.cause());
  // Out of memory, the same: var's deviation needs a second array of x's size where x fills
  // most of the device; eye's index differences (600 x 600 int64) are larger than the device.
  ferry::Device small = make(ferry::specs::tiny());  // 1 MiB of DRAM
  const auto big = ferry::ones<float>(small, Shape{2, 100'000});
  const auto oom = [](auto run) {
    try {
      run();
    } catch (const ferry::OutOfDeviceMemory& e) {
      return std::string(e.what());
    }
    return std::string("no OutOfDeviceMemory");
  };
  const ferry_test::DeviceMemoryInUse before = ferry_test::memory_in_use(small);
  const std::string held = oom([&] { (void)ferry::var(big).to_host(); });
  EXPECT_TRUE(held.starts_with("[var] step ")) << held;
  EXPECT_NE(held.find(" (subtract) on " + small.name() + " needs 800000 bytes of DRAM while "),
            std::string::npos)
      << held;
  const std::string never = oom([&] { (void)ferry::eye<float>(small, 600).to_host(); });
  EXPECT_TRUE(never.starts_with("[eye] step ")) << never;
  EXPECT_NE(never.find(" (subtract) on " + small.name() +
                       " needs 2880000 bytes of DRAM but the device has only 1048576"),
            std::string::npos)
      << never;
  EXPECT_EQ(ferry_test::memory_in_use(small), before) << "{DRAM, L1} bytes in use";
  // The books after every failure: no schedule shorter than its bound, a trace of strict JSON.
  const ferry_test::TempDir dir("faults_called");
  for (const ferry::Device& d : {dev, small}) {
    const ferry::DeviceStats st = d.stats();
    EXPECT_LE(st.lower_bound, st.makespan) << d.name();
    d.write_trace(dir.file(d.name() + ".json"));
    ferry_test::expect_strict_json(d.name() + "'s trace",
                                   ferry_test::read_text(dir.file(d.name() + ".json")));
  }
  // Built from its parts, as a fault from another process is.
  const ferry::DeviceFault rebuilt("mean", 4, "d", "why", "var");
  EXPECT_EQ(std::string(rebuilt.what()), "[var] step 4 (mean) on d failed: why");
  EXPECT_EQ(ferry::DeviceFault("mean", 4, "d", "why", "mean").what(),
            std::string("[mean] step 4 on d failed: why"));
}

TEST_P(Faults, TheTraceMarksFallbacks) {
  ferry::Device dev = make(faulty({.fail_steps = {1}}, ferry::Fallback::host));
  auto y = kernel(dev, "rescued", {kernel(dev, "a", {}, 4)}, 4);
  ferry::wait(y);
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("ferry_fallback_" + std::to_string(GetParam()) + ".json");
  dev.write_trace(path);
  const std::string json = ferry_test::read_text(path.string());
  std::filesystem::remove(path);
  EXPECT_NE(json.find("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":6,\"args\":{"
                      "\"name\":\"fallback\"}}"),
            std::string::npos);
  EXPECT_NE(
      json.find("{\"name\":\"rescued\",\"cat\":\"fallback\",\"ph\":\"X\",\"pid\":1,\"tid\":6"),
      std::string::npos);
  EXPECT_NE(dev.timeline_text().find("\nfallback "), std::string::npos);
}

TEST_P(Faults, AfterFailuresTheDeviceGoesOnAndEveryByteComesBack) {
  const std::size_t real_before = ferry_test::settled_allocated_bytes();
  ferry::DeviceSpec spec = faulty(
      {.seed = 3, .h2d_failure_rate = 0.2, .d2h_failure_rate = 0.2, .kernel_failure_rate = 0.2});
  spec.dram_bytes = 64 << 10;  // and memory pressure: a 40 KB array never fits beside another
  ferry::Device dev = make(spec);
  int faults = 0;
  int oom = 0;
  for (int i = 0; i < 60; ++i) {
    const std::int64_t n = i % 7 == 0 ? 10'000 : 64;
    auto x = ferry::full<float>(dev, Shape{n}, 1.0f);
    auto y = ferry::to_device(dev, std::vector<float>(static_cast<std::size_t>(n), 2.0f), Shape{n});
    auto z = ferry::exp(x) + y;
    auto keep = i % 7 == 0 ? z * 1.0f : x;
    try {
      auto [hz, hk] = ferry::to_host(z, keep);
      EXPECT_FLOAT_EQ(hz(0), std::exp(1.0f) + 2.0f);
    } catch (const ferry::DeviceFault&) {
      ++faults;
    } catch (const ferry::OutOfDeviceMemory&) {
      ++oom;
    }
  }
  EXPECT_GT(faults, 0);
  EXPECT_GT(oom, 0);
  auto after = ferry::full<float>(dev, Shape{4}, 5.0f) * 2.0f;
  try {  // the device still works (unless the seed fails these very steps)
    EXPECT_EQ(after.to_host()(3), 10.0f);
  } catch (const ferry::DeviceFault&) {
  }
  after = {};
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.dram_bytes_in_use, 0u);
  EXPECT_EQ(s.l1_bytes_in_use, 0u);
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(real_before), real_before);
}

TEST_P(Faults, TheLowerBoundCountsOnlyWorkThatRan) {
  // Steps 1 (b's import) and 2 (exp) fail, and the product with them: of the program only a's
  // import (and the export's copy of nothing) ran, so the bound is a's import, which the
  // makespan holds. The failed steps once counted: a bound of 1,573,084 ns, efficiency 6.
  ferry::Device dev = make(faulty({.seed = 1, .fail_steps = {1, 2}}));
  auto a = ferry::to_device(dev, std::vector<float>(64 * 1024, 1.0f), Shape{64 * 1024});
  auto b = ferry::to_device(dev, std::vector<float>(64 * 1024, 2.0f), Shape{64 * 1024});
  auto c = ferry::exp(a) * 3.0f;
  EXPECT_THROW((void)ferry::to_host(b, c), ferry::DeviceFault);
  const ferry::DeviceStats s = dev.stats();
  const auto import_a = named(slices_of(dev), "to_device");
  ASSERT_EQ(import_a.size(), 1u);  // b's import never ran
  EXPECT_EQ(s.lower_bound.count(), span_of(import_a[0]).second - span_of(import_a[0]).first);
  EXPECT_LE(s.lower_bound, s.makespan);
  EXPECT_LE(s.efficiency(), 1.0);
}

TEST_P(Faults, AnImportRefusedForMemoryIsNotInTheLowerBound) {
  ferry::Device dev = make(faulty({}));
  auto small = ferry::to_device(dev, std::vector<float>(1024, 1.0f), Shape{1024});
  auto huge = ferry::to_device(dev, std::vector<float>(300'000, 1.0f), Shape{300'000});  // 1.2 MB
  EXPECT_THROW((void)huge.to_host(), ferry::OutOfDeviceMemory);
  EXPECT_EQ(small.to_host()(0), 1.0f);
  const ferry::DeviceStats s = dev.stats();
  EXPECT_GT(s.lower_bound.count(), 0);
  EXPECT_LE(s.lower_bound, s.makespan);
}

}  // namespace

}  // namespace test_faults
