#pragma once
// cumsum along one axis; its gradient is the reversed cumulative sum of the cotangent.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/kernels/scan.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

/// The running sums of `a` along `axis`: out[..., j, ...] = a[..., 0, ...] + ... + a[..., j, ...]
/// (NumPy's cumsum with an axis). Floating sums accumulate in double and round each output once
/// (NumPy accumulates in the element type); integer sums wrap. Throws InvalidArgument for a bad
/// axis or an empty handle.
template <Numeric T>
DeviceArray<T> cumsum(const DeviceArray<T>& a, int axis) {
  constexpr std::string_view name = "cumsum";
  detail::RecordScope scope;
  detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  const detail::AxisView v = detail::axis_view(s.shape(), d);
  detail::Step* inputs[] = {&s};
  const auto n = static_cast<double>(s.shape().numel());
  DeviceArray<T> out = detail::launch<T>(
      s.device(),
      {detail::StepKind::compute,
       name,
       {n, detail::bytes_of(s), detail::bytes_of(s), {}, Work::reduction}},
      s.shape(), inputs, [v](const detail::Step& st) {
        kernels::cumsum(st.in<T>(0), st.out<T>(), v.outer, v.size, v.inner, st.runner());
      });
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(out),
        [axis](auto t, detail::GradCall& c) { detail::cumsum_backward(t, c, axis); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {name, {&s}, {},
                    [axis](std::span<detail::Step* const> in, std::span<const std::int64_t>) {
                      return detail::handle_of(cumsum(detail::as_array<T>(in[0]), axis));
                    }},
                   out, rec->shape_of(s));
  }
  return out;
}

}  // namespace ferry
