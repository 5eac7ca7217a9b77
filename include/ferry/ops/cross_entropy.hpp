#pragma once
// Cross-entropy against integer class labels, per example: the building block of the mean
// that nn::cross_entropy takes (optax's softmax_cross_entropy_with_integer_labels).

#include <cstddef>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/ops/ordering.hpp"
#include "ferry/ops/statistics.hpp"

namespace ferry {

/// -log softmax(logits)[..., labels[...]] for logits (..., C) with the classes along the last
/// axis and labels (...) holding class indices: one loss per label, unreduced (PyTorch's
/// `cross_entropy(..., reduction="none")` with the classes last). Stable for any finite
/// logits (through log_softmax). Differentiable in the logits: the gradient is softmax - one
/// hot. Throws ShapeError naming cross_entropy unless labels have the logits' shape without
/// its last axis and C >= 1, DeviceMismatch for two devices, InvalidArgument for an empty
/// handle; a label outside [0, C), a negative one too, fails the step (InvalidArgument naming
/// cross_entropy at the export, from the step that picks the entry), as PyTorch's device
/// assertion does.
template <Floating T, IndexElement I>
DeviceArray<T> cross_entropy(const DeviceArray<T>& logits, const DeviceArray<I>& labels) {
  constexpr std::string_view op = "cross_entropy";
  const detail::CalledOp called(op);
  detail::Step& sl = detail::step_of(op, logits);
  detail::Step& sy = detail::step_of(op, labels);
  detail::Step* inputs[] = {&sl, &sy};
  (void)detail::common_device(op, inputs);
  // Compared as SymInts, so that inside jit one trace serves every batch size.
  const Shape ls = logits.shape();
  const Shape ys = labels.shape();
  bool fits = ls.rank() == ys.rank() + 1 && ls[ls.rank() - 1] >= 1;
  for (std::size_t d = 0; fits && d < ys.rank(); ++d) fits = ls[d] == ys[d];
  if (!fits) {
    detail::fail<ShapeError>(
        op, "needs logits (..., C) with C >= 1 and labels of their shape without C, got logits ",
        ls, " and labels ", ys);
  }
  // A negative label is out of range, not a class counted from the end: -1, a common padding
  // label, would otherwise quietly score class C - 1.
  return -squeeze(
      detail::take_along_axis(op, log_softmax(logits, -1), unsqueeze(labels, -1), -1, false), -1);
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(DeviceArray<float> cross_entropy<float, std::int64_t>(
    const DeviceArray<float>&, const DeviceArray<std::int64_t>&))

}  // namespace ferry
