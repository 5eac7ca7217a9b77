#pragma once
// The separately compiled part of ferry: include this file in exactly one source file of a
// program whose every unit is compiled with FERRY_SEPARATE_COMPILATION defined (or link the
// ferry::separate CMake target, which is that file). It defines the model and simulator behind
// every Device (ferry/device_model_access.hpp) and the op instantiations that
// ferry/instantiations.hpp declares, so that the program's other units compile neither.
//
//   // ferry_separate.cpp, built with -DFERRY_SEPARATE_COMPILATION like the rest
//   #include <ferry/src.hpp>
//
// or in two files compiled side by side, one with `#define FERRY_SOURCE_PART 1` before the
// include and the other with 2 (ferry/core/config.hpp): with clang++ -O0, 28.9 s and 24.1 s of
// CPU against 48.8 s as one unit, so on two cores the wait is 0.6x.

#if !defined(FERRY_SEPARATE_COMPILATION)
#error \
    "ferry/src.hpp is for separate compilation: define FERRY_SEPARATE_COMPILATION in every unit"
#endif

#define FERRY_COMPILING_SOURCE
#include "ferry/core/config.hpp"
#if FERRY_SOURCE_DEFINES_MODEL
#include "ferry/device_model_access.hpp"
#endif
#include "ferry/ferry.hpp"
#include "ferry/instantiations.hpp"
