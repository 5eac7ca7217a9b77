#pragma once
// Chooses the GEMM micro-kernel for the CPU the program runs on, not the one it was compiled
// for: a plain -O2 build targets SSE2 only, yet the same binary should use AVX-512 or AVX2 with
// FMA where the CPU has them. Each entry point below compiles gemm_run_block for one
// instruction set (GCC's and clang's target attribute); gemm_isa() asks the CPU once.

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ferry/kernels/gemm_micro.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_DETAIL_GEMM_X86 1
#else
#define FERRY_DETAIL_GEMM_X86 0
#endif

// Every build, Debug included, fuses a * b + c where the target has FMA, so an element's bits
// never depend on the optimization level: GCC is told here (it fuses nothing in ISO C++ mode or
// at -O0 otherwise), clang inside the kernel (#pragma clang fp contract).
#if defined(__clang__)
#define FERRY_DETAIL_GEMM_TARGET(isa) __attribute__((target(isa)))
#define FERRY_DETAIL_GEMM_PORTABLE
#else
#define FERRY_DETAIL_GEMM_TARGET(isa) \
  __attribute__((target(isa), optimize("O2", "fp-contract=fast")))
#define FERRY_DETAIL_GEMM_PORTABLE __attribute__((optimize("O2", "fp-contract=fast")))
#endif

namespace ferry::detail {

/// The instruction sets with a micro-kernel of their own.
enum class GemmIsa : std::uint8_t { portable, avx2, avx512 };

/// Whether this CPU runs the micro-kernel of `isa`.
inline bool gemm_isa_supported(GemmIsa isa) noexcept {
#if FERRY_DETAIL_GEMM_X86
  __builtin_cpu_init();
  switch (isa) {
    case GemmIsa::avx512:
      return __builtin_cpu_supports("avx512f");
    case GemmIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::portable:
      return true;
  }
  return false;
#else
  return isa == GemmIsa::portable;
#endif
}

/// The best instruction set this CPU runs, decided on the first call.
inline GemmIsa gemm_isa() noexcept {
  static const GemmIsa isa = [] {
    for (GemmIsa best : {GemmIsa::avx512, GemmIsa::avx2}) {
      if (gemm_isa_supported(best)) return best;
    }
    return GemmIsa::portable;
  }();
  return isa;
}

/// The blocking of one instruction set and accumulator type: the micro-tile (mr x nr), the
/// depth of one k block (its MR x kc panel of A fits L1), and the columns of one packed block
/// of B (kc x nc fits L2).
struct GemmBlocking {
  std::int64_t mr;
  std::int64_t nr;
  std::int64_t kc;
  std::int64_t nc;
};

template <class A>
constexpr GemmBlocking gemm_blocking(GemmIsa isa) noexcept {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>);
  constexpr bool f32 = std::is_same_v<A, float>;
  switch (isa) {
    case GemmIsa::avx512:
      return f32 ? GemmBlocking{12, 32, 384, 512} : GemmBlocking{12, 16, 256, 256};
    case GemmIsa::avx2:
      return f32 ? GemmBlocking{6, 16, 384, 512} : GemmBlocking{6, 8, 256, 256};
    case GemmIsa::portable:
      break;
  }
  return f32 ? GemmBlocking{6, 8, 256, 256} : GemmBlocking{6, 4, 256, 128};
}

// The register blocks: 24 accumulators of 32 zmm registers, 12 of 16 ymm or xmm ones, leaving
// room for the B vectors and the broadcast A value. Must match gemm_blocking.

template <class A>
FERRY_DETAIL_GEMM_PORTABLE void gemm_block_portable(const GemmBlock<A>& block) {
  if constexpr (std::is_same_v<A, float>) {
    gemm_run_block<F32x4, float, 6, 2>(block);
  } else {
    gemm_run_block<F64x2, double, 6, 2>(block);
  }
}

#if FERRY_DETAIL_GEMM_X86
template <class A>
FERRY_DETAIL_GEMM_TARGET("avx2,fma")
void gemm_block_avx2(const GemmBlock<A>& block) {
  if constexpr (std::is_same_v<A, float>) {
    gemm_run_block<F32x8, float, 6, 2>(block);
  } else {
    gemm_run_block<F64x4, double, 6, 2>(block);
  }
}

template <class A>
FERRY_DETAIL_GEMM_TARGET("avx512f,avx512vl,avx2,fma")
void gemm_block_avx512(const GemmBlock<A>& block) {
  if constexpr (std::is_same_v<A, float>) {
    gemm_run_block<F32x16, float, 12, 2>(block);
  } else {
    gemm_run_block<F64x8, double, 12, 2>(block);
  }
}
#endif

/// Runs the micro-kernel of `isa` over one packed block (packed with gemm_blocking<A>(isa)).
template <class A>
void gemm_block(GemmIsa isa, const GemmBlock<A>& block) {
#if FERRY_DETAIL_GEMM_X86
  if (isa == GemmIsa::avx512) return gemm_block_avx512(block);
  if (isa == GemmIsa::avx2) return gemm_block_avx2(block);
#endif
  (void)isa;
  gemm_block_portable(block);
}

}  // namespace ferry::detail

#undef FERRY_DETAIL_GEMM_TARGET
#undef FERRY_DETAIL_GEMM_PORTABLE
#undef FERRY_DETAIL_GEMM_X86
