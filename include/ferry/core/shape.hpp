#pragma once
// Shape: the extents of an array, stored inline so a shape never allocates.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "ferry/core/error.hpp"
#include "ferry/core/sym_int.hpp"

namespace ferry {

/// The most dimensions an array may have (the same cap TensorRT and ONNX Runtime kernels use);
/// it lets a Shape live inline, so building an op never allocates for its shape.
inline constexpr std::size_t kMaxRank = 8;

namespace detail {
struct ShapeAccess;
}

/// The extents of an array. `Shape{}` is a scalar (rank 0, one element); `Shape{32, 784}` is
/// a 32x784 matrix. Sizes may be zero. Immutable once built.
///
/// Inside a traced program (see ferry::jit) the shape of an array may be symbolic: `shape[i]`
/// is then a SymInt expression of the program's input sizes. The accessors that give plain
/// integers (numel, dims, begin/end, ==) guard that every symbolic size keeps its value, so
/// use `shape[i]` where a program should serve other sizes too.
class Shape {
 public:
  Shape() = default;

  /// Throws InvalidArgument for a negative size, more than kMaxRank dimensions, or sizes whose
  /// product overflows int64 (zero sizes left out of the product, so strides always fit).
  template <class... Dims>
    requires(sizeof...(Dims) > 0 &&
             ((std::same_as<Dims, SymInt> || (std::integral<Dims> && !std::same_as<Dims, bool>)) &&
              ...))
  Shape(Dims... dims) {  // NOLINT: implicit, so `reshape(a, {2, 3})` works
    const std::array<SymInt, sizeof...(Dims)> list{checked_dim(dims)...};
    assign(list);
  }

  /// Throws like the variadic constructor.
  explicit Shape(std::span<const std::int64_t> dims) { assign(dims); }
  /// Throws like the variadic constructor.
  explicit Shape(std::span<const SymInt> dims) { assign(dims); }

  std::size_t rank() const noexcept { return rank_; }
  /// Extent of dimension `i`, symbolic inside a trace; throws InvalidArgument when
  /// `i >= rank()`.
  SymInt operator[](std::size_t i) const {
    if (i >= rank_) {
      detail::fail<InvalidArgument>("Shape", "dimension ", i, " of a rank-", rank_, " shape ",
                                    to_string());
    }
    return detail::SymAccess::make(dims_[i], trace_, nodes_[i]);
  }
  /// The number of elements: the product of the sizes (1 for a scalar). In a trace, guards the
  /// sizes; `size()` is the symbolic count.
  std::int64_t numel() const {
    specialize();
    return numel_;
  }
  /// The number of elements as a SymInt: symbolic inside a trace.
  SymInt size() const {
    SymInt n = 1;
    for (std::size_t i = 0; i < rank_; ++i) n = n * (*this)[i];
    return n;
  }

  /// The sizes as plain integers; in a trace, guards them.
  std::span<const std::int64_t> dims() const {
    specialize();
    return {dims_.data(), rank_};
  }
  const std::int64_t* begin() const { return dims().data(); }
  const std::int64_t* end() const { return dims().data() + rank_; }

  /// Equal ranks and sizes; in a trace, guards the sizes of both.
  friend bool operator==(const Shape& a, const Shape& b) {
    return std::ranges::equal(a.dims(), b.dims());
  }

  /// "(32, 784)"; a scalar is "()". Not a guard: it only prints the sizes of this call.
  std::string to_string() const {
    std::string out = "(";
    for (std::size_t i = 0; i < rank_; ++i) {
      if (i > 0) out += ", ";
      out += std::to_string(dims_[i]);
    }
    return out + ")";
  }

 private:
  friend struct detail::ShapeAccess;

  static SymInt checked_dim(const SymInt& d) noexcept { return d; }
  template <std::integral D>
  static SymInt checked_dim(D d) {
    if constexpr (std::is_unsigned_v<D>) {
      if (d > static_cast<std::make_unsigned_t<std::int64_t>>(
                  std::numeric_limits<std::int64_t>::max())) {
        detail::fail<InvalidArgument>("Shape", "size ", d, " does not fit in int64");
      }
    }
    return static_cast<std::int64_t>(d);
  }

  // A plain shape has trace_ == 0; a symbolic one names its trace and one node per size.
  bool tagged() const noexcept { return trace_ != 0; }

  void specialize() const {
    if (trace_ == 0) [[likely]] return;
    for (std::size_t i = 0; i < rank_; ++i) {
      if (detail::SymContext* c = detail::live_context(trace_, nodes_[i]))
        c->guard(nodes_[i], dims_[i]);
    }
  }

  void assign(std::span<const SymInt> dims) {
    std::array<std::int64_t, kMaxRank> values{};
    const std::size_t n = dims.size() < kMaxRank ? dims.size() : kMaxRank;
    for (std::size_t i = 0; i < n; ++i) values[i] = detail::SymAccess::value(dims[i]);
    assign(std::span<const std::int64_t>(values.data(), dims.size()));
    for (std::size_t i = 0; i < rank_; ++i) {
      nodes_[i] = detail::SymAccess::node(dims[i]);
      if (nodes_[i] != 0) trace_ = detail::t_sym_context->id();
    }
  }

  void assign(std::span<const std::int64_t> dims) {
    if (dims.size() > kMaxRank) {
      detail::fail<InvalidArgument>("Shape", "rank ", dims.size(), " exceeds the maximum of ",
                                    kMaxRank);
    }
    // The product of the non-zero sizes must fit even when another size is zero (NumPy's rule):
    // it bounds every row-major stride, and the answer does not depend on where the zero is.
    std::int64_t nonzero_product = 1;
    bool has_zero = false;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const std::int64_t d = dims[i];
      if (d < 0) detail::fail<InvalidArgument>("Shape", "negative size ", d, " in dimension ", i);
      if (d == 0) {
        has_zero = true;
      } else if (nonzero_product > std::numeric_limits<std::int64_t>::max() / d) {
        detail::fail<InvalidArgument>("Shape", "element count overflows int64 at dimension ", i);
      } else {
        nonzero_product *= d;
      }
      dims_[i] = d;
    }
    rank_ = static_cast<std::uint8_t>(dims.size());
    numel_ = has_zero ? 0 : nonzero_product;
  }

  std::array<std::int64_t, kMaxRank> dims_{};
  std::uint8_t rank_ = 0;
  std::int64_t numel_ = 1;
  std::uint32_t trace_ = 0;
  std::array<std::uint32_t, kMaxRank> nodes_{};
};

namespace detail {

/// What the library reads of a shape without guarding it: the sizes of this call (a kernel runs
/// for any size) and the symbols behind them.
struct ShapeAccess {
  /// The same sizes, untied from any trace.
  static Shape plain(const Shape& s) noexcept {
    Shape out = s;
    out.trace_ = 0;
    out.nodes_ = {};
    return out;
  }
  static bool tagged(const Shape& s) noexcept { return s.tagged(); }
  /// The sizes of this call, not a guard (as to_string).
  static std::span<const std::int64_t> sizes(const Shape& s) noexcept {
    return {s.dims_.data(), s.rank_};
  }
  /// `s` with the symbols `nodes` of trace `trace` (one per size, 0 for a constant).
  static Shape tag(const Shape& s, std::uint32_t trace,
                   std::span<const std::uint32_t> nodes) noexcept {
    Shape out = s;
    out.trace_ = trace;
    for (std::size_t i = 0; i < s.rank_; ++i) out.nodes_[i] = nodes[i];
    return out;
  }
};

/// Per-dimension element strides; only the first `rank` entries mean anything.
using Strides = std::array<std::int64_t, kMaxRank>;

/// Row-major (C order) strides of a contiguous array of `shape`.
inline Strides row_major_strides(const Shape& shape) noexcept {
  Strides s{};
  std::int64_t step = 1;
  for (std::size_t i = shape.rank(); i-- > 0;) {
    s[i] = step;
    step *= shape.dims()[i];
  }
  return s;
}

/// An array seen as (outer, size, inner) around dimension d: the view that ops along one axis
/// (softmax, argmax, slice, concat) iterate.
struct AxisView {
  std::int64_t outer = 1;
  std::int64_t size = 1;
  std::int64_t inner = 1;
};

inline AxisView axis_view(const Shape& shape, std::size_t d) noexcept {
  AxisView v;
  for (std::size_t i = 0; i < d; ++i) v.outer *= shape.dims()[i];
  v.size = shape.dims()[d];
  for (std::size_t i = d + 1; i < shape.rank(); ++i) v.inner *= shape.dims()[i];
  return v;
}

/// The bytes an array of `shape` with elements of `element_size` bytes takes; `E` naming `op`
/// when that exceeds what one allocation can hold (the product would otherwise wrap around in
/// size_t and become a tiny buffer). `E` is InvalidArgument for a device array's size, or
/// OutOfHostMemory for host memory the call takes itself (HostArray): then its byte count is
/// the largest uint64 when the true one does not fit in 64 bits.
template <class E = InvalidArgument>
std::size_t checked_bytes(std::string_view op, const Shape& shape, std::size_t element_size) {
  constexpr auto kMaxBytes = static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max());
  const auto n = static_cast<std::uint64_t>(shape.numel());
  if (n > kMaxBytes / element_size) {
    if constexpr (std::is_same_v<E, OutOfHostMemory>) {
      constexpr std::uint64_t kAll = std::numeric_limits<std::uint64_t>::max();
      throw OutOfHostMemory(std::string(op), n > kAll / element_size ? kAll : n * element_size,
                            "an array of shape " + shape.to_string() + " with " +
                                std::to_string(element_size) +
                                "-byte elements: no host has that much");
    } else {
      fail<E>(op, "an array of shape ", shape, " with ", element_size,
              "-byte elements does not fit in memory");
    }
  }
  return static_cast<std::size_t>(n * element_size);
}

/// InvalidArgument naming `op` unless an array of `dims` has an element count (zeros left out,
/// as Shape counts) that fits in int64: checked before an op builds its result's Shape, so the
/// error names the op, not Shape.
inline void check_count_fits(std::string_view op, std::span<const std::int64_t> dims) {
  std::int64_t product = 1;
  for (const std::int64_t d : dims) {
    if (d <= 0) continue;  // a negative size is Shape's own error
    if (product > std::numeric_limits<std::int64_t>::max() / d) {
      fail<InvalidArgument>(op, "the result's element count overflows int64");
    }
    product *= d;
  }
}

/// check_count_fits of symbolic sizes, on their values in this call.
inline void check_count_fits(std::string_view op, std::span<const SymInt> dims) {
  std::array<std::int64_t, kMaxRank> values{};
  const std::size_t n = std::min(dims.size(), kMaxRank);
  for (std::size_t i = 0; i < n; ++i) values[i] = SymAccess::value(dims[i]);
  check_count_fits(op, std::span<const std::int64_t>(values.data(), n));
}

/// Maps a possibly negative axis (-1 is the last) onto [0, rank); InvalidArgument otherwise.
inline std::size_t normalize_axis(std::string_view op, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    fail<InvalidArgument>(op, "axis ", axis, " is out of range for rank ", rank);
  }
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

}  // namespace detail
}  // namespace ferry
