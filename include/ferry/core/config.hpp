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

// FERRY_SOURCE_PART: ferry/src.hpp's unit may be compiled as two units side by side, each
// including ferry/src.hpp with FERRY_SOURCE_PART defined as 1 or 2 (the ferry::separate target
// does): part 1 defines the model, the FERRY_DECL functions and the instantiations for float,
// double, int32, int64, int8 and bool, part 2 those for bfloat16, float16, uint8 and int16
// (ferry/instantiations.hpp). Undefined, the one unit defines everything.
#if defined(FERRY_SOURCE_PART) && FERRY_SOURCE_PART != 1 && FERRY_SOURCE_PART != 2
#error "FERRY_SOURCE_PART is 1 or 2 (ferry/src.hpp compiled as two units), or undefined (one)"
#endif
#if defined(FERRY_COMPILING_SOURCE) && (!defined(FERRY_SOURCE_PART) || FERRY_SOURCE_PART == 1)
#define FERRY_SOURCE_DEFINES_MODEL 1
#else
#define FERRY_SOURCE_DEFINES_MODEL 0
#endif

// FERRY_DEFINES_DECLS: 1 where this unit defines the FERRY_DECL functions (header-only, or the
// unit of ferry/src.hpp, its part 1 where it is two), 0 where it only declares them. A header
// keeps such a function's body under `#if FERRY_DEFINES_DECLS`, so that a separately compiled
// unit neither parses it into its precompiled header's work nor instantiates what the body uses.
#if !defined(FERRY_SEPARATE_COMPILATION) || FERRY_SOURCE_DEFINES_MODEL
#define FERRY_DEFINES_DECLS 1
#else
#define FERRY_DEFINES_DECLS 0
#endif

// FERRY_EXTERN_TEMPLATE(declaration): an explicit instantiation of a template that an inline
// non-template function of the headers uses. g++ instantiates such a template in every unit
// that includes the header, even through a precompiled header and even when the unit never
// calls the function (seconds a unit in all); in the separate mode the line makes it
// `extern template` (the unit calls the one compiled in ferry/src.hpp's unit, where it is
// `template`). It must follow the template's definition and precede the first use. Header-only,
// it is nothing.
#if !defined(FERRY_SEPARATE_COMPILATION)
#define FERRY_EXTERN_TEMPLATE(...)
#elif FERRY_SOURCE_DEFINES_MODEL
#define FERRY_EXTERN_TEMPLATE(...) template __VA_ARGS__;
#else
#define FERRY_EXTERN_TEMPLATE(...) extern template __VA_ARGS__;
#endif
