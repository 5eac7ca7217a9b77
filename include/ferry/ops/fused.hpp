#pragma once
// Fused elementwise kernels: a run of elementwise ops a program replays as one step, one pass
// over memory. The kernel walks the output in chunks and applies each op to the chunk in turn,
// intermediate values living in small per-chunk registers. Each op is the very kernel its eager
// step runs (kernels::map / kernels::zip with the same functor, rounding to T on every store),
// so fused values equal eager ones bit for bit.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/kernels/layout.hpp"
#include "ferry/runtime/recorder.hpp"

namespace ferry::detail {

/// An operand of a fused instruction: input `index` of the fused step, or register `index`.
struct FusedOperand {
  bool external = true;
  std::uint32_t index = 0;
};

/// One op of a fused kernel; the last instruction writes the step's output, the others
/// register `out`.
struct FusedInstr {
  ElementwiseFn fn = nullptr;
  FusedOperand a;
  FusedOperand b;
  bool binary = false;
  std::uint32_t out = 0;
  std::array<std::byte, 16> scalar{};
};

struct FusedProgram {
  std::vector<FusedInstr> instrs;
  std::uint32_t registers = 0;
  std::string name;
};

template <Element T, class Op>
void fused_map(const void* a, const void*, void* out, std::size_t n, const std::byte*) {
  kernels::map(static_cast<const T*>(a), static_cast<T*>(out), n, Op{});
}

template <Element T, class Op>
void fused_zip(const void* a, const void* b, void* out, std::size_t n, const std::byte*) {
  kernels::zip(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, Op{});
}

/// op(x, v) for every x, or op(v, x) with `kValueFirst`: zip_scalar's kernel.
template <Element T, class Op, bool kValueFirst>
void fused_scalar(const void* a, const void*, void* out, std::size_t n, const std::byte* scalar) {
  kernels::compute_t<T> v;
  std::memcpy(&v, scalar, sizeof v);
  kernels::map(static_cast<const T*>(a), static_cast<T*>(out), n, [&](auto x) {
    if constexpr (kValueFirst) {
      return Op{}(v, x);
    } else {
      return Op{}(x, v);
    }
  });
}

/// Values per register: small enough that every register of a long run stays in L1.
inline constexpr std::size_t kFusedChunk = 256;

/// Submits `program` as one step over `externals`; null when they differ in shape or order (a
/// replay then submits the ops one by one).
template <Element T>
Handle launch_fused(const std::shared_ptr<const FusedProgram>& program,
                       std::span<Step* const> externals) {
  Step& first = *externals.front();
  double read = 0;
  for (Step* e : externals) {
    if (!(e->shape() == first.shape()) || e->layout().order != first.layout().order) return {};
    read += static_cast<double>(e->output_bytes());
  }
  const auto n = static_cast<double>(first.shape().numel());
  const Cost cost{n * static_cast<double>(program->instrs.size()), read,
                  n * static_cast<double>(sizeof(T))};
  DeviceArray<T> out = launch<T>(
      first.device(), {StepKind::compute, program->name, cost}, first.shape(), externals,
      [program](const Step& s) {
        const std::size_t inputs = s.input_count();
        std::vector<const T*> ext(inputs);
        for (std::size_t i = 0; i < inputs; ++i) ext[i] = s.in<T>(i);
        std::vector<T> regs(static_cast<std::size_t>(program->registers) * kFusedChunk);
        T* result = s.out<T>();
        const std::size_t last = program->instrs.size() - 1;
        auto operand = [&](const FusedOperand& o, std::size_t at) -> const void* {
          return o.external ? static_cast<const void*>(ext[o.index] + at)
                            : static_cast<const void*>(regs.data() + o.index * kFusedChunk);
        };
        kernels::for_each_valid_run(s.shape(), s.layout().order, [&](std::size_t at, std::size_t count) {
          for (std::size_t c = 0; c < count; c += kFusedChunk) {
            const std::size_t len = std::min(kFusedChunk, count - c);
            for (std::size_t k = 0; k <= last; ++k) {
              const FusedInstr& ins = program->instrs[k];
              void* dst = k == last ? static_cast<void*>(result + at + c)
                                    : static_cast<void*>(regs.data() + ins.out * kFusedChunk);
              ins.fn(operand(ins.a, at + c), ins.binary ? operand(ins.b, at + c) : nullptr, dst,
                     len, ins.scalar.data());
            }
          }
        });
      },
      LayoutRule::elementwise);
  return handle_of(std::move(out));
}

}  // namespace ferry::detail
