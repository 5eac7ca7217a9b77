#pragma once
// BlockPool: recycles small blocks (steps, small buffers) between threads.
//
// Why: a step is made by the host thread and usually freed by a worker. That pattern defeats
// malloc's per-thread caches (the freeing thread never allocates that size, the allocating
// thread never frees it), so every step took the allocating arena's lock from both threads;
// profiles showed a third of the time in futex calls. Here a freed block first goes to a small
// private list of the freeing thread (which often allocates that size next: no atomic at all);
// beyond that, onto a lock-free stack of its size class, which an allocating thread takes whole
// into its private list: one compare-and-swap per free, one exchange per batch, no lock, no ABA
// (a stack is only ever taken whole).
//
// A new block is carved from a chunk of its class (kChunk bytes, aligned to kChunk, so a block
// finds its chunk by masking its address), not asked of malloc: a fan-out of thousands of steps
// alive at once took a malloc and a free for each step and each small buffer, some 700
// instructions an element. A chunk counts its blocks that are out (handed out or kept in a
// list); a block freed beyond the caps goes back to its chunk, and the chunk goes back to
// malloc when its last block has. A kept block keeps its chunk: blocks kept in the caps hold
// at most a chunk each, and mostly share them (they are carved, and freed, in runs).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace ferry::detail {

class BlockPool {
 public:
  static constexpr std::size_t kGranule = 64;
  static constexpr std::size_t kClasses = 16;  // blocks of up to 1 KiB; larger go to malloc
  static constexpr std::size_t kMaxBlock = kGranule * kClasses;
  // At most this many blocks wait in a class's shared stack; more go back to their chunks, so
  // an idle pool holds a bounded amount: at most the chunks of the blocks it keeps.
  static constexpr std::size_t kMaxShared = 4096;
  static constexpr std::size_t kChunk = 16384;  // the bytes of a chunk, and its alignment
  // At most this many freed blocks a thread keeps for itself per class before sharing them.
  static constexpr std::size_t kMaxLocalFreed = 64;

  static void* allocate(std::size_t bytes) {
    if (bytes == 0 || bytes > kMaxBlock) return ::operator new(bytes);
    const std::size_t c = class_of(bytes);
    Local& local = local_lists();
    if (local.head[c] == nullptr) {
      Shared& pool = shared()[c];
      local.head[c] = pool.top.exchange(nullptr, std::memory_order_acquire);
      pool.count.store(0, std::memory_order_relaxed);  // approximate: only bounds the cache
    }
    if (Node* n = local.head[c]) {
      local.head[c] = n->next;
      if (local.freed[c] > 0) --local.freed[c];
      return n;
    }
    if (local.next[c] == local.end[c]) new_chunk(local, c);
    std::byte* block = local.next[c];
    local.next[c] += (c + 1) * kGranule;
    return block;
  }

  /// About how many freed blocks of `bytes`' class wait in the shared stack (for tests).
  static std::size_t shared_count(std::size_t bytes) noexcept {
    return shared()[class_of(bytes)].count.load(std::memory_order_relaxed);
  }

  /// Whether the calling thread holds freed blocks of `bytes`' class, which allocate() gives
  /// before it carves a new one (for tests).
  static bool holds_freed(std::size_t bytes) noexcept {
    return local_lists().head[class_of(bytes)] != nullptr;
  }

  static void deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes == 0 || bytes > kMaxBlock) {
      ::operator delete(p);
      return;
    }
    const std::size_t c = class_of(bytes);
    Local& local = local_lists();
    if (local.freed[c] < kMaxLocalFreed) {  // keep it: this thread may well allocate it next
      Node* n = static_cast<Node*>(p);
      n->next = local.head[c];
      local.head[c] = n;
      ++local.freed[c];
      return;
    }
    share(static_cast<Node*>(p), c);
  }

 private:
  struct Node {
    Node* next;
  };
  struct Local;

  /// The head of a chunk, its first granule; its blocks follow.
  struct Chunk {
    std::atomic<std::size_t> out;  // blocks not back yet (the uncarved ones count as out)
  };
  static_assert(sizeof(Chunk) <= kGranule);

  /// A fresh chunk for class `c`, its blocks all out and the calling thread's to carve.
  [[gnu::noinline]] static inline void new_chunk(Local& local, std::size_t c);

  /// Block `n` (of any chunk) comes back: the last of its chunk frees the chunk.
  static void give_back(Node* n) noexcept {
    auto* chunk = reinterpret_cast<Chunk*>(reinterpret_cast<std::uintptr_t>(n) & ~(kChunk - 1));
    return_blocks(chunk, 1);
  }

  static void return_blocks(Chunk* chunk, std::size_t blocks) noexcept {
    if (chunk->out.fetch_sub(blocks, std::memory_order_acq_rel) == blocks) {
      chunk->~Chunk();
      ::operator delete(static_cast<void*>(chunk), std::align_val_t{kChunk});
    }
  }

  /// One size class's stack of freed blocks, and about how many it holds.
  struct alignas(64) Shared {
    std::atomic<Node*> top{nullptr};
    std::atomic<std::size_t> count{0};
  };

  static std::size_t class_of(std::size_t bytes) noexcept { return (bytes - 1) / kGranule; }

  /// Pushes `n` onto its class's shared stack, or back to its chunk beyond the cap. Out of
  /// line, as is new_chunk: inlined, they kept allocate and deallocate from being inlined.
  [[gnu::noinline]] static void share(Node* n, std::size_t c) noexcept {
    Shared& pool = shared()[c];
    if (pool.count.fetch_add(1, std::memory_order_relaxed) >= kMaxShared) {
      pool.count.fetch_sub(1, std::memory_order_relaxed);
      give_back(n);
      return;
    }
    Node* head = pool.top.load(std::memory_order_relaxed);
    do {
      n->next = head;  // never dereferences head: another thread may own that block already
    } while (!pool.top.compare_exchange_weak(head, n, std::memory_order_release,
                                             std::memory_order_relaxed));
  }

  static std::array<Shared, kClasses>& shared() noexcept {
    static std::array<Shared, kClasses> stacks{};
    return stacks;
  }

  /// Blocks a thread took or freed and has not handed out, shared when the thread ends; and
  /// the rest of the chunk it carves each class's new blocks from, [next, end), given back.
  struct Local {
    std::array<Node*, kClasses> head{};
    std::array<std::size_t, kClasses> freed{};  // blocks this thread freed into head, roughly
    std::array<std::byte*, kClasses> next{};
    std::array<std::byte*, kClasses> end{};
    Local() = default;
    Local(const Local&) = delete;
    Local& operator=(const Local&) = delete;
    ~Local() {
      for (std::size_t c = 0; c < kClasses; ++c) {
        for (Node* n = head[c]; n != nullptr;) {
          Node* next_node = n->next;
          share(n, c);
          n = next_node;
        }
        give_back_rest(c);
      }
    }
    /// The blocks of class `c`'s chunk not carved yet go back to it.
    void give_back_rest(std::size_t c) noexcept {
      if (next[c] == end[c]) return;
      const auto left = static_cast<std::size_t>(end[c] - next[c]) / ((c + 1) * kGranule);
      auto* chunk =
          reinterpret_cast<Chunk*>(reinterpret_cast<std::uintptr_t>(next[c]) & ~(kChunk - 1));
      next[c] = end[c] = nullptr;
      return_blocks(chunk, left);
    }
  };

  static Local& local_lists() noexcept {
    thread_local Local lists;
    return lists;
  }
};

void BlockPool::new_chunk(Local& local, std::size_t c) {
  const std::size_t block = (c + 1) * kGranule;
  const std::size_t blocks = (kChunk - kGranule) / block;
  void* memory = ::operator new(kChunk, std::align_val_t{kChunk});
  ::new (memory) Chunk{blocks};
  local.next[c] = static_cast<std::byte*>(memory) + kGranule;
  local.end[c] = local.next[c] + blocks * block;
}

}  // namespace ferry::detail
