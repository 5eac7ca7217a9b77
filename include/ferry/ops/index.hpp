#pragma once
// index and index_update: NumPy's basic indexing, `a[:, 1:-1, 0, ::2]`. The region an index
// selects is one strided walk of the source's row-major buffer (a first element, then a stride
// per kept axis), so index is a view when that walk is one contiguous block and a single
// strided gather otherwise, whatever the number of axes it cuts; index_update writes the same
// walk, in place when its dst is given away. Why not a slice per axis: slice has no step, and
// cutting two inner axes would copy twice.
//
// Sizes may be symbolic (a traced program): bounds clamp with min and max, so a slice decides
// nothing about a size and one trace serves every size; only a position's range is guarded.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/copy.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

/// A range of positions along one axis, NumPy's `begin:end:step`, for ferry::index. A member
/// left out takes NumPy's default: `Slice{}` is the whole axis, `Slice{1, -1}` all but the
/// first and last elements, `Slice{.step = 2}` every other element, `Slice{.step = -1}` the
/// axis reversed. Negative bounds count from the end; bounds beyond either end clamp to it; a
/// negative step walks backwards from `begin` (by default the last element) down to `end`,
/// exclusive (by default past the first element); a range that holds nothing gives an empty
/// axis. A step of 0 is refused by the op that reads it.
struct Slice {
  // Default member initializers, though std::optional starts empty anyway: without them
  // `Slice{1, -1}` in a user's code warns under -Wmissing-field-initializers (g++ and clang++).
  std::optional<std::int64_t> begin = std::nullopt;
  std::optional<std::int64_t> end = std::nullopt;
  std::optional<std::int64_t> step = std::nullopt;
};

/// One entry of an index: a position, which picks one element along its axis and drops the
/// axis (negative counts from the end), or a Slice. It converts from both, so a braced list
/// reads like NumPy's: `ferry::index(a, {ferry::Slice{}, 0, ferry::Slice{.step = 2}})`.
class Index {
 public:
  /// A position along the axis. Does not throw.
  Index(std::int64_t position) noexcept : entry_(position) {}  // NOLINT: implicit, for lists
  /// A range along the axis. Does not throw.
  Index(Slice slice) noexcept : entry_(slice) {}  // NOLINT: implicit, for braced lists

  /// Whether this entry is a position (else a Slice). Does not throw.
  bool is_position() const noexcept { return std::holds_alternative<std::int64_t>(entry_); }
  /// The position. Throws std::bad_variant_access for a Slice.
  std::int64_t position() const { return std::get<std::int64_t>(entry_); }
  /// The range. Throws std::bad_variant_access for a position.
  const Slice& slice() const { return std::get<Slice>(entry_); }

  /// NumPy's notation: "0", "-1", ":", "1:-1", "::2". Throws only std::bad_alloc.
  std::string to_string() const {
    if (is_position()) return std::to_string(position());
    const Slice& s = slice();
    std::string out = s.begin ? std::to_string(*s.begin) : std::string();
    out += ':';
    if (s.end) out += std::to_string(*s.end);
    if (s.step) out += ":" + std::to_string(*s.step);
    return out;
  }

 private:
  std::variant<std::int64_t, Slice> entry_;
};

namespace detail {

/// "[:, 1:-1, 0, ::2]": an index as NumPy writes it, for messages.
inline std::string index_text(std::span<const Index> entries) {
  std::string out = "[";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ", ";
    out += entries[i].to_string();
  }
  return out + "]";
}

/// Where an index lands on one axis of its source: `count` elements from position `first`,
/// `step` apart. A position has step 0, and the region drops its axis.
struct IndexedAxis {
  SymInt first = 0;
  SymInt count = 0;
  std::int64_t step = 1;
};

/// Every axis of a source as an index selects it (axes past the index are whole).
struct Selection {
  std::array<IndexedAxis, kMaxRank> axes{};
  std::size_t rank = 0;

  /// The region's shape: the counts of the axes a position did not drop.
  Shape shape() const {
    std::array<SymInt, kMaxRank> dims{};
    std::size_t k = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      if (axes[d].step != 0) dims[k++] = axes[d].count;
    }
    return Shape(std::span<const SymInt>(dims.data(), k));
  }
};

/// NumPy's clamping of a slice bound `at` on an axis of `size`: counted from the end when
/// negative, then kept where a walk may start or stop, [0, size] forwards and [-1, size - 1]
/// backwards (-1 stands for "past the first element"). min and max, not comparisons, so that
/// a symbolic size is not guarded. No overflow: `at` < 0 <= size when they are added.
inline SymInt clamp_bound(std::int64_t at, const SymInt& size, bool backwards) {
  if (at < 0) return max(SymInt(at) + size, SymInt(backwards ? -1 : 0));
  return min(SymInt(at), backwards ? size - 1 : size);
}

/// How `entries` select the axes of an array of shape `in` (symbolic in a trace), NumPy's rules
/// for basic indexing. Throws InvalidArgument naming `name` for more entries than axes, a
/// slice of step 0 or a position outside its axis; in a trace, a position's being inside its
/// axis is guarded.
inline Selection index_selection(std::string_view name, const Shape& in,
                                 std::span<const Index> entries) {
  if (entries.size() > in.rank()) {
    fail<InvalidArgument>(name, entries.size(), " entries ", index_text(entries), " for the ",
                          in.rank(), " axes of ", in);
  }
  Selection sel;
  sel.rank = in.rank();
  for (std::size_t d = 0; d < in.rank(); ++d) {
    const SymInt size = in[d];
    IndexedAxis& axis = sel.axes[d];
    if (d >= entries.size()) {
      axis = {0, size, 1};
      continue;
    }
    const Index& e = entries[d];
    if (e.is_position()) {
      const std::int64_t at = e.position();
      const SymInt from_start = at < 0 ? SymInt(at) + size : SymInt(at);
      const bool inside = at < 0 ? static_cast<bool>(from_start >= 0)
                                 : static_cast<bool>(from_start < size);
      if (!inside) {
        fail<InvalidArgument>(name, "position ", at, " is outside axis ", d, " of size ", size,
                              " in ", in);
      }
      axis = {from_start, 1, 0};
      continue;
    }
    const Slice& s = e.slice();
    const std::int64_t step = s.step.value_or(1);
    if (step == 0) {
      fail<InvalidArgument>(name, "slice ", e.to_string(), " along axis ", d, " of ", in,
                            " has step 0");
    }
    const bool back = step < 0;
    const bool unit = step == 1 || step == -1;
    const SymInt first = s.begin ? clamp_bound(*s.begin, size, back) : back ? size - 1 : SymInt(0);
    if (unit && !s.begin && !s.end) {  // the whole axis, either way: its size, no expression
      axis = {first, size, step};
      continue;
    }
    const SymInt stop = s.end ? clamp_bound(*s.end, size, back) : back ? SymInt(-1) : size;
    const SymInt span = max(back ? first - stop : stop - first, SymInt(0));
    if (unit) {
      axis = {first, span, step};
      continue;
    }
    // ceil(span / |step|) as (span - 1) / |step| + 1 for a non-empty range: span + |step| - 1
    // would overflow for a huge step. A negative step divides as it is (|INT64_MIN| does not
    // fit), its quotient truncated toward zero being minus the one wanted.
    const SymInt some = min(span, SymInt(1));
    const SymInt rest = (max(span, SymInt(1)) - 1) / step;
    axis = {first, back ? some - rest : some + rest, step};
  }
  return sel;
}

/// Whether `entries` keep every axis whole whatever its size (each a Slice with neither end,
/// begin and step left out or 0 and 1): the index is then the array itself. Deciding it on
/// the entries alone leaves a trace nothing to guard.
inline bool selects_whole(std::span<const Index> entries) noexcept {
  for (const Index& e : entries) {
    if (e.is_position()) return false;
    const Slice& s = e.slice();
    if (s.begin.value_or(0) != 0 || s.end || s.step.value_or(1) != 1) return false;
  }
  return true;
}

/// A selection as a walk of a row-major buffer of plain sizes: the region's shape, the element
/// stride of each region axis, and the offset of the region's first element.
struct IndexWalk {
  Shape shape;
  Strides strides{};
  std::int64_t base = 0;
  /// The walk is one contiguous run of the buffer (or empty): a view serves it.
  bool block = false;
};

/// The walk of `sel` over a row-major buffer of shape `in` (plain sizes).
inline IndexWalk index_walk(const Shape& in, const Selection& sel) {
  IndexWalk w;
  w.shape = ShapeAccess::plain(sel.shape());
  if (w.shape.numel() == 0) {
    w.block = true;
    return w;
  }
  const Strides own = row_major_strides(in);
  std::size_t k = 0;
  for (std::size_t d = 0; d < sel.rank; ++d) {
    const IndexedAxis& axis = sel.axes[d];
    const std::int64_t count = SymAccess::value(axis.count);
    // Inside the buffer, as the region is not empty: every first < size, and step * stride
    // fits for an axis walked more than once. One walked once has no stride to speak of (a
    // huge step times a stride could overflow).
    w.base += SymAccess::value(axis.first) * own[d];
    if (axis.step != 0) w.strides[k++] = count > 1 ? axis.step * own[d] : 0;
  }
  // One run when every axis longer than 1 steps over exactly the axes after it.
  std::int64_t run = 1;
  w.block = true;
  for (std::size_t i = k; i-- > 0 && w.block;) {
    const std::int64_t n = w.shape.dims()[i];
    if (n == 1) continue;
    w.block = w.strides[i] == run;
    run *= n;
  }
  return w;
}

}  // namespace detail

/// NumPy's basic indexing, `a[e0, e1, ...]`: one entry per leading axis (axes past the list
/// are whole), each a position, which picks one element and drops the axis, or a Slice
/// (`ferry::index(a, {ferry::Slice{}, ferry::Slice{1, -1}, 0, ferry::Slice{.step = 2}})` is
/// `a[:, 1:-1, 0, ::2]`). Positions and slice bounds count from the end when negative; slice
/// bounds out of range clamp, and an empty range gives an empty axis (see Slice). The result
/// is a view of `a`'s buffer, without a copy, when the region is one contiguous block (a range
/// of the first axis, a position then anything, ...); a strided copy otherwise; `a` itself
/// when every entry is a whole slice (or there are none). Differentiable; in a traced program
/// one trace serves every size. Throws InvalidArgument for an empty handle, more entries than
/// axes, a step of 0, or a position outside [-size, size) of its axis.
template <Element T>
DeviceArray<T> index(const DeviceArray<T>& a, const std::vector<Index>& entries) {
  constexpr std::string_view name = "index";
  detail::RecordScope scope;
  detail::Step& s = detail::step_of(name, a);
  const detail::Selection sel = detail::index_selection(name, s.shape(), entries);
  if (detail::selects_whole(entries)) return a;
  const detail::IndexWalk w = detail::index_walk(s.shape(), sel);
  DeviceArray<T> out;
  if (w.block) {
    out = detail::launch_view<T>(name, s, w.shape, static_cast<std::size_t>(w.base) * sizeof(T));
  } else {
    detail::Step* inputs[] = {&s};
    const double bytes = static_cast<double>(w.shape.numel()) * static_cast<double>(sizeof(T));
    out = detail::launch<T>(s.device(),
                            {detail::StepKind::compute,
                             name,
                             {0, bytes, bytes, {}, Work::layout}},
                            w.shape, inputs, [w](const detail::Step& st) {
                              // Not empty (an empty region is a view): the buffer exists.
                              kernels::gather(st.in<T>(0) + w.base, st.out<T>(), w.shape,
                                              w.strides, st.runner());
                            });
  }
  if (detail::Tape* tape = scope.tape()) {
    detail::Step* in[] = {&s};
    detail::record_grad<T>(*tape, in, *detail::ArrayAccess::step(out),
                           [entries](auto t, detail::GradCall& c) {
                             detail::index_backward(t, c, entries);
                           });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    const Shape shape = detail::index_selection(name, rec->shape_of(s), entries).shape();
    detail::record(*rec,
                   {name,
                    {&s},
                    {},
                    [entries](std::span<detail::Step* const> src, std::span<const std::int64_t>) {
                      return detail::handle_of(ferry::index(detail::as_array<T>(src[0]), entries));
                    }},
                   out, shape);
  }
  return out;
}

/// `dst` with `src` written over the region `entries` select (as ferry::index selects it), as
/// a new array: NumPy's `dst[e0, e1, ...] = src`. Given away (`std::move(dst)`), dst's buffer
/// is updated in place and the step costs only the region it writes; otherwise dst is copied
/// first. Differentiable in both arrays; in a traced program one trace serves every size.
/// src and dst have one element type (a compile-time check). Throws InvalidArgument like index
/// (naming index_update) and for an empty handle, ShapeError unless src has the region's shape
/// exactly (no broadcasting), DeviceMismatch for two devices.
template <class D, Element T>
  requires detail::AnyArray<D> && std::is_same_v<std::remove_cvref_t<D>, DeviceArray<T>>
DeviceArray<T> index_update(D&& dst, const std::vector<Index>& entries, const DeviceArray<T>& src) {
  constexpr std::string_view name = "index_update";
  detail::RecordScope scope;
  detail::Step& sd = detail::step_of(name, dst);
  detail::Step& ss = detail::step_of(name, src);
  detail::Step* inputs[] = {&sd, &ss};
  const std::shared_ptr<detail::DeviceState>& dev = detail::common_device(name, inputs);
  const Shape& out = sd.shape();
  const detail::IndexWalk w = detail::index_walk(out, detail::index_selection(name, out, entries));
  if (w.shape != ss.shape()) {
    detail::fail<ShapeError>(name, "src of shape ", ss.shape(), " does not match the region ",
                             w.shape, " that ", detail::index_text(entries), " selects of ", out);
  }
  // Every element written (the positions of a region are distinct): dst's values are not read.
  const bool covers = w.shape.numel() == out.numel();
  // Not in place when src is dst itself: the kernel would read what it has already written.
  const bool give = detail::kGiven<D> && &ss != &sd;
  const bool in_place = give && sd.layout().order == Order::row_major &&
                        detail::donatable(sd, dtype_of<T>, out, sd.layout());
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  const double moved = static_cast<double>((in_place || covers ? 0 : out.numel() * bytes) +
                                           w.shape.numel() * bytes);
  DeviceArray<T> result = detail::launch<T>(
      dev, {detail::StepKind::compute, name, {0, moved, moved}}, out, inputs,
      [w, covers](const detail::Step& st) {
        if (!st.donated() && !covers && st.output_bytes() != 0) {
          kernels::copy_bytes(st.in<std::byte>(0), st.out<std::byte>(), st.output_bytes(),
                              st.runner());
        }
        if (w.shape.numel() == 0) return;  // src may have no buffer
        kernels::scatter(st.in<T>(1), st.out<T>() + w.base, w.shape, w.strides, st.runner());
      },
      detail::LayoutRule::row_major, give ? 1u : 0u);
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(*tape, inputs, *detail::ArrayAccess::step(result),
                           [entries](auto t, detail::GradCall& c) {
                             detail::index_update_backward(t, c, entries);
                           });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    const Shape ud = rec->shape_of(sd);
    const Shape region = detail::index_selection(name, ud, entries).shape();
    static_cast<void>(detail::same_shape_rule(region, rec->shape_of(ss)));  // guards "equal"
    detail::record(*rec,
                   {name,
                    {&sd, &ss},
                    {},
                    [entries](std::span<detail::Step* const> in, std::span<const std::int64_t>) {
                      return detail::handle_of(ferry::index_update(
                          detail::as_array<T>(in[0]), entries, detail::as_array<T>(in[1])));
                    }},
                   result, ud);
  }
  detail::consume(std::forward<D>(dst));
  return result;
}

/// Arrays of two element types: ferry's one compile error rather than no matching overload.
template <class D, Element U>
  requires detail::AnyArray<D> && (!std::same_as<typename std::remove_cvref_t<D>::value_type, U>)
DeviceArray<U> index_update(D&&, const std::vector<Index>&, const DeviceArray<U>&) {
  detail::check_same_element<typename std::remove_cvref_t<D>::value_type, U>();
  return {};
}

}  // namespace ferry
