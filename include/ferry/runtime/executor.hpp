#pragma once
// run_step: how every executor runs a ready step and hands on its successors.

#include <cstddef>

#include "ferry/runtime/executor_base.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

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
