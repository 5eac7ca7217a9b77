#pragma once
// The two layout ops convolutions and poolings are built from: im2col (an image's windows as
// matrix columns) and col2im (its transpose, overlapping windows summed). Each is the other's
// gradient. In a jit trace the batch stays symbolic; channels and image sizes are pinned
// (guarded), so a new image size traces again.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/kernels/im2col.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry::detail {

/// The window geometry of an (N, C, H, W) image shape `s` (sizes of the window set by the caller).
inline kernels::Window2d with_image(kernels::Window2d g, const Shape& s) {
  g.n = s.dims()[0];
  g.c = s.dims()[1];
  g.h = s.dims()[2];
  g.w = s.dims()[3];
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

/// `user` (N, C, H, W) as the trace sees it: N as it is, C, H and W pinned to their values.
inline std::array<SymInt, 4> pinned_image(const Shape& user) {
  return {user[0], SymInt(static_cast<std::int64_t>(user[1])),
          SymInt(static_cast<std::int64_t>(user[2])), SymInt(static_cast<std::int64_t>(user[3]))};
}

/// x (N, C, H, W) as (N, C * KH * KW, OH * OW) windows, `pad` outside the image. The caller has
/// checked the geometry (g's window sizes, output at least 1 x 1).
template <Element T>
DeviceArray<T> im2col(std::string_view name, const DeviceArray<T>& x, kernels::Window2d window,
                      T pad) {
  RecordScope scope;
  Step& s = step_of(name, x);
  const kernels::Window2d g = with_image(window, s.shape());
  const Shape out{g.n, g.c * g.kh * g.kw, g.oh * g.ow};
  Step* inputs[] = {&s};
  const auto bytes = static_cast<double>(out.numel()) * sizeof(T);
  DeviceArray<T> result = launch<T>(
      s.device(), {StepKind::compute, name, {0, bytes_of(s), bytes, {}, Work::layout}},
      out, inputs,
      [g, pad](const Step& st) { kernels::im2col(st.in<T>(0), st.out<T>(), g, pad, st.runner()); });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [window](auto t, GradCall& c) { im2col_backward(t, c, window); });
  }
  if (Recorder* rec = scope.recorder()) {
    const std::array<SymInt, 4> u = pinned_image(rec->shape_of(s));
    record(*rec,
           {name, {&s}, {},
            [name, window, pad](std::span<Step* const> in, std::span<const std::int64_t>) {
              return handle_of(im2col(name, as_array<T>(in[0]), window, pad));
            }},
           result, Shape{u[0], SymInt(g.c * g.kh * g.kw), SymInt(g.oh * g.ow)});
  }
  return result;
}

/// cols (N, C * KH * KW, OH * OW) folded into an (N, C, H, W) image of `image`'s shape,
/// overlapping windows summed: im2col's transpose.
template <Element T>
DeviceArray<T> col2im(const DeviceArray<T>& cols, kernels::Window2d window, const Shape& image) {
  constexpr std::string_view name = "col2im";
  RecordScope scope;
  Step& s = step_of(name, cols);
  const Shape plain = ShapeAccess::plain(image);
  const kernels::Window2d g = with_image(window, plain);
  Step* inputs[] = {&s};
  const auto n = static_cast<double>(s.shape().numel());
  DeviceArray<T> result = launch<T>(
      s.device(),
      {StepKind::compute,
       name,
       {n, bytes_of(s), static_cast<double>(plain.numel()) * sizeof(T), {}, Work::layout}},
      plain, inputs,
      [g](const Step& st) { kernels::col2im(st.in<T>(0), st.out<T>(), g, st.runner()); });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [window](auto t, GradCall& c) { col2im_backward(t, c, window); });
  }
  if (Recorder* rec = scope.recorder()) {
    const std::array<SymInt, 4> u = pinned_image(image);
    record(*rec,
           {name,
            {&s},
            {u[0]},
            [window, c = g.c, h = g.h, w = g.w](std::span<Step* const> in,
                                                std::span<const std::int64_t> p) {
              return handle_of(col2im(as_array<T>(in[0]), window, Shape{p[0], c, h, w}));
            }},
           result, Shape{u[0], u[1], u[2], u[3]});
  }
  return result;
}

}  // namespace ferry::detail
