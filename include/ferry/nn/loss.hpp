#pragma once
// Losses as compositions of ops: each is differentiable wherever its ops are, with no gradient
// written here. All reduce by the mean (PyTorch's default) to a rank-0 array.

#include <cstdint>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/cross_entropy.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::nn {

namespace detail {

/// Checks before anything is submitted, so that a bad call leaves no work behind.
inline void check_pair(std::string_view op, const DeviceArray<float>& pred,
                       const DeviceArray<float>& target) {
  if (!pred.valid() || !target.valid())
    ferry::detail::fail<InvalidArgument>(op, "got an empty array");
  // Size by size, as SymInts: in a trace this guards that the two keep equal sizes, not the
  // sizes themselves (Shape's == would pin the batch size, a new trace for each).
  const Shape a = pred.shape();
  const Shape b = target.shape();
  bool same = a.rank() == b.rank();
  for (std::size_t i = 0; same && i < a.rank(); ++i) same = a[i] == b[i];
  if (!same) {
    ferry::detail::fail<ShapeError>(op, "prediction ", a, " and target ", b, " differ in shape");
  }
  if (pred.device() != target.device()) {
    ferry::detail::fail<DeviceMismatch>(op, "prediction lives on ", pred.device().name(),
                                        ", target on ", target.device().name());
  }
}

}  // namespace detail

/// mean((pred - target)^2) over every element, as a rank-0 array (NaN for empty arrays).
/// Throws ShapeError unless the shapes are equal (no broadcasting: a broadcast target is
/// almost always a mistake), DeviceMismatch for two devices, InvalidArgument for an empty
/// handle.
inline DeviceArray<float> mse_loss(const DeviceArray<float>& pred,
                                   const DeviceArray<float>& target) {
  detail::check_pair("mse_loss", pred, target);
  const DeviceArray<float> d = pred - target;
  return mean(d * d);
}

/// mean(|pred - target|) over every element, as a rank-0 array (NaN for empty arrays). Throws
/// like mse_loss, naming l1_loss.
inline DeviceArray<float> l1_loss(const DeviceArray<float>& pred,
                                  const DeviceArray<float>& target) {
  detail::check_pair("l1_loss", pred, target);
  return mean(abs(pred - target));
}

/// The mean over the batch of -log softmax(logits)[i, labels[i]], for logits (N, C) and class
/// indices `labels` (N), as a rank-0 array: mean(ferry::cross_entropy(logits, labels)), stable
/// for any finite logits. A label outside [0, C) fails the step (InvalidArgument at the
/// export). Throws ShapeError naming cross_entropy for logits not (N, C) with C >= 1 or labels
/// not (N), DeviceMismatch for two devices, InvalidArgument for an empty handle.
inline DeviceArray<float> cross_entropy(const DeviceArray<float>& logits,
                                        const DeviceArray<std::int64_t>& labels) {
  if (logits.valid() && labels.valid() && logits.shape().rank() != 2) {
    ferry::detail::fail<ShapeError>("cross_entropy",
                                    "needs logits (N, C) with C >= 1 and labels (N), got logits ",
                                    logits.shape(), " and labels ", labels.shape());
  }
  return mean(ferry::cross_entropy(logits, labels));
}

}  // namespace ferry::nn
