#pragma once
// ManualExecutor: runs nothing until told to. Tests use it to assert that building a graph runs
// no kernel, and to step through a graph one step at a time.

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
    std::lock_guard lock(mutex_);
    queue_.push_back(&ready);
  }

  /// An export drives the queue on the waiting thread until `s` is done. If nothing here can
  /// run, `s` waits for work of another executor, so it blocks like any export.
  void wait(const Step& s) override {
    while (!s.done()) {
      if (!run_one()) {
        s.wait_done();
        return;
      }
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
  std::deque<Step*> queue_;
};

}  // namespace ferry::detail
