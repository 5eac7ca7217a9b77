// Layouts: tiled storage is real (32x32 tiles, padded), every op gives the values it gives on
// row-major DRAM arrays whatever its inputs' layouts, elementwise ops on one layout run in
// place of any conversion, and the cost model charges each step for the memory it uses.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/reference.hpp"
#include "support/timeline.hpp"

namespace test_layout {

namespace {

using ferry::Layout;
using ferry::MemorySpace;
using ferry::Order;
using ferry::Shape;
using ferry_test::named;
using ferry_test::slices_of;
using ferry_test::span_of;
using Span = std::pair<long long, long long>;

const Layout kDram{};
const Layout kL1{MemorySpace::l1, Order::row_major};
const Layout kDramTiled{MemorySpace::dram, Order::tiled};
const Layout kL1Tiled{MemorySpace::l1, Order::tiled};
const Layout kAll[] = {kDram, kL1, kDramTiled, kL1Tiled};

std::vector<float> counting(std::int64_t n, float scale = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i % 97) - 40.0f;
  return v;
}

class Layouts : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Layouts);

TEST(LayoutValue, DefaultsCompareAndPrint) {
  EXPECT_EQ(Layout{}, (Layout{MemorySpace::dram, Order::row_major}));
  EXPECT_NE(kL1, kL1Tiled);
  EXPECT_EQ(kL1Tiled.to_string(), "l1 tiled");
  EXPECT_EQ(kDram.to_string(), "dram row-major");
}

TEST(LayoutValue, TiledStoragePadsToWholeTiles) {
  using ferry::detail::storage_bytes;
  EXPECT_EQ(storage_bytes("t", Shape{3, 40}, 4, kDramTiled), 32u * 64u * 4u);
  EXPECT_EQ(storage_bytes("t", Shape{2, 33, 65}, 2, kL1Tiled), 2u * 64u * 96u * 2u);
  EXPECT_EQ(storage_bytes("t", Shape{5}, 4, kDramTiled), 32u * 32u * 4u);  // one row
  EXPECT_EQ(storage_bytes("t", Shape{0, 7}, 4, kDramTiled), 0u);
  EXPECT_EQ(storage_bytes("t", Shape{3, 40}, 4, kL1), 3u * 40u * 4u);
}

TEST(LayoutValue, ATiledBufferHoldsTilesRowMajorInsideAndZeroPadding) {
  const Shape shape{2, 33, 34};
  const std::vector<float> v = counting(shape.numel());
  std::vector<std::byte> tiled(ferry::detail::storage_bytes("t", shape, 4, kDramTiled));
  ferry::kernels::store_as(reinterpret_cast<const std::byte*>(v.data()), tiled.data(), shape, 4,
                           Order::tiled);
  const auto* t = reinterpret_cast<const float*>(tiled.data());
  // Each matrix is 2x2 tiles of 1024 elements; element (b, r, c) sits in tile
  // (b, r / 32, c / 32) at (r % 32) * 32 + c % 32.
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t r = 0; r < 64; ++r) {
      for (std::int64_t c = 0; c < 64; ++c) {
        const std::int64_t at = ((b * 2 + r / 32) * 2 + c / 32) * 1024 + (r % 32) * 32 + c % 32;
        const float want =
            r < 33 && c < 34 ? v[static_cast<std::size_t>((b * 33 + r) * 34 + c)] : 0.0f;
        ASSERT_EQ(t[at], want) << b << " " << r << " " << c;
      }
    }
  }
  std::vector<float> back(v.size());
  ferry::kernels::load_from(tiled.data(), reinterpret_cast<std::byte*>(back.data()), shape, 4,
                            Order::tiled);
  EXPECT_EQ(back, v);
}

TEST_P(Layouts, ImportAndExportRoundTripInEveryLayout) {
  for (const Shape& shape : {Shape{5}, Shape{33}, Shape{3, 40}, Shape{2, 33, 65}, Shape{0, 5},
                             Shape{1, 1}}) {
    const std::vector<float> v = counting(shape.numel());
    for (const Layout& layout : kAll) {
      SCOPED_TRACE(shape.to_string() + " " + layout.to_string());
      auto a = ferry::to_device(dev, v, shape, layout);
      EXPECT_EQ(a.layout(), layout);
      const ferry::HostArray<float> h = a.to_host();
      EXPECT_EQ(h.shape(), shape);
      EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()), v);
    }
  }
}

TEST_P(Layouts, ToLayoutConvertsBothWaysAndKeepsTheValues) {
  const Shape shape{3, 35, 33};
  const std::vector<float> v = counting(shape.numel());
  auto a = ferry::to_device(dev, v, shape);
  for (const Layout& to : kAll) {
    for (const Layout& back : kAll) {
      auto b = ferry::to_layout(ferry::to_layout(a, to), back);
      EXPECT_EQ(b.layout(), back);
      const auto h = b.to_host();
      EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()), v);
    }
  }
}

TEST_P(Layouts, EveryOpGivesTheRowMajorValuesWhateverItsInputsLayouts) {
  const Shape shape{2, 33, 40};
  const std::vector<float> va = counting(shape.numel(), 0.25f);
  const std::vector<float> vb = counting(shape.numel(), -0.5f);
  const std::vector<float> row = counting(40, 0.125f);

  auto run_all = [&](Layout la, Layout lb) {
    auto a = ferry::to_device(dev, va, shape, la);
    auto b = ferry::to_device(dev, vb, shape, lb);
    auto r = ferry::to_device(dev, row, Shape{40}, lb);
    std::vector<ferry::DeviceArray<float>> out{
        a + b,
        a * 3.0f,
        2.0f - b,
        ferry::relu(a),
        ferry::exp(a * 0.01f),
        a + r,  // broadcast
        ferry::where(ferry::less(a, b), a, b),
        ferry::maximum(a, b),
        ferry::matmul(a, ferry::permute(b, {0, 2, 1})),
        ferry::sum(a, {1}),
        ferry::max(b, {2}, true),
        ferry::softmax(a, -1),
        ferry::reshape(a, Shape{66, 40}),
        ferry::permute(a, {1, 0, 2}),
        ferry::slice(b, 1, 3, 30),
        ferry::concat({a, b}, 2),
        a.astype<double>().astype<float>(),
        ferry::argmax(a, 2).astype<float>(),
    };
    return ferry::to_host(out);
  };
  const auto want = run_all(kDram, kDram);
  for (const Layout& la : kAll) {
    for (const Layout& lb : kAll) {
      SCOPED_TRACE(la.to_string() + " with " + lb.to_string());
      const auto got = run_all(la, lb);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("op " + std::to_string(i));
        EXPECT_EQ(got[i].shape(), want[i].shape());
        EXPECT_EQ(std::vector<float>(got[i].data().begin(), got[i].data().end()),
                  std::vector<float>(want[i].data().begin(), want[i].data().end()));
      }
    }
  }
}

TEST_P(Layouts, ElementwiseOpsOnOneLayoutKeepItAndConvertNothing) {
  const Shape shape{40, 40};
  auto a = ferry::to_device(dev, counting(1600), shape, kL1Tiled);
  auto b = ferry::to_device(dev, counting(1600, 2.0f), shape, kDramTiled);
  auto c = ferry::relu(a * b + 1.0f);
  EXPECT_EQ(c.layout(), kL1Tiled);  // the first input's space, the common order
  auto m = ferry::less(a, b);
  EXPECT_EQ(m.layout(), kL1Tiled);
  ferry::wait(c, m);
  // A conversion is named after what needed it: "to_layout", or "to_layout for <op>".
  const auto conversions = [&] {
    std::size_t n = 0;
    for (const auto& s : slices_of(dev)) {
      if (s.track != 0 && s.name.rfind("to_layout", 0) == 0) ++n;
    }
    return n;
  };
  EXPECT_EQ(conversions(), 0u);

  auto d = ferry::matmul(a, b);  // matmul reads row-major: both inputs are converted
  EXPECT_EQ(d.layout(), kL1);
  auto e = a + ferry::to_layout(b, kDram);  // mixed orders: the tiled one is converted
  EXPECT_EQ(e.layout(), kL1);
  ferry::wait(d, e);
  EXPECT_EQ(conversions(), 4u);
  EXPECT_EQ(named(slices_of(dev), "to_layout for matmul").size(), 2u);
  EXPECT_EQ(named(slices_of(dev), "to_layout for add").size(), 1u);
  EXPECT_EQ(named(slices_of(dev), "to_layout").size(), 1u);  // the explicit one
}

TEST(LayoutErrors, ATiledScalarIsRefusedAtTheCall) {
  ferry::Device dev;
  try {
    (void)ferry::to_device(dev, {1.0f}, Shape{}, kL1Tiled);
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "[to_device] a scalar (shape ()) cannot be tiled: tiles need at least one dimension");
  }
  auto s = ferry::full(dev, Shape{}, 2.0f);
  EXPECT_THROW((void)ferry::to_layout(s, kDramTiled), ferry::InvalidArgument);
  EXPECT_EQ(ferry::to_layout(s, kL1).to_host()(), 2.0f);
}

// specs::tiny(): DRAM 1 byte/ns, L1 4 bytes/ns, 1 flop/ns per unit, 10 ns per kernel. relu of
// 1024 floats: 1024 flops, 4096 bytes read and 4096 written.
TEST(LayoutCost, AKernelIsChargedForTheMemoryItsOperandsLiveIn) {
  auto duration_of_relu = [](Layout in) {
    ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
    auto x = ferry::to_device(dev, std::vector<float>(1024, 1.0f), Shape{1024}, in);
    ferry::wait(ferry::relu(x));
    const auto relu = named(slices_of(dev), "relu");
    return span_of(relu.at(0)).second - span_of(relu.at(0)).first;
  };
  EXPECT_EQ(duration_of_relu(kDram), 10 + 8192);      // 8192 bytes at 1 byte/ns
  EXPECT_EQ(duration_of_relu(kL1), 10 + 2048);        // at 4 bytes/ns
  // Tiled, one row is padded to 32: 131072 bytes each way, while the flops count only the
  // real elements.
  EXPECT_EQ(duration_of_relu(kDramTiled), 10 + 262144);
}

/// A tiled output is written whole, padding included, by every elementwise op: a scalar or
/// binary op once charged the unpadded bytes (x * 2 on (10, 100): 16384 read, 4000 written).
TEST(LayoutCost, ElementwiseOpsChargeATiledOutputsPaddingLikeAUnaryOp) {
  const auto kernel_ns = [](Layout layout, auto op) {
    ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
    const auto x = ferry::to_device(dev, std::vector<float>(1000, 2.0f), Shape{10, 100}, layout);
    ferry::wait(x);
    dev.reset_stats();
    ferry::wait(op(x));
    return dev.stats().busy("compute 0").count();
  };
  const auto neg = [](const ferry::DeviceArray<float>& x) { return -x; };
  const auto twice = [](const ferry::DeviceArray<float>& x) { return x * 2.0f; };
  const auto sum = [](const ferry::DeviceArray<float>& x) { return x + x; };
  // Row-major: 4000 bytes each operand, at 1 byte/ns, plus 10 ns.
  EXPECT_EQ(kernel_ns(kDram, neg), 8010);
  EXPECT_EQ(kernel_ns(kDram, twice), 8010);
  EXPECT_EQ(kernel_ns(kDram, sum), 12010);
  // Tiled: (10, 100) takes 1 x 4 tiles of 32 x 32 floats, 16384 bytes; flops count the 1000
  // real elements, which the bytes outweigh.
  EXPECT_EQ(kernel_ns(kDramTiled, neg), 32778);
  EXPECT_EQ(kernel_ns(kDramTiled, twice), 32778);
  EXPECT_EQ(kernel_ns(kDramTiled, sum), 49162);
}

}  // namespace

}  // namespace test_layout
