#pragma once
// Attention as one kernel: softmax(scale * q k^T + mask) v, row by row, with the scores of one
// block of keys at a time (an online softmax: a running maximum rescales the partial sums, as
// FlashAttention does), so no Lq x Lk matrix is ever held. Accumulates in compute_t (float for
// float and bfloat16, double for double).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"

namespace ferry::kernels {

/// Where the additive mask's element (b, i, j) lives: `batch[b] + i * row + j * col` (strides of
/// 0 where the mask is broadcast). Absent when `batch` is empty.
struct AttentionMask {
  std::vector<std::int64_t> batch;
  std::int64_t row = 0;
  std::int64_t col = 0;
};

/// The sizes of one attention: `batch` independent problems of queries (lq x d), keys (lk x d)
/// and values (lk x dv), rows contiguous.
struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t lq = 0;
  std::int64_t lk = 0;
  std::int64_t d = 0;
  std::int64_t dv = 0;
};

inline constexpr std::int64_t kAttentionKeyBlock = 64;

/// out = softmax(scale * q k^T + mask, keys) v; with `causal`, query i sees keys j <= i only. A
/// row whose every key is masked out (-inf) is NaN, as is one that meets a NaN score.
template <class T>
void attention(const T* q, const T* k, const T* v, const T* mask, const AttentionMask& mv, T* out,
               const AttentionShape& s, double scale, bool causal,
               const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  const C sc = static_cast<C>(scale);
  const std::int64_t row_work = std::max<std::int64_t>(1, s.lk * (s.d + s.dv));
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / row_work);
  parallel_for(runner, s.batch * s.lq, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<C> acc(static_cast<std::size_t>(s.dv));
    C scores[kAttentionKeyBlock];
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t b = r / s.lq;
      const std::int64_t i = r % s.lq;
      const T* qi = q + r * s.d;
      const T* kb = k + b * s.lk * s.d;
      const T* vb = v + b * s.lk * s.dv;
      const T* mrow = mask != nullptr ? mask + mv.batch[static_cast<std::size_t>(b)] + i * mv.row : nullptr;
      std::fill(acc.begin(), acc.end(), C(0));
      C running_max = kNegInf;
      C total = 0;
      bool nan = false;
      const std::int64_t keys = causal ? std::min(s.lk, i + 1) : s.lk;
      for (std::int64_t j0 = 0; j0 < keys; j0 += kAttentionKeyBlock) {
        const std::int64_t n = std::min(kAttentionKeyBlock, keys - j0);
        C block_max = kNegInf;
        for (std::int64_t jj = 0; jj < n; ++jj) {
          const T* kj = kb + (j0 + jj) * s.d;
          C dot = 0;
          for (std::int64_t e = 0; e < s.d; ++e) dot += static_cast<C>(qi[e]) * static_cast<C>(kj[e]);
          C score = dot * sc;
          if (mrow != nullptr) score += static_cast<C>(mrow[(j0 + jj) * mv.col]);
          nan = nan || score != score;
          scores[jj] = score;
          block_max = std::max(block_max, score);
        }
        if (block_max == kNegInf) continue;  // every key of the block masked out
        const C new_max = std::max(running_max, block_max);
        const C rescale = std::exp(running_max - new_max);  // 0 for the first block
        total *= rescale;
        for (C& a : acc) a *= rescale;
        for (std::int64_t jj = 0; jj < n; ++jj) {
          const C p = std::exp(scores[jj] - new_max);
          total += p;
          const T* vj = vb + (j0 + jj) * s.dv;
          for (std::int64_t e = 0; e < s.dv; ++e) acc[static_cast<std::size_t>(e)] += p * static_cast<C>(vj[e]);
        }
        running_max = new_max;
      }
      T* o = out + r * s.dv;
      const C nan_value = std::numeric_limits<C>::quiet_NaN();
      for (std::int64_t e = 0; e < s.dv; ++e) {
        // total is 0 when every key was masked: 0 / 0 is NaN, as softmax of all -inf.
        o[e] = static_cast<T>(nan ? nan_value : acc[static_cast<std::size_t>(e)] / total);
      }
    }
  });
}

}  // namespace ferry::kernels
