#pragma once
// ferry's arrays without the rest: devices, DeviceArray and HostArray, imports and exports,
// every op (with its gradient rule, which an op needs even where nothing is differentiated).
// No programs (jit), gradient API, modules, optimizers, checkpoints or calibration: include
// ferry/program.hpp, ferry/autodiff.hpp, ferry/nn.hpp, ferry/io.hpp, ferry/calibration.hpp
// for those, or ferry/ferry.hpp for everything. A unit that includes only this one compiles
// in about three quarters of the time (benchmarks/compile_time).

#include "ferry/fwd.hpp"

#include "ferry/core/bfloat16.hpp"
#include "ferry/core/float16.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"

#include "ferry/model/spec.hpp"
#include "ferry/model/stats.hpp"

#include "ferry/any_array.hpp"
#include "ferry/array.hpp"
#include "ferry/async_export.hpp"
#include "ferry/device.hpp"
#include "ferry/executor.hpp"
#include "ferry/host_array.hpp"
#include "ferry/lifetime.hpp"
#include "ferry/print.hpp"
#include "ferry/transfer.hpp"

#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/attention.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/broadcast.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/convolution.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/cross_entropy.hpp"
#include "ferry/ops/custom.hpp"
#include "ferry/ops/flip.hpp"
#include "ferry/ops/index.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/ops/layout.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/normalization.hpp"
#include "ferry/ops/ordering.hpp"
#include "ferry/ops/pad.hpp"
#include "ferry/ops/random.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/scan.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/ops/softmax.hpp"
#include "ferry/ops/stack.hpp"
#include "ferry/ops/statistics.hpp"
#include "ferry/ops/tile.hpp"
#include "ferry/ops/triangular.hpp"
#include "ferry/ops/truth.hpp"
#include "ferry/ops/unary.hpp"

#include "ferry/autodiff/rules.hpp"

// Last: in the separate-compilation mode, the instantiations compiled once (no-op otherwise).
#include "ferry/instantiations.hpp"
