#pragma once
// im2col and col2im: the windows of a convolution or pooling over (N, C, H, W) images laid out
// as the columns of (N, C * KH * KW, OH * OW) matrices (PyTorch's unfold order: row
// c * KH * KW + i * KW + j, column oh * OW + ow), and that matrix folded back, overlapping
// windows summed. A convolution is then one matmul, a pooling one reduction.

#include <cstdint>

#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// The geometry of a 2-D window: image, kernel, stride, padding, dilation, output sizes.
struct Window2d {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::int64_t kh = 1, kw = 1;
  std::int64_t sh = 1, sw = 1;
  std::int64_t ph = 0, pw = 0;
  std::int64_t dh = 1, dw = 1;
  std::int64_t oh = 0, ow = 0;
};

/// cols[n, (c, i, j), (y, x)] = img[n, c, y * sh - ph + i * dh, x * sw - pw + j * dw], or `pad`
/// outside the image.
template <class T>
void im2col(const T* img, T* cols, const Window2d& g, T pad,
            const ChunkRunner& runner = inline_runner()) {
  const std::int64_t rows = g.n * g.c * g.kh * g.kw;
  const std::int64_t length = g.oh * g.ow;
  const std::int64_t grain =
      std::max<std::int64_t>(1, chunk_elements(2 * sizeof(T)) / std::max<std::int64_t>(length, 1));
  parallel_for(runner, rows, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t j = r % g.kw;
      const std::int64_t i = (r / g.kw) % g.kh;
      const std::int64_t plane = r / (g.kw * g.kh);  // n * C + c
      const T* src = img + plane * g.h * g.w;
      T* dst = cols + r * length;
      for (std::int64_t y = 0; y < g.oh; ++y) {
        const std::int64_t sy = y * g.sh - g.ph + i * g.dh;
        T* row = dst + y * g.ow;
        if (sy < 0 || sy >= g.h) {
          for (std::int64_t x = 0; x < g.ow; ++x) row[x] = pad;
          continue;
        }
        for (std::int64_t x = 0; x < g.ow; ++x) {
          const std::int64_t sx = x * g.sw - g.pw + j * g.dw;
          row[x] = sx >= 0 && sx < g.w ? src[sy * g.w + sx] : pad;
        }
      }
    }
  });
}

/// img = 0, then img[n, c, y * sh - ph + i * dh, x * sw - pw + j * dw] += cols[n, (c, i, j),
/// (y, x)] for every position inside the image: im2col's transpose. Each (n, c) plane is one
/// range's, summed in a fixed order, so the bits do not depend on the runner.
template <class T>
void col2im(const T* cols, T* img, const Window2d& g, const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  const std::int64_t length = g.oh * g.ow;
  const std::int64_t per_plane = g.kh * g.kw * length;
  const std::int64_t grain = std::max<std::int64_t>(
      1, chunk_elements(2 * sizeof(T)) / std::max<std::int64_t>(per_plane, 1));
  parallel_for(runner, g.n * g.c, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      T* dst = img + plane * g.h * g.w;
      for (std::int64_t e = 0; e < g.h * g.w; ++e) dst[e] = T{};
      for (std::int64_t i = 0; i < g.kh; ++i) {
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const T* src = cols + (plane * g.kh * g.kw + i * g.kw + j) * length;
          for (std::int64_t y = 0; y < g.oh; ++y) {
            const std::int64_t sy = y * g.sh - g.ph + i * g.dh;
            if (sy < 0 || sy >= g.h) continue;
            for (std::int64_t x = 0; x < g.ow; ++x) {
              const std::int64_t sx = x * g.sw - g.pw + j * g.dw;
              if (sx < 0 || sx >= g.w) continue;
              T& d = dst[sy * g.w + sx];
              d = static_cast<T>(Add{}(C(d), C(src[y * g.ow + x])));
            }
          }
        }
      }
    }
  });
}

}  // namespace ferry::kernels
