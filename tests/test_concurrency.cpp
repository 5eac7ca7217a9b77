// Every public call is safe from any thread: host threads build and export independent chains
// while sharing inputs, link new steps onto the same array at once, and export the same array.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_concurrency {

namespace {

using ferry::Shape;
using ferry_test::OnEachExecutor;

class Concurrency : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Concurrency);

constexpr int kThreads = 4;

template <class F>
void on_threads(F f) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(f, t);
  for (auto& th : threads) th.join();
}

TEST_P(Concurrency, FourHostThreadsBuildAndExportChainsOverSharedInputs) {
  // Shared, resident inputs: a small layer every thread applies in its own chain.
  const std::vector<float> wv = ferry_test::random_values<float>(8 * 8, 3);
  auto w = ferry::to_device(dev, std::span<const float>(wv), Shape{8, 8});
  auto x0 = ferry::ones<float>(dev, Shape{4, 8});
  // The reference: the same chain on the host, step by step, in float as the kernels do.
  auto host_step = [&](std::vector<float> x, float t) {
    std::vector<float> y(4 * 8, 0.0f);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 8; ++j) {
        float acc = 0;
        for (int k = 0; k < 8; ++k) acc += x[i * 8 + k] * wv[k * 8 + j];
        y[i * 8 + j] = std::tanh(acc + t);
      }
    }
    return y;
  };
  std::atomic<int> mismatches{0};
  on_threads([&](int t) {
    auto x = x0;
    std::vector<float> expected(4 * 8, 1.0f);
    for (int step = 0; step < 50; ++step) {
      const float bias = static_cast<float>(t) / 10;
      x = ferry::tanh(ferry::matmul(x, w) + bias);
      expected = host_step(expected, bias);
      if (step % 10 == 9) {  // export now and then, while the other threads keep building
        const auto h = x.to_host();
        for (std::size_t i = 0; i < expected.size(); ++i) {
          if (std::abs(h.data()[i] - expected[i]) > 1e-4f) mismatches.fetch_add(1);
        }
      }
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_P(Concurrency, ManyThreadsLinkOntoOneArrayAtOnce) {
  auto shared = ferry::arange<std::int64_t>(dev, 16);
  std::vector<std::vector<ferry::DeviceArray<std::int64_t>>> built(kThreads);
  on_threads([&](int t) {
    for (int i = 0; i < 200; ++i)
      built[static_cast<std::size_t>(t)].push_back(shared * (t * 1000 + i));
  });
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 200; ++i) {
      const auto h = built[static_cast<std::size_t>(t)][static_cast<std::size_t>(i)].to_host();
      ASSERT_EQ(h(15), 15 * (t * 1000 + i));
    }
  }
}

TEST_P(Concurrency, ThreadsExportTheSameArrayAtOnce) {
  auto x = ferry::arange<double>(dev, 1000);
  for (int i = 0; i < 20; ++i) x = ferry::sqrt(x * x);
  std::atomic<int> wrong{0};
  on_threads([&](int) {
    const auto h = x.to_host();
    for (int i = 0; i < 1000; ++i) {
      if (std::abs(h(i) - i) > 1e-9) wrong.fetch_add(1);
    }
    ferry::wait(x);
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ConcurrencyManual, ExportsFromManyThreadsDriveAManualDeviceWithoutHanging) {
  // Several threads export from one stepped device: while one runs a step another needs, the
  // other must wait for it and then drive the successors itself, not block forever.
  for (int round = 0; round < 20; ++round) {
    ferry::ManualExecutor manual;
    ferry::Device dev(manual);
    auto shared = ferry::arange<std::int64_t>(dev, 8);
    std::atomic<int> wrong{0};
    on_threads([&](int t) {
      auto x = shared + t;
      for (int i = 0; i < 100; ++i) {
        x = x + 1;
        if (i % 25 == 24 && x.to_host()(7) != 7 + t + i + 1) wrong.fetch_add(1);
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  }
}

TEST(ConcurrencyDevices, ThreadsOnSeparateDevicesShareTheExecutor) {
  ferry::Executor pool(2);
  std::atomic<int> wrong{0};
  on_threads([&](int t) {
    ferry::Device dev(pool);
    auto x = ferry::full(dev, Shape{64}, static_cast<std::int32_t>(t));
    for (int i = 0; i < 500; ++i) x = x + 1;
    if (x.to_host()(63) != t + 500) wrong.fetch_add(1);
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace

}  // namespace test_concurrency
