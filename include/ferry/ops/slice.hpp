#pragma once
// slice, concat and split along one axis: block copies.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

namespace detail {

inline Shape with_dim(const Shape& s, std::size_t d, std::int64_t size) {
  std::array<std::int64_t, kMaxRank> dims{};
  for (std::size_t i = 0; i < s.rank(); ++i) dims[i] = s.dims()[i];
  dims[d] = size;
  return Shape(std::span<const std::int64_t>(dims.data(), s.rank()));
}

/// `at`, a position on an axis of `size` where a negative one counts from the end (NumPy's
/// rule: -1 is the last element), as a position from the start; it may still lie outside
/// [0, size]. In a trace the sign of a symbolic `at` is guarded, so a replay whose position
/// changes sign traces again.
inline SymInt from_end(const SymInt& at, const SymInt& size) { return at < 0 ? at + size : at; }

/// "-1 (position 4)": a position as given, and where it lands when it counts from the end.
inline std::string given_position(std::int64_t given, std::int64_t at) {
  std::string out = std::to_string(given);
  if (given != at) out += " (position " + std::to_string(at) + ")";
  return out;
}

/// Checks that positions `begin` and `end` (negative ones counting from the end) make a range
/// of axis `d` of `in` (given as `axis`): InvalidArgument naming `name` when one lies outside
/// the axis, or when begin comes after end.
inline void check_range(std::string_view name, const Shape& in, int axis, std::size_t d,
                        std::int64_t begin, std::int64_t end) {
  const std::int64_t size = in.dims()[d];
  const std::int64_t b = begin < 0 ? begin + size : begin;  // no overflow: size >= 0
  const std::int64_t e = end < 0 ? end + size : end;
  if (b < 0 || b > size || e < 0 || e > size) {
    fail<InvalidArgument>(name, "range [", begin, ", ", end, ") is outside axis ", axis,
                          " of size ", size, " in ", in);
  }
  if (b > e) {
    fail<InvalidArgument>(name, "begin ", given_position(begin, b), " is after end ",
                          given_position(end, e), " along axis ", axis, " of size ", size,
                          " in ", in);
  }
}

/// Elements [begin, end) along `axis`, both positions from the start of the axis.
template <Element T>
DeviceArray<T> slice(std::string_view name, const DeviceArray<T>& a, int axis, std::int64_t begin,
                     std::int64_t end) {
  Step& s = step_of(name, a);
  const Shape& in = s.shape();
  const std::size_t d = normalize_axis(name, axis, in.rank());
  const std::int64_t size = in.dims()[d];
  if (begin < 0 || end < 0) {
    fail<InvalidArgument>(name, "range [", begin, ", ", end, ") is outside axis ", axis,
                          " of size ", size, " in ", in);
  }
  check_range(name, in, axis, d, begin, end);
  if (begin == 0 && end == size) return a;
  const Shape out = with_dim(in, d, end - begin);
  const AxisView v = axis_view(in, d);
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t src_pitch = size * v.inner * bytes;
  const std::int64_t block = (end - begin) * v.inner * bytes;
  const std::int64_t first = begin * v.inner * bytes;
  const std::int64_t outer = v.outer;
  // One block (a range of the first axis that is not 1): a view of it, no copy.
  if (outer == 1) return launch_view<T>(name, s, out, static_cast<std::size_t>(first));
  Step* inputs[] = {&s};
  const auto written = static_cast<double>(out.numel() * bytes);
  return launch<T>(s.device(), {StepKind::compute, name, {0, written, written}}, out,
                   inputs, [outer, src_pitch, block, first](const Step& st) {
                     // An empty result copies nothing, and its source may have no buffer:
                     // offsetting a null pointer by `first` would be undefined.
                     if (outer == 0 || block == 0) return;
                     kernels::copy_blocks(st.in<std::byte>(0) + first, src_pitch,
                                          st.out<std::byte>(), block, outer, block, st.runner());
                   });
}

/// slice, recorded in a trace with symbolic bounds.
template <Element T>
DeviceArray<T> recorded_slice(std::string_view name, const DeviceArray<T>& a, int axis,
                              const SymInt& begin, const SymInt& end) {
  RecordScope scope;
  DeviceArray<T> out = slice(name, a, axis, SymAccess::value(begin), SymAccess::value(end));
  if (Tape* tape = scope.tape()) {
    Step* in[] = {ArrayAccess::step(a)};
    record_grad<T>(*tape, in, *ArrayAccess::step(out),
                   [axis, begin](auto t, GradCall& c) { slice_backward(t, c, axis, begin); });
  }
  if (Recorder* rec = scope.recorder()) {
    Step& s = *ArrayAccess::step(a);
    const Shape in = rec->shape_of(s);
    const std::size_t d = normalize_axis(name, axis, in.rank());
    rely_on(begin >= 0);
    rely_on(begin <= end);
    rely_on(end <= in[d]);
    // The op returns `a` itself for the whole axis: a replay must decide the same way.
    if (begin == 0 && end == in[d]) return out;
    record(*rec,
           {name, {&s}, {begin, end},
            [name, axis](std::span<Step* const> src, std::span<const std::int64_t> p) {
              return handle_of(slice(name, as_array<T>(src[0]), axis, p[0], p[1]));
            }},
           out, with_sym_dim(in, d, end - begin));
  }
  return out;
}

}  // namespace detail

/// Elements [begin, end) along `axis`, as a new array: a view of `a`'s buffer, without a copy,
/// when the range is one contiguous block (every axis before `axis` has size 1). Negative
/// values of `axis`, `begin` and `end` count from the end, as in NumPy: `slice(a, 1, -1, n)` is
/// the last element along axis 1 when n is its size. In a traced program `begin` and `end` may
/// be symbolic (a replay whose position changes sign traces again). Unlike NumPy, positions
/// are not clamped. Throws InvalidArgument for a bad axis, a position outside [-size, size]
/// of the axis, or a begin that comes after end once both count from the start.
template <Element T>
DeviceArray<T> slice(const DeviceArray<T>& a, int axis, SymInt begin, SymInt end) {
  constexpr std::string_view name = "slice";
  detail::Step& s = detail::step_of(name, a);
  const std::size_t d = detail::normalize_axis(name, axis, s.shape().rank());
  detail::check_range(name, s.shape(), axis, d, detail::SymAccess::value(begin),
                      detail::SymAccess::value(end));
  const SymInt size = detail::user_shape(s)[d];
  return detail::recorded_slice(name, a, axis, detail::from_end(begin, size),
                                detail::from_end(end, size));
}

namespace detail {

/// Where one part of a join (join_rows) comes from: its input, the byte offset in it of the
/// part's first row, and the bytes the part gives each row of the output.
struct JoinPart {
  std::size_t input = 0;
  std::int64_t offset = 0;
  std::int64_t block = 0;
};

/// One step of `dev` named `name` joining row-major parts of `inputs` side by side into each of
/// the `outer` rows of an output of `out` (a row: the parts' blocks, in the order of `parts`);
/// its modeled cost copies `written` bytes. concat's step, and a collective's join (which
/// reads each received part where it lies).
template <Element T>
DeviceArray<T> join_rows(std::string_view name, const std::shared_ptr<DeviceState>& dev,
                         const Shape& out, std::span<Step* const> inputs,
                         std::vector<JoinPart> parts, std::int64_t outer, double written) {
  std::int64_t out_pitch = 0;
  for (const JoinPart& p : parts) out_pitch += p.block;
  return launch<T>(dev, {StepKind::compute, name, {0, written, written}}, out, inputs,
                   [parts = std::move(parts), outer, out_pitch](const Step& st) {
                     // An empty result has no buffer to offset into (see slice).
                     if (outer == 0 || out_pitch == 0) return;
                     std::int64_t at = 0;
                     for (const JoinPart& p : parts) {
                       kernels::copy_blocks(st.in<std::byte>(p.input) + p.offset, p.block,
                                            st.out<std::byte>() + at, out_pitch, outer, p.block,
                                            st.runner());
                       at += p.block;
                     }
                   });
}

/// concat under the name of the op that asked for it (stack, pad): the step and its errors
/// carry that name. `name` must outlive the program traces that record it (a string literal).
/// `own` (a collective's join): the one array the step's modeled cost copies; the others are
/// received parts, which a real library's links write where they belong in the output.
template <Element T>
DeviceArray<T> concat(std::string_view name, const std::vector<DeviceArray<T>>& arrays, int axis,
                      std::size_t own = std::size_t(-1)) {
  detail::RecordScope scope;
  if (arrays.empty()) detail::fail<InvalidArgument>(name, "needs at least one array");
  std::vector<detail::Step*> inputs;
  inputs.reserve(arrays.size());
  for (const DeviceArray<T>& a : arrays) inputs.push_back(&detail::step_of(name, a));
  const auto& dev = detail::common_device(name, inputs);
  const Shape& first = inputs.front()->shape();
  const std::size_t d = detail::normalize_axis(name, axis, first.rank());
  std::int64_t total = 0;
  for (detail::Step* s : inputs) {
    const Shape& sh = s->shape();
    bool same = sh.rank() == first.rank();
    for (std::size_t i = 0; same && i < sh.rank(); ++i)
      same = i == d || sh.dims()[i] == first.dims()[i];
    if (!same) {
      detail::fail<ShapeError>(name, "shapes ", first, " and ", sh, " differ outside axis ", axis);
    }
    // Empty arrays (a zero elsewhere) may have any size along `axis`: the sum may not fit.
    if (sh.dims()[d] > std::numeric_limits<std::int64_t>::max() - total) {
      detail::fail<InvalidArgument>(name, "sizes along axis ", axis,
                                    " add up to more than int64 holds");
    }
    total += sh.dims()[d];
  }
  if (arrays.size() == 1) return arrays.front();
  const Shape out = detail::with_dim(first, d, total);
  const detail::AxisView v = detail::axis_view(out, d);
  const std::int64_t outer = v.outer;
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  std::vector<detail::JoinPart> whole;  // each input whole, its rows one after another
  whole.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    whole.push_back({i, 0, inputs[i]->shape().dims()[d] * v.inner * bytes});
  const auto written = static_cast<double>(
      own < inputs.size() ? inputs[own]->shape().numel() * bytes : out.numel() * bytes);
  DeviceArray<T> result =
      detail::join_rows<T>(name, dev, out, inputs, std::move(whole), outer, written);
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(result),
        [axis](auto t, detail::GradCall& c) { detail::concat_backward(t, c, axis); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    const Shape head = rec->shape_of(*inputs.front());
    SymInt sum = 0;
    for (detail::Step* s : inputs) {
      const Shape sh = rec->shape_of(*s);
      for (std::size_t i = 0; i < sh.rank(); ++i) {
        if (i != d) detail::rely_on(sh[i] == head[i]);
      }
      sum = sum + sh[d];
    }
    detail::record(
        *rec,
        {name,
         inputs,
         {},
         [name, axis, own](std::span<detail::Step* const> src, std::span<const std::int64_t>) {
           std::vector<DeviceArray<T>> parts;
           for (detail::Step* s : src) parts.push_back(detail::as_array<T>(s));
           return detail::handle_of(concat(name, parts, axis, own));
         }},
        result, detail::with_sym_dim(head, d, sum));
  }
  return result;
}

}  // namespace detail

/// The arrays joined along `axis`. Throws InvalidArgument for an empty list, a bad axis, an
/// empty handle or sizes along `axis` whose sum overflows int64; ShapeError when ranks or the
/// other dimensions differ; DeviceMismatch.
template <Element T>
DeviceArray<T> concat(const std::vector<DeviceArray<T>>& arrays, int axis) {
  return detail::concat("concat", arrays, axis);
}

/// concat of a braced list: `concat({a, b}, 0)`.
template <Element T>
DeviceArray<T> concat(std::initializer_list<DeviceArray<T>> arrays, int axis) {
  return concat(std::vector<DeviceArray<T>>(arrays), axis);
}

/// `a` cut along `axis` into consecutive parts of the given sizes (symbolic in a traced
/// program: `split(x, {d0, d1, x.shape()[2] - d0 - d1}, 2)`). Throws InvalidArgument for a
/// negative size or a bad axis, ShapeError when the sizes do not add up to the axis' size.
template <Element T>
std::vector<DeviceArray<T>> split(const DeviceArray<T>& a, const std::vector<SymInt>& sizes,
                                  int axis) {
  constexpr std::string_view name = "split";
  const Shape in = detail::user_shape(detail::step_of(name, a));
  const std::size_t d = detail::normalize_axis(name, axis, in.rank());
  const SymInt size = in[d];
  for (const SymInt& n : sizes) {
    if (n < 0) detail::fail<InvalidArgument>(name, "negative part size ", n);
  }
  SymInt total = 0;
  bool fits = true;
  for (const SymInt& n : sizes) {
    fits = fits && n <= size - total;  // checked before adding: no overflow on huge sizes
    if (fits) total = total + n;
  }
  if (!fits || total != size) {
    detail::fail<ShapeError>(name, "part sizes do not add up to ", size, ", the size of axis ",
                             axis, " of ", in);
  }
  std::vector<DeviceArray<T>> parts;
  parts.reserve(sizes.size());
  SymInt begin = 0;
  for (const SymInt& n : sizes) {
    parts.push_back(detail::recorded_slice(name, a, axis, begin, begin + n));
    begin = begin + n;
  }
  return parts;
}

/// split with sizes held as plain integers.
template <Element T, class Sizes>
  requires std::same_as<Sizes, std::vector<std::int64_t>>
std::vector<DeviceArray<T>> split(const DeviceArray<T>& a, const Sizes& sizes, int axis) {
  return split(a, std::vector<SymInt>(sizes.begin(), sizes.end()), axis);
}

/// `dst` with `src` written over elements [begin, begin + src's size) along `axis`, as a new
/// array: the write of a preallocated buffer (a KV cache). Given away (`std::move(dst)`), dst's
/// buffer is updated in place and the step costs only the slice it writes; otherwise dst is
/// copied first. `begin` counts from the start of the axis only: unlike slice's, a negative
/// begin is refused (a cache's write position is never relative to its end, and a negative
/// one is more likely a bug than a wish). Throws ShapeError unless src matches dst outside
/// `axis` and fits inside it, InvalidArgument for a bad axis or a begin outside [0, size of
/// the axis - src's size], DeviceMismatch for two devices.
template <class D, Element T>
  requires detail::AnyArray<D> && std::is_same_v<std::remove_cvref_t<D>, DeviceArray<T>>
DeviceArray<T> update_slice(D&& dst, const DeviceArray<T>& src, int axis, SymInt sym_begin) {
  constexpr std::string_view name = "update_slice";
  detail::RecordScope scope;
  const std::int64_t begin = detail::SymAccess::value(sym_begin);
  detail::Step& sd = detail::step_of(name, dst);
  detail::Step& ss = detail::step_of(name, src);
  detail::Step* inputs[] = {&sd, &ss};
  const std::shared_ptr<detail::DeviceState>& dev = detail::common_device(name, inputs);
  const Shape& out = sd.shape();
  const std::size_t d = detail::normalize_axis(name, axis, out.rank());
  const std::int64_t count = ss.shape().rank() == out.rank() ? ss.shape().dims()[d] : -1;
  if (count < 0 || count > out.dims()[d] || detail::with_dim(out, d, count) != ss.shape()) {
    detail::fail<ShapeError>(name, "cannot write ", ss.shape(), " into ", out, " along axis ",
                             axis);
  }
  if (begin < 0 || begin > out.dims()[d] - count) {
    detail::fail<InvalidArgument>(name, "begin ", begin, " puts ", count, " elements outside axis ",
                                  axis, " of size ", out.dims()[d], " in ", out);
  }
  const detail::AxisView v = detail::axis_view(out, d);
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t pitch = v.size * v.inner * bytes;
  const std::int64_t block = count * v.inner * bytes;
  const std::int64_t first = begin * v.inner * bytes;
  const std::int64_t outer = v.outer;
  const bool in_place = detail::kGiven<D> && sd.layout().order == Order::row_major &&
                        detail::donatable(sd, dtype_of<T>, out, sd.layout());
  const double moved = static_cast<double>(in_place ? 0 : out.numel() * bytes) +
                       static_cast<double>(ss.shape().numel() * bytes);
  DeviceArray<T> result = detail::launch<T>(
      dev, {detail::StepKind::compute, name, {0, moved, moved}}, out, inputs,
      [outer, pitch, block, first](const detail::Step& st) {
        if (!st.donated() && st.output_bytes() != 0) {
          kernels::copy_bytes(st.in<std::byte>(0), st.out<std::byte>(), st.output_bytes(),
                              st.runner());
        }
        if (outer == 0 || block == 0) return;
        kernels::copy_blocks(st.in<std::byte>(1), block, st.out<std::byte>() + first, pitch, outer,
                             block, st.runner());
      },
      detail::LayoutRule::row_major, detail::kGiven<D> ? 1u : 0u);
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(*tape, inputs, *detail::ArrayAccess::step(result),
                           [axis, sym_begin](auto t, detail::GradCall& c) {
                             detail::update_slice_backward(t, c, axis, sym_begin);
                           });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    const Shape ud = rec->shape_of(sd);
    const Shape us = rec->shape_of(ss);
    for (std::size_t i = 0; i < ud.rank(); ++i) {
      if (i != d) detail::rely_on(us[i] == ud[i]);
    }
    detail::rely_on(sym_begin >= 0);
    detail::rely_on(sym_begin <= ud[d] - us[d]);
    detail::record(*rec,
                   {name, {&sd, &ss}, {sym_begin},
                    [axis](std::span<detail::Step* const> in, std::span<const std::int64_t> p) {
                      return detail::handle_of(update_slice(detail::as_array<T>(in[0]),
                                                         detail::as_array<T>(in[1]), axis, p[0]));
                    }},
                   result, ud);
  }
  detail::consume(std::forward<D>(dst));
  return result;
}

/// Arrays of two element types: ferry's one compile error rather than no matching overload.
template <class D, Element U>
  requires detail::AnyArray<D> && (!std::same_as<typename std::remove_cvref_t<D>::value_type, U>)
DeviceArray<U> update_slice(D&&, const DeviceArray<U>&, int, SymInt) {
  detail::check_same_element<typename std::remove_cvref_t<D>::value_type, U>();
  return {};
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(std::vector<DeviceArray<float>> split<float>(const DeviceArray<float>&,
                                                                   const std::vector<SymInt>&, int))

}  // namespace ferry
