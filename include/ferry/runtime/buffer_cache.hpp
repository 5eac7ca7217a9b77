#pragma once
// BufferCache: freed buffers of a device, kept by size class and handed out again.
//
// Why: every op writes a new output. The C library hands large blocks straight from the
// kernel and takes them back on free, so each new output paid its page faults again
// (first-touching 64 MB costs ~165 ms on a 2-core machine: more than the arithmetic). Keeping
// freed blocks, as MLX's buffer cache and PyTorch's caching allocator do, pays that once.
//
// Ownership: a device opens its cache and closes it when it goes, but a buffer may outlive its
// device (a HostArray an export returned, a step a kernel still runs). So every block handed
// out holds the cache open, and the last of the device and its blocks deletes it; a closed
// cache keeps nothing and frees each block that comes back.
//
// Policy: sizes round up to one of four classes per doubling (at most 25% more than asked),
// so a block serves every later request of its class. A class hands out its most recently
// freed block (warm in cache); beyond the limit, the least recently freed blocks of any class
// go back to the system. An allocation the system refuses first empties every open cache,
// then tries once more. One mutex guards a cache: a block is taken or given back in a few
// pointer moves, far below what an op on 256 bytes or more costs (smaller buffers never come
// here: BlockPool recycles them per thread).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/runtime/host_memory.hpp"

namespace ferry::detail {

class BufferCache {
 public:
  static constexpr std::size_t kAlignment = 64;  // a cache line, and enough for any SIMD load
  /// Requests below this size never reach a cache (see BlockPool).
  static constexpr std::size_t kSmallest = 256;
  static constexpr std::size_t kClassesPerDoubling = 4;
  /// Larger requests are refused outright (their class would not fit in a size_t).
  static constexpr std::size_t kLargest = std::size_t{1} << (sizeof(std::size_t) * 8 - 2);

  /// Where a cache takes blocks from the system: aligned ::operator new by default; tests put
  /// in one that fails. Whatever it returns is freed with the aligned ::operator delete.
  using SystemAllocate = void* (*)(std::size_t bytes);

  /// A new, open cache that keeps at most `limit` bytes; close() it when its owner goes.
  static BufferCache* open(std::size_t limit) {
    auto* cache = new BufferCache(limit);
    try {
      std::lock_guard lock(registry_mutex());
      registry().push_back(cache);
    } catch (...) {
      delete cache;
      throw;
    }
    return cache;
  }

  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  /// The owner lets go: the cached blocks go back to the system, and the cache goes once the
  /// blocks it handed out have come back.
  void close() noexcept {
    {
      std::lock_guard lock(registry_mutex());
      std::erase(registry(), this);
    }
    Node* evicted = nullptr;
    bool last = false;
    {
      std::lock_guard lock(mutex_);
      open_ = false;
      evicted = evict_until(0);
      last = outstanding_ == 0;
    }
    free_chain(evicted);
    if (last) delete this;
  }

  /// The bytes a request of `bytes` (>= kSmallest) takes: the top of its size class.
  static std::size_t class_bytes(std::size_t bytes) noexcept {
    const std::size_t step = class_step(bytes);
    return (bytes + step - 1) / step * step;
  }

  /// A block of class_bytes(bytes) bytes, aligned to kAlignment: a cached one of that class,
  /// or a new one. Throws OutOfHostMemory naming `op` when the system refuses it even after
  /// every cache gave back its blocks.
  std::byte* take(std::size_t bytes, std::string_view op) {
    if (bytes > kLargest) throw OutOfHostMemory(std::string(op), bytes, "no host has that much");
    const std::size_t size = class_bytes(bytes);
    const std::size_t c = class_of(size);
    SystemAllocate system = nullptr;
    {
      std::lock_guard lock(mutex_);
      ++outstanding_;  // held from here: a failure below hands it back
      if (Node* n = classes_[c].first) {
        unlink(n);
        cached_ -= size;
        ++hits_;
        return reinterpret_cast<std::byte*>(n);
      }
      system = system_allocate_;
    }
    try {
      refuse_beyond_host(size, op);
      return static_cast<std::byte*>(from_system(system, size));
    } catch (const std::bad_alloc&) {
      // Memory kept for reuse is still memory: give all of it back and try once more.
      trim_all();
      try {
        return static_cast<std::byte*>(from_system(system, size));
      } catch (const std::bad_alloc&) {
        hand_back_reservation();
        throw OutOfHostMemory(std::string(op), bytes, "the system refused it");
      }
    } catch (...) {
      hand_back_reservation();
      throw;
    }
  }

  /// Takes back a block that take(bytes) returned: it waits for reuse, or goes back to the
  /// system when the cache is closed or it does not fit under the limit.
  void give_back(std::byte* block, std::size_t bytes) noexcept {
    const std::size_t size = class_bytes(bytes);
    Node* evicted = nullptr;
    bool last = false;
    bool keep = false;
    {
      std::lock_guard lock(mutex_);
      --outstanding_;
      if (open_ && size <= limit_) {
        evicted = evict_until(limit_ - size);
        push(reinterpret_cast<Node*>(block), size);
        keep = true;
      }
      last = !open_ && outstanding_ == 0;
    }
    free_chain(evicted);
    if (!keep) ::operator delete(block, std::align_val_t{kAlignment});
    if (last) delete this;
  }

  /// The bytes of the blocks waiting for reuse (not handed out).
  std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    return cached_;
  }
  /// How many takes were served from the cache rather than the system.
  std::uint64_t hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
  }
  std::size_t limit() const {
    std::lock_guard lock(mutex_);
    return limit_;
  }
  /// Keeps at most `bytes` from now on, giving back what is beyond it now.
  void set_limit(std::size_t bytes) noexcept {
    Node* evicted = nullptr;
    {
      std::lock_guard lock(mutex_);
      limit_ = bytes;
      evicted = evict_until(bytes);
    }
    free_chain(evicted);
  }
  /// Gives every cached block back to the system.
  void trim() noexcept {
    Node* evicted = nullptr;
    {
      std::lock_guard lock(mutex_);
      evicted = evict_until(0);
    }
    free_chain(evicted);
  }

  /// Tests only: takes new blocks from `f` instead of the system.
  void set_system_allocate(SystemAllocate f) noexcept {
    std::lock_guard lock(mutex_);
    system_allocate_ = f;
  }

  /// The limit a device starts with: a quarter of its memory (`device_bytes`, 0 if it has no
  /// model) and of the host's, the smaller; 1 GiB when neither is known.
  static std::size_t default_limit(std::uint64_t device_bytes) noexcept {
    const std::uint64_t host = host_memory_bytes();
    std::uint64_t limit = std::uint64_t{1} << 30;
    if (device_bytes != 0 && host != 0) {
      limit = std::min(device_bytes, host) / 4;
    } else if (device_bytes != 0 || host != 0) {
      limit = std::max(device_bytes, host) / 4;
    }
    return static_cast<std::size_t>(limit);
  }

 private:
  /// A cached block's first bytes: its links in its class's list and in the list of all
  /// cached blocks by age. (Blocks are at least kSmallest bytes.)
  struct Node {
    Node* class_prev;
    Node* class_next;
    Node* older;
    Node* newer;
    std::size_t size;
  };
  struct List {
    Node* first = nullptr;  // most recently freed
  };

  static constexpr std::size_t kLowBit = 8;  // log2(kSmallest)
  static constexpr std::size_t kClasses = (64 - kLowBit + 1) * kClassesPerDoubling;

  explicit BufferCache(std::size_t limit) : limit_(limit) {}
  ~BufferCache() = default;

  static std::size_t floor_log2(std::size_t n) noexcept {
    std::size_t log = 0;
    while (n >>= 1) ++log;
    return log;
  }
  static std::size_t class_step(std::size_t bytes) noexcept {
    return (std::size_t{1} << floor_log2(std::max(bytes, kSmallest))) / kClassesPerDoubling;
  }
  /// The index of a class, from its size (a class_bytes result).
  static std::size_t class_of(std::size_t size) noexcept {
    const std::size_t log = floor_log2(size);
    const std::size_t steps = size / ((std::size_t{1} << log) / kClassesPerDoubling);
    return (log - kLowBit) * kClassesPerDoubling + (steps - kClassesPerDoubling);
  }

  static void* default_allocate(std::size_t bytes) {
    return ::operator new(bytes, std::align_val_t{kAlignment});
  }
  static void* from_system(SystemAllocate system, std::size_t bytes) {
    return system != nullptr ? system(bytes) : default_allocate(bytes);
  }

  void push(Node* n, std::size_t size) noexcept {
    n->size = size;
    List& list = classes_[class_of(size)];
    n->class_prev = nullptr;
    n->class_next = list.first;
    if (list.first != nullptr) list.first->class_prev = n;
    list.first = n;
    n->older = newest_;
    n->newer = nullptr;
    if (newest_ != nullptr) newest_->newer = n;
    newest_ = n;
    if (oldest_ == nullptr) oldest_ = n;
    cached_ += size;
  }

  void unlink(Node* n) noexcept {
    List& list = classes_[class_of(n->size)];
    if (n->class_prev != nullptr) n->class_prev->class_next = n->class_next;
    else list.first = n->class_next;
    if (n->class_next != nullptr) n->class_next->class_prev = n->class_prev;
    if (n->older != nullptr) n->older->newer = n->newer;
    else oldest_ = n->newer;
    if (n->newer != nullptr) n->newer->older = n->older;
    else newest_ = n->older;
  }

  /// Unlinks the oldest blocks until at most `bytes` stay cached; returns them chained by
  /// `newer`, to be freed once the lock is let go (giving memory back to the kernel is slow).
  Node* evict_until(std::size_t bytes) noexcept {
    Node* chain = nullptr;
    while (cached_ > bytes && oldest_ != nullptr) {
      Node* n = oldest_;
      unlink(n);
      cached_ -= n->size;
      n->newer = chain;
      chain = n;
    }
    return chain;
  }

  static void free_chain(Node* n) noexcept {
    while (n != nullptr) {
      Node* next = n->newer;
      ::operator delete(static_cast<void*>(n), std::align_val_t{kAlignment});
      n = next;
    }
  }

  /// A take that failed gives back the hold it took on the cache.
  void hand_back_reservation() noexcept {
    bool last = false;
    {
      std::lock_guard lock(mutex_);
      --outstanding_;
      last = !open_ && outstanding_ == 0;
    }
    if (last) delete this;
  }

  /// Empties every open cache: the system refused memory.
  static void trim_all() noexcept {
    std::lock_guard lock(registry_mutex());
    for (BufferCache* cache : registry()) cache->trim();
  }

  // Both never destroyed: a device may go on a pool's detached worker after main returned,
  // when function-local statics are already gone (found by ASan in test_faults).
  static std::mutex& registry_mutex() noexcept {
    static auto* m = new std::mutex;
    return *m;
  }
  /// The open caches (a device's lifetime apart, nothing but a failed allocation reads it).
  static std::vector<BufferCache*>& registry() noexcept {
    static auto* caches = new std::vector<BufferCache*>;
    return *caches;
  }

  mutable std::mutex mutex_;
  std::array<List, kClasses> classes_{};
  Node* oldest_ = nullptr;
  Node* newest_ = nullptr;
  std::size_t cached_ = 0;
  std::size_t limit_;
  std::size_t outstanding_ = 0;  // blocks handed out (or being taken) and not yet back
  std::uint64_t hits_ = 0;
  bool open_ = true;
  SystemAllocate system_allocate_ = nullptr;
};

}  // namespace ferry::detail
