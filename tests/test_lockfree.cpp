// The executor's lock-free parts, tested directly: the MPMC ring every ready step passes
// through, the pool that recycles step memory between threads, and the small lock a device's
// model is kept under.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include <ferry/runtime/block_pool.hpp>
#include <ferry/runtime/ring_queue.hpp>
#include <ferry/runtime/small_mutex.hpp>

namespace test_lockfree {

namespace {

using ferry::detail::BlockPool;
using ferry::detail::RingQueue;
using ferry::detail::SmallMutex;

TEST(RingQueue, IsFifoAndReportsFullAndEmpty) {
  RingQueue<int, 4> q;
  int out = 0;
  EXPECT_FALSE(q.try_pop(out));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.try_push(i));
  EXPECT_FALSE(q.try_push(99));  // full
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(out, i);
  }
  EXPECT_FALSE(q.try_pop(out));
  // Many laps around the ring keep the order.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(q.try_push(i));
    ASSERT_TRUE(q.try_pop(out));
    ASSERT_EQ(out, i);
  }
}

TEST(RingQueue, EveryItemIsPoppedExactlyOnceUnderContention) {
  constexpr int kProducers = 3;
  constexpr int kConsumers = 3;
  constexpr int kPerProducer = 20000;
  RingQueue<std::int64_t, 64> q;  // small, so producers often find it full
  std::atomic<int> producers_done{0};
  std::vector<std::vector<std::int64_t>> got(kConsumers);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (std::int64_t i = 0; i < kPerProducer; ++i) {
        while (!q.try_push(p * std::int64_t{kPerProducer} + i)) std::this_thread::yield();
      }
      producers_done.fetch_add(1);
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      std::int64_t v = 0;
      for (;;) {
        if (q.try_pop(v)) {
          got[static_cast<std::size_t>(c)].push_back(v);
        } else if (producers_done.load() == kProducers) {
          if (!q.try_pop(v)) return;  // nothing left after the last push
          got[static_cast<std::size_t>(c)].push_back(v);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<char> seen(kProducers * kPerProducer, 0);
  std::size_t total = 0;
  for (const auto& g : got) {
    // Each producer's items reach any one consumer in the order they were pushed.
    std::vector<std::int64_t> last(kProducers, -1);
    for (std::int64_t v : g) {
      ASSERT_EQ(seen[static_cast<std::size_t>(v)], 0) << v << " popped twice";
      seen[static_cast<std::size_t>(v)] = 1;
      const auto p = static_cast<std::size_t>(v / kPerProducer);
      ASSERT_GT(v, last[p]);
      last[p] = v;
    }
    total += g.size();
  }
  EXPECT_EQ(total, static_cast<std::size_t>(kProducers) * kPerProducer);
}

TEST(BlockPool, RecyclesBlocksOfTheSameClass) {
  void* a = BlockPool::allocate(200);
  BlockPool::deallocate(a, 200);
  // 193..256 bytes share a class: the block comes back for any size in it.
  void* b = BlockPool::allocate(250);
  EXPECT_EQ(a, b);
  BlockPool::deallocate(b, 250);
  // Sizes beyond the pool and zero go straight to malloc and back.
  void* big = BlockPool::allocate(BlockPool::kMaxBlock + 1);
  BlockPool::deallocate(big, BlockPool::kMaxBlock + 1);
}

TEST(BlockPool, BlocksFreedOnAnotherThreadAreReused) {
  std::vector<void*> made;
  for (int i = 0; i < 100; ++i) made.push_back(BlockPool::allocate(320));
  std::thread([&] {
    for (void* p : made) BlockPool::deallocate(p, 320);
  }).join();
  const std::set<void*> freed(made.begin(), made.end());
  int reused = 0;
  std::vector<void*> again;
  for (int i = 0; i < 100; ++i) {
    again.push_back(BlockPool::allocate(320));
    reused += freed.count(again.back()) != 0 ? 1 : 0;
  }
  EXPECT_EQ(reused, 100);
  for (void* p : again) BlockPool::deallocate(p, 320);
}

TEST(BlockPool, TheSharedCacheIsBounded) {
  // Free more blocks than the cap from a thread that never allocates them: the stack stops
  // growing at the cap and the rest goes back to malloc (AddressSanitizer's leak check would
  // flag a block that was dropped instead).
  constexpr std::size_t kSize = 900;
  std::vector<void*> made;
  for (std::size_t i = 0; i < BlockPool::kMaxShared + 100; ++i)
    made.push_back(BlockPool::allocate(kSize));
  EXPECT_EQ(BlockPool::shared_count(kSize), 0u);
  std::thread([&] {
    for (void* p : made) BlockPool::deallocate(p, kSize);
  }).join();
  EXPECT_EQ(BlockPool::shared_count(kSize), BlockPool::kMaxShared);
  // Taking the stack empties it.
  BlockPool::deallocate(BlockPool::allocate(kSize), kSize);
  EXPECT_LE(BlockPool::shared_count(kSize), 1u);
}

TEST(BlockPool, NewBlocksAreCarvedOneAfterAnotherFromAChunk) {
  // Once a thread holds no freed block of a class, it carves its new ones from a chunk, each
  // right after the one before, all within one aligned chunk.
  constexpr std::size_t kSize = 700;
  constexpr std::ptrdiff_t kStride = 704;  // the class's block: 11 granules of 64 bytes
  std::thread([&] {
    // Blocks of this class other tests freed (the shared stack, which the first allocation
    // takes) come first: taken until none is left.
    std::vector<void*> freed_before{BlockPool::allocate(kSize)};
    while (BlockPool::holds_freed(kSize)) freed_before.push_back(BlockPool::allocate(kSize));
    auto* a = static_cast<std::byte*>(BlockPool::allocate(kSize));
    auto* b = static_cast<std::byte*>(BlockPool::allocate(kSize));
    auto* c = static_cast<std::byte*>(BlockPool::allocate(kSize));
    EXPECT_EQ(b - a, kStride);
    EXPECT_EQ(c - b, kStride);
    const auto chunk = [](const std::byte* p) {
      return reinterpret_cast<std::uintptr_t>(p) / BlockPool::kChunk;
    };
    EXPECT_EQ(chunk(a), chunk(c));
    // Freed, they are this thread's to reuse, last freed first.
    BlockPool::deallocate(a, kSize);
    BlockPool::deallocate(b, kSize);
    EXPECT_EQ(BlockPool::allocate(kSize), b);
    BlockPool::deallocate(b, kSize);
    BlockPool::deallocate(c, kSize);
    for (void* p : freed_before) BlockPool::deallocate(p, kSize);
  }).join();
}

TEST(SmallMutex, ExcludesAndCountsEveryIncrementOfManyThreads) {
  // A plain (non-atomic) counter and a running flag: a lost update or two holders at once
  // show as a wrong count or a flag found set.
  SmallMutex m;
  std::uint64_t count = 0;
  bool inside = false;
  std::atomic<int> overlaps{0};
  constexpr int kThreads = 4;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        std::lock_guard lock(m);
        if (inside) overlaps.fetch_add(1, std::memory_order_relaxed);
        inside = true;
        // Now and then the holder gives up its core while it holds the lock: the others then
        // find it held, and must wait (sleep) rather than enter.
        if (i % 64 == 0) std::this_thread::yield();
        ++count;
        inside = false;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(count, std::uint64_t{kThreads} * kEach);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(SmallMutex, AWaiterGetsTheLockOnlyOnceTheHolderUnlocks) {
  SmallMutex m;
  std::atomic<bool> took{false};
  m.lock();
  std::thread waiter([&] {
    m.lock();
    took.store(true);
    m.unlock();
  });
  // The waiter cannot get the lock while it is held, however long that is.
  for (int i = 0; i < 100; ++i) {
    std::this_thread::yield();
    ASSERT_FALSE(took.load());
  }
  m.unlock();
  waiter.join();
  EXPECT_TRUE(took.load());
  // Free again afterwards: this thread takes it at once.
  m.lock();
  m.unlock();
}

}  // namespace

}  // namespace test_lockfree
