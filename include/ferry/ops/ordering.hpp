#pragma once
// Ordering along an axis: argsort, sort and topk (stable; NaN after every number, in either
// direction, as NumPy sorts it last), and take_along_axis, which they are built on: sort is
// take_along_axis(a, argsort(a)), so its gradient routes each cotangent back to the element it
// came from (through take_along_axis's rule, a scatter-add along the axis).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/sort.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry {

namespace detail {

/// Checks that `idx` has a's shape except along axis `d`; ShapeError naming `op` otherwise.
inline void check_along(std::string_view op, const Shape& a, const Shape& idx, std::size_t d) {
  bool ok = a.rank() == idx.rank();
  for (std::size_t i = 0; ok && i < a.rank(); ++i) ok = i == d || a.dims()[i] == idx.dims()[i];
  if (!ok) fail<ShapeError>(op, "indices of ", idx, " must match ", a, " on every axis but ", d);
}

/// `a` with `updates` added at `indices` along `axis` (each element to the position its index
/// names in its own line): take_along_axis's gradient, under the name of the op whose gradient
/// it is (`name`, as take_along_axis's below) and reading its indices as that op did
/// (`from_end`), so that an index the op refused is refused here too. Given away, a's buffer is
/// updated in place.
template <Element T, IndexElement I>
DeviceArray<T> scatter_add_along_axis(std::string_view name, const DeviceArray<T>& a,
                                      const DeviceArray<I>& indices, const DeviceArray<T>& updates,
                                      int axis, bool from_end = true) {
  RecordScope scope;
  Step& sa = step_of(name, a);
  Step& si = step_of(name, indices);
  Step& su = step_of(name, updates);
  Step* inputs[] = {&sa, &si, &su};
  const auto& dev = common_device(name, inputs);
  const std::size_t d = normalize_axis(name, axis, sa.shape().rank());
  check_along(name, sa.shape(), si.shape(), d);
  if (su.shape() != si.shape())
    fail<ShapeError>(name, "updates ", su.shape(), " must match the indices ", si.shape());
  const AxisView v = axis_view(sa.shape(), d);
  const std::int64_t count = si.shape().dims()[d];
  DeviceArray<T> result =
      launch<T>(dev,
                {StepKind::compute,
                 name,
                 {static_cast<double>(su.shape().numel()),
                  bytes_of(sa) + bytes_of(si) + bytes_of(su),
                  bytes_of(sa),
                  {},
                  Work::layout}},
                sa.shape(), inputs,
                [name, v, count, from_end, numel = sa.shape().numel()](const Step& st) {
                  std::copy_n(st.in<T>(0), numel, st.out<T>());
                  kernels::scatter_add_along(name, st.in<I>(1), st.in<T>(2), st.out<T>(), v.outer,
                                             v.size, count, v.inner, st.runner(), from_end);
                });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [axis, name, from_end](auto t, GradCall& c) {
                     scatter_add_along_backward<I>(t, c, axis, name, from_end);
                   });
  }
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {name,
            {&sa, &si, &su},
            {},
            [axis, name, from_end](std::span<Step* const> in, std::span<const std::int64_t>) {
              return handle_of(scatter_add_along_axis(name, as_array<T>(in[0]),
                                                      as_array<I>(in[1]), as_array<T>(in[2]),
                                                      axis, from_end));
            }},
           result, rec->shape_of(sa));
  }
  return result;
}

/// take_along_axis under the name of the op that asked for it (sort, topk, cross_entropy): the
/// step and its errors, an index out of range among them, carry that name. `name` must outlive
/// the program traces that record it (a string literal). With `from_end` false a negative
/// index is out of range (cross_entropy's labels), not counted from the end.
template <Element T, IndexElement I>
DeviceArray<T> take_along_axis(std::string_view name, const DeviceArray<T>& a,
                               const DeviceArray<I>& indices, int axis, bool from_end = true) {
  RecordScope scope;
  Step& sa = step_of(name, a);
  Step& si = step_of(name, indices);
  Step* inputs[] = {&sa, &si};
  const auto& dev = common_device(name, inputs);
  const std::size_t d = normalize_axis(name, axis, sa.shape().rank());
  check_along(name, sa.shape(), si.shape(), d);
  const AxisView v = axis_view(sa.shape(), d);
  const std::int64_t count = si.shape().dims()[d];
  const auto n = static_cast<double>(si.shape().numel());
  DeviceArray<T> result =
      launch<T>(dev,
                {StepKind::compute,
                 name,
                 {0, n * sizeof(T) + bytes_of(si), n * sizeof(T), {}, Work::layout}},
                si.shape(), inputs, [name, v, count, from_end](const Step& st) {
                  kernels::take_along(name, st.in<T>(0), st.in<I>(1), st.out<T>(), v.outer, v.size,
                                      count, v.inner, st.runner(), from_end);
                });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [axis, name, from_end](auto t, GradCall& c) {
                     take_along_backward<I>(t, c, axis, name, from_end);
                   });
  }
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {name, {&sa, &si}, {},
            [name, axis, from_end](std::span<Step* const> in, std::span<const std::int64_t>) {
              return handle_of(
                  take_along_axis(name, as_array<T>(in[0]), as_array<I>(in[1]), axis, from_end));
            }},
           result, rec->shape_of(si));
  }
  return result;
}

}  // namespace detail

/// The elements of `a` at `indices` along `axis`, element by element: out[..., j, ...] =
/// a[..., indices[..., j, ...], ...] (NumPy's take_along_axis, PyTorch's gather). indices has
/// a's shape except along `axis` (no broadcasting, unlike NumPy). Its gradient scatter-adds the
/// cotangent back. Throws InvalidArgument for a bad axis or an empty handle, ShapeError for
/// indices of another shape, DeviceMismatch; an index out of range fails the step.
template <Element T, IndexElement I>
DeviceArray<T> take_along_axis(const DeviceArray<T>& a, const DeviceArray<I>& indices, int axis) {
  return detail::take_along_axis("take_along_axis", a, indices, axis);
}

/// The positions that sort `a` along `axis`, as int64: stable (equal values keep their order),
/// NaN after every number, ascending or `descending` (NaN last there too; NumPy has no
/// descending sort, PyTorch's puts NaN first). Any numeric type. No gradient. Throws
/// InvalidArgument for a bad axis or an empty handle.
template <Numeric T>
DeviceArray<std::int64_t> argsort(const DeviceArray<T>& a, int axis = -1, bool descending = false) {
  constexpr std::string_view name = "argsort";
  detail::RecordScope scope;
  detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  const detail::AxisView v = detail::axis_view(s.shape(), d);
  detail::Step* inputs[] = {&s};
  const auto n = static_cast<double>(s.shape().numel());
  const double compares =
      n * std::max(1.0, std::log2(static_cast<double>(std::max<std::int64_t>(v.size, 2))));
  DeviceArray<std::int64_t> result =
      detail::launch<std::int64_t>(s.device(),
                                   {detail::StepKind::compute,
                                    name,
                                    {compares, detail::bytes_of(s), n * 8, {}, Work::reduction}},
                                   s.shape(), inputs, [v, descending](const detail::Step& st) {
                                     kernels::argsort(st.in<T>(0), st.out<std::int64_t>(), v.outer,
                                                      v.size, v.inner, descending, st.runner());
                                   });
  if (detail::Tape* tape = scope.tape())
    detail::record_no_grad(*tape, inputs, *detail::ArrayAccess::step(result));
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(
        *rec,
        {name,
         {&s},
         {},
         [axis, descending](std::span<detail::Step* const> in, std::span<const std::int64_t>) {
           return detail::handle_of(argsort(detail::as_array<T>(in[0]), axis, descending));
         }},
        result, rec->shape_of(s));
  }
  return result;
}

/// `a` sorted along `axis` (stable, NaN last; `descending` as argsort): an argsort step and a
/// step named "sort" that picks the values. Differentiable: each cotangent goes back to the
/// element it came from. Throws InvalidArgument naming sort for a bad axis or an empty handle.
template <Numeric T>
DeviceArray<T> sort(const DeviceArray<T>& a, int axis = -1, bool descending = false) {
  constexpr std::string_view name = "sort";
  const detail::CalledOp called(name);
  static_cast<void>(detail::normalize_axis(name, axis, detail::step_of(name, a).shape().rank()));
  return detail::take_along_axis(name, a, argsort(a, axis, descending), axis);
}

/// The k largest elements along `axis` and their positions, largest first, equal values in
/// their original order, NaN ranked below every number (PyTorch ranks it above: here a NaN is
/// picked only when fewer than k numbers remain). The values are differentiable. Throws
/// InvalidArgument for a bad axis, an empty handle or k outside [0, the axis' size].
template <Numeric T>
std::pair<DeviceArray<T>, DeviceArray<std::int64_t>> topk(const DeviceArray<T>& a, std::int64_t k,
                                                          int axis = -1) {
  constexpr std::string_view name = "topk";
  const detail::CalledOp called(name);
  const detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  if (k < 0 || k > s.shape().dims()[d]) {
    detail::fail<InvalidArgument>(name, "k = ", k, " is outside [0, ", s.shape().dims()[d],
                                  "] for axis ", axis, " of ", s.shape());
  }
  DeviceArray<std::int64_t> positions =
      detail::recorded_slice(name, argsort(a, axis, true), axis, 0, k);
  DeviceArray<T> values = detail::take_along_axis(name, a, positions, axis);
  return {std::move(values), std::move(positions)};
}

}  // namespace ferry
