#pragma once
// Losses as compositions of ops: each is differentiable wherever its ops are, with no gradient
// written here. All reduce by the mean (PyTorch's default) to a rank-0 array.

#include <cstdint>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::nn {

namespace detail {

/// Checks before anything is submitted, so that a bad call leaves no work behind.
inline void check_pair(std::string_view op, const DeviceArray<float>& pred,
                       const DeviceArray<float>& target) {
  if (!pred.valid() || !target.valid()) ferry::detail::fail<InvalidArgument>(op, "got an empty array");
  if (pred.shape() != target.shape()) {
    ferry::detail::fail<ShapeError>(op, "prediction ", pred.shape(), " and target ", target.shape(),
                                    " differ in shape");
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
inline DeviceArray<float> mse_loss(const DeviceArray<float>& pred, const DeviceArray<float>& target) {
  detail::check_pair("mse_loss", pred, target);
  const DeviceArray<float> d = pred - target;
  return mean(d * d);
}

/// mean(|pred - target|) over every element, as a rank-0 array; throws like mse_loss.
inline DeviceArray<float> l1_loss(const DeviceArray<float>& pred, const DeviceArray<float>& target) {
  detail::check_pair("l1_loss", pred, target);
  return mean(abs(pred - target));
}

/// The mean over the batch of -log softmax(logits)[i, labels[i]], for logits (N, C) and class
/// indices `labels` (N), as a rank-0 array. Stable for any finite logits: the row maximum is
/// subtracted before exp, and log-sum-exp is taken of what is left. The label's entry is
/// picked by a mask on the device (no export). A label outside [0, C) picks nothing and makes
/// the loss NaN, where checking it on the host would need an export. Throws ShapeError naming
/// cross_entropy for logits not (N, C) with C >= 1 or labels not (N), DeviceMismatch for two
/// devices, InvalidArgument for an empty handle.
inline DeviceArray<float> cross_entropy(const DeviceArray<float>& logits,
                                        const DeviceArray<std::int64_t>& labels) {
  constexpr std::string_view op = "cross_entropy";
  if (!logits.valid() || !labels.valid()) ferry::detail::fail<InvalidArgument>(op, "got an empty array");
  const Shape ls = logits.shape();
  const Shape ys = labels.shape();
  // Sizes compared as SymInts, not through dims() (which pins every size of a traced shape):
  // inside ferry::jit, one trace serves every batch size.
  if (ls.rank() != 2 || ys.rank() != 1 || ls[1] < 1 || ys[0] != ls[0]) {
    ferry::detail::fail<ShapeError>(op, "needs logits (N, C) with C >= 1 and labels (N), got logits ",
                                    ls, " and labels ", ys);
  }
  const Device dev = logits.device();
  if (labels.device() != dev) {
    ferry::detail::fail<DeviceMismatch>(op, "logits live on ", dev.name(), ", labels on ",
                                        labels.device().name());
  }
  const SymInt n = ls[0];
  const auto c = static_cast<std::int64_t>(ls[1]);  // the classes: a constant of a trace
  // log_softmax = shifted - log(sum(exp(shifted))): exp never sees a positive argument.
  DeviceArray<float> shifted = logits - max(logits, {1}, true);
  DeviceArray<float> log_probs = shifted - log(sum(exp(shifted), {1}, true));
  const DeviceArray<bool> mask =
      equal(reshape(labels, Shape{n, SymInt(1)}), reshape(arange<std::int64_t>(dev, c), Shape{1, c}));
  // Each row holds the label's entry once; dividing by the count of matches leaves it as it is
  // and turns a row with no match (a label out of range) into 0 / 0 = NaN.
  DeviceArray<float> picked = sum(where(mask, log_probs, 0.0f), {1});
  DeviceArray<float> matches = sum(mask.astype<float>(), {1});
  return -mean(std::move(picked) / std::move(matches));
}

}  // namespace ferry::nn
