#pragma once
// Buffer: the bytes of one array, owned however they arrived (allocated here or taken from a
// device's BufferCache, adopted from a std::vector on import, or borrowed: another step's
// buffer for a view, the caller's memory for an export into it).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/runtime/block_pool.hpp"
#include "ferry/runtime/buffer_cache.hpp"
#include "ferry/runtime/host_memory.hpp"

namespace ferry::detail {

/// Move-only owner of an array's bytes. The release function is a plain function pointer so a
/// buffer can own memory of any origin (the small-block pool, a device's BufferCache, the
/// system, an adopted vector) without a virtual class per origin.
class Buffer {
 public:
  static constexpr std::size_t kAlignment = BufferCache::kAlignment;
  // Below this size a buffer gets malloc's own 16-byte alignment: an aligned allocation costs a
  // slower path in malloc, which dominated the cost of steps on small arrays.
  static constexpr std::size_t kAlignFrom = BufferCache::kSmallest;

  /// Gives the memory back: called with the buffer's context, data and size.
  using Release = void (*)(void* context, std::byte* data, std::size_t bytes);

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
    if (release_ != nullptr) release_(context_, data_, bytes_);
  }

  /// `bytes` uninitialized bytes, aligned to kAlignment from kAlignFrom bytes up (no
  /// allocation for zero bytes), taken from `cache` when there is one (and the buffer is not
  /// small), else from the system. Throws OutOfHostMemory naming `op` when the host has no
  /// room for them.
  static Buffer allocate(std::size_t bytes, BufferCache* cache = nullptr,
                         std::string_view op = "allocate") {
    Buffer b;
    if (bytes == 0) return b;
    if (bytes < kAlignFrom) {
      // Small buffers share the steps' pool: a worker makes them, the host often frees them.
      b.data_ = static_cast<std::byte*>(BlockPool::allocate(bytes));
      b.release_ = [](void*, std::byte* data, std::size_t size) {
        BlockPool::deallocate(data, size);
        uncount(size);
      };
    } else if (cache != nullptr) {
      b.data_ = cache->take(bytes, op);
      b.context_ = cache;
      b.release_ = [](void* owner, std::byte* data, std::size_t size) {
        static_cast<BufferCache*>(owner)->give_back(data, size);
        uncount(size);
      };
    } else {
      b.data_ = static_cast<std::byte*>(allocate_host(bytes, kAlignment, op));
      b.release_ = [](void*, std::byte* data, std::size_t size) {
        ::operator delete(data, std::align_val_t{kAlignment});
        uncount(size);
      };
    }
    b.bytes_ = bytes;
    allocated_.fetch_add(bytes, std::memory_order_relaxed);
    return b;
  }

  /// A new buffer holding a copy of `bytes` bytes at `src`; allocated as allocate() says.
  static Buffer copy_of(const void* src, std::size_t bytes, BufferCache* cache = nullptr,
                        std::string_view op = "allocate") {
    Buffer b = allocate(bytes, cache, op);
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
    b.release_ = [](void* ctx, std::byte*, std::size_t) {
      delete static_cast<std::vector<T>*>(ctx);
    };
    return b;
  }

  /// A buffer over memory someone else owns; `release(context, data, bytes)` runs when it
  /// goes (none: the owner frees it).
  static Buffer borrow(std::byte* data, std::size_t bytes, Release release = nullptr,
                       void* context = nullptr) noexcept {
    Buffer b;
    b.data_ = data;
    b.bytes_ = bytes;
    b.release_ = release;
    b.context_ = context;
    return b;
  }

  /// `bytes` bytes at `offset` in `block`, holding it: a block that several buffers are parts
  /// of goes (back to where it came from) with the last of them.
  static Buffer part_of(const std::shared_ptr<Buffer>& block, std::size_t offset,
                        std::size_t bytes) {
    auto* owner = new std::shared_ptr<Buffer>(block);
    return borrow(
        block->data() + offset, bytes,
        [](void* context, std::byte*, std::size_t) {
          delete static_cast<std::shared_ptr<Buffer>*>(context);
        },
        owner);
  }

  /// The bytes allocate() has handed out and not yet taken back, in the whole process: after
  /// every array is gone it returns to its earlier level (tests prove nothing was lost). Bytes
  /// a BufferCache keeps for reuse are not in use: they are counted by the cache.
  static std::size_t allocated_bytes() noexcept {
    return allocated_.load(std::memory_order_relaxed);
  }

  std::byte* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

  void swap(Buffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(release_, o.release_);
    std::swap(context_, o.context_);
  }

 private:
  static void uncount(std::size_t size) noexcept {
    allocated_.fetch_sub(size, std::memory_order_relaxed);
  }

  inline static std::atomic<std::size_t> allocated_{0};
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  Release release_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace ferry::detail
