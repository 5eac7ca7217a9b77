#pragma once
// How ferry is compiled: header-only (the default), or with FERRY_SEPARATE_COMPILATION defined
// for every unit of a program, one of which includes ferry/src.hpp (or the program links the
// ferry::separate CMake target, which does that). Then the model, the simulator and the common
// instantiations of the ops are compiled once, in that unit, instead of in every unit that uses
// a device (ferry/instantiations.hpp says which).
//
// FERRY_DECL marks a function that ferry defines apart from its declaration: `inline` (defined
// in every unit) header-only, an ordinary function (defined in ferry/src.hpp's unit) otherwise.

#if defined(FERRY_SEPARATE_COMPILATION)
#define FERRY_DECL
#else
#define FERRY_DECL inline
#endif
