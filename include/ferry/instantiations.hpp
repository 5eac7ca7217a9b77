#pragma once
// The op templates ferry compiles once for the element types programs use most, in the
// separate-compilation mode (FERRY_SEPARATE_COMPILATION, see ferry/src.hpp).
//
// Header-only (the default), every unit that calls `matmul` on floats instantiates it, and
// everything under it: its kernels, its gradient rule, the rules those call. That, not parsing,
// is most of a small program's compile time. With FERRY_SEPARATE_COMPILATION defined, this file
// declares those instantiations `extern`: the unit calls them, and one source file of the
// program (the one that includes ferry/src.hpp, or the ferry::separate CMake target) defines
// them. A template or a type not listed here is instantiated where it is used, as header-only:
// the list is an optimization, never a restriction.
//
// What is listed: the entry points of the elementwise ops, reductions, shape ops, matmul,
// softmax and the norms, and every backward rule, for every element type ferry computes in:
// float, double, bfloat16, float16, int32, int64, int8, uint8 and int16 (the floating ones for
// the floating ops and the rules; bool where the op takes masks). Each type listed moves its
// instantiations out of every unit that uses it (a test swept over the nine numeric types
// compiled a quarter faster when the last four joined the list). Each line names a template whose
// return type is spelled out (a deduced one cannot be declared extern) and whose body compiles
// for every type it lists.

#include "ferry/arrays.hpp"

#if defined(FERRY_SEPARATE_COMPILATION)

#if defined(FERRY_COMPILING_SOURCE)
#define FERRY_INSTANTIATE template
#else
#define FERRY_INSTANTIATE extern template
#endif

// Where ferry/src.hpp is compiled as two units (FERRY_SOURCE_PART, ferry/core/config.hpp),
// each defines the instantiations of its own element types; every other unit declares them all.
#if defined(FERRY_COMPILING_SOURCE) && defined(FERRY_SOURCE_PART) && FERRY_SOURCE_PART == 1
#define FERRY_IN_PART_1(...) __VA_ARGS__
#define FERRY_IN_PART_2(...)
#elif defined(FERRY_COMPILING_SOURCE) && defined(FERRY_SOURCE_PART)
#define FERRY_IN_PART_1(...)
#define FERRY_IN_PART_2(...) __VA_ARGS__
#else
#define FERRY_IN_PART_1(...) __VA_ARGS__
#define FERRY_IN_PART_2(...) __VA_ARGS__
#endif

// The element-type lists: X(T) once per type.
#define FERRY_FOR_FLOATING(X) \
  FERRY_IN_PART_1(X(float) X(double)) FERRY_IN_PART_2(X(::ferry::bfloat16) X(::ferry::float16))
#define FERRY_FOR_NUMERIC(X)                                    \
  FERRY_FOR_FLOATING(X)                                         \
  FERRY_IN_PART_1(X(std::int32_t) X(std::int64_t) X(std::int8_t)) \
  FERRY_IN_PART_2(X(std::uint8_t) X(std::int16_t))
#define FERRY_FOR_ELEMENTS(X) FERRY_FOR_NUMERIC(X) FERRY_IN_PART_1(X(bool))

// The op lists: X(Op, T) once per op, for one type T.
// clang-format off
#define FERRY_ARITHMETIC_OPS(X, T) \
  X(kernels::Add, T) X(kernels::Subtract, T) X(kernels::Multiply, T) X(kernels::Divide, T) \
  X(kernels::Maximum, T) X(kernels::Minimum, T)
#define FERRY_COMPARISON_OPS(X, T) \
  X(kernels::Less, T) X(kernels::Greater, T) X(kernels::Equal, T) X(kernels::NotEqual, T) \
  X(kernels::LessEqual, T) X(kernels::GreaterEqual, T)
#define FERRY_NUMERIC_UNARY_OPS(X, T) \
  X(kernels::Negate, T) X(kernels::Abs, T) X(kernels::Relu, T) X(kernels::Sign, T) \
  X(kernels::Square, T)
#define FERRY_FLOATING_UNARY_OPS(X, T) \
  X(kernels::Exp, T) X(kernels::Log, T) X(kernels::Sqrt, T) X(kernels::Sigmoid, T) \
  X(kernels::Tanh, T) X(kernels::Gelu, T) X(kernels::Sin, T) X(kernels::Cos, T) \
  X(kernels::Erf, T) X(kernels::Log1p, T) X(kernels::Expm1, T) X(kernels::Rsqrt, T) \
  X(kernels::Silu, T) X(kernels::Softplus, T)
// clang-format on

namespace ferry::detail {

// ---- elementwise ----
#define FERRY_ZIP(Op, T)                                                                           \
  FERRY_INSTANTIATE DeviceArray<T> zip_arrays<T, T, Op>(std::string_view, const DeviceArray<T>&,   \
                                                        const DeviceArray<T>&, Op, std::uint32_t); \
  FERRY_INSTANTIATE DeviceArray<T> zip_scalar<T, T, Op>(std::string_view, const DeviceArray<T>&,   \
                                                        T, bool, Op, std::uint32_t);
#define FERRY_COMPARE(Op, T)                                                              \
  FERRY_INSTANTIATE DeviceArray<bool> zip_arrays<bool, T, Op>(                            \
      std::string_view, const DeviceArray<T>&, const DeviceArray<T>&, Op, std::uint32_t); \
  FERRY_INSTANTIATE DeviceArray<bool> zip_scalar<bool, T, Op>(                            \
      std::string_view, const DeviceArray<T>&, T, bool, Op, std::uint32_t);
#define FERRY_NUMERIC_UNARY(Op, T)                                                     \
  FERRY_INSTANTIATE DeviceArray<T> UnaryOp<Op, false>::apply<T>(const DeviceArray<T>&, \
                                                                std::uint32_t) const;
#define FERRY_FLOATING_UNARY(Op, T)                                                   \
  FERRY_INSTANTIATE DeviceArray<T> UnaryOp<Op, true>::apply<T>(const DeviceArray<T>&, \
                                                               std::uint32_t) const;
#define FERRY_ELEMENTWISE(T)                      \
  FERRY_ARITHMETIC_OPS(FERRY_ZIP, T)              \
  FERRY_COMPARISON_OPS(FERRY_COMPARE, T)          \
  FERRY_NUMERIC_UNARY_OPS(FERRY_NUMERIC_UNARY, T) \
  FERRY_INSTANTIATE DeviceArray<T> select<T>(const DeviceArray<bool>&, Choice<T>, Choice<T>);
FERRY_FOR_NUMERIC(FERRY_ELEMENTWISE)
#define FERRY_FLOATING_ELEMENTWISE(T) FERRY_FLOATING_UNARY_OPS(FERRY_FLOATING_UNARY, T)
FERRY_FOR_FLOATING(FERRY_FLOATING_ELEMENTWISE)

// ---- reductions, shape ops, the fused launcher ----
#define FERRY_ANY_ELEMENT_OPS(T)                                                                   \
  FERRY_INSTANTIATE DeviceArray<T> expand<T>(std::string_view, const DeviceArray<T>&,              \
                                             const Shape&, bool);                                  \
  FERRY_INSTANTIATE DeviceArray<T> permute<T>(std::string_view, const DeviceArray<T>&,             \
                                              std::span<const int>);                               \
  FERRY_INSTANTIATE DeviceArray<T> reshape<T>(std::string_view, const DeviceArray<T>&, Shape);     \
  FERRY_INSTANTIATE DeviceArray<T> slice<T>(std::string_view, const DeviceArray<T>&, int,          \
                                            std::int64_t, std::int64_t);                           \
  FERRY_INSTANTIATE DeviceArray<T> concat<T>(std::string_view, const std::vector<DeviceArray<T>>&, \
                                             int, std::size_t);
FERRY_FOR_ELEMENTS(FERRY_ANY_ELEMENT_OPS)
#define FERRY_NUMERIC_OPS(T)                                                                      \
  FERRY_INSTANTIATE DeviceArray<T> reduce_eager<T>(                                               \
      std::string_view, kernels::ReduceOp, const DeviceArray<T>&, const std::vector<int>&, bool); \
  FERRY_INSTANTIATE Handle launch_fused<T>(const std::shared_ptr<const FusedProgram>&,            \
                                           std::span<Step* const>, std::uint32_t);
FERRY_FOR_NUMERIC(FERRY_NUMERIC_OPS)

// ---- the backward rules ----
#define FERRY_UNARY_RULE(Op, T) FERRY_INSTANTIATE void unary_backward<Op, T>(Tag<T>, GradCall&);
#define FERRY_BINARY_RULES(Op, T)                                   \
  FERRY_INSTANTIATE void binary_backward<Op, T>(Tag<T>, GradCall&); \
  FERRY_INSTANTIATE void scalar_backward<Op, T>(Tag<T>, GradCall&, T, bool);
#define FERRY_TAKE_RULES(I, T)                                               \
  FERRY_INSTANTIATE void take_backward<I, T>(Tag<T>, GradCall&, int);        \
  FERRY_INSTANTIATE void scatter_add_backward<I, T>(Tag<T>, GradCall&, int); \
  FERRY_INSTANTIATE void take_along_backward<I, T>(Tag<T>, GradCall&, int, std::string_view,   \
                                                  bool);                                     \
  FERRY_INSTANTIATE void scatter_add_along_backward<I, T>(Tag<T>, GradCall&, int,              \
                                                         std::string_view, bool);
#define FERRY_RULES(T)                                                                           \
  FERRY_NUMERIC_UNARY_OPS(FERRY_UNARY_RULE, T)                                                   \
  FERRY_FLOATING_UNARY_OPS(FERRY_UNARY_RULE, T)                                                  \
  FERRY_ARITHMETIC_OPS(FERRY_BINARY_RULES, T)                                                    \
  FERRY_TAKE_RULES(std::int32_t, T)                                                              \
  FERRY_TAKE_RULES(std::int64_t, T)                                                              \
  FERRY_INSTANTIATE void select_backward<T>(Tag<T>, GradCall&, bool, bool);                      \
  FERRY_INSTANTIATE void broadcast_backward<T>(Tag<T>, GradCall&, bool);                         \
  FERRY_INSTANTIATE void reduce_backward<T>(Tag<T>, GradCall&, kernels::ReduceOp,                \
                                            const std::vector<int>&, bool);                      \
  FERRY_INSTANTIATE void softmax_backward<T>(Tag<T>, GradCall&, int);                            \
  FERRY_INSTANTIATE void cumsum_backward<T>(Tag<T>, GradCall&, int);                             \
  FERRY_INSTANTIATE void matmul_backward<T>(Tag<T>, GradCall&);                                  \
  FERRY_INSTANTIATE void reshape_backward<T>(Tag<T>, GradCall&);                                 \
  FERRY_INSTANTIATE void permute_backward<T>(Tag<T>, GradCall&, const std::vector<int>&);        \
  FERRY_INSTANTIATE void slice_backward<T>(Tag<T>, GradCall&, int, const SymInt&);               \
  FERRY_INSTANTIATE void concat_backward<T>(Tag<T>, GradCall&, int);                             \
  FERRY_INSTANTIATE void update_slice_backward<T>(Tag<T>, GradCall&, int, const SymInt&);        \
  FERRY_INSTANTIATE void flip_backward<T>(Tag<T>, GradCall&, const std::vector<int>&);           \
  FERRY_INSTANTIATE void index_backward<T>(Tag<T>, GradCall&, const std::vector<Index>&);        \
  FERRY_INSTANTIATE void index_update_backward<T>(Tag<T>, GradCall&, const std::vector<Index>&); \
  FERRY_INSTANTIATE void to_layout_backward<T>(Tag<T>, GradCall&);                               \
  FERRY_INSTANTIATE void im2col_backward<T>(Tag<T>, GradCall&, const kernels::Window2d&);        \
  FERRY_INSTANTIATE void col2im_backward<T>(Tag<T>, GradCall&, const kernels::Window2d&);        \
  FERRY_INSTANTIATE void attention_backward<T>(Tag<T>, GradCall&, double, bool, bool);           \
  FERRY_INSTANTIATE void transfer_backward<T>(Tag<T>, GradCall&);                                \
  FERRY_INSTANTIATE void set_grad<T>(GradCall&, std::size_t, DeviceArray<T>);
FERRY_FOR_FLOATING(FERRY_RULES)

}  // namespace ferry::detail

namespace ferry {

#define FERRY_PUBLIC_NUMERIC(T)                                                                  \
  FERRY_INSTANTIATE DeviceArray<T> matmul<T, T>(const DeviceArray<T>&, const DeviceArray<T>&);   \
  FERRY_INSTANTIATE DeviceArray<T> sum<T>(const DeviceArray<T>&, const std::vector<int>&, bool); \
  FERRY_INSTANTIATE DeviceArray<T> max<T>(const DeviceArray<T>&, const std::vector<int>&, bool); \
  FERRY_INSTANTIATE DeviceArray<T> min<T>(const DeviceArray<T>&, const std::vector<int>&, bool);
FERRY_FOR_NUMERIC(FERRY_PUBLIC_NUMERIC)
#define FERRY_PUBLIC_FLOATING(T)                                                                  \
  FERRY_INSTANTIATE DeviceArray<T> mean<T>(const DeviceArray<T>&, const std::vector<int>&, bool); \
  FERRY_INSTANTIATE DeviceArray<T> softmax<T>(const DeviceArray<T>&, int);                        \
  FERRY_INSTANTIATE DeviceArray<T> layer_norm<T>(const DeviceArray<T>&, const NormOptions<T>&);   \
  FERRY_INSTANTIATE DeviceArray<T> rms_norm<T>(const DeviceArray<T>&, const NormOptions<T>&);
FERRY_FOR_FLOATING(FERRY_PUBLIC_FLOATING)

}  // namespace ferry

#undef FERRY_IN_PART_1
#undef FERRY_IN_PART_2
#undef FERRY_FOR_FLOATING
#undef FERRY_FOR_NUMERIC
#undef FERRY_FOR_ELEMENTS
#undef FERRY_ARITHMETIC_OPS
#undef FERRY_COMPARISON_OPS
#undef FERRY_NUMERIC_UNARY_OPS
#undef FERRY_FLOATING_UNARY_OPS
#undef FERRY_ZIP
#undef FERRY_COMPARE
#undef FERRY_NUMERIC_UNARY
#undef FERRY_FLOATING_UNARY
#undef FERRY_ELEMENTWISE
#undef FERRY_FLOATING_ELEMENTWISE
#undef FERRY_ANY_ELEMENT_OPS
#undef FERRY_NUMERIC_OPS
#undef FERRY_UNARY_RULE
#undef FERRY_BINARY_RULES
#undef FERRY_TAKE_RULES
#undef FERRY_RULES
#undef FERRY_PUBLIC_NUMERIC
#undef FERRY_PUBLIC_FLOATING
#undef FERRY_INSTANTIATE

#endif  // FERRY_SEPARATE_COMPILATION
