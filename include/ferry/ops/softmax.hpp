#pragma once
// softmax along one axis.

#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/array.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/kernels/softmax.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"

namespace ferry {

/// e^a / sum(e^a) along `axis` (negative counts from the end), computed stably. Floating
/// types only. Throws InvalidArgument for a bad axis or an empty handle.
template <Floating T>
DeviceArray<T> softmax(const DeviceArray<T>& a, int axis) {
  constexpr std::string_view name = "softmax";
  detail::RecordScope scope;
  detail::Step& s = detail::step_of(name, a);
  const Shape& in = s.shape();
  const std::size_t d = detail::normalize_axis(name, axis, in.rank());
  const detail::AxisView v = detail::axis_view(in, d);
  detail::Step* inputs[] = {&s};
  const auto n = static_cast<double>(in.numel());
  // exp, max, sum and divide: about four operations an element.
  DeviceArray<T> out = detail::launch<T>(s.device(),
                           {detail::StepKind::compute, name,
                            {4 * n, detail::bytes_of(s), detail::bytes_of(s), {}, Work::reduction}},
                           in, inputs, [v](const detail::Step& st) {
                             kernels::softmax(st.in<T>(0), st.out<T>(), v.outer, v.size, v.inner,
                                              st.runner());
                           });
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(out),
        [axis](auto t, detail::GradCall& c) { detail::softmax_backward(t, c, axis); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {name, {&s}, {},
                    [axis](std::span<detail::Step* const> src, std::span<const std::int64_t>) {
                      return detail::handle_of(softmax(detail::as_array<T>(src[0]), axis));
                    }},
                   out, rec->shape_of(s));
  }
  return out;
}

}  // namespace ferry
