#pragma once
// ferry's arrays (ferry/arrays.hpp) and checkpoints: safetensors, read and written.

#include "ferry/arrays.hpp"
#include "ferry/io/safetensors.hpp"
