#pragma once
// ferry: asynchronous tensors on a modeled accelerator. This header includes the whole public
// surface; see README.md for a tour. A unit that needs less compiles faster with the entry
// header for it: ferry/arrays.hpp (arrays, ops, exports), ferry/autodiff.hpp, ferry/program.hpp,
// ferry/io.hpp, ferry/nn.hpp, ferry/calibration.hpp.

#include "ferry/arrays.hpp"
#include "ferry/autodiff.hpp"
#include "ferry/calibration.hpp"
#include "ferry/io.hpp"
#include "ferry/mesh.hpp"
#include "ferry/nn.hpp"
#include "ferry/nn/data_parallel.hpp"  // nn.hpp has no mesh layers (its optimizers step meshes)
#include "ferry/nn/mesh_grad.hpp"
#include "ferry/nn/parallel_attention.hpp"
#include "ferry/nn/tensor_parallel.hpp"
#include "ferry/program.hpp"
