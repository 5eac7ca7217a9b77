#pragma once
// ferry's arrays (ferry/arrays.hpp) and gradients: grad, value_and_grad, vjp.

#include "ferry/arrays.hpp"
#include "ferry/autodiff/grad.hpp"
