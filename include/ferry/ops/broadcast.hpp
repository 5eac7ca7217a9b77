#pragma once
// broadcast_to: an array repeated along new or size-1 dimensions, as NumPy broadcasting does,
// written out as a new array (the gradient of every reduction).

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

namespace detail {

/// `a` broadcast to `shape`; with `average`, each value divided by how many times it is
/// repeated (numel of the result / numel of `a`): the gradient of a mean, which a replay
/// computes again from the sizes of the call.
template <Element T>
DeviceArray<T> expand(std::string_view name, const DeviceArray<T>& a, const Shape& shape,
                      bool average) {
  RecordScope scope;
  Step& s = step_of(name, a);
  const Shape plain = ShapeAccess::plain(shape);
  const Shape out = broadcast_shapes(name, s.shape(), plain);
  if (out != plain) fail<ShapeError>(name, "cannot broadcast ", s.shape(), " to ", plain);
  if (out == s.shape()) return a;  // each value is repeated once
  const Strides from = broadcast_strides(s.shape(), out);
  const double scale = out.numel() == 0 ? 1.0
                                        : static_cast<double>(s.shape().numel()) /
                                              static_cast<double>(out.numel());
  Step* inputs[] = {&s};
  const auto n = static_cast<double>(out.numel());
  DeviceArray<T> result = launch<T>(
      s.device(),
      {StepKind::compute, name,
       {average ? n : 0, bytes_of(s), n * sizeof(T), {}, Work::layout}},
      out, inputs, [out, from, average, scale](const Step& st) {
        kernels::gather(st.in<T>(0), st.out<T>(), out, from, st.runner());
        if (!average) return;
        kernels::map(st.out<T>(), st.out<T>(), static_cast<std::size_t>(out.numel()),
                     [scale](auto x) { return x * static_cast<decltype(x)>(scale); }, st.runner());
      });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [average](auto t, GradCall& c) { broadcast_backward(t, c, average); });
  }
  if (Recorder* rec = scope.recorder()) {
    const Shape user = rec->shape_of(s);
    static_cast<void>(same_shape_rule(broadcast_rule(user, shape), shape));
    static_cast<void>(same_shape_rule(user, shape));  // guards "not the same"
    record(*rec,
           {name, {&s}, sym_dims(shape),
            [name, average](std::span<Step* const> in, std::span<const std::int64_t> p) {
              return handle_of(expand(name, as_array<T>(in[0]), Shape(p), average));
            }},
           result, shape);
  }
  return result;
}

}  // namespace detail

/// `a` repeated along `shape` as NumPy broadcasting repeats an operand: trailing dimensions
/// line up, and each of `a` is 1 or the size in `shape` (new leading dimensions are added).
/// Returns `a` itself when it already has `shape`. In a traced program `shape` may be
/// symbolic. Throws ShapeError when `a` does not broadcast to exactly `shape`, InvalidArgument
/// for an empty handle.
template <Element T>
DeviceArray<T> broadcast_to(const DeviceArray<T>& a, Shape shape) {
  return detail::expand("broadcast_to", a, shape, false);
}

}  // namespace ferry
