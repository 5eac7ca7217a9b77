#pragma once
// ThreadPool: the executor that runs steps for real. One shared FIFO queue; workers that run
// out of work spin briefly before sleeping, because the common case is a host thread that is
// about to submit the next step of a pipeline, and a futex wake costs more than the step.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ferry/runtime/executor.hpp"
#include "ferry/runtime/spin.hpp"

namespace ferry::detail {

class ThreadPool final : public ExecutorBase {
 public:
  explicit ThreadPool(std::size_t threads) : state_(std::make_shared<State>()) {
    state_->max_spinners = std::max<std::size_t>(1, threads / 2);
    workers_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) {
      workers_.emplace_back([state = state_, this] { work(*state, this); });
    }
  }

  /// Lets the workers finish every queued step, then joins them. If the last reference to the
  /// pool is dropped by one of its own workers (a step that held the last handle of a device),
  /// that worker cannot join itself: it is detached and exits on its own, holding the state.
  ~ThreadPool() override {
    {
      std::lock_guard lock(state_->mutex);
      state_->stop = true;
    }
    state_->wake.notify_all();
    for (std::thread& t : workers_) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
  }

  void post(Step& ready) override {
    State& st = *state_;
    bool wake = false;
    {
      std::lock_guard lock(st.mutex);
      st.queue.push_back(&ready);
      st.queued.fetch_add(1, std::memory_order_release);
      wake = st.sleepers > 0 && st.spinners.load(std::memory_order_acquire) == 0;
    }
    if (wake) st.wake.notify_one();
  }

  void wait(const Step& s) override { s.wait_done(); }

  std::size_t thread_count() const noexcept override { return workers_.size(); }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Step*> queue;             // guarded by mutex
    std::atomic<std::size_t> queued{0};  // queue.size(), readable without the lock
    std::size_t sleepers = 0;            // guarded by mutex
    std::atomic<std::size_t> spinners{0};
    std::size_t max_spinners = 1;
    bool stop = false;  // guarded by mutex
  };

  static constexpr auto kSpinFor = std::chrono::microseconds(50);

  static void work(State& st, const ExecutorBase* self) {
    for (;;) {
      Step* s = try_pop(st);
      if (s == nullptr) s = spin_pop(st);
      if (s == nullptr) s = sleep_pop(st);
      if (s == nullptr) return;  // stopped and drained
      while (s != nullptr) s = run_step(*s, self);
    }
  }

  static Step* pop_locked(State& st, std::unique_lock<std::mutex>& lock) {
    Step* s = st.queue.front();
    st.queue.pop_front();
    st.queued.fetch_sub(1, std::memory_order_relaxed);
    // Nobody is spinning and work is left: wake a sleeper, which wakes the next in turn.
    const bool wake = !st.queue.empty() && st.sleepers > 0 &&
                      st.spinners.load(std::memory_order_acquire) == 0;
    lock.unlock();
    if (wake) st.wake.notify_one();
    return s;
  }

  static Step* try_pop(State& st) {
    if (st.queued.load(std::memory_order_acquire) == 0) return nullptr;
    std::unique_lock lock(st.mutex);
    if (st.queue.empty()) return nullptr;
    return pop_locked(st, lock);
  }

  /// At most max_spinners workers spin at once, so spinning never starves the host thread.
  static Step* spin_pop(State& st) {
    if (st.spinners.fetch_add(1, std::memory_order_acq_rel) >= st.max_spinners) {
      st.spinners.fetch_sub(1, std::memory_order_acq_rel);
      return nullptr;
    }
    const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
    for (unsigned i = 1;; ++i) {
      if (st.queued.load(std::memory_order_acquire) != 0) {
        st.spinners.fetch_sub(1, std::memory_order_acq_rel);
        if (Step* s = try_pop(st)) return s;
        st.spinners.fetch_add(1, std::memory_order_acq_rel);
      }
      cpu_relax();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::yield();
      }
    }
    st.spinners.fetch_sub(1, std::memory_order_acq_rel);
    return nullptr;
  }

  static Step* sleep_pop(State& st) {
    std::unique_lock lock(st.mutex);
    while (st.queue.empty()) {
      if (st.stop) return nullptr;
      ++st.sleepers;
      st.wake.wait(lock);
      --st.sleepers;
    }
    return pop_locked(st, lock);
  }

  std::shared_ptr<State> state_;
  std::vector<std::thread> workers_;
};

}  // namespace ferry::detail
