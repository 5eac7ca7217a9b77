#pragma once
// cpu_relax: the pause a spin loop takes between polls, so a spinning thread neither starves a
// sibling hyper-thread nor floods the memory bus; spin_poll: the same, yielding the core now
// and then.

#include <thread>

namespace ferry::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// The pause of poll `i` of a spin that waits for another thread: cpu_relax, and every 64th
/// poll a yield. Where threads outnumber cores (several processes of a mesh over MPI on one
/// machine, each with its progress thread and workers), the thread that would finish the wait
/// may be runnable but waiting for this very core: without the yield, a waiter spinning its
/// 2000 polls (~60 us here) held off the progress thread that delivers its data, and a 1 KiB
/// all-reduce over 2 ranks took ~70 us instead of ~25. Alone on its core, the yield returns at
/// once.
inline void spin_poll(int i) noexcept {
  if (i % 64 == 63) std::this_thread::yield();
  cpu_relax();
}

}  // namespace ferry::detail
