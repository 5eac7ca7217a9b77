#pragma once
// Fused elementwise kernels: a run of elementwise ops a program replays as one step, one pass
// over memory. Operands have the output's shape or repeat along it (a bias). The kernel walks the
// output in chunks and applies each op to the chunk in turn, intermediate values living in small
// per-chunk registers. Each op is the very kernel its eager step runs (kernels::map / kernels::zip
// with the same functor, rounding to T on every store), so fused values equal eager ones bit for
// bit.

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
#include "ferry/core/sym_float.hpp"
#include "ferry/kernels/convert.hpp"
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

/// Writes the scalar fused_scalar reads from a floating scalar's parameter word (a SymFloat's
/// value at a replay): converted to T as the op converts a double scalar, then widened as the op's
/// kernel widens it.
template <Element T>
void fused_scalar_from_param(std::int64_t param, std::byte* scalar) {
  const auto v = static_cast<kernels::compute_t<T>>(kernels::convert_value<T>(word_float(param)));
  std::memcpy(scalar, &v, sizeof v);
}

/// Values per register: small enough that every register of a long run stays in L1.
inline constexpr std::size_t kFusedChunk = 256;

/// How a fused kernel reads each input against the output's shape: 0 for an input of that
/// shape, else the period with which a smaller input repeats (a bias: its sizes are the
/// output's last sizes, after any leading 1s). Empty when some input is neither.
inline std::vector<std::size_t> fused_periods(std::span<Step* const> inputs, const Shape& out) {
  std::vector<std::size_t> periods;
  for (const Step* e : inputs) {
    const Shape& s = e->shape();
    if (s == out) {
      periods.push_back(0);
      continue;
    }
    std::size_t lead = 0;
    while (lead < s.rank() && s.dims()[lead] == 1) ++lead;
    const std::size_t kept = s.rank() - lead;
    if (kept > out.rank() || s.numel() == 0 ||
        !std::equal(s.dims().begin() + static_cast<std::ptrdiff_t>(lead), s.dims().end(),
                    out.dims().end() - static_cast<std::ptrdiff_t>(kept))) {
      return {};
    }
    periods.push_back(static_cast<std::size_t>(s.numel()));
  }
  return periods;
}

/// Submits `program` as one step over `externals`, its output of the largest external's shape;
/// null when an external neither has that shape nor repeats along it, or when they differ in
/// order, or a repeating one is tiled (a replay then submits the ops one by one). An external
/// marked in `given` may be donated (launch()): each output element is written after the last
/// read of that position, and an external of the output's shape is read only there.
template <Element T>
Handle launch_fused(const std::shared_ptr<const FusedProgram>& program,
                    std::span<Step* const> externals, std::uint32_t given) {
  const Step* largest = externals.front();
  double read = 0;
  for (const Step* e : externals) {
    const std::int64_t n = e->shape().numel();
    const std::int64_t best = largest->shape().numel();
    if (n > best || (n == best && e->shape().rank() > largest->shape().rank())) largest = e;
    if (e->layout().order != externals.front()->layout().order) return {};
    read += static_cast<double>(e->output_bytes());
  }
  const Shape out_shape = largest->shape();
  std::vector<std::size_t> periods = fused_periods(externals, out_shape);
  const bool repeats =
      std::any_of(periods.begin(), periods.end(), [](std::size_t p) { return p != 0; });
  if (periods.empty() || (repeats && largest->layout().order != Order::row_major)) return {};
  const auto n = static_cast<double>(out_shape.numel());
  const Cost cost{n * static_cast<double>(program->instrs.size()), read,
                  n * static_cast<double>(sizeof(T))};
  DeviceArray<T> out = launch<T>(
      externals.front()->device(), {StepKind::compute, program->name, cost}, out_shape, externals,
      [program, periods = std::move(periods)](const Step& s) {
        const std::size_t inputs = s.input_count();
        std::vector<const T*> ext(inputs);
        for (std::size_t i = 0; i < inputs; ++i) ext[i] = s.in<T>(i);
        T* result = s.out<T>();
        const std::size_t last = program->instrs.size() - 1;
        const std::size_t bytes_per_element = (inputs + 1) * sizeof(T);
        // Each range has its own registers: ranges run on several threads at once.
        kernels::parallel_valid_runs(s.runner(), s.shape(), s.layout().order,
                                     kernels::chunk_elements(bytes_per_element),
                                     [&](std::size_t at, std::size_t count) {
          std::vector<T> regs(static_cast<std::size_t>(program->registers + 2) * kFusedChunk);
          T* const scratch =
              regs.data() + static_cast<std::size_t>(program->registers) * kFusedChunk;
          // An operand at element `from`: a register, an input read in place, or a repeating
          // input gathered into scratch register `slot` (a bias: a copy loop per period).
          auto operand = [&](const FusedOperand& o, std::size_t from, std::size_t len,
                             std::size_t slot) -> const void* {
            if (!o.external) return regs.data() + o.index * kFusedChunk;
            const std::size_t period = periods[o.index];
            if (period == 0) return ext[o.index] + from;
            T* dst = scratch + slot * kFusedChunk;
            const T* src = ext[o.index];
            std::size_t p = from % period;
            for (std::size_t k = 0; k < len;) {
              const std::size_t run = std::min(len - k, period - p);
              std::copy(src + p, src + p + run, dst + k);
              k += run;
              p = 0;
            }
            return dst;
          };
          for (std::size_t c = 0; c < count; c += kFusedChunk) {
            const std::size_t len = std::min(kFusedChunk, count - c);
            for (std::size_t k = 0; k <= last; ++k) {
              const FusedInstr& ins = program->instrs[k];
              void* dst = k == last ? static_cast<void*>(result + at + c)
                                    : static_cast<void*>(regs.data() + ins.out * kFusedChunk);
              ins.fn(operand(ins.a, at + c, len, 0),
                     ins.binary ? operand(ins.b, at + c, len, 1) : nullptr, dst, len,
                     ins.scalar.data());
            }
          }
        });
      },
      LayoutRule::elementwise, given);
  return handle_of(std::move(out));
}

}  // namespace ferry::detail
