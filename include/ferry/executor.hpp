#pragma once
// ferry::Executor: the host threads that run kernels. Devices share one by default.

#include <cstddef>
#include <memory>
#include <thread>
#include <utility>

#include "ferry/core/error.hpp"
#include "ferry/runtime/manual_executor.hpp"
#include "ferry/runtime/thread_pool.hpp"

namespace ferry {

class Device;

/// A handle to a set of host threads that run the kernels of one or more devices. Copies share
/// the threads; they stop when the last handle and the last device using them are gone, after
/// finishing every step already submitted.
class Executor {
 public:
  /// A private pool of `threads` workers. Throws InvalidArgument when `threads` is 0.
  explicit Executor(std::size_t threads)
      : impl_(threads == 0 ? fail_zero() : std::make_shared<detail::ThreadPool>(threads)) {}

  /// The process-wide pool every default device uses: one worker per hardware thread. It is
  /// never destroyed: a worker of another pool, detached because a step of its own dropped
  /// the pool's last handle, may still post to this one while the program's statics are torn
  /// down (ThreadSanitizer caught that race at exit), so it lives until the process ends.
  static Executor shared() {
    static const Executor* const pool =
        new Executor(std::max<std::size_t>(1, std::thread::hardware_concurrency()));
    return *pool;
  }

  /// Worker threads (0 for a ManualExecutor).
  std::size_t threads() const noexcept { return impl_->thread_count(); }

  friend bool operator==(const Executor& a, const Executor& b) noexcept {
    return a.impl_ == b.impl_;
  }

 protected:
  explicit Executor(std::shared_ptr<detail::ExecutorBase> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::ExecutorBase>& impl() const noexcept { return impl_; }

 private:
  friend class Device;
  static std::shared_ptr<detail::ExecutorBase> fail_zero() {
    detail::fail<InvalidArgument>("Executor", "needs at least one thread, got 0");
  }

  std::shared_ptr<detail::ExecutorBase> impl_;
};

/// An executor with no threads: steps run only when `run_one`/`run_all` is called, or when an
/// export drives them on the exporting thread. For tests that assert nothing has run yet, and
/// for stepping through a graph.
class ManualExecutor : public Executor {
 public:
  ManualExecutor() : Executor(std::make_shared<detail::ManualExecutor>()) {}

  /// Runs the oldest ready step on this thread; false when none is ready.
  bool run_one() { return manual().run_one(); }
  /// Runs ready steps until none is left; returns how many ran.
  std::size_t run_all() { return manual().run_all(); }
  /// Steps whose inputs are done but which have not run.
  std::size_t ready_count() const { return manual().ready_count(); }

 private:
  detail::ManualExecutor& manual() const {
    return static_cast<detail::ManualExecutor&>(*impl());
  }
};

}  // namespace ferry
