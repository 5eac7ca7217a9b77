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

#include <array>
#include <atomic>
#include <cstddef>
#include <new>

namespace ferry::detail {

class BlockPool {
 public:
  static constexpr std::size_t kGranule = 64;
  static constexpr std::size_t kClasses = 16;  // blocks of up to 1 KiB; larger go to malloc
  static constexpr std::size_t kMaxBlock = kGranule * kClasses;
  // At most this many blocks wait in a class's shared stack; more go back to malloc, so an
  // idle pool holds at most a few MiB.
  static constexpr std::size_t kMaxShared = 4096;
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
    return ::operator new((c + 1) * kGranule);
  }

  /// About how many freed blocks of `bytes`' class wait in the shared stack (for tests).
  static std::size_t shared_count(std::size_t bytes) noexcept {
    return shared()[class_of(bytes)].count.load(std::memory_order_relaxed);
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

  /// One size class's stack of freed blocks, and about how many it holds.
  struct alignas(64) Shared {
    std::atomic<Node*> top{nullptr};
    std::atomic<std::size_t> count{0};
  };

  static std::size_t class_of(std::size_t bytes) noexcept { return (bytes - 1) / kGranule; }

  /// Pushes `n` onto its class's shared stack, or back to malloc beyond the cap.
  static void share(Node* n, std::size_t c) noexcept {
    Shared& pool = shared()[c];
    if (pool.count.fetch_add(1, std::memory_order_relaxed) >= kMaxShared) {
      pool.count.fetch_sub(1, std::memory_order_relaxed);
      ::operator delete(n);
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

  /// Blocks a thread took or freed and has not handed out; shared when the thread ends.
  struct Local {
    std::array<Node*, kClasses> head{};
    std::array<std::size_t, kClasses> freed{};  // blocks this thread freed into head, roughly
    Local() = default;
    Local(const Local&) = delete;
    Local& operator=(const Local&) = delete;
    ~Local() {
      for (std::size_t c = 0; c < kClasses; ++c) {
        for (Node* n = head[c]; n != nullptr;) {
          Node* next = n->next;
          share(n, c);
          n = next;
        }
      }
    }
  };

  static Local& local_lists() noexcept {
    thread_local Local lists;
    return lists;
  }
};

}  // namespace ferry::detail
