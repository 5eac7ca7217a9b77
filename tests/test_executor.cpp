// The runtime: executors, scheduling of dependents, lifetimes, and the million-step chain that
// must neither overflow a stack when it runs nor when its handles go away.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/runtime/remote.hpp>
#include <ferry/runtime/wait_driver.hpp>

#include "support/devices.hpp"

namespace test_executor {

namespace {

using ferry::Shape;
using ferry::detail::Step;
using ferry::detail::StepKind;

/// A float step that runs `f()` as its kernel and writes 0: lets a test watch or gate a kernel.
template <class F>
ferry::DeviceArray<float> probe(const ferry::Device& dev,
                                std::vector<ferry::DeviceArray<float>> inputs, F f) {
  std::vector<Step*> steps;
  for (const auto& a : inputs) steps.push_back(&ferry::detail::step_of("probe", a));
  return ferry::detail::launch<float>(ferry::detail::DeviceAccess::state(dev),
                                      {StepKind::compute, "probe", {}}, Shape{1}, steps,
                                      [f](const Step& s) {
                                        f();
                                        *s.out<float>() = 0;
                                      });
}

/// Waits (with a generous watchdog, not a timing assertion) until `pred` holds.
template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The length of the chains that must be released without recursion: a million steps, or a
// tenth of that under a sanitizer, where each step costs about a hundred times more (and
// where a recursive release of 100,000 levels, several frames of a few hundred bytes each,
// would overflow an 8 MiB stack all the same: its frames are larger there).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FERRY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FERRY_TEST_SANITIZED 1
#endif
#endif
#ifdef FERRY_TEST_SANITIZED
constexpr std::int64_t kLongChain = 100'000;
#else
constexpr std::int64_t kLongChain = 1'000'000;
#endif

TEST(Executor, ThreadCounts) {
  EXPECT_EQ(ferry::Executor(3).threads(), 3u);
  EXPECT_EQ(ferry::ManualExecutor().threads(), 0u);
  EXPECT_GE(ferry::Executor::shared().threads(), 1u);
  EXPECT_EQ(ferry::Executor::shared(), ferry::Executor::shared());
  try {
    ferry::Executor none(0);
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[Executor] needs at least one thread, got 0");
  }
}

TEST(Executor, ManualExecutorStepsOneAtATime) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  std::vector<int> order;
  auto a = probe(dev, {}, [&] { order.push_back(1); });
  auto b = probe(dev, {a}, [&] { order.push_back(2); });
  auto c = probe(dev, {a, b}, [&] { order.push_back(3); });
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(manual.ready_count(), 1u);
  EXPECT_TRUE(manual.run_one());
  EXPECT_EQ(order, std::vector<int>{1});
  EXPECT_FALSE(c.ready());
  EXPECT_EQ(manual.run_all(), 2u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(c.ready());
  EXPECT_FALSE(manual.run_one());
}

TEST(Executor, UndrivenWorkOnAManualDeviceRunsOnceNothingCanDriveIt) {
  // Pending steps hold their device and the executor holds pending steps: without a rule, work
  // nobody drives would keep itself alive forever. The rule: when the last Device and
  // DeviceArray of a device are gone, a manual executor runs what is left.
  std::atomic<int> ran{0};
  ferry::ManualExecutor manual;
  {
    ferry::Device dev(manual);
    auto x = ferry::zeros<float>(dev, Shape{2});
    for (int i = 0; i < 10; ++i) x = probe(dev, {x}, [&] { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 0);
    auto copy = dev;  // a second Device handle: still reachable after the first goes
  }
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(manual.ready_count(), 0u);
}

TEST(Executor, ADependentChainRunsOnOneWorkerWithoutRequeueing) {
  // Gate the chain behind a step that blocks until the whole chain is linked; then every step
  // has exactly one successor, which its worker must run itself rather than hand over.
  ferry::Device dev(ferry::Executor(2));
  std::latch open(1);
  std::mutex m;
  std::vector<std::thread::id> ran_on;
  auto x = probe(dev, {}, [&] { open.wait(); });
  for (int i = 0; i < 1000; ++i) {
    x = probe(dev, {x}, [&] {
      std::lock_guard lock(m);
      ran_on.push_back(std::this_thread::get_id());
    });
  }
  open.count_down();
  ferry::wait(x);
  ASSERT_EQ(ran_on.size(), 1000u);
  for (const auto& id : ran_on) EXPECT_EQ(id, ran_on.front());
}

TEST(Executor, IndependentStepsSpreadOverWorkers) {
  // Two steps that each wait for the other to start can only finish if they run at once.
  ferry::Device dev(ferry::Executor(2));
  std::latch both(2);
  auto a = probe(dev, {}, [&] { both.arrive_and_wait(); });
  auto b = probe(dev, {}, [&] { both.arrive_and_wait(); });
  ferry::wait(a, b);
  SUCCEED();
}

TEST(Executor, EverySubmittedStepRunsEvenWhenNobodyKeepsItsResult) {
  std::atomic<int> ran{0};
  {
    ferry::Device dev(ferry::Executor(2));
    auto x = ferry::zeros<float>(dev, Shape{4});
    for (int i = 0; i < 100; ++i) (void)probe(dev, {x}, [&] { ran.fetch_add(1); });
  }  // every handle, the device and the executor handle are gone; the steps still run
  EXPECT_TRUE(eventually([&] { return ran.load() == 100; }));
}

TEST(Executor, AMillionStepChainRunsAndIsDestroyedWithoutRecursion) {
  ferry::Device dev(ferry::Executor(2));
  auto x = ferry::zeros<std::int64_t>(dev, Shape{1});
  for (std::int64_t i = 0; i < kLongChain; ++i) x = x + 1;
  EXPECT_EQ(x.to_host()(0), kLongChain);
}

TEST(Executor, AMillionPendingStepsAreReleasedWithoutRecursion) {
  // Built on a stepped executor, so the whole chain exists unrun while its handles drop: the
  // destruction of the last handle must not walk the chain recursively.
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  {
    auto x = ferry::zeros<std::int64_t>(dev, Shape{1});
    for (std::int64_t i = 0; i < kLongChain; ++i) x = x + 1;
    EXPECT_FALSE(x.ready());
  }
  EXPECT_EQ(manual.run_all(), static_cast<std::size_t>(kLongChain) + 1);
}

TEST(Executor, AMillionHandlesToAFinishedChainAreDestroyedFlat) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  std::vector<ferry::DeviceArray<std::int64_t>> all;
  all.reserve(static_cast<std::size_t>(kLongChain) + 1);
  all.push_back(ferry::zeros<std::int64_t>(dev, Shape{1}));
  for (std::int64_t i = 0; i < kLongChain; ++i) all.push_back(all.back() + 1);
  // The export drives the million steps on this thread, iteratively.
  EXPECT_EQ(all.back().to_host()(0), kLongChain);
  all.clear();
}

TEST(Executor, ExportsFromInsideAStepAreRefused) {
  ferry::Device dev(ferry::Executor(2));
  auto other = ferry::ones<float>(dev, Shape{2});
  ferry::wait(other);
  auto nested = probe(dev, {}, [&] { (void)other.to_host(); });
  try {
    (void)nested.to_host();
    FAIL() << "expected ExportInsideStep";
  } catch (const ferry::ExportInsideStep& e) {
    EXPECT_STREQ(e.what(),
                 "[to_host] called from inside the running step 'probe'; exports may only wait "
                 "from outside");
  }
  auto waits = probe(dev, {}, [&] { ferry::wait(other); });
  EXPECT_THROW(ferry::wait(waits), ferry::ExportInsideStep);
  // ready() never blocks, so it is allowed anywhere.
  bool seen = false;
  auto polls = probe(dev, {}, [&] { seen = other.ready(); });
  ferry::wait(polls);
  EXPECT_TRUE(seen);
}

TEST(Executor, AnExportOnAManualDeviceRunsWhatItNeeds) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  auto a = ferry::full(dev, Shape{2}, 2.0f);
  auto b = ferry::full(dev, Shape{2}, 3.0f);
  EXPECT_EQ(manual.ready_count(), 2u);
  EXPECT_EQ((a * b).to_host()(0), 6.0f);
  EXPECT_EQ(manual.ready_count(), 0u);
}

// A registered WaitDriver (runtime/wait_driver.hpp) is polled by the thread that waits: ferry::mpi
// registers one so that a rank waiting for a collective moves MPI's data itself instead of
// sleeping through the hand-offs to its progress thread and back. Here a gate that nothing else
// opens feeds the awaited step, and the driver opens it on its third poll, noting which thread
// polled; the step the gate makes ready then runs on the waiter (no hand-off to a worker), which
// wakes no sleeping worker for a kernel's job of fewer than kWaiterWakesForChunks chunks. A
// watchdog opens the gate after 60 s if the driver has not (the test then fails on who opened it
// instead of hanging).
class GateOpener final : public ferry::detail::WaitDriver {
 public:
  explicit GateOpener(ferry::detail::GateStep& gate) : gate_(gate) {}

  ferry::detail::Drive drive() noexcept override {
    const std::lock_guard lock(mutex_);
    pollers_.push_back(std::this_thread::get_id());
    if (opener_ != Opener::none) return ferry::detail::Drive::idle;
    if (pollers_.size() < 3) return ferry::detail::Drive::waiting;
    opener_ = Opener::driver;
    gate_.open(ferry::detail::Buffer());
    return ferry::detail::Drive::moved;
  }
  void open_late() {
    const std::lock_guard lock(mutex_);
    if (opener_ != Opener::none) return;
    opener_ = Opener::watchdog;
    gate_.open(ferry::detail::Buffer());
  }

  enum class Opener { none, driver, watchdog };
  Opener opener() {
    const std::lock_guard lock(mutex_);
    return opener_;
  }
  std::vector<std::thread::id> pollers() {
    const std::lock_guard lock(mutex_);
    return pollers_;
  }

 private:
  ferry::detail::GateStep& gate_;
  std::mutex mutex_;
  std::vector<std::thread::id> pollers_;
  Opener opener_ = Opener::none;
};

/// Observes nothing: the hook is the executor's, and a model would refuse to wait for a gate it
/// was never told of (a mesh over processes tells it of each).
class Unobserved final : public ferry::detail::StepObserver {
 public:
  void submitted(Step&) override {}
  void host_sync(std::span<Step* const>, std::span<std::exception_ptr>) override {}
};

TEST(Executor, AWaiterPollsTheRegisteredDriversOnItsOwnThread) {
  namespace d = ferry::detail;
  const ferry::Device dev =
      d::DeviceAccess::make(ferry::Executor(2), std::make_unique<Unobserved>(), "unobserved");
  const auto state = d::DeviceAccess::state(dev);
  const d::Ref<Step> gate = d::Ref<Step>::adopt(new d::GateStep(
      state, "gate", ferry::DType::boolean, Shape(std::int64_t{0}), ferry::Layout{}));
  Step* inputs[] = {gate.get()};
  std::thread::id ran_on;  // written by the reader's kernel, read once it is done
  std::int64_t wakes_for = 0;  // the chunks its kernel's job would need to wake a worker
  const ferry::DeviceArray<float> reader = d::launch<float>(
      state, {StepKind::compute, "reads the gate", {}}, Shape{1}, inputs,
      [&ran_on, &wakes_for](const Step& s) {
        ran_on = std::this_thread::get_id();
        wakes_for = d::t_wake_for_chunks;
        *s.out<float>() = 7.0f;
      });

  auto opener = std::make_shared<GateOpener>(static_cast<d::GateStep&>(*gate));
  d::WaitDrivers::instance().add(opener);
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    opener->open_late();
  });
  const float value = reader.to_host()(0);
  done = true;
  watchdog.join();
  d::WaitDrivers::instance().remove(opener.get());

  EXPECT_EQ(value, 7.0f);
  EXPECT_EQ(opener->opener(), GateOpener::Opener::driver);
  const std::vector<std::thread::id> pollers = opener->pollers();
  ASSERT_GE(pollers.size(), 3u);
  EXPECT_EQ(pollers[2], std::this_thread::get_id());  // the poll that opened the gate
  // The reader the gate made ready ran on the waiter too, not on one of the pool's workers.
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  // There it woke no sleeping worker for a job of two chunks; and this thread's own kernels (a
  // step it runs outside a wait) wake them for any job that splits, as before.
  EXPECT_EQ(wakes_for, 3);
  EXPECT_EQ(d::kWaiterWakesForChunks, 3);
  EXPECT_EQ(d::t_wake_for_chunks, 2);
  EXPECT_FALSE(d::WaitDrivers::instance().any());
}

}  // namespace

}  // namespace test_executor
