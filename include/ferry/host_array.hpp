#pragma once
// HostArray<T>: values in host memory, what an export returns. Plain data with a shape.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/runtime/buffer.hpp"

namespace ferry {

/// An array in host memory that owns its values (row-major). Copies are deep.
template <Element T>
class HostArray {
 public:
  /// An empty rank-1 array of zero elements.
  HostArray() : HostArray(Shape{0}) {}

  /// `shape.numel()` zero values. Throws OutOfHostMemory when the host has no room for them.
  explicit HostArray(Shape shape)
      : shape_(shape), buffer_(detail::Buffer::allocate(bytes_for(shape), nullptr, "HostArray")) {
    std::fill_n(data().data(), data().size(), T{});
  }

  /// Takes `values` (row-major). Throws InvalidArgument when their count is not the shape's
  /// (before anything is allocated), OutOfHostMemory as HostArray(shape).
  HostArray(Shape shape, const std::vector<T>& values)
      : HostArray(counted(std::move(shape), values.size())) {
    std::copy(values.begin(), values.end(), data().begin());
  }

  HostArray(const HostArray& o)
      : shape_(o.shape_),
        buffer_(
            detail::Buffer::copy_of(o.buffer_.data(), o.buffer_.bytes(), nullptr, "HostArray")) {}
  HostArray& operator=(const HostArray& o) {
    if (this != &o) *this = HostArray(o);
    return *this;
  }
  /// A moved-from array is empty, as HostArray() is: its shape goes with its buffer.
  HostArray(HostArray&& o) noexcept : shape_(o.shape_), buffer_(std::move(o.buffer_)) {
    o.shape_ = empty_shape();
  }
  HostArray& operator=(HostArray&& o) noexcept {
    if (this != &o) {
      shape_ = o.shape_;
      buffer_ = std::move(o.buffer_);
      o.shape_ = empty_shape();
    }
    return *this;
  }
  ~HostArray() = default;

  const Shape& shape() const noexcept { return shape_; }
  std::span<T> data() noexcept { return {ptr(), size()}; }
  std::span<const T> data() const noexcept { return {ptr(), size()}; }

  /// The element at `indices` (one per dimension; none for a scalar). Throws InvalidArgument
  /// for the wrong number of indices or an index out of range.
  template <std::integral... I>
  T& operator()(I... indices) {
    return ptr()[offset(indices...)];
  }
  template <std::integral... I>
  const T& operator()(I... indices) const {
    return ptr()[offset(indices...)];
  }

  friend bool operator==(const HostArray& a, const HostArray& b) {
    return a.shape_ == b.shape_ && std::ranges::equal(a.data(), b.data());
  }

  /// Adopts a buffer of `shape.numel()` elements: the export path.
  static HostArray adopt(Shape shape, detail::Buffer buffer) {
    return HostArray(shape, std::move(buffer));
  }

 private:
  HostArray(Shape shape, detail::Buffer buffer) : shape_(shape), buffer_(std::move(buffer)) {}

  static const Shape& empty_shape() noexcept {
    static const Shape empty{0};
    return empty;
  }

  static Shape counted(Shape shape, std::size_t values) {
    if (static_cast<std::int64_t>(values) != shape.numel()) {
      detail::fail<InvalidArgument>("HostArray", values, " values for shape ", shape, " of ",
                                    shape.numel(), " elements");
    }
    return shape;
  }

  /// The bytes of `s`'s values. Past what one allocation can hold, they are host memory this
  /// call cannot have: OutOfHostMemory, not the InvalidArgument of a device array's size.
  static std::size_t bytes_for(const Shape& s) {
    return detail::checked_bytes<OutOfHostMemory>("HostArray", s, sizeof(T));
  }
  T* ptr() const noexcept { return reinterpret_cast<T*>(buffer_.data()); }
  std::size_t size() const noexcept { return static_cast<std::size_t>(shape_.numel()); }

  template <std::integral... I>
  std::size_t offset(I... indices) const {
    if (sizeof...(I) != shape_.rank()) {
      detail::fail<InvalidArgument>("HostArray", sizeof...(I), " indices for shape ", shape_);
    }
    const std::array<std::int64_t, sizeof...(I)> idx{static_cast<std::int64_t>(indices)...};
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      const std::int64_t n = shape_.dims()[d];
      if (idx[d] < 0 || idx[d] >= n) {
        detail::fail<InvalidArgument>("HostArray", "index ", idx[d], " out of range for dimension ",
                                      d, " of shape ", shape_);
      }
      flat = flat * n + idx[d];
    }
    return static_cast<std::size_t>(flat);
  }

  Shape shape_;
  detail::Buffer buffer_;
};

}  // namespace ferry
