#pragma once
// Training: modules, losses, optimizers and their gradients, with arrays, gradients and
// checkpoints (ferry/autodiff.hpp, ferry/io.hpp).

#include "ferry/autodiff.hpp"
#include "ferry/io.hpp"

#include "ferry/nn/activation.hpp"
#include "ferry/nn/attention.hpp"
#include "ferry/nn/clip.hpp"
#include "ferry/nn/conv.hpp"
#include "ferry/nn/dropout.hpp"
#include "ferry/nn/embedding.hpp"
#include "ferry/nn/grad.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/linear.hpp"
#include "ferry/nn/loss.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/nn/module_list.hpp"
#include "ferry/nn/normalization.hpp"
#include "ferry/nn/sequential.hpp"

#include "ferry/optim/adam.hpp"
#include "ferry/optim/optimizer.hpp"
#include "ferry/optim/schedule.hpp"
#include "ferry/optim/sgd.hpp"
#include "ferry/optim/updates.hpp"
