#pragma once
// The backward rules of the ops that move values without arithmetic: reshape, permute, flip,
// slice, concat, update_slice, index, index_update, to_layout and DeviceArray::to (whose
// cotangent travels back to the source's device, over the model's copy engines like any
// transfer).

#include <cstddef>
#include <vector>

#include "ferry/autodiff/support.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/flip.hpp"
#include "ferry/ops/index.hpp"
#include "ferry/ops/layout.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry::detail {

template <Floating T>
void reshape_backward(Tag<T>, GradCall& c) {
  set_grad(c, 0, reshape(cotangent_of<T>(c), user_shape(*c.inputs[0])));
}

template <Floating T>
void permute_backward(Tag<T>, GradCall& c, const std::vector<int>& axes) {
  std::vector<int> inverse(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    inverse[normalize_axis("permute", axes[i], axes.size())] = static_cast<int>(i);
  }
  set_grad(c, 0, permute(cotangent_of<T>(c), inverse));
}

template <Floating T>
void slice_backward(Tag<T>, GradCall& c, int axis, const SymInt& begin) {
  set_grad(c, 0, update_slice(zeros_like_step<T>(*c.inputs[0]), cotangent_of<T>(c), axis, begin));
}

template <Floating T>
void concat_backward(Tag<T>, GradCall& c, int axis) {
  const DeviceArray<T> g = cotangent_of<T>(c);
  const std::size_t d = normalize_axis("concat", axis, c.output.shape().rank());
  SymInt at = 0;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const SymInt size = user_shape(*c.inputs[i])[d];
    if (c.needs(i)) set_grad(c, i, slice(g, axis, at, at + size));  // a constant part: none
    at = at + size;
  }
}

template <Floating T>
void update_slice_backward(Tag<T>, GradCall& c, int axis, const SymInt& begin) {
  const DeviceArray<T> g = cotangent_of<T>(c);
  const Shape written = user_shape(*c.inputs[1]);
  const std::size_t d = normalize_axis("update_slice", axis, written.rank());
  if (c.needs(0)) set_grad(c, 0, update_slice(g, zeros_like_step<T>(*c.inputs[1]), axis, begin));
  if (c.needs(1)) set_grad(c, 1, slice(g, axis, begin, begin + written[d]));
}

template <Floating T>
void flip_backward(Tag<T>, GradCall& c, const std::vector<int>& axes) {
  set_grad(c, 0, flip(cotangent_of<T>(c), axes));
}

// index and index_update are each other's transpose over the region: index's cotangent is
// written into zeros of its source's shape; index_update's passes to dst outside the region
// (zeros written over it) and to src from inside it.
template <Floating T>
void index_backward(Tag<T>, GradCall& c, const std::vector<Index>& entries) {
  set_grad(c, 0,
           ferry::index_update(zeros_like_step<T>(*c.inputs[0]), entries, cotangent_of<T>(c)));
}

template <Floating T>
void index_update_backward(Tag<T>, GradCall& c, const std::vector<Index>& entries) {
  const DeviceArray<T> g = cotangent_of<T>(c);
  if (c.needs(0)) {
    set_grad(c, 0, ferry::index_update(g, entries, zeros_like_step<T>(*c.inputs[1])));
  }
  if (c.needs(1)) set_grad(c, 1, ferry::index(g, entries));
}

template <Floating T>
void to_layout_backward(Tag<T>, GradCall& c) {
  set_grad(c, 0, to_layout(cotangent_of<T>(c), c.inputs[0]->layout()));
}

template <Floating T>
void transfer_backward(Tag<T>, GradCall& c) {
  set_grad(c, 0, cotangent_of<T>(c).to(DeviceAccess::wrap(c.inputs[0]->device())));
}

}  // namespace ferry::detail
