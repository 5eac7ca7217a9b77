#pragma once
// A plain synchronous evaluator for the random programs: row-major values in a std::vector and
// one loop per op. It shares no code with ferry's kernels, graph or scheduler, so that a fuzz
// failure points at one of the two.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ferry/core/dtype.hpp>

namespace ferry_fuzz {

/// bfloat16 and float16: stored in 16 bits, computed in float. Each op of the reference works
/// on the float values and rounds its result once, as ferry's kernels do.
template <class T>
inline constexpr bool kHalf = ferry::HalfFloating<T>;
/// A floating element type: NaN exists and propagates.
template <class T>
inline constexpr bool kFloating = std::is_floating_point_v<T> || kHalf<T>;

/// The unsigned type integer T wraps in: at least unsigned int, since a narrower one would be
/// promoted to int, where 65535 * 65535 overflows.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
bool is_nan(T x) {
  if constexpr (kFloating<T>) {
    const auto v = static_cast<std::conditional_t<kHalf<T>, float, T>>(x);
    return v != v;
  } else {
    return false;
  }
}

/// x < 0, asked of signed and floating types only.
template <class T>
bool negative(T x) {
  if constexpr (std::is_unsigned_v<T>) {
    static_cast<void>(x);
    return false;
  } else {
    return x < T{0};
  }
}

template <class T>
struct Tensor {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<T> v;

  static Tensor zeros(std::int64_t r, std::int64_t c) {
    return {r, c, std::vector<T>(static_cast<std::size_t>(r * c))};
  }
  T& at(std::int64_t i, std::int64_t j) { return v[static_cast<std::size_t>(i * cols + j)]; }
  const T& at(std::int64_t i, std::int64_t j) const {
    return v[static_cast<std::size_t>(i * cols + j)];
  }
  /// Reads (i, j) of this tensor broadcast to rows x cols (a size of 1 repeats).
  const T& bcast(std::int64_t i, std::int64_t j) const {
    return at(rows == 1 ? 0 : i, cols == 1 ? 0 : j);
  }
};

/// Integer arithmetic wraps in two's complement, as ferry defines it; a 16-bit float computes
/// in float and rounds once.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = Wide<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else if constexpr (kHalf<T>) {
    return T(static_cast<float>(a) + static_cast<float>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = Wide<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else if constexpr (kHalf<T>) {
    return T(static_cast<float>(a) - static_cast<float>(b));
  } else {
    return a - b;
  }
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = Wide<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else if constexpr (kHalf<T>) {
    return T(static_cast<float>(a) * static_cast<float>(b));
  } else {
    return a * b;
  }
}

enum class Binary { add, sub, mul, max };

template <class T>
T apply(Binary op, T a, T b) {
  switch (op) {
    case Binary::add: return wrap_add(a, b);
    case Binary::sub: return wrap_sub(a, b);
    case Binary::mul: return wrap_mul(a, b);
    case Binary::max:
      if (is_nan(a)) return a;  // NaN propagates, as in ferry
      if (is_nan(b)) return b;
      return a < b ? b : a;
  }
  return a;
}

template <class T>
Tensor<T> binary(Binary op, const Tensor<T>& a, const Tensor<T>& b) {
  const std::int64_t r = a.rows == 1 ? b.rows : a.rows;
  const std::int64_t c = a.cols == 1 ? b.cols : a.cols;
  Tensor<T> out = Tensor<T>::zeros(r, c);
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) out.at(i, j) = apply(op, a.bcast(i, j), b.bcast(i, j));
  }
  return out;
}

enum class Unary { neg, abs, relu, tanh };

template <class T>
Tensor<T> unary(Unary op, Tensor<T> a) {
  for (T& x : a.v) {
    switch (op) {
      case Unary::neg: x = wrap_sub(T{0}, x); break;
      case Unary::abs: x = negative(x) ? wrap_sub(T{0}, x) : x; break;
      case Unary::relu: x = negative(x) ? T{0} : x; break;
      case Unary::tanh:
        if constexpr (kFloating<T>) {
          using C = std::conditional_t<kHalf<T>, float, T>;
          x = static_cast<T>(std::tanh(static_cast<C>(x)));
        }
        break;
    }
  }
  return a;
}

/// A 16-bit float's products are exact in float and summed there, in order of k, then
/// rounded once; integers wrap.
template <class T>
Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b) {
  using Acc = std::conditional_t<kHalf<T>, float, T>;
  Tensor<T> out = Tensor<T>::zeros(a.rows, b.cols);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < b.cols; ++j) {
      Acc acc{0};
      for (std::int64_t k = 0; k < a.cols; ++k) {
        acc = wrap_add(acc, wrap_mul(static_cast<Acc>(a.at(i, k)), static_cast<Acc>(b.at(k, j))));
      }
      out.at(i, j) = static_cast<T>(acc);
    }
  }
  return out;
}

/// The sum along `axis`, kept as size 1; floating sums accumulate in double, integers wrap.
template <class T>
Tensor<T> sum(const Tensor<T>& a, int axis) {
  using Acc = std::conditional_t<std::is_integral_v<T>, T, double>;
  Tensor<T> out = Tensor<T>::zeros(axis == 0 ? 1 : a.rows, axis == 0 ? a.cols : 1);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    for (std::int64_t j = 0; j < out.cols; ++j) {
      Acc acc{0};
      const std::int64_t n = axis == 0 ? a.rows : a.cols;
      for (std::int64_t k = 0; k < n; ++k) {
        const T x = axis == 0 ? a.at(k, j) : a.at(i, k);
        if constexpr (std::is_integral_v<T>) {
          acc = wrap_add(acc, x);
        } else {
          acc += static_cast<double>(static_cast<std::conditional_t<kHalf<T>, float, T>>(x));
        }
      }
      out.at(i, j) = static_cast<T>(static_cast<std::conditional_t<kHalf<T>, float, Acc>>(acc));
    }
  }
  return out;
}

template <class T>
Tensor<T> transpose(const Tensor<T>& a) {
  Tensor<T> out = Tensor<T>::zeros(a.cols, a.rows);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < a.cols; ++j) out.at(j, i) = a.at(i, j);
  }
  return out;
}

/// Rows [begin, end) of `a`, or columns when `axis` is 1.
template <class T>
Tensor<T> slice(const Tensor<T>& a, int axis, std::int64_t begin, std::int64_t end) {
  Tensor<T> out =
      Tensor<T>::zeros(axis == 0 ? end - begin : a.rows, axis == 0 ? a.cols : end - begin);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    for (std::int64_t j = 0; j < out.cols; ++j) {
      out.at(i, j) = axis == 0 ? a.at(begin + i, j) : a.at(i, begin + j);
    }
  }
  return out;
}

/// `a` above `b` (axis 0) or beside it (axis 1).
template <class T>
Tensor<T> concat(const Tensor<T>& a, const Tensor<T>& b, int axis) {
  Tensor<T> out =
      Tensor<T>::zeros(axis == 0 ? a.rows + b.rows : a.rows, axis == 0 ? a.cols : a.cols + b.cols);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    for (std::int64_t j = 0; j < out.cols; ++j) {
      const bool first = axis == 0 ? i < a.rows : j < a.cols;
      out.at(i, j) = first ? a.at(i, j) : (axis == 0 ? b.at(i - a.rows, j) : b.at(i, j - a.cols));
    }
  }
  return out;
}

/// The same values read as rows x cols (row-major).
template <class T>
Tensor<T> reshape(Tensor<T> a, std::int64_t rows, std::int64_t cols) {
  a.rows = rows;
  a.cols = cols;
  return a;
}

/// `a` with its rows (axis 0) or columns (axis 1) in reverse order.
template <class T>
Tensor<T> flip(const Tensor<T>& a, int axis) {
  Tensor<T> out = Tensor<T>::zeros(a.rows, a.cols);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < a.cols; ++j) {
      out.at(i, j) = axis == 0 ? a.at(a.rows - 1 - i, j) : a.at(i, a.cols - 1 - j);
    }
  }
  return out;
}

/// The running sum along `axis`, in order: floating sums in double, integers wrapping.
template <class T>
Tensor<T> cumsum(const Tensor<T>& a, int axis) {
  Tensor<T> out = Tensor<T>::zeros(a.rows, a.cols);
  const std::int64_t lines = axis == 0 ? a.cols : a.rows;
  const std::int64_t n = axis == 0 ? a.rows : a.cols;
  for (std::int64_t l = 0; l < lines; ++l) {
    double acc = 0;
    T wrapped{0};
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t i = axis == 0 ? k : l;
      const std::int64_t j = axis == 0 ? l : k;
      if constexpr (std::is_integral_v<T>) {
        out.at(i, j) = wrapped = wrap_add(wrapped, a.at(i, j));
      } else {
        acc += static_cast<double>(static_cast<std::conditional_t<kHalf<T>, float, T>>(a.at(i, j)));
        using Rounded = std::conditional_t<kHalf<T>, float, double>;
        out.at(i, j) = static_cast<T>(static_cast<Rounded>(acc));
      }
    }
  }
  return out;
}

/// The rows `rows` names, in that order; a negative index counts from the end.
template <class T>
Tensor<T> take_rows(const Tensor<T>& a, const std::vector<std::int64_t>& rows) {
  Tensor<T> out = Tensor<T>::zeros(static_cast<std::int64_t>(rows.size()), a.cols);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    const std::int64_t r = rows[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < a.cols; ++j) out.at(i, j) = a.at(r < 0 ? r + a.rows : r, j);
  }
  return out;
}

/// Each row (axis 1) or column (axis 0) sorted ascending, NaN after every number.
template <class T>
Tensor<T> sort(Tensor<T> a, int axis) {
  const std::int64_t lines = axis == 0 ? a.cols : a.rows;
  const std::int64_t n = axis == 0 ? a.rows : a.cols;
  for (std::int64_t l = 0; l < lines; ++l) {
    std::vector<T> line;
    for (std::int64_t k = 0; k < n; ++k) line.push_back(axis == 0 ? a.at(k, l) : a.at(l, k));
    std::stable_sort(line.begin(), line.end(), [](T x, T y) {
      if (is_nan(x)) return false;
      if (is_nan(y)) return true;
      return x < y;
    });
    for (std::int64_t k = 0; k < n; ++k)
      (axis == 0 ? a.at(k, l) : a.at(l, k)) = line[static_cast<std::size_t>(k)];
  }
  return a;
}

/// `a` with the elements above diagonal k (j - i > k) set to 0.
template <class T>
Tensor<T> tril(Tensor<T> a, std::int64_t k) {
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < a.cols; ++j) {
      if (j - i > k) a.at(i, j) = T{0};
    }
  }
  return a;
}

}  // namespace ferry_fuzz
