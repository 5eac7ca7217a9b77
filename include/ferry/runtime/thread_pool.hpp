#pragma once
// ThreadPool: the executor that runs steps for real. Ready steps go through a lock-free ring
// (a locked overflow list takes what does not fit); workers that run out of work spin briefly
// before sleeping, because the common case is a host thread about to submit the next step of a
// pipeline, and a futex wake costs more than the step.
//
// Sleeping uses an eventcount: a worker announces itself in `sleepers`, looks for work once
// more, and only then waits for `epoch` to change; a poster publishes its step, then reads
// `sleepers`. All four operations are sequentially consistent, so either the worker sees the
// step or the poster sees the worker, and the lock is taken only to sleep and to wake.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ferry/runtime/executor.hpp"
#include "ferry/runtime/ring_queue.hpp"
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
      ++state_->epoch;
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
    // Once anything overflowed, later steps queue behind it, so no step waits forever.
    if (st.overflow_size.load(std::memory_order_acquire) != 0 || !st.ring.try_push(&ready)) {
      std::lock_guard lock(st.mutex);
      st.overflow.push_back(&ready);
      st.overflow_size.fetch_add(1, std::memory_order_seq_cst);
    }
    // The push (into the ring or the overflow count) and this load are sequentially consistent,
    // like a sleeper's increment and its last look: in the single order of those four, either
    // we see the sleeper or the sleeper's last look sees our step.
    if (st.sleepers.load(std::memory_order_seq_cst) != 0 &&
        st.spinners.load(std::memory_order_relaxed) == 0) {
      wake_one(st);
    }
  }

  void wait(const Step& s) override { s.wait_done(); }

  std::size_t thread_count() const noexcept override { return workers_.size(); }

 private:
  struct State {
    RingQueue<Step*, 1024> ring;
    std::mutex mutex;  // guards overflow, epoch and stop, and is what sleepers wait on
    std::deque<Step*> overflow;
    std::atomic<std::size_t> overflow_size{0};
    std::condition_variable wake;
    std::uint64_t epoch = 0;
    bool stop = false;
    std::atomic<std::size_t> sleepers{0};
    std::atomic<std::size_t> spinners{0};
    std::size_t max_spinners = 1;
  };

  static constexpr auto kSpinFor = std::chrono::microseconds(50);

  static void work(State& st, const ExecutorBase* self) {
    for (;;) {
      Step* s = try_pop(st);
      if (s == nullptr) s = spin_pop(st);
      if (s == nullptr) s = sleep_pop(st);
      if (s == nullptr) return;  // stopped and drained
      // Work is left and nobody is looking for it: wake a sleeper, which wakes the next.
      if ((!st.ring.maybe_empty() || st.overflow_size.load(std::memory_order_relaxed) != 0) &&
          st.sleepers.load(std::memory_order_relaxed) != 0 &&
          st.spinners.load(std::memory_order_relaxed) == 0) {
        wake_one(st);
      }
      while (s != nullptr) s = run_step(*s, self);
    }
  }

  static void wake_one(State& st) {
    {
      std::lock_guard lock(st.mutex);
      ++st.epoch;
    }
    st.wake.notify_one();
  }

  static Step* try_pop(State& st) {
    Step* s = nullptr;
    if (st.ring.try_pop(s)) return s;
    if (st.overflow_size.load(std::memory_order_seq_cst) == 0) return nullptr;
    std::lock_guard lock(st.mutex);
    if (st.overflow.empty()) return nullptr;
    s = st.overflow.front();
    st.overflow.pop_front();
    st.overflow_size.fetch_sub(1, std::memory_order_release);
    return s;
  }

  /// At most max_spinners workers spin at once, so spinning never starves the host thread.
  static Step* spin_pop(State& st) {
    if (st.spinners.fetch_add(1, std::memory_order_acq_rel) >= st.max_spinners) {
      st.spinners.fetch_sub(1, std::memory_order_acq_rel);
      return nullptr;
    }
    const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
    Step* s = nullptr;
    for (unsigned i = 1; s == nullptr; ++i) {
      s = try_pop(st);
      cpu_relax();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::yield();
      }
    }
    st.spinners.fetch_sub(1, std::memory_order_acq_rel);
    return s;
  }

  static Step* sleep_pop(State& st) {
    std::unique_lock lock(st.mutex);
    for (;;) {
      const std::uint64_t seen = st.epoch;
      const bool stopping = st.stop;
      st.sleepers.fetch_add(1, std::memory_order_seq_cst);
      lock.unlock();
      Step* s = try_pop(st);  // the last look, after announcing ourselves
      lock.lock();
      if (s != nullptr || stopping) {
        st.sleepers.fetch_sub(1, std::memory_order_relaxed);
        return s;  // null only when stopping with nothing left
      }
      st.wake.wait(lock, [&] { return st.epoch != seen; });
      st.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  std::shared_ptr<State> state_;
  std::vector<std::thread> workers_;
};

}  // namespace ferry::detail
