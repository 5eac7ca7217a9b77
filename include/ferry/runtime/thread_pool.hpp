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
//
// Chunks (intra-op parallelism, see kernels/parallel.hpp): the thread that calls run_chunks
// publishes a job in one of a fixed set of slots, wakes sleepers, and claims chunks itself
// from the job's counter; idle workers claim the rest. Nothing waits for a chunk nobody has
// claimed, so a job finishes even when every worker is busy. A job counts the helpers inside
// it (`users`): the owner closes it once the counter runs out, then waits for `users` to reach
// zero, which both proves every claimed chunk done and frees the slot for reuse. A published
// job counts in `open_jobs`, which takes part in the eventcount exactly like a posted step.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/runtime/executor.hpp"
#include "ferry/runtime/ring_queue.hpp"
#include "ferry/runtime/spin.hpp"
#include "ferry/runtime/wait_driver.hpp"

namespace ferry::detail {

class ThreadPool final : public ExecutorBase {
 public:
  FERRY_DECL explicit ThreadPool(std::size_t threads);

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

  // A waiter polls what the registered drivers need polled (MPI's progress) while it waits, and
  // runs the steps of this pool that those polls make ready.
  void wait(const Step& s) override { wait_driving(s, *this); }

  std::size_t thread_count() const noexcept override { return workers_.size(); }

  /// Runs the chunks on the calling thread and on idle workers. Inline when called from inside
  /// a chunk (a nested parallel_for), when helping is impossible, or when every job slot is
  /// taken. Allocates nothing.
  void run_chunks(std::int64_t chunks, void (*fn)(void*, std::int64_t),
                  void* context) const noexcept override {
    if (chunks <= 0) return;
    State& st = *state_;
    Job* job = chunks > 1 && parallelism() > 1 ? acquire_job(st) : nullptr;
    if (job == nullptr) {
      const bool outer = std::exchange(t_in_chunk, true);
      for (std::int64_t i = 0; i < chunks; ++i) fn(context, i);
      t_in_chunk = outer;
      return;
    }
    job->fn = fn;
    job->context = context;
    job->chunks = chunks;
    job->next.store(0, std::memory_order_relaxed);
    job->state.store(kOpen, std::memory_order_seq_cst);  // publishes the fields above
    st.open_jobs.fetch_add(1, std::memory_order_seq_cst);
    // As in post: this load and a sleeper's announcement are sequentially consistent with the
    // increment above and its last look. A spinner finds the job by itself. A job smaller than
    // this thread's t_wake_for_chunks wakes nobody: spinners may still take its chunks.
    if (chunks >= t_wake_for_chunks && st.sleepers.load(std::memory_order_seq_cst) != 0) {
      wake_all(st);
    }
    run_claimed(*job);
    st.open_jobs.fetch_sub(1, std::memory_order_relaxed);
    // Closed before reading `users`, both sequentially consistent: a helper that arrives later
    // sees the job closed, one that arrived earlier is counted and waited for.
    job->state.store(kClosed, std::memory_order_seq_cst);
    std::uint32_t users = job->users.load(std::memory_order_seq_cst);
    for (int i = 0; users != 0 && i < kUserPolls; ++i) {
      spin_poll(i);
      users = job->users.load(std::memory_order_acquire);
    }
    while (users != 0) {  // a helper is still inside a chunk it claimed
      job->users.wait(users, std::memory_order_acquire);
      users = job->users.load(std::memory_order_acquire);
    }
    job->state.store(kFree, std::memory_order_release);
  }

  /// The workers plus the caller, when a worker could help: 1 from inside a chunk, and for a
  /// one-worker pool's own worker (nobody else could run a chunk).
  std::int64_t parallelism() const noexcept override {
    if (t_in_chunk) return 1;
    const auto threads = static_cast<std::int64_t>(workers_.size());
    return t_worker_of == state_.get() ? threads : threads + 1;
  }

 private:
  static constexpr std::uint32_t kFree = 0;
  static constexpr std::uint32_t kClaimed = 1;  // an owner is filling it in
  static constexpr std::uint32_t kOpen = 2;     // helpers may claim chunks
  static constexpr std::uint32_t kClosed = 3;   // the owner waits for its helpers to leave
  // Concurrent jobs: one per step running on a worker plus a few host threads. A caller that
  // finds none free runs its chunks inline, which is always correct.
  static constexpr std::size_t kJobSlots = 32;
  static constexpr int kUserPolls = 4000;

  /// One run_chunks call, in a slot of the pool (never on a stack a helper might outlive).
  struct alignas(64) Job {
    std::atomic<std::uint32_t> state{kFree};
    std::atomic<std::uint32_t> users{0};  // helpers between their arrival and their leaving
    std::atomic<std::int64_t> next{0};    // the next unclaimed chunk
    // Written by the owner before it opens the job, read by helpers after they see it open.
    void (*fn)(void*, std::int64_t) = nullptr;
    void* context = nullptr;
    std::int64_t chunks = 0;
  };

  /// Set while this thread runs a chunk: a nested run_chunks runs inline.
  static inline thread_local bool t_in_chunk = false;
  /// The pool whose worker this thread is, if any.
  static inline thread_local const void* t_worker_of = nullptr;

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
    std::atomic<std::size_t> open_jobs{0};
    std::array<Job, kJobSlots> jobs;
  };

  static constexpr auto kSpinFor = std::chrono::microseconds(50);

  /// What an idle worker found: a step to run, or chunks it already helped with (or neither:
  /// the pool stopped and is drained).
  struct Found {
    Step* step = nullptr;
    bool helped = false;
  };

  static Job* acquire_job(State& st) noexcept {
    for (Job& job : st.jobs) {
      std::uint32_t expected = kFree;
      if (job.state.load(std::memory_order_relaxed) == kFree &&
          job.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
        return &job;
      }
    }
    return nullptr;
  }

  /// Claims and runs chunks of `job` until none is left; true if it ran any.
  static bool run_claimed(Job& job) noexcept {
    const bool outer = std::exchange(t_in_chunk, true);
    bool ran = false;
    for (;;) {
      const std::int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= job.chunks) break;
      job.fn(job.context, i);
      ran = true;
    }
    t_in_chunk = outer;
    return ran;
  }

  /// Helps every open job once; true if it ran a chunk.
  static bool help(State& st) noexcept {
    if (st.open_jobs.load(std::memory_order_seq_cst) == 0) return false;
    bool ran = false;
    for (Job& job : st.jobs) {
      if (job.state.load(std::memory_order_relaxed) != kOpen) continue;
      // Counted first, then checked: see run_chunks for the other half.
      job.users.fetch_add(1, std::memory_order_seq_cst);
      if (job.state.load(std::memory_order_seq_cst) == kOpen) ran = run_claimed(job) || ran;
      if (job.users.fetch_sub(1, std::memory_order_acq_rel) == 1) job.users.notify_all();
    }
    return ran;
  }

  static void work(State& st, const ExecutorBase* self) {
    t_worker_of = &st;
    for (;;) {
      Step* s = try_pop(st);
      if (s == nullptr && help(st)) continue;
      if (s == nullptr) {
        const Found f = spin_pop(st);
        if (f.helped) continue;
        s = f.step;
      }
      if (s == nullptr) {
        const Found f = sleep_pop(st);
        if (f.helped) continue;
        s = f.step;
      }
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

  static void wake_all(State& st) {
    {
      std::lock_guard lock(st.mutex);
      ++st.epoch;
    }
    st.wake.notify_all();
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
  static Found spin_pop(State& st) {
    if (st.spinners.fetch_add(1, std::memory_order_acq_rel) >= st.max_spinners) {
      st.spinners.fetch_sub(1, std::memory_order_acq_rel);
      return {};
    }
    const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
    Found f;
    for (unsigned i = 1; f.step == nullptr && !f.helped; ++i) {
      f.step = try_pop(st);
      if (f.step == nullptr) f.helped = help(st);
      cpu_relax();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::yield();
      }
    }
    st.spinners.fetch_sub(1, std::memory_order_acq_rel);
    return f;
  }

  static Found sleep_pop(State& st) {
    std::unique_lock lock(st.mutex);
    for (;;) {
      const std::uint64_t seen = st.epoch;
      const bool stopping = st.stop;
      st.sleepers.fetch_add(1, std::memory_order_seq_cst);
      lock.unlock();
      // The last look, after announcing ourselves: at steps, then at open jobs.
      Found f{try_pop(st), false};
      if (f.step == nullptr) f.helped = help(st);
      lock.lock();
      if (f.step != nullptr || f.helped || stopping) {
        st.sleepers.fetch_sub(1, std::memory_order_relaxed);
        return f;  // neither only when stopping with nothing left
      }
      st.wake.wait(lock, [&] { return st.epoch != seen; });
      st.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  std::shared_ptr<State> state_;
  std::vector<std::thread> workers_;
};

#if FERRY_DEFINES_DECLS
FERRY_DECL ThreadPool::ThreadPool(std::size_t threads) : state_(std::make_shared<State>()) {
  state_->max_spinners = std::max<std::size_t>(1, threads / 2);
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([state = state_, this] { work(*state, this); });
  }
}
#endif

}  // namespace ferry::detail
