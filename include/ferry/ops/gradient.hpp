#pragma once
// The declarations of the ops' backward rules (an op reports itself to a gradient tape with
// record_grad, runtime/tape.hpp). The rules are written with ops (so gradients are
// futures like any array, and differentiable again), which is why they are defined above the op
// layer, in ferry/autodiff/, and only declared here.

#include <span>
#include <string_view>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/fwd.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/kernels/im2col.hpp"
#include "ferry/kernels/reduce.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry::detail {

/// Gives input `i` of a rule's call the cotangent `g` (autodiff/support.hpp).
template <Floating T>
void set_grad(GradCall& c, std::size_t i, DeviceArray<T> g);

// ---- the rules of the ops (ferry/autodiff/*_rules.hpp); array.hpp declares those of astype
// and DeviceArray::to ----

template <class Op, Floating T>
void unary_backward(Tag<T>, GradCall& c);
template <class Op, Floating T>
void binary_backward(Tag<T>, GradCall& c);
template <class Op, Floating T>
void scalar_backward(Tag<T>, GradCall& c, T value, bool value_first);
template <class Op, Floating T>
void sym_scalar_backward(Tag<T>, GradCall& c, const SymFloat& value, bool value_first);
template <Floating T>
void select_backward(Tag<T>, GradCall& c, bool a_array, bool b_array);
template <Floating T>
void broadcast_backward(Tag<T>, GradCall& c, bool average);
template <Floating T>
void reduce_backward(Tag<T>, GradCall& c, kernels::ReduceOp op, const std::vector<int>& axes,
                     bool keepdims);
template <Floating T>
void softmax_backward(Tag<T>, GradCall& c, int axis);
template <Floating T>
void cumsum_backward(Tag<T>, GradCall& c, int axis);
template <Floating T>
void matmul_backward(Tag<T>, GradCall& c);
template <Floating T>
void reshape_backward(Tag<T>, GradCall& c);
template <Floating T>
void permute_backward(Tag<T>, GradCall& c, const std::vector<int>& axes);
template <Floating T>
void slice_backward(Tag<T>, GradCall& c, int axis, const SymInt& begin);
template <Floating T>
void concat_backward(Tag<T>, GradCall& c, int axis);
template <Floating T>
void update_slice_backward(Tag<T>, GradCall& c, int axis, const SymInt& begin);
template <Floating T>
void flip_backward(Tag<T>, GradCall& c, const std::vector<int>& axes);
template <Floating T>
void index_backward(Tag<T>, GradCall& c, const std::vector<Index>& entries);
template <Floating T>
void index_update_backward(Tag<T>, GradCall& c, const std::vector<Index>& entries);
template <Floating T>
void to_layout_backward(Tag<T>, GradCall& c);
template <class I, Floating T>
void take_backward(Tag<T>, GradCall& c, int axis);
template <class I, Floating T>
void scatter_add_backward(Tag<T>, GradCall& c, int axis);
template <class I, Floating T>
void take_along_backward(Tag<T>, GradCall& c, int axis, std::string_view name, bool from_end);
template <class I, Floating T>
void scatter_add_along_backward(Tag<T>, GradCall& c, int axis, std::string_view name,
                                bool from_end);
template <Floating T>
void im2col_backward(Tag<T>, GradCall& c, const kernels::Window2d& window);
template <Floating T>
void col2im_backward(Tag<T>, GradCall& c, const kernels::Window2d& window);
template <Floating T>
void attention_backward(Tag<T>, GradCall& c, double scale, bool causal, bool has_mask);

}  // namespace ferry::detail
