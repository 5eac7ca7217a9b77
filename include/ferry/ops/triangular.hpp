#pragma once
// Matrices described by their diagonals: eye, tril and triu. Each is built from a comparison of
// symbolic index ranges (arange of the sizes), so inside jit a causal mask `tril(ones(n, n))` on a
// symbolic length is one trace for every length, and tril/triu are differentiable (through
// where).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry {

namespace detail {

/// column - row over a rows x cols grid, as int64: the diagonal each element lies on (0 the
/// main one, positive above it).
FERRY_DECL DeviceArray<std::int64_t> diagonal_index(const Device& device, SymInt rows, SymInt cols);
#if FERRY_DEFINES_DECLS
FERRY_DECL DeviceArray<std::int64_t> diagonal_index(const Device& device, SymInt rows,
                                                    SymInt cols) {
  return reshape(arange<std::int64_t>(device, cols), Shape{SymInt(1), cols}) -
         reshape(arange<std::int64_t>(device, rows), Shape{rows, SymInt(1)});
}
#endif

/// a with the elements outside diagonals [lowest, highest] of its last two dimensions zeroed.
template <Element T>
DeviceArray<T> keep_band(std::string_view name, const DeviceArray<T>& a, bool lower,
                         std::int64_t k) {
  const CalledOp called(name);
  const Step& s = step_of(name, a);
  if (s.shape().rank() < 2) {
    fail<ShapeError>(name, "needs an array of rank >= 2 (the last two dimensions are the "
                           "matrix), got ", s.shape());
  }
  const Shape shape = a.shape();
  const DeviceArray<std::int64_t> diag =
      diagonal_index(a.device(), shape[shape.rank() - 2], shape[shape.rank() - 1]);
  const DeviceArray<bool> keep = lower ? less_equal(diag, k) : greater_equal(diag, k);
  return where(keep, a, T{});
}

}  // namespace detail

/// The n x m matrix with ones on diagonal k (0 the main one, positive above it, negative below)
/// and zeros elsewhere; n and m may be symbolic in a trace. Throws InvalidArgument for a
/// negative size, n * m past int64, or an n x m array that does not fit in memory, with elements
/// of T or with the int64 diagonal indices it is built from.
template <Element T>
DeviceArray<T> eye(const Device& device, SymInt n, SymInt m, std::int64_t k = 0) {
  const detail::CalledOp called("eye");
  if (n < 0 || m < 0) detail::fail<InvalidArgument>("eye", "negative size ", n, " x ", m);
  const SymInt sizes[] = {n, m};
  detail::check_count_fits("eye", sizes);
  // Checked here, so the error names eye and T: the internal steps would refuse the larger of
  // the result and the diagonal index under their own op (subtract) and element size.
  const Shape shape{detail::SymAccess::value(n), detail::SymAccess::value(m)};
  (void)detail::checked_bytes("eye", shape, sizeof(T));
  if (shape.numel() > std::numeric_limits<std::ptrdiff_t>::max() / 8) {
    detail::fail<InvalidArgument>("eye", "an array of shape ", shape, " with ", sizeof(T),
                                  "-byte elements does not fit in memory beside the int64 "
                                  "diagonal index it is built from");
  }
  return equal(detail::diagonal_index(device, n, m), k).template astype<T>();
}

/// The n x n identity matrix.
template <Element T>
DeviceArray<T> eye(const Device& device, SymInt n) {
  return eye<T>(device, n, n, 0);
}

/// a with every element above diagonal k of its last two dimensions set to zero (k = 0 keeps the
/// main diagonal, k = -1 drops it too), as NumPy's tril; any element type, batched over leading
/// dimensions. Throws ShapeError for rank below 2, InvalidArgument for an empty handle.
template <Element T>
DeviceArray<T> tril(const DeviceArray<T>& a, std::int64_t k = 0) {
  return detail::keep_band("tril", a, true, k);
}

/// a with every element below diagonal k of its last two dimensions set to zero, as NumPy's
/// triu; throws like tril.
template <Element T>
DeviceArray<T> triu(const DeviceArray<T>& a, std::int64_t k = 0) {
  return detail::keep_band("triu", a, false, k);
}

}  // namespace ferry
