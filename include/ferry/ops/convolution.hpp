#pragma once
// conv2d, max_pool2d and avg_pool2d over NCHW images, as PyTorch's. Each lays the image's
// windows out as matrix columns (im2col, ops/unfold.hpp) and then is one batched matmul (a
// convolution) or one reduction (a pooling): the model sees those steps, and their gradients
// are those of the steps (col2im for the windows). In a jit trace the batch is symbolic;
// channels and image sizes are guarded.

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/unfold.hpp"

namespace ferry {

/// A 2-D window's stride, zero padding and dilation, each (height, width).
struct Conv2dOptions {
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  /// Input and output channels split into this many independent groups.
  std::int64_t groups = 1;
};

/// A pooling window's stride (0: the kernel's size, PyTorch's default), padding and dilation.
struct Pool2dOptions {
  std::array<std::int64_t, 2> stride{0, 0};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
};

namespace detail {

/// The window of kernel (kh, kw) over x's (N, C, H, W), checked: InvalidArgument naming `op` for a
/// stride or dilation below 1, a negative padding or an empty kernel; ShapeError for x not of
/// rank 4 or a window larger than the padded image.
inline kernels::Window2d checked_window(std::string_view op, const Shape& x, std::int64_t kh,
                                        std::int64_t kw, const std::array<std::int64_t, 2>& stride,
                                        const std::array<std::int64_t, 2>& padding,
                                        const std::array<std::int64_t, 2>& dilation) {
  if (x.rank() != 4) fail<ShapeError>(op, "needs an (N, C, H, W) image, got ", x);
  if (kh < 1 || kw < 1) fail<InvalidArgument>(op, "kernel size must be >= 1, got ", kh, " x ", kw);
  for (std::size_t d = 0; d < 2; ++d) {
    if (stride[d] < 1 || dilation[d] < 1 || padding[d] < 0) {
      fail<InvalidArgument>(op, "needs stride and dilation >= 1 and padding >= 0, got stride (",
                            stride[0], ", ", stride[1], "), padding (", padding[0], ", ",
                            padding[1], "), dilation (", dilation[0], ", ", dilation[1], ")");
    }
  }
  kernels::Window2d g;
  g.kh = kh;
  g.kw = kw;
  g.sh = stride[0];
  g.sw = stride[1];
  g.ph = padding[0];
  g.pw = padding[1];
  g.dh = dilation[0];
  g.dw = dilation[1];
  const kernels::Window2d full = with_image(g, x);
  if (full.h + 2 * g.ph < g.dh * (kh - 1) + 1 || full.w + 2 * g.pw < g.dw * (kw - 1) + 1) {
    fail<ShapeError>(op, "the window ", kh, " x ", kw, " (dilation ", g.dh, " x ", g.dw,
                     ") is larger than the image ", x, " padded by ", g.ph, " x ", g.pw);
  }
  return g;
}

/// The (N, C, OH, OW) shape of a pooling or convolution output: N as the trace sees it.
inline Shape image_out(const Shape& user, std::int64_t channels, const kernels::Window2d& g) {
  return Shape{user[0], SymInt(channels), SymInt(g.oh), SymInt(g.ow)};
}

template <Floating T>
DeviceArray<T> pool2d(std::string_view op, const DeviceArray<T>& x,
                      const std::array<std::int64_t, 2>& kernel, const Pool2dOptions& o, bool max) {
  const Step& s = step_of(op, x);
  std::array<std::int64_t, 2> stride = o.stride;
  for (std::size_t d = 0; d < 2; ++d) stride[d] = stride[d] == 0 ? kernel[d] : stride[d];
  const kernels::Window2d g =
      checked_window(op, s.shape(), kernel[0], kernel[1], stride, o.padding, o.dilation);
  if (2 * o.padding[0] > kernel[0] || 2 * o.padding[1] > kernel[1]) {
    fail<InvalidArgument>(op, "padding (", o.padding[0], ", ", o.padding[1],
                          ") must be at most half the kernel (", kernel[0], ", ", kernel[1], ")");
  }
  const kernels::Window2d full = with_image(g, s.shape());
  const Shape user = x.shape();
  const T pad = max ? kernels::convert_value<T>(-std::numeric_limits<double>::infinity()) : T{};
  const DeviceArray<T> cols = im2col(op, x, g, pad);
  const DeviceArray<T> windows =
      reshape(cols, Shape{user[0], SymInt(full.c), SymInt(g.kh * g.kw), SymInt(full.oh * full.ow)});
  const DeviceArray<T> pooled = max ? ferry::max(windows, {2}) : mean(windows, {2});
  return reshape(pooled, image_out(user, full.c, full));
}

}  // namespace detail

/// The 2-D cross-correlation of x (N, C, H, W) with w (Cout, C / groups, KH, KW), plus bias
/// (Cout) where given: (N, Cout, OH, OW) with OH = (H + 2 ph - dh (KH - 1) - 1) / sh + 1, as
/// PyTorch's conv2d. Throws ShapeError for ranks other than 4 (and 1 for bias), channels that
/// do not match or divide by groups, or a window larger than the padded image; InvalidArgument
/// for a stride or dilation below 1, negative padding, groups below 1 or an empty handle;
/// DeviceMismatch.
template <Floating T>
DeviceArray<T> conv2d(const DeviceArray<T>& x, const DeviceArray<T>& w, const DeviceArray<T>& bias,
                      const Conv2dOptions& o = {}) {
  constexpr std::string_view op = "conv2d";
  const detail::Step& sx = detail::step_of(op, x);
  const detail::Step& sw = detail::step_of(op, w);
  if (x.device() != w.device() || (bias.valid() && bias.device() != x.device())) {
    detail::fail<DeviceMismatch>(
        op, "x lives on ", x.device().name(), ", w on ", w.device().name(),
        bias.valid() ? ", bias on " + bias.device().name() : std::string());
  }
  if (o.groups < 1) detail::fail<InvalidArgument>(op, "groups must be >= 1, got ", o.groups);
  const Shape& xs = sx.shape();
  const Shape& ws = sw.shape();
  if (ws.rank() != 4)
    detail::fail<ShapeError>(op, "needs a weight (Cout, C / groups, KH, KW), got ", ws);
  const kernels::Window2d g =
      detail::checked_window(op, xs, ws.dims()[2], ws.dims()[3], o.stride, o.padding, o.dilation);
  const std::int64_t c = xs.dims()[1];
  const std::int64_t cout = ws.dims()[0];
  if (c % o.groups != 0 || cout % o.groups != 0 || ws.dims()[1] * o.groups != c) {
    detail::fail<ShapeError>(
        op, "x ", xs, " and weight ", ws, " do not match for ", o.groups,
        " groups: needs C and Cout divisible by groups and weight (Cout, C / groups, KH, KW)");
  }
  if (bias.valid() &&
      (bias.shape().rank() != 1 || detail::step_of(op, bias).shape().dims()[0] != cout)) {
    detail::fail<ShapeError>(op, "bias must have the shape (", cout, "), got ", bias.shape());
  }
  const kernels::Window2d full = detail::with_image(g, xs);
  const std::int64_t k = (c / o.groups) * g.kh * g.kw;
  const Shape user = x.shape();
  const DeviceArray<T> cols = detail::im2col(op, x, g, T{});
  // (N, G, K, L) columns against (G, Cout / G, K) weights: one batched product per group.
  const DeviceArray<T> grouped_cols =
      reshape(cols, Shape{user[0], SymInt(o.groups), SymInt(k), SymInt(full.oh * full.ow)});
  const DeviceArray<T> grouped_w = reshape(w, Shape{o.groups, cout / o.groups, k});
  DeviceArray<T> y = reshape(matmul(grouped_w, grouped_cols), detail::image_out(user, cout, full));
  if (bias.valid()) y = std::move(y) + reshape(bias, Shape{cout, 1, 1});
  return y;
}

/// conv2d without a bias.
template <Floating T>
DeviceArray<T> conv2d(const DeviceArray<T>& x, const DeviceArray<T>& w,
                      const Conv2dOptions& o = {}) {
  return conv2d(x, w, DeviceArray<T>{}, o);
}

/// The maximum of each kernel[0] x kernel[1] window of x (N, C, H, W), padding with -inf, as
/// PyTorch's max_pool2d (ceil_mode false). NaN in a window gives NaN; ties share the gradient
/// equally (PyTorch gives it to one). Throws like conv2d, and InvalidArgument for padding above
/// half the kernel.
template <Floating T>
DeviceArray<T> max_pool2d(const DeviceArray<T>& x, std::array<std::int64_t, 2> kernel,
                          const Pool2dOptions& o = {}) {
  return detail::pool2d("max_pool2d", x, kernel, o, true);
}

/// The mean of each window, zero padding counted (PyTorch's avg_pool2d with its defaults,
/// count_include_pad true); dilation 1 in PyTorch, any here. Throws like max_pool2d.
template <Floating T>
DeviceArray<T> avg_pool2d(const DeviceArray<T>& x, std::array<std::int64_t, 2> kernel,
                          const Pool2dOptions& o = {}) {
  return detail::pool2d("avg_pool2d", x, kernel, o, false);
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(DeviceArray<float> conv2d<float>(const DeviceArray<float>&,
                                                       const DeviceArray<float>&,
                                                       const DeviceArray<float>&,
                                                       const Conv2dOptions&))

}  // namespace ferry
