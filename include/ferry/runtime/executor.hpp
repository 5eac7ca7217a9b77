#pragma once
// ExecutorBase: where ready steps run. Two implementations: ThreadPool (the real one) and
// ManualExecutor (a stepped one, for tests that must control when anything runs).

#include <cstddef>

#include "ferry/runtime/step.hpp"

namespace ferry::detail {

class ExecutorBase {
 public:
  ExecutorBase() = default;
  ExecutorBase(const ExecutorBase&) = delete;
  ExecutorBase& operator=(const ExecutorBase&) = delete;
  virtual ~ExecutorBase() = default;

  /// `ready` has no pending input: run it soon. Takes over the step's graph reference.
  virtual void post(Step& ready) = 0;
  /// Returns once `s` is done, blocking or driving work as the executor needs.
  virtual void wait(const Step& s) = 0;
  /// Worker threads (0 for an executor that runs only when driven).
  virtual std::size_t thread_count() const noexcept = 0;
  /// The last user handle of a device using this executor is gone: nothing can drive its
  /// pending steps any more. A pool is running them anyway; a stepped executor must run them
  /// now, or they would wait (and hold their device) forever.
  virtual void device_unreachable() noexcept {}
};

/// Runs `s` and completes it. Each successor it makes ready goes to that successor's executor,
/// except the first one that belongs to `self`, which is returned so the caller runs it next on
/// this thread: a dependent chain then runs in a loop on one worker, with no queue traffic, no
/// wake-up and no recursion. Finally drops the graph reference, which may free `s`.
inline Step* run_step(Step& s, const ExecutorBase* self) noexcept {
  s.run();
  Step* next = nullptr;
  s.complete([&](Step& ready) {
    if (next == nullptr && &ready.executor() == self) {
      next = &ready;
    } else {
      ready.executor().post(ready);
    }
  });
  s.release();
  return next;
}

}  // namespace ferry::detail
