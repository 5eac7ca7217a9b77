#pragma once
// reshape, transpose and permute. A row-major array is contiguous, so a reshape never copies:
// it is a view step whose output borrows its source's buffer (a tiled one is converted first).

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"

namespace ferry {

namespace detail {

/// reshape under the name of the op that asked for it (squeeze, unsqueeze, tile...): the view's
/// step and its errors carry that name. `name` must outlive the program traces that record it
/// (a string literal).
template <Element T>
DeviceArray<T> reshape(std::string_view name, const DeviceArray<T>& a, Shape shape) {
  RecordScope scope;
  Step& s = step_of(name, a);
  const Shape plain = ShapeAccess::plain(shape);
  if (s.shape().numel() != plain.numel()) {
    fail<ShapeError>(name, "cannot reshape ", s.shape(), " of ", s.shape().numel(),
                     " elements into ", plain, " of ", plain.numel());
  }
  if (plain == s.shape()) {
    if (Recorder* rec = scope.recorder()) {
      static_cast<void>(same_shape_rule(rec->shape_of(s), shape));  // guards "same"
    }
    return a;
  }
  DeviceArray<T> out = launch_view<T>(name, s, plain, 0);
  if (Tape* tape = scope.tape()) {
    Step* in[] = {&s};
    record_grad<T>(*tape, in, *ArrayAccess::step(out),
                   [](auto t, GradCall& c) { reshape_backward(t, c); });
  }
  if (Recorder* rec = scope.recorder()) {
    const Shape in = rec->shape_of(s);
    rely_on(in.size() == shape.size());
    static_cast<void>(same_shape_rule(in, shape));  // guards "not the same"
    record(*rec,
           {name, {&s}, sym_dims(shape),
            [name](std::span<Step* const> src, std::span<const std::int64_t> p) {
              return handle_of(reshape(name, as_array<T>(src[0]), Shape(p)));
            }},
           out, shape);
  }
  return out;
}

}  // namespace detail

/// The same values with `shape` (row-major order), without copying them. Throws ShapeError
/// when the element counts differ, InvalidArgument for an empty handle.
template <Element T>
DeviceArray<T> reshape(const DeviceArray<T>& a, Shape shape) {
  return detail::reshape("reshape", a, shape);
}

namespace detail {

/// "(2, -1, 4)": the sizes a caller asked for, -1 included (a Shape cannot hold -1).
inline std::string requested_dims(std::span<const SymInt> dims) {
  std::string out = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += dims[i].to_string();
  }
  return out + ")";
}

/// The shape `dims` asks of an array of shape `in`, its one -1 replaced by the element count
/// divided by the product of the other sizes. In a trace that size is the symbolic quotient
/// (guarded to divide exactly), so a replay infers it again for its own sizes.
inline Shape infer_reshape(std::string_view name, const Shape& in, std::span<const SymInt> dims) {
  std::size_t unknown = dims.size();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = SymAccess::value(dims[i]);
    if (d == -1 && unknown != dims.size()) {
      fail<InvalidArgument>(name, "more than one -1 in ", requested_dims(dims));
    }
    if (d == -1) {
      unknown = i;
    } else if (d < 0) {
      fail<InvalidArgument>(name, "negative size ", d, " in dimension ", i, " of ",
                            requested_dims(dims));
    }
  }
  if (dims.size() > kMaxRank) {
    fail<InvalidArgument>(name, "rank ", dims.size(), " exceeds the maximum of ", kMaxRank);
  }
  if (unknown == dims.size()) {
    check_count_fits(name, dims);
    return Shape(dims);
  }
  // The product of the known sizes, checked for overflow on the values of this call: one that
  // overflows cannot divide the element count anyway.
  std::int64_t known = 1;
  bool overflow = false;
  SymInt sym_known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i == unknown) continue;
    const std::int64_t d = SymAccess::value(dims[i]);
    if (d != 0 && known > std::numeric_limits<std::int64_t>::max() / d) overflow = true;
    if (!overflow) known *= d;
    sym_known = sym_known * dims[i];
  }
  const SymInt count = in.size();
  const std::int64_t n = SymAccess::value(count);
  if (overflow || known == 0 || n % known != 0) {
    fail<ShapeError>(name, "cannot reshape ", in, " of ", n, " elements into ",
                     requested_dims(dims),
                     known == 0 ? ": -1 is ambiguous next to a zero size" : "");
  }
  rely_on(sym_known != 0);
  rely_on(count % sym_known == 0);
  std::array<SymInt, kMaxRank> out{};
  for (std::size_t i = 0; i < dims.size(); ++i) out[i] = i == unknown ? count / sym_known : dims[i];
  return Shape(std::span<const SymInt>(out.data(), dims.size()));
}

}  // namespace detail

/// reshape where one size may be -1: that size is inferred from the element count and the
/// other sizes, as NumPy and PyTorch do (`reshape(a, {-1, 4})`). In a traced program the
/// inferred size is symbolic (element count / product of the others), so one trace serves
/// other sizes. A -1 next to a zero size is refused even when the count is 0, as NumPy and
/// PyTorch refuse it (any size would do). Throws InvalidArgument for two -1s, another
/// negative size, more than kMaxRank sizes, sizes whose product overflows int64 or an empty
/// handle; ShapeError when the count is not a multiple of the product of the other sizes, or
/// that product is 0.
template <Element T>
DeviceArray<T> reshape(const DeviceArray<T>& a, const std::vector<SymInt>& dims) {
  constexpr std::string_view name = "reshape";
  const Shape in = detail::user_shape(detail::step_of(name, a));
  return reshape(a, detail::infer_reshape(name, in, dims));
}

/// reshape of a braced list, -1 allowed once: `reshape(a, {-1, 4})`. Every braced call,
/// `reshape(a, {2, 3})` too, resolves here (a braced list prefers std::initializer_list); without
/// a -1 it is `reshape(a, Shape{2, 3})`. Throws like the std::vector<SymInt> overload.
template <Element T>
DeviceArray<T> reshape(const DeviceArray<T>& a, std::initializer_list<SymInt> dims) {
  constexpr std::string_view name = "reshape";
  const Shape in = detail::user_shape(detail::step_of(name, a));
  const std::span<const SymInt> list(dims.begin(), dims.size());
  return reshape(a, detail::infer_reshape(name, in, list));
}

namespace detail {

/// permute under the name of the op that asked for it (transpose, swapaxes): the step and its
/// errors carry that name. `name` must outlive the program traces that record it (a string
/// literal). `axes` is a span: a transpose's axes need no vector of their own unless a tape
/// or a trace keeps them.
template <Element T>
DeviceArray<T> permute(std::string_view name, const DeviceArray<T>& a, std::span<const int> axes) {
  RecordScope scope;
  Step& s = step_of(name, a);
  const Shape& in = s.shape();
  if (axes.size() != in.rank()) {
    fail<InvalidArgument>(name, axes.size(), " axes given for an array of rank ", in.rank());
  }
  std::array<bool, kMaxRank> seen{};
  std::array<std::int64_t, kMaxRank> dims{};
  const Strides own = row_major_strides(in);
  Strides from{};  // input stride along each output dimension
  bool identity = true;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const std::size_t d = normalize_axis(name, axes[i], in.rank());
    if (seen[d]) fail<InvalidArgument>(name, "axis ", axes[i], " is given twice");
    seen[d] = true;
    identity = identity && d == i;
    dims[i] = in.dims()[d];
    from[i] = own[d];
  }
  if (identity) return a;
  const Shape out(std::span<const std::int64_t>(dims.data(), in.rank()));
  Step* inputs[] = {&s};
  DeviceArray<T> result = launch<T>(
      s.device(),
      {StepKind::compute, name, {0, bytes_of(s), bytes_of(s), {}, Work::layout}}, out,
      inputs, [out, from](const Step& st) {
        kernels::gather(st.in<T>(0), st.out<T>(), out, from, st.runner());
      });
  if (Tape* tape = scope.tape()) {
    record_grad<T>(*tape, inputs, *ArrayAccess::step(result),
                   [axes = std::vector<int>(axes.begin(), axes.end())](auto t, GradCall& c) {
                     permute_backward(t, c, axes);
                   });
  }
  if (Recorder* rec = scope.recorder()) {
    const Shape user = rec->shape_of(s);
    std::array<SymInt, kMaxRank> sym{};
    for (std::size_t i = 0; i < axes.size(); ++i) {
      sym[i] = user[normalize_axis(name, axes[i], in.rank())];
    }
    record(*rec,
           {name, {&s}, {},
            [name, axes = std::vector<int>(axes.begin(), axes.end())](
                std::span<Step* const> src, std::span<const std::int64_t>) {
              return handle_of(permute(name, as_array<T>(src[0]), axes));
            }},
           result, Shape(std::span<const SymInt>(sym.data(), in.rank())));
  }
  return result;
}

}  // namespace detail

/// The array with its dimensions reordered: dimension i of the result is dimension axes[i] of
/// `a` (axes may be negative). Throws InvalidArgument unless `axes` is a permutation of the
/// dimensions.
template <Element T>
DeviceArray<T> permute(const DeviceArray<T>& a, const std::vector<int>& axes) {
  return detail::permute("permute", a, axes);
}

/// The array with its dimensions reversed (the matrix transpose for rank 2): a step named
/// "transpose". Throws InvalidArgument for an empty handle.
template <Element T>
DeviceArray<T> transpose(const DeviceArray<T>& a) {
  constexpr std::string_view name = "transpose";
  const std::size_t rank = detail::step_of(name, a).shape().rank();
  std::array<int, kMaxRank> axes{};
  for (std::size_t i = 0; i < rank; ++i) axes[i] = static_cast<int>(rank - 1 - i);
  return detail::permute(name, a, std::span<const int>(axes.data(), rank));
}

}  // namespace ferry
