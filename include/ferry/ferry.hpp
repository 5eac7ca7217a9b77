#pragma once
// ferry: asynchronous tensors on a modeled accelerator. This header includes the whole public
// surface; see README.md for a tour.

#include "ferry/fwd.hpp"

#include "ferry/core/bfloat16.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/core/sym_int.hpp"

#include "ferry/model/calibration.hpp"
#include "ferry/model/measurements.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/stats.hpp"

#include "ferry/any_array.hpp"
#include "ferry/array.hpp"
#include "ferry/async_export.hpp"
#include "ferry/device.hpp"
#include "ferry/executor.hpp"
#include "ferry/host_array.hpp"
#include "ferry/lifetime.hpp"
#include "ferry/transfer.hpp"

#include "ferry/io/safetensors.hpp"

#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/attention.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/broadcast.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/convolution.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/custom.hpp"
#include "ferry/ops/flip.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/ops/layout.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/normalization.hpp"
#include "ferry/ops/pad.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/ops/softmax.hpp"
#include "ferry/ops/stack.hpp"
#include "ferry/ops/statistics.hpp"
#include "ferry/ops/tile.hpp"
#include "ferry/ops/triangular.hpp"
#include "ferry/ops/unary.hpp"

#include "ferry/program/jit.hpp"

#include "ferry/autodiff/grad.hpp"

#include "ferry/nn/activation.hpp"
#include "ferry/nn/grad.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/linear.hpp"
#include "ferry/nn/loss.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/nn/sequential.hpp"

#include "ferry/optim/adam.hpp"
#include "ferry/optim/optimizer.hpp"
#include "ferry/optim/sgd.hpp"
