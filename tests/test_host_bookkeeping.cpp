// The model's bookkeeping stays bounded on a device whose launches take no host time
// (Device::cpu()): there the host's clock stands still between exports, and before the bound
// every release and dropped handle waited, with its command, until the next export. The loops
// here never export until the end; the bound they check is a constant of the model
// (kHostEventsAhead), whatever the loop's length, so the 100,000 steps stand for the 10
// million. Each also checks the values, the model's memory once the arrays are gone, and that
// a chain decided in pieces keeps the timeline it had when decided at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/model/device_model.hpp>  // not in ferry.hpp's parse in the separate mode

#include "support/memory.hpp"

namespace test_host_bookkeeping {

namespace {

using ferry::Device;
using ferry::DeviceArray;
using ferry::Shape;

struct Bookkeeping {
  std::size_t host_events = 0;  // waiting for the model's clock
  std::size_t live = 0;         // commands not retired
};

/// The size of the model's bookkeeping now, read without deciding anything (stats() would).
Bookkeeping bookkeeping(const Device& dev) {
  return ferry::detail::DeviceAccess::state(dev)->with_observer([](ferry::detail::StepObserver& o) {
    const auto& sim = dynamic_cast<ferry::detail::DeviceModel&>(o).simulator();
    return Bookkeeping{sim.host_events_waiting(), sim.commands_live()};
  });
}

constexpr std::size_t kBound = ferry::detail::Simulator::kHostEventsAhead;

/// The most the bookkeeping held at any step of a loop, against kBound.
struct Peak {
  Bookkeeping most;
  void see(const Device& dev) {
    const Bookkeeping now = bookkeeping(dev);
    most.host_events = std::max(most.host_events, now.host_events);
    most.live = std::max(most.live, now.live);
  }
};

/// The model's books on `dev` after a program whose arrays are gone: its memory back to
/// `before`, and no schedule shorter than its lower bound.
void expect_balanced(const Device& dev, const ferry_test::DeviceMemoryInUse& before) {
  EXPECT_EQ(ferry_test::memory_in_use(dev), before) << "{DRAM, L1} bytes in use";
  const ferry::DeviceStats s = dev.stats();
  EXPECT_LE(s.lower_bound, s.makespan);
}

TEST(HostBookkeeping, TheHostSpecTakesNoHostTimePerLaunch) {
  // What makes everything wait at one instant: without it the bound would not be exercised.
  EXPECT_EQ(Device::cpu().spec().launch_overhead, ferry::Duration::zero());
}

TEST(HostBookkeeping, AChainThatNeverExportsStaysBounded) {
  const Device dev = Device::cpu();
  constexpr int kSteps = 100'000;  // 200,000 host events: the bound is reached 3 times
  const auto before = ferry_test::memory_in_use(dev);
  Peak peak;
  {
    auto x = ferry::to_device(dev, {0.0f}, Shape{1});
    for (int i = 0; i < kSteps; ++i) {
      x = x + 1.0f;
      peak.see(dev);
    }
    EXPECT_EQ(x.item(), static_cast<float>(kSteps));  // exact: below 2^24
  }
  EXPECT_LT(peak.most.host_events, kBound);
  // A command not decided yet has its release among those events.
  EXPECT_LE(peak.most.live, kBound);
  expect_balanced(dev, before);
}

TEST(HostBookkeeping, AFanOutThatNeverExportsStaysBounded) {
  const Device dev = Device::cpu();
  constexpr int kSteps = 70'000;  // every result held: 70,000 releases, no dropped handle
  const auto before = ferry_test::memory_in_use(dev);
  Peak peak;
  {
    const auto s = ferry::to_device(dev, {1.0f}, Shape{1});
    std::vector<DeviceArray<float>> out;
    out.reserve(kSteps);
    for (int i = 0; i < kSteps; ++i) {
      out.push_back(s + static_cast<float>(i));
      peak.see(dev);
    }
    ferry::wait(out);
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_EQ(out[static_cast<std::size_t>(i)].item(), 1.0f + static_cast<float>(i)) << i;
    }
  }
  EXPECT_LT(peak.most.host_events, kBound);
  EXPECT_LE(peak.most.live, kBound);
  expect_balanced(dev, before);
}

/// The makespan of a chain of `steps` additions on `dev`, from an import to its export.
ferry::Duration chain_makespan(Device dev, int steps) {
  dev.reset_stats();
  auto x = ferry::to_device(dev, {0.0f}, Shape{1});
  for (int i = 0; i < steps; ++i) x = x + 1.0f;
  EXPECT_EQ(x.item(), static_cast<float>(steps));
  return dev.stats().makespan;
}

TEST(HostBookkeeping, AChainDecidedInPiecesKeepsItsTimeline) {
  // Below the bound a chain is decided at its export, at once: its makespan is a fixed part
  // (the import, the export's copy) plus one step's time per step. Decided in pieces, each
  // piece's successor is released when the piece ends, when it would have started anyway: the
  // long chain's makespan is the same line's.
  const Device dev = Device::cpu();
  const int short_steps = static_cast<int>(kBound / 8);  // 2 events a step: well below it
  const ferry::Duration one = chain_makespan(dev, short_steps);
  const ferry::Duration two = chain_makespan(dev, 2 * short_steps);
  const ferry::Duration per_step = (two - one) / short_steps;
  ASSERT_EQ((two - one) % short_steps, ferry::Duration::zero());
  ASSERT_GT(per_step, ferry::Duration::zero());
  constexpr int kLong = 100'000;  // decided in 4 pieces
  EXPECT_EQ(chain_makespan(dev, kLong), one + (kLong - short_steps) * per_step);
}

}  // namespace

}  // namespace test_host_bookkeeping
