#pragma once
// ExecutorBase: where ready steps run. Two implementations: ThreadPool (the real one) and
// ManualExecutor (a stepped one, for tests that must control when anything runs). Apart from
// the steps, so a step can hand a successor to its executor. An executor is also the
// ChunkRunner its steps' kernels split their work over (the base runs chunks inline).

#include <cstddef>
#include <cstdint>

#include "ferry/kernels/parallel.hpp"

namespace ferry::detail {

class Step;

/// The fewest chunks a kernel's job (kernels/parallel.hpp) must have for this thread to wake a
/// pool's sleeping workers to help with it: 2, any job that splits, unless a scope raises it.
/// Workers already awake help with any job: only the wake-up is held back. A thread that runs
/// steps in a sleeping worker's stead (runtime/wait_driver.hpp) raises it, since handing a
/// chunk or two back to that worker costs the wake-up the steps were kept from it to save.
inline thread_local std::int64_t t_wake_for_chunks = 2;

class ExecutorBase : public kernels::ChunkRunner {
 public:
  ExecutorBase() = default;
  ExecutorBase(const ExecutorBase&) = delete;
  ExecutorBase& operator=(const ExecutorBase&) = delete;
  ~ExecutorBase() override = default;

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

}  // namespace ferry::detail
