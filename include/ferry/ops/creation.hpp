#pragma once
// Arrays made on the device itself: no host data, no transfer, only a fill kernel.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/device.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/fill.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

namespace detail {

/// Whether `d` is an integer that an int64 holds (checked before any cast: converting a double
/// out of range to an integer is undefined behaviour).
inline bool is_int64_value(double d) noexcept {
  return d >= -0x1p63 && d < 0x1p63 && std::trunc(d) == d;
}

template <Element T, class Kernel>
DeviceArray<T> create(const Device& device, std::string_view name, const Shape& shape,
                      Kernel kernel) {
  const double bytes = static_cast<double>(shape.numel()) * sizeof(T);
  return launch<T>(DeviceAccess::state(device),
                   {StepKind::compute, name, {0, 0, bytes}}, shape, {},
                   std::move(kernel));
}

/// full under the name of the op that asked for it (zeros, ones, pad): its step, its errors
/// (a shape too large for memory, the device running out of it) and its trace carry that name.
/// `name` must outlive the program traces that record it (a string literal).
template <Element T>
DeviceArray<T> full(std::string_view name, const Device& device, Shape shape, T value) {
  RecordScope scope;
  const Shape plain = ShapeAccess::plain(shape);
  const auto n = static_cast<std::size_t>(plain.numel());
  DeviceArray<T> out = create<T>(device, name, plain, [n, value](const Step& s) {
    kernels::fill(s.out<T>(), n, value, s.runner());
  });
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {name, {}, sym_dims(shape),
            [name, device, value](std::span<Step* const>, std::span<const std::int64_t> p) {
              return handle_of(full<T>(name, device, Shape(p), value));
            }},
           out, shape);
  }
  return out;
}

/// full with a SymFloat value. A symbolic value is the recorded op's last parameter (after the
/// sizes), which each replay evaluates for its call; a constant one is a plain full's.
template <Floating T>
DeviceArray<T> full(std::string_view name, const Device& device, Shape shape,
                    const SymFloat& value) {
  const T v = kernels::convert_value<T>(SymFloatAccess::value(value));
  if (SymFloatAccess::node(value) == 0) return full<T>(name, device, shape, v);
  RecordScope scope;
  const Shape plain = ShapeAccess::plain(shape);
  const auto n = static_cast<std::size_t>(plain.numel());
  DeviceArray<T> out = create<T>(device, name, plain, [n, v](const Step& s) {
    kernels::fill(s.out<T>(), n, v, s.runner());
  });
  if (Recorder* rec = scope.recorder()) {
    std::vector<SymInt> params = sym_dims(shape);
    params.push_back(SymFloatAccess::word(value));
    record(*rec,
           {name, {}, std::move(params),
            [name, device](std::span<Step* const>, std::span<const std::int64_t> p) {
              const T filled = kernels::convert_value<T>(word_float(p.back()));
              return handle_of(full<T>(name, device, Shape(p.first(p.size() - 1)), filled));
            }},
           out, shape);
  }
  return out;
}

}  // namespace detail

/// An array of `shape` filled with `value`, made on the device.
/// In a traced program the shape may be symbolic (`full(dev, x.shape(), 0.f)`).
template <Element T>
DeviceArray<T> full(const Device& device, Shape shape, T value) {
  return detail::full<T>("full", device, shape, value);
}

/// An array of `shape` filled with `value`, a SymFloat (or a SymInt, read as one), for a
/// floating T given explicitly (`full<float>(dev, x.shape(), lr)`): in a traced program a
/// symbolic value is an input of the trace, so a replay fills in each call's value without
/// tracing again. Converted to T as a double scalar is (kernels::convert_value).
template <Floating T>
DeviceArray<T> full(const Device& device, Shape shape, const SymFloat& value) {
  return detail::full<T>("full", device, shape, value);
}

/// An array of `shape` filled with zeros: a step named "zeros", as its errors are.
template <Element T>
DeviceArray<T> zeros(const Device& device, Shape shape) {
  return detail::full<T>("zeros", device, shape, T{});
}

/// An array of `shape` filled with ones (true for bool): a step named "ones", as its errors are.
template <Element T>
DeviceArray<T> ones(const Device& device, Shape shape) {
  return detail::full<T>("ones", device, shape, kernels::convert_value<T>(1));
}

namespace detail {

/// The `length` values start + i * step: exact int64 arithmetic (wrapping) for an integer T,
/// else computed in double; each converted to T once.
template <Numeric T>
DeviceArray<T> iota_step(const Device& device, std::int64_t length, std::int64_t start,
                         std::int64_t step) {
  return create<T>(device, "arange", Shape{length}, [length, start, step](const Step& s) {
    if constexpr (kernels::is_int_v<T>) {
      kernels::iota_int(s.out<T>(), static_cast<std::size_t>(length), start, step, s.runner());
    } else {
      kernels::iota(s.out<T>(), static_cast<std::size_t>(length), static_cast<double>(start),
                    static_cast<double>(step), s.runner());
    }
  });
}

/// Checks the integer arange's length max(0, ceil((stop - start) / step)) on this call's
/// values: at most 2^62, the floating overload's bound, and stop - start must not overflow
/// int64 (the recorded length is an expression of that difference, which would wrap). The
/// length is counted in uint64, where neither the span of the bounds nor rounding up wraps.
inline void check_arange_length(std::int64_t start, std::int64_t stop, std::int64_t step) {
  const bool up = step > 0;
  if (up ? stop > start : stop < start) {
    // The span and the step's magnitude as uint64: exact there even for INT64_MIN.
    const auto lo = static_cast<std::uint64_t>(up ? start : stop);
    const auto hi = static_cast<std::uint64_t>(up ? stop : start);
    const std::uint64_t span = hi - lo;
    const std::uint64_t by = up ? static_cast<std::uint64_t>(step)
                                : 0 - static_cast<std::uint64_t>(step);
    if (span / by + (span % by != 0 ? 1 : 0) > (std::uint64_t{1} << 62)) {
      fail<InvalidArgument>("arange", "length of start ", start, ", stop ", stop, ", step ",
                            step, " is too large (past 2^62)");
    }
  }
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t least = std::numeric_limits<std::int64_t>::min();
  if (start >= 0 ? stop < least + start : stop > most + start) {
    fail<InvalidArgument>("arange", "stop - start overflows int64 for start ", start, ", stop ",
                          stop, ", step ", step);
  }
}

template <Numeric T>
DeviceArray<T> arange_eager(const Device& device, double start, double stop, double step) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop)) {
    fail<InvalidArgument>("arange", "needs finite bounds and a non-zero step, got start ", start,
                          ", stop ", stop, ", step ", step);
  }
  // A span past the double range would make the length inf, and the last values
  // start + i * step overflow to inf as well: refused as such rather than as a long range.
  const double span = stop - start;
  if (!std::isfinite(span)) {
    fail<InvalidArgument>("arange", "stop - start overflows double for start ", start,
                          ", stop ", stop, ", step ", step);
  }
  const double count = std::ceil(span / step);
  if (count > 0x1p62) {
    fail<InvalidArgument>("arange", "length ", count, " is too large");
  }
  const auto n = count > 0 ? static_cast<std::int64_t>(count) : std::int64_t{0};
  if (is_int64_value(start) && is_int64_value(step)) {
    return iota_step<T>(device, n, static_cast<std::int64_t>(start),
                        static_cast<std::int64_t>(step));
  }
  return create<T>(device, "arange", Shape{n}, [n, start, step](const Step& s) {
    kernels::iota(s.out<T>(), static_cast<std::size_t>(n), start, step, s.runner());
  });
}

}  // namespace detail

/// The values start + i * step for i = 0, 1, ..., n - 1 with n = ceil((stop - start) / step)
/// (0 if that is negative), as a rank-1 array: the values below `stop`, above it for a negative
/// step. As in NumPy, a fractional step can make the quotient round up, so that the last value
/// reaches `stop` (arange(1, 1.3, 0.1) has 4 values). Each value is computed in double and
/// converted to T once (kernels::convert_value); for an integer T with integer `start` and
/// `step` the progression is exact int64 arithmetic, wrapping like every integer op. Throws
/// InvalidArgument when a bound is not finite, `step` is 0 or not finite, stop - start
/// overflows double, or n exceeds 2^62.
template <Numeric T>
DeviceArray<T> arange(const Device& device, double start, double stop, double step = 1) {
  detail::RecordScope scope;
  DeviceArray<T> out = detail::arange_eager<T>(device, start, stop, step);
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {"arange", {}, {},
                    [device, start, stop, step](std::span<detail::Step* const>,
                                                std::span<const std::int64_t>) {
                      return detail::handle_of(arange<T>(device, start, stop, step));
                    }},
                   out, detail::ArrayAccess::step(out)->shape());
  }
  return out;
}

/// start, start + step, ... below `stop` (above it for a negative step), as a rank-1 array of
/// max(0, ceil((stop - start) / step)) values, from integer bounds that in a traced program may
/// be symbolic (`arange<std::int64_t>(dev, x.shape()[0], x.shape()[1])`): a replay makes the
/// range of the new bounds. The length is a symbolic expression of the bounds; the trace relies
/// on the sign of `step`, so a replay whose step has the other sign traces again. The values are
/// exact int64 arithmetic converted to T once. Throws InvalidArgument when `step` is 0, the
/// length is past 2^62, or stop - start overflows int64 (even for a short range:
/// `arange(INT64_MIN, INT64_MAX, INT64_MAX)`).
template <Numeric T>
DeviceArray<T> arange(const Device& device, SymInt start, SymInt stop, SymInt step) {
  if (step == 0) {
    detail::fail<InvalidArgument>("arange", "needs a non-zero step, got start ", start, ", stop ",
                                  stop, ", step ", step);
  }
  detail::check_arange_length(detail::SymAccess::value(start), detail::SymAccess::value(stop),
                              detail::SymAccess::value(step));
  detail::RecordScope scope;
  // ceil(d / step) as the truncated quotient plus one when the remainder lies on step's side
  // of 0 (the quotient was then rounded down): no term wraps, unlike d + step - 1 for a large
  // step. d does not wrap (checked above), nor does -r (|r| < |step|).
  const SymInt d = stop - start;
  const SymInt r = d % step;
  const SymInt rest = step > 0 ? r : -r;
  const SymInt n = max(SymInt(0), d / step + min(max(rest, SymInt(0)), SymInt(1)));
  const Shape shape{n};
  DeviceArray<T> out =
      detail::iota_step<T>(device, detail::ShapeAccess::plain(shape).dims()[0],
                           detail::SymAccess::value(start), detail::SymAccess::value(step));
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(*rec,
                   {"arange", {}, {start, stop, step},
                    [device](std::span<detail::Step* const>, std::span<const std::int64_t> p) {
                      // SymInt: the overload recorded, not the floating one an int64 would pick.
                      return detail::handle_of(
                          arange<T>(device, SymInt(p[0]), SymInt(p[1]), SymInt(p[2])));
                    }},
                   out, shape);
  }
  return out;
}

/// 0, 1, ..., n-1 as a rank-1 array: arange(device, 0, n, 1), symbolic like it. Throws
/// InvalidArgument when `n` is negative.
template <Numeric T>
DeviceArray<T> arange(const Device& device, SymInt n) {
  if (n < 0) detail::fail<InvalidArgument>("arange", "negative length ", n);
  return arange<T>(device, SymInt(0), n, SymInt(1));
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(DeviceArray<float> zeros<float>(const Device&, Shape))

}  // namespace ferry
