#pragma once
// Buffer: the bytes of one array, owned however they arrived (allocated here, adopted from a
// std::vector on import, or borrowed from another step's buffer for a view).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "ferry/runtime/block_pool.hpp"

namespace ferry::detail {

/// Move-only owner of an array's bytes. The release function is a plain function pointer so a
/// buffer can own memory of any origin without a virtual class per origin.
class Buffer {
 public:
  static constexpr std::size_t kAlignment = 64;  // a cache line, and enough for any SIMD load
  // Below this size a buffer gets malloc's own 16-byte alignment: an aligned allocation costs a
  // slower path in malloc, which dominated the cost of steps on small arrays.
  static constexpr std::size_t kAlignFrom = 256;

  Buffer() noexcept = default;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        release_(std::exchange(o.release_, nullptr)),
        context_(std::exchange(o.context_, nullptr)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer(std::move(o)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (release_ != nullptr) release_(context_, data_);
  }

  /// `bytes` uninitialized bytes, aligned to kAlignment from kAlignFrom bytes up (no
  /// allocation for zero bytes).
  static Buffer allocate(std::size_t bytes) {
    Buffer b;
    if (bytes == 0) return b;
    b.bytes_ = bytes;
    b.context_ = reinterpret_cast<void*>(bytes);
    if (bytes < kAlignFrom) {
      // Small buffers share the steps' pool: a worker makes them, the host often frees them.
      b.data_ = static_cast<std::byte*>(BlockPool::allocate(bytes));
      b.release_ = [](void* size, std::byte* data) {
        BlockPool::deallocate(data, reinterpret_cast<std::size_t>(size));
        uncount(size);
      };
    } else {
      b.data_ = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{kAlignment}));
      b.release_ = [](void* size, std::byte* data) {
        ::operator delete(data, std::align_val_t{kAlignment});
        uncount(size);
      };
    }
    allocated_.fetch_add(bytes, std::memory_order_relaxed);
    return b;
  }

  /// A new buffer holding a copy of `bytes` bytes at `src`.
  static Buffer copy_of(const void* src, std::size_t bytes) {
    Buffer b = allocate(bytes);
    if (bytes != 0) std::memcpy(b.data_, src, bytes);
    return b;
  }

  /// Takes ownership of a vector's storage: the import that moves instead of copying.
  template <class T>
  static Buffer adopt(std::vector<T>&& values) {
    Buffer b;
    if (values.empty()) return b;
    auto* owner = new std::vector<T>(std::move(values));
    b.data_ = reinterpret_cast<std::byte*>(owner->data());
    b.bytes_ = owner->size() * sizeof(T);
    b.context_ = owner;
    b.release_ = [](void* ctx, std::byte*) { delete static_cast<std::vector<T>*>(ctx); };
    return b;
  }

  /// A buffer over memory someone else owns; `release(context, data)` runs when it goes.
  static Buffer borrow(std::byte* data, std::size_t bytes, void (*release)(void*, std::byte*),
                       void* context) noexcept {
    Buffer b;
    b.data_ = data;
    b.bytes_ = bytes;
    b.release_ = release;
    b.context_ = context;
    return b;
  }

  /// The bytes allocate() has handed out and not yet taken back, in the whole process: after
  /// every array is gone it returns to its earlier level (tests prove nothing was lost).
  static std::size_t allocated_bytes() noexcept { return allocated_.load(std::memory_order_relaxed); }

  std::byte* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(release_, o.release_);
    std::swap(context_, o.context_);
  }

 private:
  static void uncount(void* size) noexcept {
    allocated_.fetch_sub(reinterpret_cast<std::size_t>(size), std::memory_order_relaxed);
  }

  inline static std::atomic<std::size_t> allocated_{0};
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  void (*release_)(void*, std::byte*) = nullptr;
  void* context_ = nullptr;
};

}  // namespace ferry::detail
