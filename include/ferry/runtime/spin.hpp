#pragma once
// cpu_relax: the pause a spin loop takes between polls, so a spinning thread neither starves a
// sibling hyper-thread nor floods the memory bus.

namespace ferry::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace ferry::detail
