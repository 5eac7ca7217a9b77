#pragma once
// Attention as one kernel: softmax(scale * q k^T + mask) v, row by row, with the scores of one
// block of keys at a time (an online softmax: a running maximum rescales the partial sums, as
// FlashAttention does), so no Lq x Lk matrix is ever held. Accumulates in compute_t (float for
// float, bfloat16 and float16, double for double).

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
inline constexpr std::int64_t kAttentionQueryBlock = 16;

/// out = softmax(scale * q k^T + mask, keys) v; with `causal`, query i sees keys j <= i only. A
/// row whose every key is masked out (-inf) is NaN, as is one that meets a NaN score; with no
/// keys (lk 0) every row is 0. Work goes
/// by blocks of 16 queries of one problem: each block of 64 keys is transposed once into a
/// local buffer, so every query's 64 dot products run side by side (a loop the compiler
/// vectorizes; each dot product still sums over D in order, so the bits do not depend on the
/// blocking).
template <class T>
void attention(const T* q, const T* k, const T* v, const T* mask, const AttentionMask& mv, T* out,
               const AttentionShape& s, double scale, bool causal,
               const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  constexpr std::int64_t kBq = kAttentionQueryBlock;
  constexpr std::int64_t kBk = kAttentionKeyBlock;
  const C sc = static_cast<C>(scale);
  const std::int64_t blocks_per_problem = (s.lq + kBq - 1) / kBq;
  const std::int64_t block_work = std::max<std::int64_t>(1, kBq * s.lk * (s.d + s.dv));
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / block_work);
  parallel_for(
      runner, s.batch * blocks_per_problem, grain, [&](std::int64_t begin, std::int64_t end) {
        std::vector<C> kt(
            static_cast<std::size_t>(s.d * kBk));  // the key block, transposed: kt[e][jj]
        std::vector<C> acc(static_cast<std::size_t>(kBq * s.dv));
        std::vector<C> running_max(kBq);
        std::vector<C> total(kBq);
        std::vector<char> nan(kBq);
        C scores[kBk];
        for (std::int64_t t = begin; t < end; ++t) {
          const std::int64_t b = t / blocks_per_problem;
          const std::int64_t i0 = (t % blocks_per_problem) * kBq;
          const std::int64_t rows = std::min(kBq, s.lq - i0);
          const T* kb = k + b * s.lk * s.d;
          const T* vb = v + b * s.lk * s.dv;
          std::fill(acc.begin(), acc.end(), C(0));
          std::fill(running_max.begin(), running_max.end(), kNegInf);
          std::fill(total.begin(), total.end(), C(0));
          std::fill(nan.begin(), nan.end(), 0);
          const std::int64_t keys =
              causal ? std::min(s.lk, i0 + rows) : s.lk;  // what the last row sees
          for (std::int64_t j0 = 0; j0 < keys; j0 += kBk) {
            const std::int64_t n = std::min(kBk, keys - j0);
            for (std::int64_t jj = 0; jj < n; ++jj) {
              const T* kj = kb + (j0 + jj) * s.d;
              for (std::int64_t e = 0; e < s.d; ++e)
                kt[static_cast<std::size_t>(e * kBk + jj)] = static_cast<C>(kj[e]);
            }
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::int64_t i = i0 + r;
              const std::int64_t seen =
                  causal ? std::min(n, i + 1 - j0) : n;  // keys of this block row i sees
              if (seen <= 0) continue;
              const T* qi = q + (b * s.lq + i) * s.d;
              for (std::int64_t jj = 0; jj < seen; ++jj) scores[jj] = 0;
              for (std::int64_t e = 0; e < s.d; ++e) {
                const C qe = static_cast<C>(qi[e]);
                const C* row = kt.data() + e * kBk;
                for (std::int64_t jj = 0; jj < seen; ++jj) scores[jj] += qe * row[jj];
              }
              const T* mrow = mask != nullptr
                                  ? mask + mv.batch[static_cast<std::size_t>(b)] + i * mv.row
                                  : nullptr;
              C block_max = kNegInf;
              for (std::int64_t jj = 0; jj < seen; ++jj) {
                C score = scores[jj] * sc;
                if (mrow != nullptr) score += static_cast<C>(mrow[(j0 + jj) * mv.col]);
                nan[static_cast<std::size_t>(r)] |= static_cast<char>(score != score);
                scores[jj] = score;
                block_max = std::max(block_max, score);
              }
              if (block_max == kNegInf) continue;  // every key of the block masked out
              C& m = running_max[static_cast<std::size_t>(r)];
              const C new_max = std::max(m, block_max);
              const C rescale = std::exp(m - new_max);  // 0 for the row's first block
              C* a = acc.data() + r * s.dv;
              C& l = total[static_cast<std::size_t>(r)];
              l *= rescale;
              for (std::int64_t e = 0; e < s.dv; ++e) a[e] *= rescale;
              for (std::int64_t jj = 0; jj < seen; ++jj) {
                const C p = std::exp(scores[jj] - new_max);
                l += p;
                const T* vj = vb + (j0 + jj) * s.dv;
                for (std::int64_t e = 0; e < s.dv; ++e) a[e] += p * static_cast<C>(vj[e]);
              }
              m = new_max;
            }
          }
          const C nan_value = std::numeric_limits<C>::quiet_NaN();
          for (std::int64_t r = 0; r < rows; ++r) {
            T* o = out + (b * s.lq + i0 + r) * s.dv;
            const C* a = acc.data() + r * s.dv;
            // total is 0 when every key was masked: 0 / 0 is NaN, as softmax of all -inf. With
            // no keys at all the output is a sum of nothing, 0 (as PyTorch's).
            for (std::int64_t e = 0; e < s.dv; ++e) {
              o[e] = static_cast<T>(s.lk == 0 ? C(0)
                                    : nan[static_cast<std::size_t>(r)] != 0
                                        ? nan_value
                                        : a[e] / total[static_cast<std::size_t>(r)]);
            }
          }
        }
      });
}

}  // namespace ferry::kernels
