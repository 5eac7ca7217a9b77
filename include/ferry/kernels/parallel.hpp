#pragma once
// Intra-op parallelism as the kernels see it. Kernels own no threads: the runtime hands them a
// ChunkRunner (the executor of the running step), and a kernel with enough work splits it into
// chunks that the runner spreads over its threads, the calling thread included. Chunks are not
// graph steps. A kernel's result must not depend on how many threads ran its chunks: split
// work over independent outputs, never over a sum.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <utility>

namespace ferry::kernels {

/// Runs the chunks of one kernel. The base class runs them in order on the calling thread.
class ChunkRunner {
 public:
  ChunkRunner() = default;
  ChunkRunner(const ChunkRunner&) = delete;
  ChunkRunner& operator=(const ChunkRunner&) = delete;
  virtual ~ChunkRunner() = default;

  /// Calls `fn(context, i)` once for every i in [0, chunks), on any of the runner's threads and
  /// the calling one, and returns when all have returned. `fn` must not throw.
  virtual void run_chunks(std::int64_t chunks, void (*fn)(void*, std::int64_t),
                          void* context) const noexcept {
    for (std::int64_t i = 0; i < chunks; ++i) fn(context, i);
  }

  /// How many threads may run chunks at once (the caller counted): 1 runs everything inline.
  virtual std::int64_t parallelism() const noexcept { return 1; }
};

/// A runner with no threads: what kernels use when no executor is at hand.
inline const ChunkRunner& inline_runner() noexcept {
  // Never destroyed: a pool whose last reference a worker dropped detaches that worker, which
  // may still run kernels after main returned (UBSan saw a destroyed runner's vptr there).
  static const ChunkRunner* const runner = new ChunkRunner();
  return *runner;
}

/// Calls `fn(begin, end)` over [0, n) in ranges of at least `grain` items, in parallel on
/// `runner` when there is more than one range's work; in order on the calling thread otherwise.
/// The ranges depend only on n and grain (never on the thread count), so a kernel that writes
/// each output from its own range gives the same bits on any runner. The first exception a
/// range throws is rethrown once every range has finished.
template <class F>
void parallel_ranges(const ChunkRunner& runner, std::int64_t n, std::int64_t grain, F&& fn);

/// As parallel_ranges below. The one-range case is kept small so that it is inlined into the
/// kernel: a kernel on a few elements (a step of a dispatch-bound program) runs its loop
/// straight away, without the call into the splitting path (about 60 instructions a step).
template <class F>
inline void parallel_for(const ChunkRunner& runner, std::int64_t n, std::int64_t grain,
                         F&& fn) {
  if (n > 0 && n <= grain) {
    fn(std::int64_t{0}, n);
    return;
  }
  parallel_ranges(runner, n, grain, std::forward<F>(fn));
}

template <class F>
void parallel_ranges(const ChunkRunner& runner, std::int64_t n, std::int64_t grain, F&& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t ranges = (n + grain - 1) / grain;
  if (ranges == 1 || runner.parallelism() <= 1) {
    for (std::int64_t r = 0; r < ranges; ++r) fn(r * grain, std::min(n, (r + 1) * grain));
    return;
  }
  static_assert(std::is_invocable_v<F&, std::int64_t, std::int64_t>, "fn(begin, end)");
  struct Context {
    std::remove_reference_t<F>* fn;
    std::int64_t n;
    std::int64_t grain;
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // written once, by the range that set `failed`
  } ctx{&fn, n, grain, {false}, nullptr};
  runner.run_chunks(
      ranges,
      [](void* p, std::int64_t r) {
        auto& c = *static_cast<Context*>(p);
        try {
          (*c.fn)(r * c.grain, std::min(c.n, (r + 1) * c.grain));
        } catch (...) {
          // Any one failure describes the kernel's; the first to get here keeps its own.
          if (!c.failed.exchange(true, std::memory_order_acq_rel))
            c.error = std::current_exception();
        }
      },
      &ctx);
  if (ctx.error) std::rethrow_exception(ctx.error);
}

}  // namespace ferry::kernels
