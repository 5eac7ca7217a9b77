// The resident-tensor use cases: weights pushed once, models stitched on device, weights updated
// in place, inputs double-buffered, a KV cache kept on device, and memory pressure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/timeline.hpp"

namespace test_resident {

namespace {

using ferry::DeviceArray;
using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;

std::vector<float> ramp(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  }
  return v;
}

struct Mlp {
  DeviceArray<float> w1, w2, w3;
  static Mlp load(const ferry::Device& dev, std::int64_t in, std::int64_t hidden,
                  std::int64_t out) {
    return {ferry::to_device(dev, ramp(in * hidden, 0.01f), Shape{in, hidden}),
            ferry::to_device(dev, ramp(hidden * hidden, 0.02f), Shape{hidden, hidden}),
            ferry::to_device(dev, ramp(hidden * out, 0.03f), Shape{hidden, out})};
  }
  static std::uint64_t bytes(std::int64_t in, std::int64_t hidden, std::int64_t out) {
    return static_cast<std::uint64_t>(in * hidden + hidden * hidden + hidden * out) * 4;
  }
  DeviceArray<float> operator()(const DeviceArray<float>& x) const {
    return ferry::matmul(ferry::relu(ferry::matmul(ferry::relu(ferry::matmul(x, w1)), w2)), w3);
  }
};

class Resident : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Resident);

TEST_P(Resident, WeightsArePushedOnceAndEachBatchOnlyBringsItsActivations) {
  const Mlp mlp = Mlp::load(dev, 64, 32, 10);
  for (int batch = 0; batch < 100; ++batch) {
    auto x = ferry::to_device(dev, ramp(16 * 64, 0.1f * static_cast<float>(batch % 5 + 1)),
                              Shape{16, 64});
    EXPECT_EQ(mlp(x).to_host().shape(), (Shape{16, 10}));
  }
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.bytes_h2d, Mlp::bytes(64, 32, 10) + 100u * 16 * 64 * 4);
  EXPECT_EQ(s.bytes_d2h, 100u * 16 * 10 * 4);
  EXPECT_EQ(s.host_syncs, 100u);
}

TEST_P(Resident, StitchedModelsTouchTheHostOnlyAtTheEnds) {
  const Mlp a = Mlp::load(dev, 64, 32, 48);
  const Mlp b = Mlp::load(dev, 48, 32, 10);
  auto x = ferry::to_device(dev, ramp(8 * 64, 0.1f), Shape{8, 64});
  auto y = b(ferry::softmax(a(x), -1));  // A's output is B's input, on the device
  const auto h = y.to_host();
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.bytes_h2d, Mlp::bytes(64, 32, 48) + Mlp::bytes(48, 32, 10) + 8u * 64 * 4);
  EXPECT_EQ(s.bytes_d2h, 8u * 10 * 4);
  EXPECT_EQ(s.host_syncs, 1u);
  // The same values as going through the host between the models.
  auto mid = ferry::to_device(dev, ferry::softmax(a(x), -1).to_host());
  const auto through_host = b(mid).to_host();
  EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()),
            std::vector<float>(through_host.data().begin(), through_host.data().end()));
}

TEST_P(Resident, ATrainingLoopUpdatesItsWeightsInPlace) {
  const std::int64_t n = 32, d = 16;
  auto x = ferry::to_device(dev, ramp(n * d, 0.05f), Shape{n, d});
  auto target = ferry::to_device(dev, ramp(n, 0.1f), Shape{n, 1});
  auto w = ferry::to_device(dev, std::vector<float>(d, 0.0f), Shape{d, 1});
  ferry::wait(w);
  const std::byte* buffer = ferry::detail::ArrayAccess::step(w)->output().data();
  const float lr = 0.01f;
  std::uint64_t peak_after_two = 0;
  for (int it = 1; it <= 50; ++it) {
    auto grad = ferry::matmul(ferry::transpose(x), ferry::matmul(x, w) - target);
    w = std::move(w) - lr * grad;
    if (it == 2) peak_after_two = dev.stats().peak_dram_bytes;
  }
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.peak_dram_bytes, peak_after_two);
  ferry::wait(w);
  EXPECT_EQ(ferry::detail::ArrayAccess::step(w)->output().data(), buffer);  // never reallocated
  // Each iteration donates w to its update, and the residual's product temporary to the
  // subtraction that consumes it.
  EXPECT_EQ(s.donations, 50u * 2);

  // The same loop on the host.
  const std::vector<float> hx = ramp(n * d, 0.05f), ht = ramp(n, 0.1f);
  std::vector<float> hw(static_cast<std::size_t>(d), 0.0f);
  for (int it = 0; it < 50; ++it) {
    std::vector<float> r(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      float acc = 0;
      for (std::int64_t k = 0; k < d; ++k)
        acc += hx[static_cast<std::size_t>(i * d + k)] * hw[static_cast<std::size_t>(k)];
      r[static_cast<std::size_t>(i)] = acc - ht[static_cast<std::size_t>(i)];
    }
    for (std::int64_t k = 0; k < d; ++k) {
      float g = 0;
      for (std::int64_t i = 0; i < n; ++i)
        g += hx[static_cast<std::size_t>(i * d + k)] * r[static_cast<std::size_t>(i)];
      hw[static_cast<std::size_t>(k)] -= lr * g;
    }
  }
  const auto got = w.to_host();
  for (std::int64_t k = 0; k < d; ++k) {
    EXPECT_NEAR(got(k, 0), hw[static_cast<std::size_t>(k)],
                1e-4f * (1 + std::fabs(hw[static_cast<std::size_t>(k)])));
  }
}

TEST_P(Resident, TheNextBatchsImportOverlapsTheCurrentBatchsCompute) {
  const Mlp mlp = Mlp::load(dev, 256, 256, 16);
  ferry::wait(mlp.w1, mlp.w2, mlp.w3);
  dev.reset_stats();
  // Double buffering: batch b + 1 is imported before the host waits for batch b's result.
  auto next = ferry::to_device(dev, ramp(128 * 256, 0.01f), Shape{128, 256});
  for (int batch = 0; batch < 8; ++batch) {
    auto current = next;
    if (batch + 1 < 8) next = ferry::to_device(dev, ramp(128 * 256, 0.02f), Shape{128, 256});
    EXPECT_EQ(mlp(current).to_host().shape(), (Shape{128, 16}));
  }
  const auto all = slices_of(dev);
  const auto imports = named(all, "to_device");
  const auto products = named(all, "matmul");
  ASSERT_EQ(imports.size(), 8u);
  ASSERT_EQ(products.size(), 24u);
  for (std::size_t b = 0; b + 1 < 8; ++b) {
    const auto& import_next = imports[b + 1];
    EXPECT_LT(import_next.start, products[3 * b + 2].end) << "batch " << b;  // batch b's layers
    EXPECT_GT(import_next.end, products[3 * b].start) << "batch " << b;
  }
  EXPECT_GT(dev.stats().overlap, ferry::Duration::zero());
}

// Attention scores of one query against every cached key, for 32 decode steps, with the cache
// grown by concat or written into a preallocated buffer.
std::vector<float> decode(const ferry::Device& dev, bool preallocated) {
  constexpr std::int64_t kSteps = 32, kDim = 64;
  auto cache = preallocated ? ferry::zeros<float>(dev, Shape{kSteps, kDim})
                            : ferry::to_device(dev, ramp(kDim, 0.5f), Shape{1, kDim});
  if (preallocated)
    cache = ferry::update_slice(std::move(cache),
                                ferry::to_device(dev, ramp(kDim, 0.5f), Shape{1, kDim}), 0, 0);
  std::vector<DeviceArray<float>> scores;
  for (std::int64_t t = 1; t <= kSteps; ++t) {
    auto q =
        ferry::to_device(dev, ramp(kDim, 0.25f * static_cast<float>(t % 3 + 1)), Shape{kDim, 1});
    // The keys so far: a view of the first t rows of the buffer, or the whole grown cache.
    // (A view left in a variable would keep the next write from happening in place.)
    scores.push_back(ferry::reshape(
        ferry::matmul(preallocated ? ferry::slice(cache, 0, 0, t) : cache, q), Shape{t}));
    if (t == kSteps) break;
    auto k = ferry::to_device(dev, ramp(kDim, 0.1f * static_cast<float>(t)), Shape{1, kDim});
    cache = preallocated ? ferry::update_slice(std::move(cache), k, 0, t)
                         : ferry::concat({cache, k}, 0);
  }
  std::vector<float> flat;
  for (const auto& h : ferry::to_host(scores))
    flat.insert(flat.end(), h.data().begin(), h.data().end());
  return flat;
}

TEST_P(Resident, AKvCacheStaysOnDeviceGrownByConcatOrWrittenInPlace) {
  // On tiny, where moving bytes is what costs (1 byte/ns), as it is for a long cache.
  ferry::Device by_concat = ferry::Device::modeled(ferry::specs::tiny(), dev.executor());
  ferry::Device in_place = ferry::Device::modeled(ferry::specs::tiny(), dev.executor());
  EXPECT_EQ(decode(by_concat, false), decode(in_place, true));
  const ferry::DeviceStats c = by_concat.stats();
  const ferry::DeviceStats p = in_place.stats();
  EXPECT_EQ(c.host_syncs, 1u);
  EXPECT_EQ(p.host_syncs, 1u);
  EXPECT_EQ(p.donations, 32u);  // every write of the cache is in place
  // The preallocated cache writes one row a step where concat copies the whole cache.
  auto compute_busy = [](const ferry::DeviceStats& s) {
    ferry::Duration busy{};
    for (const ferry::EngineStats& e : s.engines) {
      if (e.name.rfind("compute", 0) == 0) busy += e.busy;
    }
    return busy;
  };
  EXPECT_LT(compute_busy(p), compute_busy(c));
  EXPECT_LT(p.makespan, c.makespan);
  RecordProperty("concat_makespan_ns", std::to_string(c.makespan.count()));
  RecordProperty("preallocated_makespan_ns", std::to_string(p.makespan.count()));
}

TEST_P(Resident, UnderL1PressureTinySpillsAndTheValuesStayExact) {
  ferry::Device tiny = ferry::Device::modeled(ferry::specs::tiny(), dev.executor());
  const ferry::Layout l1{ferry::MemorySpace::l1, ferry::Order::row_major};
  std::vector<DeviceArray<float>> arrays;
  std::vector<std::vector<float>> values;
  for (int i = 0; i < 10; ++i) {  // 10 x 16 KiB in a 64 KiB L1
    values.push_back(ramp(4096, 0.5f + static_cast<float>(i)));
    arrays.push_back(ferry::to_device(tiny, values.back(), Shape{4096}, l1));
  }
  std::vector<DeviceArray<float>> sums;
  for (int i = 0; i + 1 < 10; ++i)
    sums.push_back(arrays[static_cast<std::size_t>(i)] + arrays[static_cast<std::size_t>(i + 1)]);
  const auto got = ferry::to_host(sums);
  for (std::size_t i = 0; i < got.size(); ++i) {
    for (std::size_t k = 0; k < 4096; ++k) {
      ASSERT_EQ(got[i].data()[k], values[i][k] + values[i + 1][k]);
    }
  }
  const ferry::DeviceStats s = tiny.stats();
  EXPECT_GT(s.spills, 0u);
  EXPECT_LE(s.peak_l1_bytes, 65536u);
}

}  // namespace

}  // namespace test_resident
