#pragma once
// The backward rules of im2col and col2im, each the other's transpose (a window position
// outside the image gets no gradient).

#include "ferry/autodiff/support.hpp"
#include "ferry/ops/unfold.hpp"

namespace ferry::detail {

template <Floating T>
void im2col_backward(Tag<T>, GradCall& c, const kernels::Window2d& window) {
  set_grad(c, 0, col2im(cotangent_of<T>(c), window, user_shape(*c.inputs[0])));
}

template <Floating T>
void col2im_backward(Tag<T>, GradCall& c, const kernels::Window2d& window) {
  set_grad(c, 0, im2col("im2col", cotangent_of<T>(c), window, T{}));
}

}  // namespace ferry::detail
