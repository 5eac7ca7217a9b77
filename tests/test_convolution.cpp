// conv2d, max_pool2d and avg_pool2d: against direct loops over the windows (strides, padding,
// dilation, groups, bias), errors by type, gradients against finite differences (the windows'
// col2im), one jit trace for every batch size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/gradcheck.hpp"

namespace test_convolution {

namespace {

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary

class Convolution : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Convolution, ::testing::Values(0, 2),
                         ferry_test::executor_name);

std::vector<double> wave(std::int64_t n, double phase) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(static_cast<double>(i) * 0.61 + phase) * 2;
  return v;
}

struct Geometry {
  std::int64_t n, c, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  std::int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

/// The definition: y[n, o, y, x] = bias[o] + sum over the group's channels and the window.
std::vector<double> reference_conv(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& bias, const Geometry& g) {
  std::vector<double> out;
  const std::int64_t cg = g.c / g.groups;
  const std::int64_t og = g.cout / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n) {
    for (std::int64_t o = 0; o < g.cout; ++o) {
      for (std::int64_t y = 0; y < g.oh(); ++y) {
        for (std::int64_t xx = 0; xx < g.ow(); ++xx) {
          double acc = bias.empty() ? 0 : bias[static_cast<std::size_t>(o)];
          for (std::int64_t ci = 0; ci < cg; ++ci) {
            const std::int64_t c = (o / og) * cg + ci;
            for (std::int64_t i = 0; i < g.kh; ++i) {
              for (std::int64_t j = 0; j < g.kw; ++j) {
                const std::int64_t sy = y * g.sh - g.ph + i * g.dh;
                const std::int64_t sx = xx * g.sw - g.pw + j * g.dw;
                if (sy < 0 || sy >= g.h || sx < 0 || sx >= g.w) continue;
                acc += x[static_cast<std::size_t>(((n * g.c + c) * g.h + sy) * g.w + sx)] *
                       w[static_cast<std::size_t>(((o * cg + ci) * g.kh + i) * g.kw + j)];
              }
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
}

TEST_P(Convolution, Conv2dMatchesTheDefinition) {
  for (const Geometry& g : {Geometry{2, 4, 7, 6, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2},
                            Geometry{1, 3, 5, 5, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1},
                            Geometry{3, 2, 4, 3, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1},
                            Geometry{1, 4, 6, 6, 4, 3, 3, 2, 2, 2, 1, 1, 1, 4}}) {
    SCOPED_TRACE(std::to_string(g.c) + " channels, groups " + std::to_string(g.groups));
    const auto xv = wave(g.n * g.c * g.h * g.w, 0.1);
    const auto wv = wave(g.cout * (g.c / g.groups) * g.kh * g.kw, 0.9);
    const auto bv = wave(g.cout, 2.0);
    const D x = ferry::to_device(dev, xv, Shape{g.n, g.c, g.h, g.w});
    const D w = ferry::to_device(dev, wv, Shape{g.cout, g.c / g.groups, g.kh, g.kw});
    const D b = ferry::to_device(dev, bv, Shape{g.cout});
    const ferry::Conv2dOptions o{{g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}, g.groups};
    const D y = ferry::conv2d(x, w, b, o);
    EXPECT_EQ(y.shape(), (Shape{g.n, g.cout, g.oh(), g.ow()}));
    expect_close(host(y), reference_conv(xv, wv, bv, g));
    expect_close(host(ferry::conv2d(x, w, o)), reference_conv(xv, wv, {}, g));
  }
  // An empty batch.
  const D none = ferry::to_device(dev, std::vector<double>{}, Shape{0, 2, 4, 4});
  const D w = ferry::to_device(dev, wave(3 * 2 * 2 * 2, 0), Shape{3, 2, 2, 2});
  EXPECT_EQ(ferry::conv2d(none, w).shape(), (Shape{0, 3, 3, 3}));
}

/// Pooling by the definition; `max` over the window's positions inside the image, else the
/// mean with the padding counted as zeros.
std::vector<double> reference_pool(const std::vector<double>& x, std::int64_t n, std::int64_t c,
                                   std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t s,
                                   std::int64_t p, bool max) {
  const std::int64_t oh = (h + 2 * p - k) / s + 1;
  const std::int64_t ow = (w + 2 * p - k) / s + 1;
  std::vector<double> out;
  for (std::int64_t plane = 0; plane < n * c; ++plane) {
    for (std::int64_t y = 0; y < oh; ++y) {
      for (std::int64_t xx = 0; xx < ow; ++xx) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0;
        for (std::int64_t i = 0; i < k; ++i) {
          for (std::int64_t j = 0; j < k; ++j) {
            const std::int64_t sy = y * s - p + i;
            const std::int64_t sx = xx * s - p + j;
            if (sy < 0 || sy >= h || sx < 0 || sx >= w) continue;
            const double v = x[static_cast<std::size_t>((plane * h + sy) * w + sx)];
            acc = max ? std::max(acc, v) : acc + v;
          }
        }
        out.push_back(max ? acc : acc / static_cast<double>(k * k));
      }
    }
  }
  return out;
}

TEST_P(Convolution, PoolingMatchesTheDefinition) {
  const auto xv = wave(2 * 3 * 7 * 5, 0.4);
  const D x = ferry::to_device(dev, xv, Shape{2, 3, 7, 5});
  expect_close(host(ferry::max_pool2d(x, {2, 2})), reference_pool(xv, 2, 3, 7, 5, 2, 2, 0, true));
  expect_close(host(ferry::max_pool2d(x, {3, 3}, {.stride = {1, 1}, .padding = {1, 1}})),
               reference_pool(xv, 2, 3, 7, 5, 3, 1, 1, true));
  expect_close(host(ferry::avg_pool2d(x, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}})),
               reference_pool(xv, 2, 3, 7, 5, 3, 2, 1, false));
  EXPECT_EQ(ferry::avg_pool2d(x, {2, 2}).shape(), (Shape{2, 3, 3, 2}));
  const D nan = ferry::to_device(dev, {1.0, std::nan(""), 3.0, 4.0}, Shape{1, 1, 2, 2});
  EXPECT_TRUE(std::isnan(host(ferry::max_pool2d(nan, {2, 2}))[0]));
}

TEST_P(Convolution, ErrorsNameTheOpAndTheValues) {
  const D x = ferry::to_device(dev, wave(2 * 4 * 5 * 5, 0), Shape{2, 4, 5, 5});
  const D w = ferry::to_device(dev, wave(6 * 2 * 3 * 3, 0), Shape{6, 2, 3, 3});
  try {
    (void)ferry::conv2d(x, w);  // C 4 but weight for 2 channels, groups 1
    FAIL() << "no error";
  } catch (const ferry::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(6, 2, 3, 3)"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)ferry::conv2d(x, w, {.groups = 2}));
  EXPECT_THROW((void)ferry::conv2d(x, w, {.groups = 3}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::conv2d(x, w, {.groups = 0}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::conv2d(x, w, {.stride = {0, 1}, .groups = 2}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::conv2d(x, w, {.padding = {-1, 0}, .groups = 2}),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::conv2d(x, w, {.dilation = {3, 3}, .groups = 2}),
               ferry::ShapeError);  // 7 > 5
  EXPECT_THROW(
      (void)ferry::conv2d(x, w, ferry::to_device(dev, wave(5, 0), Shape{5}), {.groups = 2}),
      ferry::ShapeError);
  EXPECT_THROW((void)ferry::conv2d(ferry::to_device(dev, wave(20, 0), Shape{4, 5}), w),
               ferry::ShapeError);
  EXPECT_THROW((void)ferry::conv2d(D{}, w), ferry::InvalidArgument);
  const ferry::Device other = ferry_test::make_device(1);
  EXPECT_THROW(
      (void)ferry::conv2d(x, ferry::to_device(other, wave(6 * 2 * 9, 0), Shape{6, 2, 3, 3}),
                          {.groups = 2}),
      ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::max_pool2d(x, {2, 2}, {.padding = {2, 0}}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::max_pool2d(x, {0, 2}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::avg_pool2d(x, {6, 6}), ferry::ShapeError);
}

TEST_P(Convolution, GradientsMatchFiniteDifferences) {
  check(
      dev,
      [](const D& x, const D& w, const D& b) {
        return weighed(ferry::conv2d(
            x, w, b, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2}));
      },
      draw(Shape{2, 4, 5, 5}), draw(Shape{4, 2, 2, 2}), draw(Shape{4}));
  check(
      dev,
      [](const D& x) {
        return weighed(ferry::max_pool2d(x, {2, 2}, {.stride = {1, 1}, .padding = {1, 1}}));
      },
      draw(Shape{1, 2, 4, 3}));
  check(dev, [](const D& x) { return weighed(ferry::avg_pool2d(x, {3, 2}, {.stride = {2, 1}})); },
        draw(Shape{2, 1, 5, 4}));
}

TEST_P(Convolution, OneTraceServesEveryBatchSize) {
  const D w = ferry::to_device(dev, wave(4 * 3 * 3 * 3, 0.5), Shape{4, 3, 3, 3});
  auto net = [&](const D& x) {
    return ferry::avg_pool2d(
        ferry::relu(ferry::max_pool2d(ferry::conv2d(x, w, {.padding = {1, 1}}), {2, 2})), {2, 2});
  };
  auto f = ferry::jit([&](D x) { return net(x); });
  for (std::int64_t n : {2, 5, 1, 3}) {
    SCOPED_TRACE(n);
    const D x = ferry::to_device(dev, wave(n * 3 * 8 * 8, 0.2), Shape{n, 3, 8, 8});
    EXPECT_EQ(host(f(x)), host(net(x)));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

}  // namespace

}  // namespace test_convolution
