#pragma once
// Reductions: sum, mean, prod, max and min over any set of axes (none given: all of them), and
// argmax along one axis. Axes may be negative (-1 is the last).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/reduce.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

namespace detail {

/// The dimensions `axes` names, as flags; all of them when `axes` is empty. InvalidArgument for
/// an axis out of range or named twice.
inline std::array<bool, kMaxRank> reduced_axes(std::string_view op, const std::vector<int>& axes,
                                               std::size_t rank) {
  std::array<bool, kMaxRank> flags{};
  if (axes.empty()) {
    for (std::size_t d = 0; d < rank; ++d) flags[d] = true;
    return flags;
  }
  for (int axis : axes) {
    const std::size_t d = normalize_axis(op, axis, rank);
    if (flags[d]) fail<InvalidArgument>(op, "axis ", axis, " is given twice");
    flags[d] = true;
  }
  return flags;
}

/// The shape left after reducing the flagged dimensions (kept as size 1 with `keepdims`).
inline Shape reduced_shape(const Shape& in, const std::array<bool, kMaxRank>& flags,
                           bool keepdims) {
  std::array<std::int64_t, kMaxRank> dims{};
  std::size_t rank = 0;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (!flags[d]) {
      dims[rank++] = in.dims()[d];
    } else if (keepdims) {
      dims[rank++] = 1;
    }
  }
  return Shape(std::span<const std::int64_t>(dims.data(), rank));
}

/// A reduction's output shape for a symbolic input: the kept sizes, 1 for each reduced one
/// with `keepdims`; guards a reduced size non-zero where the op needs that (`nonempty`).
inline Shape reduced_rule(const Shape& in, const std::array<bool, kMaxRank>& flags, bool keepdims,
                          bool nonempty) {
  std::array<SymInt, kMaxRank> dims{};
  std::size_t rank = 0;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (!flags[d]) {
      dims[rank++] = in[d];
    } else {
      if (nonempty) rely_on(in[d] != 0);
      if (keepdims) dims[rank++] = 1;
    }
  }
  return Shape(std::span<const SymInt>(dims.data(), rank));
}

/// The cost of a reduction that reads `elements` elements (`bytes_read` bytes) and writes
/// `bytes_written`: one operation per element read. The reductions here and the collectives'
/// (mesh/collectives.hpp's reduce_members) share it, so the model charges them alike.
inline Cost reduction_cost(double elements, double bytes_read, double bytes_written) {
  return {elements, bytes_read, bytes_written, {}, Work::reduction};
}

template <Element T>
DeviceArray<T> reduce_eager(std::string_view name, kernels::ReduceOp op, const DeviceArray<T>& a,
                            const std::vector<int>& axes, bool keepdims);

template <Element T>
DeviceArray<T> reduce(std::string_view name, kernels::ReduceOp op, const DeviceArray<T>& a,
                      const std::vector<int>& axes, bool keepdims) {
  RecordScope scope;
  DeviceArray<T> out = reduce_eager(name, op, a, axes, keepdims);
  if (Tape* tape = scope.tape()) {
    Step* in[] = {ArrayAccess::step(a)};
    record_grad<T>(*tape, in, *ArrayAccess::step(out), [op, axes, keepdims](auto t, GradCall& c) {
      reduce_backward(t, c, op, axes, keepdims);
    });
  }
  if (Recorder* rec = scope.recorder()) {
    Step& s = *ArrayAccess::step(a);
    const bool nonempty = op == kernels::ReduceOp::max || op == kernels::ReduceOp::min;
    record(*rec,
           {name,
            {&s},
            {},
            [name, op, axes, keepdims](std::span<Step* const> in, std::span<const std::int64_t>) {
              return handle_of(reduce_eager(name, op, as_array<T>(in[0]), axes, keepdims));
            }},
           out,
           reduced_rule(rec->shape_of(s), reduced_axes(name, axes, s.shape().rank()), keepdims,
                        nonempty));
  }
  return out;
}

template <Element T>
DeviceArray<T> reduce_eager(std::string_view name, kernels::ReduceOp op, const DeviceArray<T>& a,
                            const std::vector<int>& axes, bool keepdims) {
  Step& s = step_of(name, a);
  const Shape in = s.shape();
  const std::array<bool, kMaxRank> flags = reduced_axes(name, axes, in.rank());
  const Shape out = reduced_shape(in, flags, keepdims);
  if (op == kernels::ReduceOp::max || op == kernels::ReduceOp::min) {
    for (std::size_t d = 0; d < in.rank(); ++d) {
      if (flags[d] && in.dims()[d] == 0) {
        fail<ShapeError>(name, "cannot reduce the empty axis ", d, " of ", in,
                         ": the result has no identity");
      }
    }
  }
  Step* inputs[] = {&s};
  const auto n = static_cast<double>(in.numel());
  return launch<T>(s.device(),
                   {StepKind::compute, name,
                    reduction_cost(n, bytes_of(s), static_cast<double>(out.numel()) * sizeof(T))},
                   out, inputs, [in, flags, op](const Step& st) {
                     kernels::reduce(st.in<T>(0), st.out<T>(), in, flags, op, st.runner());
                   });
}

}  // namespace detail

/// The sum over `axes` (all when empty), keeping reduced axes as size 1 with `keepdims`.
/// Floating sums accumulate in double; integer sums wrap. Throws InvalidArgument for a bad or
/// repeated axis or an empty handle.
template <Numeric T>
DeviceArray<T> sum(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                   bool keepdims = false) {
  return detail::reduce("sum", kernels::ReduceOp::sum, a, axes, keepdims);
}

/// The arithmetic mean over `axes`, like sum; floating types only (NaN for an empty extent).
template <Floating T>
DeviceArray<T> mean(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                    bool keepdims = false) {
  return detail::reduce("mean", kernels::ReduceOp::mean, a, axes, keepdims);
}

/// The product over `axes`, like sum: 1 for an empty extent; floating products accumulate in
/// double, integer products wrap. Its gradient is the product of the other elements, exact
/// where elements are 0 (one zero: only it gets a gradient; two or more: none do), as in JAX;
/// differentiated again, exact there too (to any order with at most two zeros, to the second
/// with more).
template <Numeric T>
DeviceArray<T> prod(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                    bool keepdims = false) {
  return detail::reduce("prod", kernels::ReduceOp::prod, a, axes, keepdims);
}

/// The maximum over `axes`, like sum; NaN if any reduced value is NaN. Throws ShapeError when
/// a reduced axis has size 0.
template <Numeric T>
DeviceArray<T> max(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                   bool keepdims = false) {
  return detail::reduce("max", kernels::ReduceOp::max, a, axes, keepdims);
}

/// The minimum over `axes`, like max.
template <Numeric T>
DeviceArray<T> min(const DeviceArray<T>& a, const std::vector<int>& axes = {},
                   bool keepdims = false) {
  return detail::reduce("min", kernels::ReduceOp::min, a, axes, keepdims);
}

namespace detail {

/// argmax, or argmin with `smallest`: the first extreme position along `axis` (of the first
/// NaN, if any), as int64.
template <Numeric T>
DeviceArray<std::int64_t> arg_extreme(std::string_view name, const DeviceArray<T>& a, int axis,
                                      bool keepdims, bool smallest) {
  RecordScope scope;
  Step& s = step_of(name, a);
  const Shape in = s.shape();
  const std::size_t d = normalize_axis(name, axis, in.rank());
  if (in.dims()[d] == 0) {
    fail<ShapeError>(name, "axis ", axis, " of ", in, " is empty");
  }
  std::array<bool, kMaxRank> flags{};
  flags[d] = true;
  const Shape out = reduced_shape(in, flags, keepdims);
  const AxisView v = axis_view(in, d);
  Step* inputs[] = {&s};
  DeviceArray<std::int64_t> result = launch<std::int64_t>(
      s.device(),
      {StepKind::compute, name,
       reduction_cost(static_cast<double>(in.numel()), bytes_of(s),
                      static_cast<double>(out.numel()) * sizeof(std::int64_t))},
      out, inputs, [v, smallest](const Step& st) {
        kernels::argmax(st.in<T>(0), st.out<std::int64_t>(), v.outer, v.size, v.inner, st.runner(),
                        smallest);
      });
  if (Tape* tape = scope.tape()) record_no_grad(*tape, inputs, *ArrayAccess::step(result));
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {name,
            {&s},
            {},
            [name, axis, keepdims, smallest](std::span<Step* const> src,
                                             std::span<const std::int64_t>) {
              return handle_of(arg_extreme(name, as_array<T>(src[0]), axis, keepdims, smallest));
            }},
           result, reduced_rule(rec->shape_of(s), flags, keepdims, true));
  }
  return result;
}

}  // namespace detail

/// The index of the first maximum along `axis` (of the first NaN, if any), as int64. Throws
/// InvalidArgument for a bad axis, ShapeError when that axis has size 0.
template <Numeric T>
DeviceArray<std::int64_t> argmax(const DeviceArray<T>& a, int axis, bool keepdims = false) {
  return detail::arg_extreme("argmax", a, axis, keepdims, false);
}

/// The index of the first minimum along `axis` (of the first NaN, if any), like argmax.
template <Numeric T>
DeviceArray<std::int64_t> argmin(const DeviceArray<T>& a, int axis, bool keepdims = false) {
  return detail::arg_extreme("argmin", a, axis, keepdims, true);
}

}  // namespace ferry
