// The buffer cache: a freed buffer's memory is handed out again, within a limit the user can
// set, given back on request (trim) and when the system refuses memory; cached bytes are
// reported apart from bytes in use, so the memory-return tests still prove what they prove.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <new>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/memory.hpp"

namespace test_buffer_cache {

namespace {

using ferry::Shape;
using ferry::detail::BufferCache;

constexpr std::int64_t kFloats = 1 << 16;  // 256 KiB: a size class of its own, exactly
constexpr std::size_t kBytes = kFloats * sizeof(float);

ferry::detail::BufferCache& cache_of(const ferry::Device& dev) {
  return ferry::detail::DeviceAccess::state(dev)->buffers();
}

const std::byte* data_of(const ferry::DeviceArray<float>& a) {
  return ferry::detail::ArrayAccess::step(a)->output().data();
}

/// Waits until `dev` caches at least `bytes`: a worker may still hold the last step a
/// moment after the export returned.
std::size_t cached_at_least(const ferry::Device& dev, std::size_t bytes) {
  for (int i = 0; i < 30'000 && dev.stats().cached_bytes < bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return dev.stats().cached_bytes;
}

class BufferReuse : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(BufferReuse);

TEST_P(BufferReuse, AFreedBuffersMemoryIsHandedOutAgain) {
  auto a = ferry::full<float>(dev, Shape{kFloats}, 2.0f);
  ferry::wait(a);
  const std::byte* first = data_of(a);
  ASSERT_NE(first, nullptr);
  a = {};
  ASSERT_EQ(cached_at_least(dev, kBytes), kBytes);
  const std::uint64_t hits = cache_of(dev).hits();

  auto b = ferry::full<float>(dev, Shape{kFloats}, 3.0f);
  ferry::wait(b);
  EXPECT_EQ(data_of(b), first);  // the same block, not a fresh one from the system
  EXPECT_EQ(cache_of(dev).hits(), hits + 1);
  EXPECT_EQ(dev.stats().cached_bytes, 0u);
  const ferry::HostArray<float> values = b.to_host();
  for (std::int64_t i = 0; i < kFloats; ++i) ASSERT_EQ(values(i), 3.0f) << i;  // nothing stale
}

TEST_P(BufferReuse, ALoopOfStepsReusesItsBuffers) {
  auto x = ferry::full<float>(dev, Shape{kFloats}, 0.0f);
  std::vector<float> out(kFloats);
  for (int i = 0; i < 20; ++i) {
    x = x + 1.0f;
    x.to_host(std::span<float>(out));
  }
  for (std::int64_t i = 0; i < kFloats; i += 997)
    ASSERT_EQ(out[static_cast<std::size_t>(i)], 20.0f);
  // Twenty outputs, but only the first few came from the system: the rest were reused.
  EXPECT_GE(cache_of(dev).hits(), 15u);
}

TEST_P(BufferReuse, CachedBytesAreReportedApartFromBytesInUse) {
  const std::size_t in_use = ferry_test::settled_allocated_bytes();
  {
    auto a = ferry::ones<float>(dev, Shape{kFloats});
    ferry::wait(a);
    EXPECT_GE(ferry::detail::Buffer::allocated_bytes(), in_use + kBytes);  // in use now
  }
  // Real memory in use is back where it was, although the device keeps the buffer: a buffer
  // that leaked would still count as in use, so the memory-return tests keep their meaning.
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(in_use), in_use);
  EXPECT_EQ(cached_at_least(dev, kBytes), kBytes);
  const ferry::DeviceStats stats = dev.stats();
  EXPECT_EQ(stats.cached_bytes, kBytes);
  EXPECT_EQ(stats.dram_bytes_in_use, 0u);  // the model's memory is another matter
}

TEST_P(BufferReuse, TrimGivesTheCachedBuffersBack) {
  {
    auto a = ferry::ones<float>(dev, Shape{kFloats});
    ferry::wait(a);
  }
  ASSERT_EQ(cached_at_least(dev, kBytes), kBytes);
  dev.trim();
  EXPECT_EQ(dev.stats().cached_bytes, 0u);
  EXPECT_EQ((ferry::ones<float>(dev, Shape{kFloats}) * 2.0f).to_host()(kFloats - 1), 2.0f);
}

TEST_P(BufferReuse, ALimitOfZeroCachesNothing) {
  dev.set_cache_limit(0);
  EXPECT_EQ(dev.cache_limit(), 0u);
  const std::size_t in_use = ferry_test::settled_allocated_bytes();
  {
    auto a = ferry::ones<float>(dev, Shape{kFloats});
    ferry::wait(a);
  }
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(in_use), in_use);
  EXPECT_EQ(dev.stats().cached_bytes, 0u);
}

TEST(BufferCacheLimit, StartsAtAQuarterOfTheSmallerOfDeviceAndHostMemory) {
  const std::uint64_t host = ferry::detail::host_memory_bytes();
  const ferry::Device tiny = ferry::Device::modeled(ferry::specs::tiny());  // 1 MiB of DRAM
  EXPECT_EQ(tiny.cache_limit(), (std::size_t{1} << 20) / 4);
  const ferry::Device big;  // 80 GiB of modeled DRAM
  const std::uint64_t dram = std::uint64_t{80} << 30;
  EXPECT_EQ(big.cache_limit(), (host != 0 ? std::min(host, dram) : dram) / 4);
}

TEST(BufferCacheLimit, AShrunkLimitGivesBackTheOldestBlocksFirst) {
  BufferCache* cache = BufferCache::open(4096);
  std::byte* a = cache->take(1024, "test");
  std::byte* b = cache->take(1024, "test");
  std::byte* c = cache->take(2048, "test");
  cache->give_back(a, 1024);  // oldest
  cache->give_back(b, 1024);
  cache->give_back(c, 2048);
  EXPECT_EQ(cache->cached_bytes(), 4096u);
  cache->set_limit(3072);  // a goes
  EXPECT_EQ(cache->cached_bytes(), 3072u);
  EXPECT_EQ(cache->take(1024, "test"), b);  // b is still there; a was given back
  std::byte* d = cache->take(1024, "test");  // a fresh block
  EXPECT_EQ(cache->cached_bytes(), 2048u);
  // A block larger than the limit is never kept; one that fits pushes out the oldest.
  std::byte* huge = cache->take(8192, "test");
  cache->give_back(huge, 8192);
  EXPECT_EQ(cache->cached_bytes(), 2048u);
  cache->give_back(b, 1024);
  EXPECT_EQ(cache->cached_bytes(), 3072u);
  cache->give_back(d, 1024);  // 4096 > 3072: c, the oldest, goes
  EXPECT_EQ(cache->cached_bytes(), 2048u);
  cache->close();
}

TEST(BufferCacheClasses, ARequestTakesTheTopOfItsClassAtMostAQuarterMore) {
  for (std::size_t bytes : {256u, 257u, 320u, 321u, 1000u, 4096u, 4097u, 1u << 20, 3u << 20,
                            (1u << 26) + 1}) {
    const std::size_t size = BufferCache::class_bytes(bytes);
    EXPECT_GE(size, bytes);
    EXPECT_LE(size, bytes + bytes / 4 + 1) << bytes;
    EXPECT_EQ(BufferCache::class_bytes(size), size) << bytes;  // a class's top is its own class
  }
  EXPECT_EQ(BufferCache::class_bytes(std::size_t{64} << 20), std::size_t{64} << 20);
}

// ---- release under allocation failure ----

std::atomic<int> g_refusals{0};

/// A system that refuses the next g_refusals requests.
void* refusing_system(std::size_t bytes) {
  if (g_refusals.load() > 0) {
    g_refusals.fetch_sub(1);
    throw std::bad_alloc();
  }
  return ::operator new(bytes, std::align_val_t{BufferCache::kAlignment});
}

TEST(BufferCacheFailure, ARefusedAllocationEmptiesTheCachesAndTriesAgain) {
  BufferCache* cache = BufferCache::open(std::size_t{1} << 20);
  BufferCache* other = BufferCache::open(std::size_t{1} << 20);
  cache->give_back(cache->take(4096, "test"), 4096);
  other->give_back(other->take(8192, "test"), 8192);
  ASSERT_EQ(cache->cached_bytes() + other->cached_bytes(), 4096u + 8192u);
  cache->set_system_allocate(refusing_system);
  g_refusals = 1;
  std::byte* block = cache->take(100'000, "test");  // refused once, then granted
  EXPECT_NE(block, nullptr);
  EXPECT_EQ(g_refusals.load(), 0);
  EXPECT_EQ(cache->cached_bytes(), 0u);  // every cache gave its blocks back before the retry
  EXPECT_EQ(other->cached_bytes(), 0u);
  cache->give_back(block, 100'000);

  g_refusals = 2;  // refused even after the caches are empty
  try {
    (void)cache->take(200'000, "matmul");
    FAIL() << "expected OutOfHostMemory";
  } catch (const ferry::OutOfHostMemory& e) {
    EXPECT_EQ(e.op(), "matmul");
    EXPECT_EQ(e.bytes(), 200'000u);
    EXPECT_EQ(std::string(e.what()).rfind("[matmul] cannot allocate 200000 bytes", 0), 0u)
        << e.what();
  }
  std::byte* again = cache->take(4096, "test");  // still usable
  EXPECT_NE(again, nullptr);
  cache->give_back(again, 4096);
  cache->close();
  other->close();
}

TEST(BufferCacheFailure, AStepWhoseOutputTheHostRefusesFailsItsExportsOnly) {
  ferry::Device dev;
  cache_of(dev).set_system_allocate(refusing_system);
  auto small = ferry::ones<float>(dev, Shape{4});  // pooled apart: the system is not asked
  ferry::wait(small);
  g_refusals = 2;
  auto big = ferry::full<float>(dev, Shape{kFloats}, 1.0f);
  auto after = big + 1.0f;
  EXPECT_THROW(ferry::wait(after), ferry::OutOfHostMemory);
  EXPECT_THROW((void)ferry::to_host(small, big), ferry::OutOfHostMemory);
  EXPECT_EQ(small.to_host()(3), 1.0f);
  EXPECT_EQ((ferry::full<float>(dev, Shape{kFloats}, 5.0f) + 1.0f).to_host()(7), 6.0f);
}

// ---- threads ----

TEST(BufferCacheThreads, ManyThreadsTakeAndGiveBackWithoutSharingABlock) {
  BufferCache* cache = BufferCache::open(std::size_t{1} << 20);
  constexpr int kThreads = 4;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<std::byte*, std::size_t>> held;
      for (int i = 0; i < 3000; ++i) {
        if (held.size() < 8 && (rng() % 2 == 0 || held.empty())) {
          const std::size_t bytes = 256 + rng() % 70'000;
          std::byte* p = cache->take(bytes, "test");
          std::memset(p, t + 1, bytes);  // a block two threads held at once would be overwritten
          held.emplace_back(p, bytes);
        } else {
          const auto [p, bytes] = held.back();
          held.pop_back();
          for (std::size_t k = 0; k < bytes; k += 61) {
            if (p[k] != static_cast<std::byte>(t + 1)) ++wrong;
          }
          cache->give_back(p, bytes);
        }
      }
      for (const auto& [p, bytes] : held) cache->give_back(p, bytes);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache->cached_bytes(), std::size_t{1} << 20);
  EXPECT_GT(cache->hits(), 0u);
  cache->close();
}

TEST(BufferCacheThreads, HostThreadsSharingADeviceGetTheirOwnValues) {
  ferry::Device dev(ferry::Executor(2));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto value = static_cast<float>(t + 1);
      for (int i = 0; i < 40; ++i) {
        auto x = ferry::full<float>(dev, Shape{1024 + 64 * t}, value);
        x = x * 2.0f + 1.0f;
        const ferry::HostArray<float> h = x.to_host();  // freed by this host thread
        for (float v : h.data()) wrong += v != value * 2.0f + 1.0f ? 1 : 0;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(dev.stats().cached_bytes, dev.cache_limit());
}

TEST(BufferCacheLifetime, AnExportedArrayOutlivesItsDevice) {
  ferry::HostArray<float> kept;
  {
    const ferry::Device dev;
    kept = ferry::full<float>(dev, Shape{kFloats}, 4.0f).to_host();
  }
  // The device is gone; its cache waits for this block, which it frees when it comes back.
  EXPECT_EQ(kept(kFloats - 1), 4.0f);
  kept = ferry::HostArray<float>();
}

}  // namespace

}  // namespace test_buffer_cache
