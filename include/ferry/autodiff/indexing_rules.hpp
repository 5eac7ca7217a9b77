#pragma once
// The backward rules of take and scatter_add, and of take_along_axis and
// scatter_add_along_axis: in each pair one is the other's transpose. A gather's cotangent is
// scatter-added into zeros of its source's shape; a scatter-add passes its cotangent to the base
// and gathers it at the indices for the updates. Indices get no gradient.

#include "ferry/autodiff/support.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/ops/ordering.hpp"

namespace ferry::detail {

template <class I, Floating T>
void take_backward(Tag<T>, GradCall& c, int axis) {
  // Recorded for its indices alone (computed from a variable), the source needs no cotangent.
  if (!c.needs(0)) return;
  // Named take: an index out of range fails the gradient as the op the program called.
  set_grad(c, 0, scatter_add("take", zeros_like_step<T>(*c.inputs[0]), input_of<I>(c, 1),
                             cotangent_of<T>(c), axis));
}

template <class I, Floating T>
void scatter_add_backward(Tag<T>, GradCall& c, int axis) {
  const DeviceArray<T> g = cotangent_of<T>(c);
  if (c.needs(0)) set_grad(c, 0, g);
  if (c.needs(2)) set_grad(c, 2, take("scatter_add", g, input_of<I>(c, 1), axis));
}

// The pair along an axis carries the name of the op the program called (sort, topk,
// cross_entropy, ...) and how it reads a negative index: a label the forward refused (-1,
// cross_entropy's) fails the gradient too, rather than counting from the end there.
template <class I, Floating T>
void take_along_backward(Tag<T>, GradCall& c, int axis, std::string_view name, bool from_end) {
  if (!c.needs(0)) return;
  set_grad(c, 0, scatter_add_along_axis(name, zeros_like_step<T>(*c.inputs[0]),
                                        input_of<I>(c, 1), cotangent_of<T>(c), axis, from_end));
}

template <class I, Floating T>
void scatter_add_along_backward(Tag<T>, GradCall& c, int axis, std::string_view name,
                                bool from_end) {
  const DeviceArray<T> g = cotangent_of<T>(c);
  if (c.needs(0)) set_grad(c, 0, g);
  if (c.needs(2)) set_grad(c, 2, take_along_axis(name, g, input_of<I>(c, 1), axis, from_end));
}

}  // namespace ferry::detail
