#pragma once
// ManualExecutor: runs nothing until told to. Tests use it to assert that building a graph runs
// no kernel, and to step through a graph one step at a time.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

#include "ferry/runtime/executor.hpp"

namespace ferry::detail {

class ManualExecutor final : public ExecutorBase {
 public:
  /// Runs whatever is still queued, so no submitted step is ever lost or leaked.
  ~ManualExecutor() override { run_all(); }

  void post(Step& ready) override {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(&ready);
    }
    progress_.notify_all();
  }

  /// An export drives the queue on the waiting thread until `s` is done. When the queue is
  /// empty, another thread is running what `s` needs: wait until it queues the successors or
  /// finishes `s` (both notify). A step finished by another executor notifies nobody here,
  /// hence the short timeout.
  void wait(const Step& s) override {
    while (!s.done()) {
      if (run_one()) continue;
      std::unique_lock lock(mutex_);
      progress_.wait_for(lock, std::chrono::milliseconds(1),
                         [&] { return !queue_.empty() || s.done(); });
    }
  }

  std::size_t thread_count() const noexcept override { return 0; }

  void device_unreachable() noexcept override { run_all(); }

  /// Runs the oldest ready step on the calling thread; its successors become ready but do not
  /// run. Returns false when nothing was ready.
  bool run_one() noexcept {
    Step* s = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return false;
      s = queue_.front();
      queue_.pop_front();
    }
    run_step(*s, nullptr);  // no continuation: every successor goes back to the queue
    {
      // Taking the lock orders this notification after a waiter's check of its condition.
      std::lock_guard lock(mutex_);
    }
    progress_.notify_all();
    return true;
  }

  /// Runs until nothing is ready; returns how many steps ran.
  std::size_t run_all() noexcept {
    std::size_t n = 0;
    while (run_one()) ++n;
    return n;
  }

  /// Steps ready to run and not yet run.
  std::size_t ready_count() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable progress_;  // a step was queued or finished
  std::deque<Step*> queue_;
};

}  // namespace ferry::detail
