#pragma once
// Indexing along one axis: take (gather: the embedding lookup), scatter_add (its gradient) and
// one_hot. Indices are int32 or int64 arrays of any shape; their values are known only when
// the step runs, so an index out of range fails the step and reaches the caller through the
// futures as InvalidArgument (negative indices count from the end, as NumPy).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/indexing.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry {

/// The element types an index array may have: int32 and int64, as PyTorch's index ops take
/// (an int8 or int16 index array would only wrap positions past 127 or 32767; astype first).
template <class I>
concept IndexElement = std::same_as<I, std::int32_t> || std::same_as<I, std::int64_t>;

namespace detail {

/// a's shape with dimension `d` replaced by all of `index`'s dimensions (symbolic sizes kept).
/// Throws ShapeError naming `op` when the result's rank exceeds kMaxRank.
inline Shape indexed_shape(std::string_view op, const Shape& a, std::size_t d, const Shape& index) {
  const std::size_t rank = a.rank() - 1 + index.rank();
  if (rank > kMaxRank) {
    fail<ShapeError>(op, "indexing ", a, " along axis ", d, " with indices of ", index,
                     " gives rank ", rank, ", above ", kMaxRank);
  }
  std::array<SymInt, kMaxRank> dims{};
  std::size_t k = 0;
  for (std::size_t i = 0; i < d; ++i) dims[k++] = a[i];
  for (std::size_t i = 0; i < index.rank(); ++i) dims[k++] = index[i];
  for (std::size_t i = d + 1; i < a.rank(); ++i) dims[k++] = a[i];
  return Shape(std::span<const SymInt>(dims.data(), rank));
}

/// take under the name of the op that asked for it (scatter_add's gradient): the step and its
/// errors, an index out of range among them, carry that name (a string literal: a program's
/// trace keeps it).
template <Element T, IndexElement I>
DeviceArray<T> take(std::string_view name, const DeviceArray<T>& a, const DeviceArray<I>& indices,
                    int axis) {
  detail::RecordScope scope;
  detail::Step& sa = detail::step_of(name, a);
  detail::Step& si = detail::step_of(name, indices);
  detail::Step* inputs[] = {&sa, &si};
  const std::shared_ptr<detail::DeviceState>& dev = detail::common_device(name, inputs);
  const std::size_t d = detail::normalize_axis(name, axis, sa.shape().rank());
  const Shape out = detail::indexed_shape(name, sa.shape(), d, si.shape());
  const detail::AxisView v = detail::axis_view(sa.shape(), d);
  const std::int64_t count = si.shape().numel();
  const auto n = static_cast<double>(out.numel());
  DeviceArray<T> result = detail::launch<T>(
      dev,
      {detail::StepKind::compute, name,
       {0, n * sizeof(T) + detail::bytes_of(si), n * sizeof(T), {}, Work::layout}},
      out, inputs, [name, v, count](const detail::Step& st) {
        kernels::take(name, st.in<T>(0), st.in<I>(1), st.out<T>(), v.outer, v.size, count,
                      v.inner, st.runner());
      });
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(result),
        [axis](auto t, detail::GradCall& c) { detail::take_backward<I>(t, c, axis); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    detail::record(
        *rec,
        {name,
         {&sa, &si},
         {},
         [name, axis](std::span<detail::Step* const> in, std::span<const std::int64_t>) {
           return detail::handle_of(
               take(name, detail::as_array<T>(in[0]), detail::as_array<I>(in[1]), axis));
         }},
        result, detail::indexed_shape(name, rec->shape_of(sa), d, rec->shape_of(si)));
  }
  return result;
}

}  // namespace detail

/// The slices of `a` at `indices` along `axis`: the result's shape is a's with that dimension
/// replaced by indices' shape (NumPy's take and jnp.take with an axis; PyTorch's index_select
/// for rank-1 indices). `take(table, token_ids, 0)` is an embedding lookup. Its gradient
/// scatter-adds the cotangent back. Throws InvalidArgument for a bad axis or an empty handle,
/// ShapeError when the result's rank is above kMaxRank, DeviceMismatch for two devices; an
/// index outside [-size, size) fails the step (InvalidArgument at the export).
template <Element T, IndexElement I>
DeviceArray<T> take(const DeviceArray<T>& a, const DeviceArray<I>& indices, int axis) {
  return detail::take("take", a, indices, axis);
}

namespace detail {

/// scatter_add under the name of the op that asked for it (take's gradient, an embedding's):
/// as detail::take.
template <class A, IndexElement I, Element T = typename std::remove_cvref_t<A>::value_type>
  requires std::same_as<std::remove_cvref_t<A>, DeviceArray<T>>
DeviceArray<T> scatter_add(std::string_view name, A&& a, const DeviceArray<I>& indices,
                           const DeviceArray<T>& updates, int axis) {
  detail::RecordScope scope;
  detail::Step& sa = detail::step_of(name, a);
  detail::Step& si = detail::step_of(name, indices);
  detail::Step& su = detail::step_of(name, updates);
  detail::Step* inputs[] = {&sa, &si, &su};
  const std::shared_ptr<detail::DeviceState>& dev = detail::common_device(name, inputs);
  const std::size_t d = detail::normalize_axis(name, axis, sa.shape().rank());
  const Shape expected = detail::indexed_shape(name, sa.shape(), d, si.shape());
  if (su.shape() != expected) {
    detail::fail<ShapeError>(name, "updates must have the shape ", expected, " (", sa.shape(),
                             " with axis ", axis, " replaced by the indices' ", si.shape(),
                             "), got ", su.shape());
  }
  const detail::AxisView v = detail::axis_view(sa.shape(), d);
  const std::int64_t count = si.shape().numel();
  const auto added = static_cast<double>(su.shape().numel());
  const auto total = static_cast<double>(sa.shape().numel());
  DeviceArray<T> result = detail::launch<T>(
      dev,
      {detail::StepKind::compute, name,
       {added, detail::bytes_of(sa) + detail::bytes_of(si) + 2 * detail::bytes_of(su),
        total * sizeof(T), {}, Work::layout}},
      sa.shape(), inputs,
      [name, v, count, numel = sa.shape().numel()](const detail::Step& st) {
        T* out = st.out<T>();
        const T* base = st.in<T>(0);
        if (base != out) std::copy_n(base, numel, out);  // not donated: start from a copy
        kernels::scatter_add(name, st.in<I>(1), st.in<T>(2), out, v.outer, v.size, count,
                             v.inner, st.runner());
      },
      // Not in place when a is also the indices or the updates: the kernel reads them as it
      // writes.
      detail::LayoutRule::row_major, detail::kGiven<A> && &sa != &si && &sa != &su ? 1u : 0u);
  if (detail::Tape* tape = scope.tape()) {
    detail::record_grad<T>(
        *tape, inputs, *detail::ArrayAccess::step(result),
        [axis](auto t, detail::GradCall& c) { detail::scatter_add_backward<I>(t, c, axis); });
  }
  if (detail::Recorder* rec = scope.recorder()) {
    static_cast<void>(detail::same_shape_rule(
        rec->shape_of(su), detail::indexed_shape(name, rec->shape_of(sa), d, rec->shape_of(si))));
    detail::record(*rec,
                   {name,
                    {&sa, &si, &su},
                    {},
                    [name, axis](std::span<detail::Step* const> in,
                                 std::span<const std::int64_t>) {
                      return detail::handle_of(scatter_add(name, detail::as_array<T>(in[0]),
                                                           detail::as_array<I>(in[1]),
                                                           detail::as_array<T>(in[2]), axis));
                    }},
                   result, rec->shape_of(sa));
  }
  detail::consume(std::forward<A>(a));
  return result;
}

}  // namespace detail

/// `a` with `updates` added at `indices` along `axis`: for each position j of the (flattened)
/// indices, the slice j of updates is added to the slice indices[j] of a, a repeated index
/// adding each of its slices (NumPy's np.add.at, PyTorch's index_add; JAX's .at[].add).
/// updates has a's shape with `axis` replaced by indices' shape. Given away
/// (`std::move(a)`), a's buffer is updated in place. Integer sums wrap; bfloat16 and float16
/// sums round at each addition. Throws InvalidArgument for a bad axis or an empty handle,
/// ShapeError for updates of another shape, DeviceMismatch; an index out of range fails the
/// step.
template <class A, IndexElement I, Element T = typename std::remove_cvref_t<A>::value_type>
  requires std::same_as<std::remove_cvref_t<A>, DeviceArray<T>>
DeviceArray<T> scatter_add(A&& a, const DeviceArray<I>& indices, const DeviceArray<T>& updates,
                           int axis) {
  return detail::scatter_add("scatter_add", std::forward<A>(a), indices, updates, axis);
}

/// Arrays of two element types: ferry's one compile error rather than no matching overload.
template <class A, IndexElement I, Element U>
  requires detail::AnyArray<A> && (!std::same_as<typename std::remove_cvref_t<A>::value_type, U>)
DeviceArray<U> scatter_add(A&&, const DeviceArray<I>&, const DeviceArray<U>&, int) {
  detail::check_same_element<typename std::remove_cvref_t<A>::value_type, U>();
  return {};
}

/// 1 where indices[...] == c and 0 elsewhere, along a new last dimension of `num_classes`
/// (symbolic in a trace); as T (float by default). An index outside [0, num_classes) gives a
/// row of zeros, as jax.nn.one_hot (PyTorch's one_hot raises). Throws InvalidArgument for a
/// negative num_classes, a result whose element count overflows int64, or an empty handle.
template <Element T = float, IndexElement I>
DeviceArray<T> one_hot(const DeviceArray<I>& indices, SymInt num_classes) {
  constexpr std::string_view name = "one_hot";
  const detail::CalledOp called(name);
  detail::step_of(name, indices);
  if (num_classes < 0) detail::fail<InvalidArgument>(name, "negative num_classes ", num_classes);
  const Shape s = indices.shape();
  std::array<SymInt, kMaxRank> dims{};
  if (s.rank() + 1 > kMaxRank) {
    detail::fail<ShapeError>(name, "indices of ", s, " give rank ", s.rank() + 1, ", above ",
                             kMaxRank);
  }
  for (std::size_t i = 0; i < s.rank(); ++i) dims[i] = s[i];
  dims[s.rank()] = num_classes;
  detail::check_count_fits(name, std::span<const SymInt>(dims.data(), s.rank() + 1));
  dims[s.rank()] = 1;
  const DeviceArray<I> column =
      reshape(indices, Shape(std::span<const SymInt>(dims.data(), s.rank() + 1)));
  return equal(column, arange<I>(indices.device(), num_classes)).template astype<T>();
}

}  // namespace ferry
