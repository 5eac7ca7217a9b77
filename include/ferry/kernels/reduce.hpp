#pragma once
// Reductions over any set of axes (sum, mean, prod, max, min) and argmax / argmin over one axis.
// Sums and products accumulate floating values in double and integers in wrapping unsigned
// arithmetic;
// max and min propagate NaN; argmax returns the first maximum (the first NaN if there is one).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

enum class ReduceOp : std::uint8_t { sum, mean, prod, max, min };

/// What a sum or product of `T` accumulates in: double for floating types, wrapping unsigned
/// for integers (wrap_t: at least 32 bits, whose low bits are those of the sum wrapped in T's
/// width; the result keeps just those, so an int8 sum wraps as int8 additions would).
template <class T>
struct reduce_acc {
  using type = double;
};
template <IntegerElement T>
struct reduce_acc<T> {
  using type = wrap_t<T>;
};

}  // namespace ferry::kernels

namespace ferry::detail {

/// The fold of one reduction, on the type it accumulates in: a sum or product in
/// kernels::reduce_acc (wrapping for integers), a maximum or minimum in kernels::compute_t
/// (exact, and compared as signed for integers).
/// Written without branches on the data so the compiler vectorizes the loops that call it.
template <class T, kernels::ReduceOp kOp>
struct Fold {
  static constexpr bool kSum = kOp == kernels::ReduceOp::sum || kOp == kernels::ReduceOp::mean;
  static constexpr bool kProd = kOp == kernels::ReduceOp::prod;
  static constexpr bool kPlainSum = kOp == kernels::ReduceOp::sum;
  using Acc = std::conditional_t<kSum || kProd, typename kernels::reduce_acc<T>::type,
                                 kernels::compute_t<T>>;

  static Acc init() noexcept {
    if constexpr (kSum) {
      return Acc{};
    } else if constexpr (kProd) {
      return Acc{1};
    } else if constexpr (std::numeric_limits<Acc>::has_infinity) {
      return kOp == kernels::ReduceOp::max ? -std::numeric_limits<Acc>::infinity()
                                  : std::numeric_limits<Acc>::infinity();
    } else {
      return kOp == kernels::ReduceOp::max ? std::numeric_limits<Acc>::lowest()
                                           : std::numeric_limits<Acc>::max();
    }
  }
  static Acc load(T x) noexcept { return static_cast<Acc>(static_cast<kernels::compute_t<T>>(x)); }
  /// NaN propagates: once `a` is NaN it stays; a NaN `x` replaces any `a`.
  static Acc combine(Acc a, Acc x) noexcept {
    if constexpr (kSum) {
      return a + x;
    } else if constexpr (kProd) {
      return a * x;
    } else if constexpr (kOp == kernels::ReduceOp::max) {
      return !kernels::is_nan(a) && (kernels::is_nan(x) || a < x) ? x : a;
    } else {
      return !kernels::is_nan(a) && (kernels::is_nan(x) || x < a) ? x : a;
    }
  }
  static T finish(Acc a, std::int64_t count) noexcept {
    if constexpr (kOp == kernels::ReduceOp::mean) {
      return kernels::convert_value<T>(a / static_cast<Acc>(count));  // 0/0 is NaN, as in NumPy
    } else {
      static_cast<void>(count);
      return kernels::convert_value<T>(a);
    }
  }
};

/// Independent accumulators a contiguous fold keeps: wide enough for the vector unit, and a
/// fixed number, so the order of the sum depends on the length alone.
inline constexpr std::int64_t kReduceLanes = 16;
/// Elements of a row folded into one partial result; a longer row's partials are then combined
/// in order. Fixed, so a row sums in the same order on any number of threads.
inline constexpr std::int64_t kReduceBlock = std::int64_t{1} << 14;
/// Outputs a column fold accumulates at once (on the stack).
inline constexpr std::int64_t kColumnBlock = 256;

/// The fold of x[0, n): lanes k take elements k, k + 16, ...; then lanes combine in order.
template <class F, class T>
typename F::Acc fold_contiguous(const T* x, std::int64_t n) noexcept {
  using Acc = typename F::Acc;
  std::array<Acc, kReduceLanes> lanes;
  lanes.fill(F::init());
  std::int64_t i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes) {
    for (std::int64_t k = 0; k < kReduceLanes; ++k) {
      lanes[static_cast<std::size_t>(k)] =
          F::combine(lanes[static_cast<std::size_t>(k)], F::load(x[i + k]));
    }
  }
  for (std::int64_t k = 0; i + k < n; ++k) {
    lanes[static_cast<std::size_t>(k)] =
        F::combine(lanes[static_cast<std::size_t>(k)], F::load(x[i + k]));
  }
  Acc a = lanes[0];
  for (std::size_t k = 1; k < lanes.size(); ++k) a = F::combine(a, lanes[k]);
  return a;
}

/// out[o] = fold of the contiguous row o of `len` elements, for `rows` rows.
template <class F, class T>
void fold_rows(const T* in, T* out, std::int64_t rows, std::int64_t len,
               const kernels::ChunkRunner& runner) {
  using Acc = typename F::Acc;
  const std::int64_t blocks = (len + kReduceBlock - 1) / kReduceBlock;
  const std::int64_t per_item = std::min(len, kReduceBlock);
  const std::int64_t grain = std::max<std::int64_t>(
      kernels::chunk_elements(sizeof(T)) / std::max<std::int64_t>(per_item, 1), 1);
  if (blocks <= 1) {
    kernels::parallel_for(runner, rows, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r)
        out[r] = F::finish(fold_contiguous<F>(in + r * len, len), len);
    });
    return;
  }
  std::vector<Acc> partial(static_cast<std::size_t>(rows * blocks));
  kernels::parallel_for(runner, rows * blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t r = item / blocks;
      const std::int64_t at = (item % blocks) * kReduceBlock;
      partial[static_cast<std::size_t>(item)] =
          fold_contiguous<F>(in + r * len + at, std::min(kReduceBlock, len - at));
    }
  });
  for (std::int64_t r = 0; r < rows; ++r) {
    Acc a = partial[static_cast<std::size_t>(r * blocks)];
    for (std::int64_t b = 1; b < blocks; ++b)
      a = F::combine(a, partial[static_cast<std::size_t>(r * blocks + b)]);
    out[r] = F::finish(a, len);
  }
}

/// out[o, j] = fold over r of in[o, r, j]: each output folds its inputs in order of r, with
/// the loop over j (contiguous in both) innermost.
template <class F, class T>
void fold_columns(const T* in, T* out, std::int64_t outer, std::int64_t reduced, std::int64_t inner,
                  const kernels::ChunkRunner& runner) {
  using Acc = typename F::Acc;
  const std::int64_t col_blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const std::int64_t per_item = std::max<std::int64_t>(reduced * std::min(inner, kColumnBlock), 1);
  const std::int64_t grain =
      std::max<std::int64_t>(kernels::chunk_elements(sizeof(T)) / per_item, 1);
  kernels::parallel_for(runner, outer * col_blocks, grain,
                        [&](std::int64_t begin, std::int64_t end) {
                          std::array<Acc, kColumnBlock> acc;
                          for (std::int64_t item = begin; item < end; ++item) {
                            const std::int64_t o = item / col_blocks;
                            const std::int64_t j0 = (item % col_blocks) * kColumnBlock;
                            const std::int64_t n = std::min(kColumnBlock, inner - j0);
                            std::fill(acc.begin(), acc.begin() + n, F::init());
                            const T* base = in + o * reduced * inner + j0;
                            for (std::int64_t r = 0; r < reduced; ++r) {
                              const T* row = base + r * inner;
                              for (std::int64_t j = 0; j < n; ++j) {
                                acc[static_cast<std::size_t>(j)] =
                                    F::combine(acc[static_cast<std::size_t>(j)], F::load(row[j]));
                              }
                            }
                            T* dst = out + o * inner + j0;
                            for (std::int64_t j = 0; j < n; ++j)
                              dst[j] = F::finish(acc[static_cast<std::size_t>(j)], reduced);
                          }
                        });
}

/// Any other pattern of reduced axes: one pass in row-major order on the calling thread.
template <class F, class T>
void fold_general(const T* in, T* out, const Shape& shape, const Strides& out_strides,
                  std::int64_t out_count, std::int64_t per_output) {
  using Acc = typename F::Acc;
  std::vector<Acc> acc(static_cast<std::size_t>(out_count), F::init());
  const std::array<Strides, 2> strides{row_major_strides(shape), out_strides};
  kernels::for_each_run(shape, strides, [&](const auto& off, const auto& step, std::int64_t n) {
    const T* src = in + off[0];
    Acc* dst = acc.data() + off[1];
    if (step[1] == 0) {
      Acc a = *dst;
      for (std::int64_t i = 0; i < n; ++i) a = F::combine(a, F::load(src[i]));
      *dst = a;
    } else {
      for (std::int64_t i = 0; i < n; ++i) dst[i] = F::combine(dst[i], F::load(src[i]));
    }
  });
  for (std::size_t i = 0; i < acc.size(); ++i) out[i] = F::finish(acc[i], per_output);
}

/// out[j] = fold over i of parts[i][j0 + j], for j < m (`m`: the template's count, or else the
/// argument), accumulated in `acc` (m of them); `n`: the parts.
template <class F, std::int64_t kCount = 0, class T, class Acc>
void fold_block(std::span<const T* const> parts, T* out, std::int64_t j0, Acc* acc,
                std::int64_t n, std::int64_t m = kCount) {
  const std::int64_t count = kCount != 0 ? kCount : m;
  for (std::int64_t j = 0; j < count; ++j) acc[j] = F::init();
  for (const T* part : parts) {
    const T* in = part + j0;
    for (std::int64_t j = 0; j < count; ++j) acc[j] = F::combine(acc[j], F::load(in[j]));
  }
  for (std::int64_t j = 0; j < count; ++j) out[j] = F::finish(acc[j], n);
}

/// fold_block's result for a whole block of kKeep (2 to 4) parts that `out` does not overlap,
/// in one pass: each element's fold stays in a register from its first part to its store. The
/// same operations in the same order as fold_block, which passes over its block's accumulators
/// once per part and twice more (their start, the stores): 8.6 instructions a float of a
/// two-part sum there, 4.5 here (two floats a vector register of doubles).
///
/// A sum of two floats is added in float, 1.25 instructions a float (a gradient all-reduce over
/// two processes reduces that): the same bits as in double, since the sum of two floats rounded
/// to double and then to float is the sum rounded to float once (Figueroa 1995: a double
/// rounding of +, -, x, / is innocuous when the wider format has at least 2p + 2 bits, 53 >=
/// 2 * 24 + 2), and 0 + x is exact in both (+0 for -0 in both). Not for three or more floats,
/// whose partial sum in double is not rounded to float.
template <class F, std::int64_t kKeep, class T>
void fold_block_fused(const T* __restrict p0, const T* __restrict p1, const T* __restrict p2,
                      const T* __restrict p3, T* __restrict out) {
  if constexpr (std::is_same_v<T, float> && F::kPlainSum && kKeep == 2) {
    for (std::int64_t j = 0; j < kColumnBlock; ++j) out[j] = (0.0F + p0[j]) + p1[j];
    return;
  }
  for (std::int64_t j = 0; j < kColumnBlock; ++j) {
    auto a = F::combine(F::combine(F::init(), F::load(p0[j])), F::load(p1[j]));
    if constexpr (kKeep > 2) a = F::combine(a, F::load(p2[j]));
    if constexpr (kKeep > 3) a = F::combine(a, F::load(p3[j]));
    out[j] = F::finish(a, kKeep);
  }
}

/// Block `j0` of fold_parts by fold_block_fused where it can (2 to 4 parts, none overlapping
/// `out`'s block); false where it cannot.
template <class F, class T>
bool fold_block_at_once(std::span<const T* const> parts, T* out, std::int64_t j0) {
  const std::size_t n = parts.size();
  if (n < 2 || n > 4) return false;
  const auto lo = reinterpret_cast<std::uintptr_t>(out + j0);
  const std::uintptr_t hi = lo + kColumnBlock * sizeof(T);
  std::array<const T*, 4> p{};
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = parts[i] + j0;
    const auto at = reinterpret_cast<std::uintptr_t>(p[i]);
    if (at < hi && lo < at + kColumnBlock * sizeof(T)) return false;  // `out` is this part
  }
  if (n == 2) fold_block_fused<F, 2>(p[0], p[1], p[2], p[3], out + j0);
  if (n == 3) fold_block_fused<F, 3>(p[0], p[1], p[2], p[3], out + j0);
  if (n == 4) fold_block_fused<F, 4>(p[0], p[1], p[2], p[3], out + j0);
  return true;
}

/// out[j] = fold over i of parts[i][j], for j < count: a reduction over a new leading axis of
/// the parts stacked, in reduce_with's order for that shape (a column fold, or fold_rows
/// where each part holds one element), without the stacked copy. `out` may be one of the
/// parts: a position is written only after its last read. `whole`: the elements of each part
/// of the reduction this is a piece of (the order follows that shape's, not this piece's).
template <class F, class T>
void fold_parts(std::span<const T* const> parts, T* out, std::int64_t count,
                const kernels::ChunkRunner& runner, std::int64_t whole) {
  using Acc = typename F::Acc;
  const auto n = static_cast<std::int64_t>(parts.size());
  if (whole == 1) {  // the stacked shape coalesces to one reduced axis: its lanes' order
    std::vector<T> column(parts.size());
    for (std::size_t i = 0; i < parts.size(); ++i) column[i] = parts[i][0];
    fold_rows<F>(column.data(), out, 1, n, runner);
    return;
  }
  const std::int64_t blocks = (count + kColumnBlock - 1) / kColumnBlock;
  const std::int64_t per_item = std::max<std::int64_t>(n * std::min(count, kColumnBlock), 1);
  const std::int64_t grain =
      std::max<std::int64_t>(kernels::chunk_elements(sizeof(T)) / per_item, 1);
  kernels::parallel_for(runner, blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    std::array<Acc, kColumnBlock> acc;
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t j0 = b * kColumnBlock;
      const std::int64_t m = std::min(kColumnBlock, count - j0);
      // A whole block through loops of a constant count: the compiler vectorizes those at -O2
      // (GCC's cheap cost model takes no loop that needs a remainder), 2.5x faster here; the
      // operations and their order are the same either way.
      if (m == kColumnBlock) {
        if (fold_block_at_once<F>(parts, out, j0)) continue;
        fold_block<F, kColumnBlock>(parts, out + j0, j0, acc.data(), n);
      } else {
        fold_block<F>(parts, out + j0, j0, acc.data(), n, m);
      }
    }
  });
}

template <class F, class T>
void reduce_with(const T* in, T* out, const Shape& shape, const std::array<bool, kMaxRank>& reduced,
                 const kernels::ChunkRunner& runner) {
  Strides out_strides{};  // in input-dimension order: 0 along a reduced dimension
  std::int64_t out_count = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    out_strides[d] = reduced[d] ? 0 : out_count;
    if (!reduced[d]) out_count *= shape.dims()[d];
  }
  if (out_count == 0) return;
  const std::int64_t per_output = shape.numel() / out_count;
  if (per_output == 0) {  // nothing to fold: the identity (a sum's 0, a product's 1, a mean's NaN)
    for (std::int64_t i = 0; i < out_count; ++i) out[i] = F::finish(F::init(), 0);
    return;
  }
  // After merging, reduced and kept dimensions alternate; the common patterns are a row
  // ([kept,] reduced) and a column ([kept,] reduced, kept).
  const Coalesced<2> c =
      coalesce(shape, std::array<Strides, 2>{row_major_strides(shape), out_strides});
  auto is_reduced = [&](std::size_t d) { return c.st[1][d] == 0; };
  if (c.rank == 0) {
    out[0] = F::finish(F::combine(F::init(), F::load(in[0])), 1);
  } else if (is_reduced(c.rank - 1) && (c.rank == 1 || (c.rank == 2 && !is_reduced(0)))) {
    fold_rows<F>(in, out, out_count, per_output, runner);
  } else if (!is_reduced(c.rank - 1) && c.rank <= 3 &&
             (c.rank == 1 || is_reduced(c.rank - 2)) && (c.rank < 3 || !is_reduced(0))) {
    const std::int64_t inner = c.size[c.rank - 1];
    fold_columns<F>(in, out, out_count / inner, per_output, inner, runner);
  } else {
    fold_general<F>(in, out, shape, out_strides, out_count, per_output);
  }
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// Reduces `in` (of `shape`) over the dimensions flagged in `reduced` into `out`, which holds
/// the kept dimensions in order, split over `runner`. Each output folds its inputs in an order
/// that depends on the shape alone (so any runner gives the same bits): in row-major order
/// along a strided axis, in 16 interleaved lanes of 16384-element blocks along a contiguous
/// one. Does not throw.
template <class T>
void reduce(const T* in, T* out, const Shape& shape, const std::array<bool, kMaxRank>& reduced,
            ReduceOp op, const ChunkRunner& runner = inline_runner()) {
  switch (op) {
    case ReduceOp::sum:
      return detail::reduce_with<detail::Fold<T, ReduceOp::sum>>(in, out, shape, reduced, runner);
    case ReduceOp::mean:
      return detail::reduce_with<detail::Fold<T, ReduceOp::mean>>(in, out, shape, reduced, runner);
    case ReduceOp::prod:
      return detail::reduce_with<detail::Fold<T, ReduceOp::prod>>(in, out, shape, reduced, runner);
    case ReduceOp::max:
      return detail::reduce_with<detail::Fold<T, ReduceOp::max>>(in, out, shape, reduced, runner);
    case ReduceOp::min:
      return detail::reduce_with<detail::Fold<T, ReduceOp::min>>(in, out, shape, reduced, runner);
  }
}

/// The reduction of `parts` (each `count` elements) over a new leading axis, into `out`: the
/// bits reduce() gives for the parts stacked along axis 0, without stacking them. `out` may be
/// one of the parts (the result then overwrites it). `whole` (-1: `count`): the elements of
/// each part of a larger reduction whose elements [j, j + count) these are (all_reduce reduces
/// one piece of its members' data on each member): the bits are those of that reduction, whose
/// order for one element (lanes) differs from that for more (member after member). Does not
/// throw (but for std::bad_alloc).
template <class T>
void reduce_parts(std::span<const T* const> parts, T* out, std::int64_t count, ReduceOp op,
                  const ChunkRunner& runner = inline_runner(), std::int64_t whole = -1) {
  if (parts.empty() || count <= 0) return;
  if (whole < 0) whole = count;
  switch (op) {
    case ReduceOp::sum:
      return detail::fold_parts<detail::Fold<T, ReduceOp::sum>>(parts, out, count, runner,
                                                                   whole);
    case ReduceOp::mean:
      return detail::fold_parts<detail::Fold<T, ReduceOp::mean>>(parts, out, count, runner,
                                                                   whole);
    case ReduceOp::prod:
      return detail::fold_parts<detail::Fold<T, ReduceOp::prod>>(parts, out, count, runner,
                                                                   whole);
    case ReduceOp::max:
      return detail::fold_parts<detail::Fold<T, ReduceOp::max>>(parts, out, count, runner,
                                                                   whole);
    case ReduceOp::min:
      return detail::fold_parts<detail::Fold<T, ReduceOp::min>>(parts, out, count, runner,
                                                                   whole);
  }
}

/// For each (outer, inner) position, the index along the middle axis (of `axis_size`) of the
/// first largest value (first smallest with `smallest`), or of the first NaN. Split over
/// `runner` by outer positions. Does not throw (but for std::bad_alloc).
template <class T>
void argmax(const T* in, std::int64_t* out, std::int64_t outer, std::int64_t axis_size,
            std::int64_t inner, const ChunkRunner& runner = inline_runner(),
            bool smallest = false) {
  using C = compute_t<T>;
  const std::int64_t per_outer = std::max<std::int64_t>(axis_size * inner, 1);
  const std::int64_t grain = std::max<std::int64_t>(chunk_elements(sizeof(T)) / per_outer, 1);
  parallel_for(runner, outer, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<C> best(static_cast<std::size_t>(inner));
    for (std::int64_t o = begin; o < end; ++o) {
      const T* base = in + o * axis_size * inner;
      std::int64_t* idx = out + o * inner;
      for (std::int64_t j = 0; j < inner; ++j) {
        best[static_cast<std::size_t>(j)] = static_cast<C>(base[j]);
        idx[j] = 0;
      }
      for (std::int64_t i = 1; i < axis_size; ++i) {
        const T* row = base + i * inner;
        for (std::int64_t j = 0; j < inner; ++j) {
          C& b = best[static_cast<std::size_t>(j)];
          const C v = static_cast<C>(row[j]);
          if (!is_nan(b) && ((smallest ? v < b : v > b) || is_nan(v))) {
            b = v;
            idx[j] = i;
          }
        }
      }
    }
  });
}

}  // namespace ferry::kernels
