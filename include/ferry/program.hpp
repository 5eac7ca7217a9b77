#pragma once
// ferry's arrays (ferry/arrays.hpp) and programs: ferry::jit, traced once and replayed.

#include "ferry/arrays.hpp"
#include "ferry/program/jit.hpp"
