// nn's PyTorch-shaped modules (Embedding, LayerNorm, RMSNorm, Conv2d, Dropout,
// MultiheadAttention, ModuleList): each forward against a plain loop on the host, parameter names
// and shapes as PyTorch's state_dict lists them, initial values within PyTorch's bounds,
// gradients against finite differences of the host loops, train/eval, Sequentials with named
// children loading a checkpoint under those names, and load errors naming the call and the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace test_nn_modules {

namespace {

using ferry_test::values_of;

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::DeviceArray;
using ferry::Shape;
namespace nn = ferry::nn;

/// Parameters on the host, in double, by name: what the reference loops read.
using Params = std::map<std::string, std::vector<double>>;

std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

DeviceArray<float> random_array(const ferry::Device& dev, const Shape& shape, unsigned seed) {
  return ferry::to_device(dev, random_values(static_cast<std::size_t>(shape.numel()), seed), shape);
}

/// Every parameter replaced by values in [-1, 1], so biases and norms' scales are not the
/// zeros and ones they start as.
void randomize(nn::Module& m, const ferry::Device& dev, unsigned seed) {
  nn::NamedParameters fresh;
  for (const auto& [name, p] : m.named_parameters())
    fresh.emplace_back(name, random_array(dev, p.shape(), seed++));
  m.set_parameters(fresh);
}

Params params_of(const nn::Module& m) {
  Params out;
  for (const auto& [name, p] : m.named_parameters()) {
    const std::vector<float> v = values_of(p);
    out[name] = std::vector<double>(v.begin(), v.end());
  }
  return out;
}

std::vector<std::pair<std::string, Shape>> names_and_shapes(const nn::Module& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.shape());
  return out;
}

using NameShapes = std::vector<std::pair<std::string, Shape>>;

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
  }
}

double dot(const std::vector<double>& a, const std::vector<float>& r) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * r[i];
  return s;
}

/// Expects each gradient to match central differences of `loss` (the host reference of the
/// loss, in double, over the parameters `p`), within a relative `tol`.
template <class Loss>
void expect_gradients(const nn::NamedParameters& grads, Params p, const Loss& loss,
                      double tol = 2e-4) {
  const double h = 1e-4;
  ASSERT_EQ(grads.size(), p.size());
  for (const auto& [name, g] : grads) {
    SCOPED_TRACE("gradient of " + name);
    const std::vector<float> analytic = values_of(g);
    std::vector<double>& v = p.at(name);
    ASSERT_EQ(analytic.size(), v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double x = v[i];
      v[i] = x + h;
      const double up = loss(p);
      v[i] = x - h;
      const double down = loss(p);
      v[i] = x;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], fd, tol * std::max(1.0, std::abs(fd))) << "at " << i;
    }
  }
}

// ---- host references, in double ----

std::vector<double> norm_reference(const std::vector<float>& x, std::int64_t size, const Params& p,
                                   bool rms, double eps) {
  const auto n = static_cast<std::size_t>(size);
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    const float* row = x.data() + r * n;
    double mean = 0;
    if (!rms) {
      for (std::size_t i = 0; i < n; ++i) mean += row[i];
      mean /= static_cast<double>(n);
    }
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) sq += (row[i] - mean) * (row[i] - mean);
    const double inv = 1 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (std::size_t i = 0; i < n; ++i) {
      double v = (row[i] - mean) * inv;
      if (p.count("weight")) v *= p.at("weight")[i];
      if (p.count("bias")) v += p.at("bias")[i];
      y[r * n + i] = v;
    }
  }
  return y;
}

struct ConvGeometry {
  std::int64_t n, c, h, w, out, kh, kw;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  std::int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

std::vector<double> conv_reference(const std::vector<float>& x, const ConvGeometry& g,
                                   const Params& p) {
  const std::vector<double>& w = p.at("weight");
  const std::int64_t cg = g.c / g.groups;
  const std::int64_t og = g.out / g.groups;
  std::vector<double> y(static_cast<std::size_t>(g.n * g.out * g.oh() * g.ow()));
  std::size_t k = 0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    for (std::int64_t o = 0; o < g.out; ++o) {
      for (std::int64_t i = 0; i < g.oh(); ++i) {
        for (std::int64_t j = 0; j < g.ow(); ++j) {
          double acc = p.count("bias") ? p.at("bias")[static_cast<std::size_t>(o)] : 0.0;
          for (std::int64_t c = 0; c < cg; ++c) {
            for (std::int64_t a = 0; a < g.kh; ++a) {
              for (std::int64_t b = 0; b < g.kw; ++b) {
                const std::int64_t row = i * g.sh - g.ph + a * g.dh;
                const std::int64_t col = j * g.sw - g.pw + b * g.dw;
                if (row < 0 || row >= g.h || col < 0 || col >= g.w) continue;
                const std::int64_t ch = (o / og) * cg + c;
                acc += x[static_cast<std::size_t>(((n * g.c + ch) * g.h + row) * g.w + col)] *
                       w[static_cast<std::size_t>(((o * cg + c) * g.kh + a) * g.kw + b)];
              }
            }
          }
          y[k++] = acc;
        }
      }
    }
  }
  return y;
}

/// rows (count, in) times W (out, in) transposed, plus b, from W's and b's rows [first, first +
/// out).
std::vector<double> affine(const std::vector<double>& x, std::size_t count, std::size_t in,
                           const std::vector<double>& w, const std::vector<double>* b,
                           std::size_t first, std::size_t out) {
  std::vector<double> y(count * out);
  for (std::size_t r = 0; r < count; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[first + o] : 0.0;
      for (std::size_t i = 0; i < in; ++i) acc += x[r * in + i] * w[(first + o) * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

/// PyTorch's multi-head attention for batch-first inputs q (n, l, e), k and v (n, s, e), with an
/// optional additive (l, s) mask.
std::vector<double> mha_reference(const Params& p, std::size_t e, std::size_t heads,
                                  const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, std::size_t n, std::size_t l,
                                  std::size_t s, bool causal, const std::vector<float>* mask) {
  const std::vector<double>& wi = p.at("in_proj_weight");
  const std::vector<double>* bi = p.count("in_proj_bias") ? &p.at("in_proj_bias") : nullptr;
  const std::vector<double>* bo = p.count("out_proj.bias") ? &p.at("out_proj.bias") : nullptr;
  const std::size_t d = e / heads;
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  const std::vector<double> qp = affine({q.begin(), q.end()}, n * l, e, wi, bi, 0, e);
  const std::vector<double> kp = affine({k.begin(), k.end()}, n * s, e, wi, bi, e, e);
  const std::vector<double> vp = affine({v.begin(), v.end()}, n * s, e, wi, bi, 2 * e, e);
  std::vector<double> merged(n * l * e);
  for (std::size_t b = 0; b < n; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < l; ++i) {
        std::vector<double> score(s);
        double top = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < s; ++j) {
          double acc = 0;
          for (std::size_t c = 0; c < d; ++c)
            acc += qp[(b * l + i) * e + h * d + c] * kp[(b * s + j) * e + h * d + c];
          score[j] = acc * scale + (mask ? (*mask)[i * s + j] : 0.0);
          if (causal && j > i) score[j] = -std::numeric_limits<double>::infinity();
          top = std::max(top, score[j]);
        }
        double total = 0;
        for (double& x : score) total += (x = std::exp(x - top));
        for (std::size_t c = 0; c < d; ++c) {
          double acc = 0;
          for (std::size_t j = 0; j < s; ++j)
            acc += score[j] / total * vp[(b * s + j) * e + h * d + c];
          merged[(b * l + i) * e + h * d + c] = acc;
        }
      }
    }
  }
  return affine(merged, n * l, e, p.at("out_proj.weight"), bo, 0, e);
}

/// (a, b, e) -> (b, a, e).
template <class T>
std::vector<T> swap01(const std::vector<T>& x, std::size_t a, std::size_t b, std::size_t e) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < a; ++i) {
    for (std::size_t j = 0; j < b; ++j) {
      for (std::size_t c = 0; c < e; ++c) y[(j * a + i) * e + c] = x[(i * b + j) * e + c];
    }
  }
  return y;
}

/// A scratch directory of this file's tests.
struct TempDir : ferry_test::TempDir {
  TempDir() : ferry_test::TempDir("ferry_nn_modules") {}
};

/// A model's skeleton as PyTorch would nest it: "embed" (when asked), a ModuleList "layers" of
/// Linear(4, hidden) and Linear(hidden, 4), "norm".
class Nested : public nn::Module {
 public:
  Nested(const ferry::Device& dev, bool embed, std::int64_t hidden) {
    if (embed) register_module("embed", nn::Embedding(10, 4, dev, {.seed = 1}));
    register_module("layers", nn::ModuleList(nn::Linear(4, hidden, dev, {.seed = 2}),
                                             nn::Linear(hidden, 4, dev, {.seed = 3})));
    register_module("norm", nn::LayerNorm(4, dev));
  }
  std::string_view type_name() const override { return "Nested"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override { return x; }
};

class NNModules : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(NNModules);

// ---- names and shapes ----

TEST_P(NNModules, ParameterNamesAndShapesAreThoseOfPyTorchsStateDict) {
  EXPECT_EQ(names_and_shapes(nn::Embedding(10, 4, dev, {.seed = 1})),
            (NameShapes{{"weight", Shape{10, 4}}}));
  EXPECT_EQ(names_and_shapes(nn::LayerNorm(4, dev)),
            (NameShapes{{"weight", Shape{4}}, {"bias", Shape{4}}}));
  EXPECT_EQ(names_and_shapes(nn::LayerNorm(4, dev, {.bias = false})),
            (NameShapes{{"weight", Shape{4}}}));
  EXPECT_EQ(names_and_shapes(nn::LayerNorm(4, dev, {.elementwise_affine = false})), NameShapes{});
  EXPECT_EQ(names_and_shapes(nn::RMSNorm(4, dev)), (NameShapes{{"weight", Shape{4}}}));
  EXPECT_EQ(names_and_shapes(nn::RMSNorm(4, dev, {.elementwise_affine = false})), NameShapes{});
  EXPECT_EQ(names_and_shapes(nn::Conv2d(3, 8, {3, 5}, dev, {.seed = 1})),
            (NameShapes{{"weight", Shape{8, 3, 3, 5}}, {"bias", Shape{8}}}));
  EXPECT_EQ(names_and_shapes(nn::Conv2d(4, 6, 3, dev, {.groups = 2, .bias = false, .seed = 1})),
            (NameShapes{{"weight", Shape{6, 2, 3, 3}}}));
  EXPECT_EQ(names_and_shapes(nn::Dropout(0.1)), NameShapes{});
  EXPECT_EQ(names_and_shapes(nn::MultiheadAttention(8, 2, dev, {.seed = 1})),
            (NameShapes{{"in_proj_weight", Shape{24, 8}},
                        {"in_proj_bias", Shape{24}},
                        {"out_proj.weight", Shape{8, 8}},
                        {"out_proj.bias", Shape{8}}}));
  EXPECT_EQ(names_and_shapes(nn::MultiheadAttention(8, 2, dev, {.bias = false, .seed = 1})),
            (NameShapes{{"in_proj_weight", Shape{24, 8}}, {"out_proj.weight", Shape{8, 8}}}));
  const nn::ModuleList list(nn::Linear(2, 3, dev, {.seed = 1}), nn::ReLU(),
                            nn::Linear(3, 4, dev, {.seed = 2}));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(names_and_shapes(list), (NameShapes{{"0.weight", Shape{3, 2}},
                                                {"0.bias", Shape{3}},
                                                {"2.weight", Shape{4, 3}},
                                                {"2.bias", Shape{4}}}));
  // Nested names joined with ".", own parameters first, then each submodule's, depth first.
  EXPECT_EQ(names_and_shapes(Nested(dev, true, 6)), (NameShapes{{"embed.weight", Shape{10, 4}},
                                                                {"layers.0.weight", Shape{6, 4}},
                                                                {"layers.0.bias", Shape{6}},
                                                                {"layers.1.weight", Shape{4, 6}},
                                                                {"layers.1.bias", Shape{4}},
                                                                {"norm.weight", Shape{4}},
                                                                {"norm.bias", Shape{4}}}));
}

// ---- initialization ----

TEST_P(NNModules, EmbeddingStartsStandardNormalAndFollowsTheSeed) {
  const nn::Embedding a(200, 50, dev, {.seed = 7});
  const std::vector<float> w = values_of(a.weight());
  double mean = 0;
  for (float v : w) mean += v;
  mean /= static_cast<double>(w.size());
  double var = 0;
  for (float v : w) var += (v - mean) * (v - mean);
  var /= static_cast<double>(w.size());
  EXPECT_NEAR(mean, 0.0, 0.05);  // 10,000 draws: the mean's deviation is 0.01
  EXPECT_NEAR(var, 1.0, 0.05);
  const auto beyond =
      std::count_if(w.begin(), w.end(), [](float v) { return std::abs(v) > 1.96f; });
  EXPECT_NEAR(static_cast<double>(beyond) / static_cast<double>(w.size()), 0.05, 0.01);
  EXPECT_EQ(values_of(nn::Embedding(200, 50, dev, {.seed = 7}).weight()), w);
  EXPECT_NE(values_of(nn::Embedding(200, 50, dev, {.seed = 8}).weight()), w);
  EXPECT_EQ(nn::Embedding(7, 3, dev, {.seed = 1}).weight().shape(), (Shape{7, 3}));  // an odd count
}

TEST_P(NNModules, NormsStartAsTheIdentityWithPyTorchsEpsilons) {
  const nn::LayerNorm ln(6, dev);
  EXPECT_EQ(values_of(ln.weight()), std::vector<float>(6, 1.0f));
  EXPECT_EQ(values_of(ln.bias()), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ln.eps(), 1e-5);
  const nn::RMSNorm rms(6, dev);
  EXPECT_EQ(values_of(rms.weight()), std::vector<float>(6, 1.0f));
  // PyTorch's eps=None: float32's machine epsilon.
  EXPECT_EQ(rms.eps(), static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(nn::RMSNorm(6, dev, {.eps = 1e-6}).eps(), 1e-6);
  EXPECT_THROW((void)nn::LayerNorm(6, dev, {.bias = false}).bias(), ferry::InvalidArgument);
  EXPECT_THROW((void)nn::RMSNorm(6, dev, {.elementwise_affine = false}).weight(),
               ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>(
      [&] { nn::LayerNorm(-1, dev); },
      "[LayerNorm] needs normalized_shape >= 0 and a finite eps >= 0, got -1 and 1e-05");
  EXPECT_THROW(nn::RMSNorm(4, dev, {.eps = -1}), ferry::InvalidArgument);
}

/// Every value within +-bound, and 90% of the range reached on each side.
void expect_uniform_within(const std::vector<float>& v, double bound) {
  float lo = 1;
  float hi = -1;
  for (float x : v) {
    EXPECT_LE(std::abs(x), static_cast<float>(bound));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_LT(lo, -0.9 * bound);
  EXPECT_GT(hi, 0.9 * bound);
}

TEST_P(NNModules, ConvAndAttentionStartWithinPyTorchsBounds) {
  // Conv2d: kaiming_uniform_(a = sqrt(5)) and the bias both give 1/sqrt(fan_in).
  const nn::Conv2d conv(8, 16, {3, 2}, dev, {.seed = 3});
  expect_uniform_within(values_of(conv.weight()), 1 / std::sqrt(8.0 * 3 * 2));
  for (float b : values_of(conv.bias()))
    EXPECT_LE(std::abs(b), static_cast<float>(1 / std::sqrt(48.0)));
  const nn::Conv2d grouped(8, 32, 3, dev, {.groups = 4, .seed = 4});  // fan_in 8 / 4 * 3 * 3
  expect_uniform_within(values_of(grouped.weight()), 1 / std::sqrt(18.0));
  EXPECT_EQ(values_of(nn::Conv2d(8, 16, {3, 2}, dev, {.seed = 3}).weight()),
            values_of(conv.weight()));

  // MultiheadAttention: xavier_uniform_ on (3E, E), zero biases, out_proj as a Linear's weight.
  const nn::MultiheadAttention mha(32, 4, dev, {.seed = 5});
  EXPECT_EQ(mha.head_dim(), 8);
  expect_uniform_within(values_of(mha.in_proj_weight()), std::sqrt(6.0 / (32 + 96)));
  EXPECT_EQ(values_of(mha.in_proj_bias()), std::vector<float>(96, 0.0f));
  expect_uniform_within(values_of(mha.out_proj().weight()), 1 / std::sqrt(32.0));
  EXPECT_EQ(values_of(mha.out_proj().bias()), std::vector<float>(32, 0.0f));
  EXPECT_EQ(values_of(nn::MultiheadAttention(32, 4, dev, {.seed = 5}).out_proj().weight()),
            values_of(mha.out_proj().weight()));
  EXPECT_NE(values_of(nn::MultiheadAttention(32, 4, dev, {.seed = 6}).in_proj_weight()),
            values_of(mha.in_proj_weight()));
}

TEST_P(NNModules, ConstructorsRejectBadSizes) {
  expect_error<ferry::InvalidArgument>(
      [&] { nn::Embedding(-1, 4, dev); },
      "[Embedding] sizes must not be negative, got num_embeddings -1 and embedding_dim 4");
  expect_error<ferry::InvalidArgument>(
      [&] { nn::Conv2d(6, 4, 3, dev, {.groups = 4}); },
      "[Conv2d] groups must be >= 1 and divide in_channels 6 and out_channels 4, got 4");
  expect_error<ferry::InvalidArgument>([&] { nn::Conv2d(2, 4, {0, 3}, dev); },
                                       "[Conv2d] kernel_size must be >= 1, got 0 x 3");
  EXPECT_THROW(nn::Conv2d(2, 4, 3, dev, {.stride = {1, 0}}), ferry::InvalidArgument);
  EXPECT_THROW(nn::Conv2d(2, 4, 3, dev, {.padding = {-1, 0}}), ferry::InvalidArgument);
  EXPECT_THROW(nn::Conv2d(2, 4, 3, dev, {.dilation = {0, 1}}), ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>(
      [&] { nn::MultiheadAttention(10, 4, dev); },
      "[MultiheadAttention] needs embed_dim >= 1 divisible by num_heads >= 1, got 10 and 4");
  expect_error<ferry::InvalidArgument>([] { nn::Dropout(1.5); },
                                       "[Dropout] needs 0 <= p <= 1, got 1.5");
  EXPECT_THROW(nn::Dropout(-0.1), ferry::InvalidArgument);
}

// ---- forward against the host ----

TEST_P(NNModules, EmbeddingLooksUpRowsByInt32OrInt64Ids) {
  nn::Embedding emb(10, 4, dev, {.seed = 1});
  const std::vector<float> w = values_of(emb.weight());
  const std::vector<std::int64_t> ids{3, 0, 9, 3, 7, 1};
  std::vector<double> want;
  for (std::int64_t id : ids) want.insert(want.end(), w.begin() + id * 4, w.begin() + id * 4 + 4);
  const DeviceArray<float> y64 = emb(ferry::to_device(dev, ids, Shape{2, 3}));
  EXPECT_EQ(y64.shape(), (Shape{2, 3, 4}));
  expect_close(values_of(y64), want, 0);
  const std::vector<std::int32_t> ids32(ids.begin(), ids.end());
  const DeviceArray<float> y32 = emb(ferry::to_device(dev, ids32, Shape{6}));
  EXPECT_EQ(y32.shape(), (Shape{6, 4}));
  expect_close(values_of(y32), want, 0);

  // Floats through the Module interface are refused; ids on another device are too.
  const nn::Module& as_module = emb;
  expect_error<ferry::InvalidArgument>(
      [&] { (void)as_module(ferry::full(dev, Shape{2}, 1.0f)); },
      "[Embedding] takes int32 or int64 ids, got a float32 array of shape (2)");
  ferry::Device other = ferry_test::make_device(GetParam());
  const std::string m =
      message_of<ferry::DeviceMismatch>([&] { (void)emb(ferry::to_device(other, ids, Shape{6})); });
  EXPECT_EQ(m, "[Embedding] input lives on " + other.name() + ", parameters on " + dev.name());
  EXPECT_THROW((void)emb(DeviceArray<std::int32_t>()), ferry::InvalidArgument);
  // An id out of range fails the lookup's step, at the export.
  EXPECT_THROW((void)emb(ferry::to_device(dev, std::vector<std::int64_t>{10}, Shape{1})).to_host(),
               ferry::InvalidArgument);
}

TEST_P(NNModules, LayerNormAndRMSNormMatchAReferenceLoop) {
  const std::vector<float> x = random_values(3 * 2 * 5, 11, -2, 3);
  const auto xd = ferry::to_device(dev, x, Shape{3, 2, 5});
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "affine" : "plain");
    nn::LayerNorm ln(5, dev, {.eps = 1e-3, .elementwise_affine = affine});
    randomize(ln, dev, 1);
    const DeviceArray<float> y = ln(xd);
    EXPECT_EQ(y.shape(), (Shape{3, 2, 5}));
    expect_close(values_of(y), norm_reference(x, 5, params_of(ln), false, 1e-3));
    nn::RMSNorm rms(5, dev, {.elementwise_affine = affine});
    randomize(rms, dev, 2);
    expect_close(values_of(rms(xd)),
                 norm_reference(x, 5, params_of(rms), true, std::numeric_limits<float>::epsilon()));
  }
  const std::string m = message_of<ferry::ShapeError>([&] { (void)nn::LayerNorm(4, dev)(xd); });
  EXPECT_EQ(m, "[LayerNorm] input (3, 2, 5) does not end in normalized_shape 4");
  EXPECT_THROW((void)nn::RMSNorm(4, dev)(xd), ferry::ShapeError);
  EXPECT_THROW((void)nn::RMSNorm(4, dev)(ferry::full(dev, Shape{}, 1.0f)), ferry::ShapeError);
}

TEST_P(NNModules, Conv2dMatchesAReferenceLoop) {
  struct Case {
    const char* name;
    ConvGeometry g;
    bool bias;
  };
  const Case cases[] = {
      {"plain", {.n = 2, .c = 3, .h = 5, .w = 6, .out = 4, .kh = 3, .kw = 2}, true},
      {"strided, padded, dilated",
       {.n = 1,
        .c = 2,
        .h = 7,
        .w = 6,
        .out = 3,
        .kh = 3,
        .kw = 3,
        .sh = 2,
        .sw = 1,
        .ph = 1,
        .pw = 2,
        .dh = 1,
        .dw = 2},
       true},
      {"grouped, no bias",
       {.n = 2, .c = 4, .h = 4, .w = 4, .out = 6, .kh = 2, .kw = 2, .groups = 2},
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ConvGeometry& g = c.g;
    nn::Conv2d conv(g.c, g.out, {g.kh, g.kw}, dev,
                    {.stride = {g.sh, g.sw},
                     .padding = {g.ph, g.pw},
                     .dilation = {g.dh, g.dw},
                     .groups = g.groups,
                     .bias = c.bias,
                     .seed = 9});
    const std::vector<float> x = random_values(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 12);
    const DeviceArray<float> y = conv(ferry::to_device(dev, x, Shape{g.n, g.c, g.h, g.w}));
    EXPECT_EQ(y.shape(), (Shape{g.n, g.out, g.oh(), g.ow()}));
    expect_close(values_of(y), conv_reference(x, g, params_of(conv)));
  }
  // Unbatched (C, H, W) gives (out, OH, OW).
  nn::Conv2d conv(3, 2, 2, dev, {.seed = 1});
  const ConvGeometry g{.n = 1, .c = 3, .h = 3, .w = 4, .out = 2, .kh = 2, .kw = 2};
  const std::vector<float> x = random_values(36, 13);
  const DeviceArray<float> y = conv(ferry::to_device(dev, x, Shape{3, 3, 4}));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  expect_close(values_of(y), conv_reference(x, g, params_of(conv)));
  const std::string m = message_of<ferry::ShapeError>([&] {
    (void)conv(ferry::zeros<float>(dev, Shape{1, 4, 3, 3}));
  });
  EXPECT_EQ(m,
            "[Conv2d] input (1, 4, 3, 3) is not (N, 3, H, W) or (3, H, W) (weight (2, 3, 2, 2))");
  EXPECT_THROW((void)conv(ferry::zeros<float>(dev, Shape{3, 3})), ferry::ShapeError);
}

TEST_P(NNModules, MultiheadAttentionMatchesAReferenceLoop) {
  constexpr std::size_t kE = 8;
  constexpr std::size_t kH = 2;
  constexpr std::size_t kN = 2;
  constexpr std::size_t kL = 3;
  constexpr std::size_t kS = 5;
  nn::MultiheadAttention mha(kE, kH, dev, {.seed = 4});
  randomize(mha, dev, 20);
  const Params p = params_of(mha);
  const std::vector<float> x = random_values(kN * kL * kE, 21);
  const std::vector<float> kv = random_values(kN * kS * kE, 22);
  const std::vector<float> vv = random_values(kN * kS * kE, 23);
  const auto xd = ferry::to_device(dev, x, Shape{kN, kL, kE});
  const auto kd = ferry::to_device(dev, kv, Shape{kN, kS, kE});
  const auto vd = ferry::to_device(dev, vv, Shape{kN, kS, kE});

  const DeviceArray<float> self = mha(xd);
  EXPECT_EQ(self.shape(), (Shape{kN, kL, kE}));
  expect_close(values_of(self), mha_reference(p, kE, kH, x, x, x, kN, kL, kL, false, nullptr));
  expect_close(values_of(mha(xd, {.causal = true})),
               mha_reference(p, kE, kH, x, x, x, kN, kL, kL, true, nullptr));
  const DeviceArray<float> cross = mha(xd, kd, vd);
  EXPECT_EQ(cross.shape(), (Shape{kN, kL, kE}));
  expect_close(values_of(cross), mha_reference(p, kE, kH, x, kv, vv, kN, kL, kS, false, nullptr));
  const std::vector<float> mask = random_values(kL * kS, 24);
  expect_close(values_of(mha(xd, kd, vd, {.mask = ferry::to_device(dev, mask, Shape{kL, kS})})),
               mha_reference(p, kE, kH, x, kv, vv, kN, kL, kS, false, &mask));

  // Unbatched (L, E): the first sequence alone.
  const std::vector<float> x0(x.begin(), x.begin() + kL * kE);
  const DeviceArray<float> single = mha(ferry::to_device(dev, x0, Shape{kL, kE}));
  EXPECT_EQ(single.shape(), (Shape{kL, kE}));
  expect_close(values_of(single), mha_reference(p, kE, kH, x0, x0, x0, 1, kL, kL, false, nullptr));

  // Sequence first (PyTorch's default layout): (L, N, E) in and out.
  nn::MultiheadAttention seq_first(kE, kH, dev, {.batch_first = false, .seed = 4});
  seq_first.set_parameters(mha.named_parameters());
  const DeviceArray<float> y =
      seq_first(ferry::to_device(dev, swap01(x, kN, kL, kE), Shape{kL, kN, kE}),
                ferry::to_device(dev, swap01(kv, kN, kS, kE), Shape{kS, kN, kE}),
                ferry::to_device(dev, swap01(vv, kN, kS, kE), Shape{kS, kN, kE}));
  EXPECT_EQ(y.shape(), (Shape{kL, kN, kE}));
  expect_close(values_of(y),
               swap01(mha_reference(p, kE, kH, x, kv, vv, kN, kL, kS, false, nullptr), kN, kL, kE));

  // Without biases.
  nn::MultiheadAttention plain(kE, kH, dev, {.bias = false, .seed = 4});
  randomize(plain, dev, 30);
  expect_close(values_of(plain(xd, kd, vd)),
               mha_reference(params_of(plain), kE, kH, x, kv, vv, kN, kL, kS, false, nullptr));

  // Inputs checked at the call, naming the module.
  expect_error<ferry::ShapeError>([&] { (void)mha(xd, kd, ferry::slice(vd, 1, 0, 4)); },
                                  "[MultiheadAttention] key and value must have the same length: "
                                  "query (2, 3, 8), key (2, 5, 8), value (2, 4, 8) "
                                  "(embed_dim 8)");
  EXPECT_THROW((void)mha(ferry::zeros<float>(dev, Shape{kN, kL, 6})), ferry::ShapeError);
  EXPECT_THROW((void)mha(xd, ferry::slice(kd, 0, 0, 1), ferry::slice(vd, 0, 0, 1)),
               ferry::ShapeError);
  EXPECT_THROW((void)mha(ferry::zeros<float>(dev, Shape{kE})), ferry::ShapeError);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW((void)mha(xd, ferry::to_device(other, kv, Shape{kN, kS, kE}), vd),
               ferry::DeviceMismatch);
  // A bad mask too, as the module, before the projections are submitted (the attention
  // checked it after them, naming itself).
  expect_error<ferry::ShapeError>(
      [&] { (void)mha(xd, kd, vd, {.mask = ferry::zeros<float>(dev, Shape{3, 4})}); },
      "[MultiheadAttention] the mask's (3, 4) does not broadcast to the scores' (N, num_heads, "
      "L, S) (2, 2, 3, 5)");
  expect_error<ferry::DeviceMismatch>(
      [&] { (void)mha(xd, kd, vd, {.mask = ferry::zeros<float>(other, Shape{kL, kS})}); },
      "[MultiheadAttention] the mask lives on " + other.name() + ", parameters on " + dev.name());
}

TEST_P(NNModules, ModuleListHoldsModulesButIsNotCalled) {
  nn::ModuleList list;
  list.append(nn::Linear(3, 3, dev, {.seed = 1}));
  list.append(std::make_unique<nn::Tanh>());
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].type_name(), "Tanh");
  const auto x = random_array(dev, Shape{2, 3}, 1);
  const DeviceArray<float> y = list[1](list[0](x));
  EXPECT_EQ(values_of(y), values_of(ferry::tanh(static_cast<const nn::Linear&>(list[0])(x))));
  expect_error<ferry::InvalidArgument>([&] { (void)list(x); },
                                       "[ModuleList] has no forward: call its modules, list[i](x)");
  EXPECT_THROW(list.append(std::unique_ptr<nn::Module>()), ferry::InvalidArgument);
}

// ---- gradients ----

TEST_P(NNModules, GradientsMatchFiniteDifferencesOfTheReferences) {
  {
    SCOPED_TRACE("Embedding");
    nn::Embedding emb(5, 3, dev, {.seed = 2});
    const std::vector<std::int64_t> ids{4, 1, 4, 0};  // 4 twice: its row gets both
    const auto idd = ferry::to_device(dev, ids, Shape{4});
    const std::vector<float> r = random_values(12, 3);
    const auto rd = ferry::to_device(dev, r, Shape{4, 3});
    auto [loss, grads] = nn::value_and_grad(emb, [&] { return ferry::sum(emb(idd) * rd); })();
    expect_gradients(grads, params_of(emb), [&](const Params& p) {
      double s = 0;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        for (std::size_t c = 0; c < 3; ++c)
          s += p.at("weight")[static_cast<std::size_t>(ids[i]) * 3 + c] * r[i * 3 + c];
      }
      return s;
    });
  }
  const std::vector<float> x = random_values(4 * 5, 4, -2, 2);
  const auto xd = ferry::to_device(dev, x, Shape{4, 5});
  const std::vector<float> r = random_values(4 * 5, 5);
  const auto rd = ferry::to_device(dev, r, Shape{4, 5});
  {
    SCOPED_TRACE("LayerNorm");
    nn::LayerNorm ln(5, dev);
    randomize(ln, dev, 6);
    auto [loss, grads] = nn::value_and_grad(ln, [&] { return ferry::sum(ln(xd) * rd); })();
    expect_gradients(grads, params_of(ln),
                     [&](const Params& p) { return dot(norm_reference(x, 5, p, false, 1e-5), r); });
  }
  {
    SCOPED_TRACE("RMSNorm");
    nn::RMSNorm rms(5, dev);
    randomize(rms, dev, 7);
    auto [loss, grads] = nn::value_and_grad(rms, [&] { return ferry::sum(rms(xd) * rd); })();
    expect_gradients(grads, params_of(rms), [&](const Params& p) {
      return dot(norm_reference(x, 5, p, true, std::numeric_limits<float>::epsilon()), r);
    });
  }
  {
    SCOPED_TRACE("Conv2d");
    const ConvGeometry g{
        .n = 2, .c = 2, .h = 4, .w = 4, .out = 3, .kh = 2, .kw = 3, .ph = 1, .pw = 0};
    nn::Conv2d conv(2, 3, {2, 3}, dev, {.padding = {1, 0}, .seed = 8});
    const std::vector<float> xi = random_values(2 * 2 * 4 * 4, 9);
    const auto xid = ferry::to_device(dev, xi, Shape{2, 2, 4, 4});
    const std::vector<float> ro =
        random_values(static_cast<std::size_t>(2 * 3 * g.oh() * g.ow()), 10);
    const auto rod = ferry::to_device(dev, ro, Shape{2, 3, g.oh(), g.ow()});
    auto [loss, grads] = nn::value_and_grad(conv, [&] { return ferry::sum(conv(xid) * rod); })();
    expect_gradients(grads, params_of(conv),
                     [&](const Params& p) { return dot(conv_reference(xi, g, p), ro); });
  }
  for (bool self : {true, false}) {
    SCOPED_TRACE(self ? "MultiheadAttention, causal self-attention"
                      : "MultiheadAttention, cross-attention");
    nn::MultiheadAttention mha(4, 2, dev, {.seed = 11});
    randomize(mha, dev, 12);
    const std::size_t s = self ? 3 : 4;
    const std::vector<float> q = random_values(2 * 3 * 4, 13);
    const std::vector<float> kv = self ? q : random_values(2 * s * 4, 14);
    const auto qd = ferry::to_device(dev, q, Shape{2, 3, 4});
    const auto kvd = self ? qd : ferry::to_device(dev, kv, Shape{2, s, 4});
    const std::vector<float> ro = random_values(2 * 3 * 4, 15);
    const auto rod = ferry::to_device(dev, ro, Shape{2, 3, 4});
    auto [loss, grads] = nn::value_and_grad(mha, [&] {
      return ferry::sum((self ? mha(qd, {.causal = true}) : mha(qd, kvd, kvd)) * rod);
    })();
    expect_gradients(grads, params_of(mha), [&](const Params& p) {
      return dot(mha_reference(p, 4, 2, q, kv, kv, 2, 3, s, self, nullptr), ro);
    });
  }
}

// ---- train and eval ----

TEST_P(NNModules, TrainAndEvalReachEverySubmodule) {
  nn::Sequential model(nn::Linear(4, 4, dev, {.seed = 1}), nn::Dropout(0.5));
  model.append(nn::ModuleList(nn::Dropout(0.2), nn::LayerNorm(4, dev)));
  auto all = [&](bool training) {
    const auto& list = static_cast<const nn::ModuleList&>(model[2]);
    return model.is_training() == training && model[0].is_training() == training &&
           model[1].is_training() == training && list.is_training() == training &&
           list[0].is_training() == training && list[1].is_training() == training;
  };
  EXPECT_TRUE(all(true));  // modules start in training mode, as PyTorch's
  nn::Module& same = model.eval();
  EXPECT_EQ(&same, static_cast<nn::Module*>(&model));
  EXPECT_TRUE(all(false));
  model.train();
  EXPECT_TRUE(all(true));
  model.train(false);
  EXPECT_TRUE(all(false));
  // A child can be switched alone.
  model[1].train();
  EXPECT_TRUE(model[1].is_training());
  EXPECT_FALSE(model.is_training());
}

TEST_P(NNModules, DropoutIsTheIdentityInEvalAndAScaledMaskInTraining) {
  constexpr double kP = 0.25;
  constexpr std::size_t kCount = 20000;
  std::vector<float> xv = random_values(kCount, 31, 0.5f, 2.0f);  // none zero: a zero was dropped
  const auto x = ferry::to_device(dev, xv, Shape{100, 200});
  const ferry::random::Key key = ferry::random::key(dev, 42);
  nn::Dropout drop(kP);
  EXPECT_EQ(drop.p(), kP);

  const std::vector<float> kept = values_of(drop(x, key));
  const float scale = static_cast<float>(1 / (1 - kP));
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    if (kept[i] == 0) {
      ++zeros;
    } else {
      EXPECT_EQ(kept[i], xv[i] * scale) << "at " << i;  // exactly x * 1/(1-p), in float
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / kCount, kP, 0.02);
  EXPECT_EQ(values_of(drop(x, key)), kept);  // the mask depends on the key alone
  EXPECT_NE(values_of(drop(x, ferry::random::key(dev, 43))), kept);
  const std::string m = message_of<ferry::InvalidArgument>([&] { (void)drop(x); });
  EXPECT_EQ(m, "[Dropout] needs a key in training mode: call it as dropout(x, key), or eval() it");

  // The gradient through the mask: r where kept, times 1/(1-p), else 0.
  const std::vector<float> rv = random_values(kCount, 32);
  const auto r = ferry::to_device(dev, rv, Shape{100, 200});
  const auto [loss, dx] = ferry::value_and_grad([&](const DeviceArray<float>& a) {
    return ferry::sum(drop(a, key) * r);
  })(x);
  const std::vector<float> g = values_of(dx);
  for (std::size_t i = 0; i < kCount; i += 97)
    EXPECT_EQ(g[i], kept[i] == 0 ? 0.0f : rv[i] * scale) << "at " << i;

  drop.eval();
  EXPECT_EQ(values_of(drop(x, key)), xv);
  EXPECT_EQ(ferry::detail::ArrayAccess::step(drop(x)),
            ferry::detail::ArrayAccess::step(x));  // x itself
  nn::Sequential seq(nn::Dropout(0.9), nn::ReLU());
  seq.eval();
  EXPECT_EQ(values_of(seq(x)), xv);

  // p = 0 keeps everything, p = 1 nothing.
  EXPECT_EQ(values_of(nn::Dropout(0)(x, key)), xv);
  EXPECT_EQ(values_of(nn::Dropout(1)(x, key)), std::vector<float>(kCount, 0.0f));

  // The key is checked in either mode.
  EXPECT_THROW((void)drop(x, ferry::random::Key()), ferry::InvalidArgument);
  EXPECT_THROW((void)drop(x, ferry::to_device(dev, std::vector<std::int64_t>{1, 2, 3}, Shape{3})),
               ferry::ShapeError);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW((void)drop(x, ferry::random::key(other, 1)), ferry::DeviceMismatch);
}

// ---- named Sequentials and checkpoints ----

TEST_P(NNModules, ANamedSequentialLoadsAPyTorchCheckpointUnderItsNames) {
  TempDir dir;
  // A checkpoint as a nested PyTorch model saves it: layers is a ModuleList, norm a LayerNorm.
  const std::string path = dir.file("model.safetensors");
  const std::vector<std::pair<std::string, Shape>> layout{
      {"layers.0.weight", Shape{8, 4}}, {"layers.0.bias", Shape{8}},
      {"layers.1.weight", Shape{4, 8}}, {"layers.1.bias", Shape{4}},
      {"norm.weight", Shape{4}},        {"norm.bias", Shape{4}}};
  ferry::NamedArrays file;
  Params want;
  unsigned seed = 50;
  for (const auto& [name, shape] : layout) {
    const std::vector<float> v = random_values(static_cast<std::size_t>(shape.numel()), seed++);
    want[name] = std::vector<double>(v.begin(), v.end());
    if (name == "norm.bias") {  // PyTorch may have saved a float64 tensor: converted on load
      file.emplace_back(name, ferry::to_device(ferry::Device::cpu(),
                                               std::vector<double>(v.begin(), v.end()), shape));
    } else {
      file.emplace_back(name, ferry::to_device(ferry::Device::cpu(), v, shape));
    }
  }
  ferry::save_safetensors(path, file);

  nn::Sequential flat({{"layers.0", nn::Linear(4, 8, dev, {.seed = 1})},
                       {"act", nn::ReLU()},
                       {"layers.1", nn::Linear(8, 4, dev, {.seed = 2})},
                       {"norm", nn::LayerNorm(4, dev)}});
  nn::Sequential built;
  built.register_module("layers.0", nn::Linear(4, 8, dev, {.seed = 3}));
  built.register_module("act", std::make_unique<nn::ReLU>());
  nn::Linear& second = built.register_module("layers.1", nn::Linear(8, 4, dev, {.seed = 4}));
  EXPECT_EQ(second.in_features(), 8);
  built.register_module("norm", nn::LayerNorm(4, dev));
  Nested nested(dev, false, 8);  // the same names, nested as PyTorch nests them
  for (nn::Module* m : {static_cast<nn::Module*>(&flat), static_cast<nn::Module*>(&built),
                        static_cast<nn::Module*>(&nested)}) {
    EXPECT_EQ(names_and_shapes(*m), layout);
    m->load(path);
    EXPECT_EQ(params_of(*m), want);
    EXPECT_EQ(m->device(), dev);
  }
  // The forward runs the children in order, under whatever names.
  const std::vector<float> x = random_values(3 * 4, 60);
  std::vector<double> h =
      affine({x.begin(), x.end()}, 3, 4, want["layers.0.weight"], &want["layers.0.bias"], 0, 8);
  for (double& v : h) v = std::max(v, 0.0);
  const std::vector<double> o =
      affine(h, 3, 8, want["layers.1.weight"], &want["layers.1.bias"], 0, 4);
  const std::vector<double> y =
      norm_reference(std::vector<float>(o.begin(), o.end()), 4,
                     {{"weight", want["norm.weight"]}, {"bias", want["norm.bias"]}}, false, 1e-5);
  expect_close(values_of(flat(ferry::to_device(dev, x, Shape{3, 4}))), y, 1e-4);

  // A module's own save writes those names back.
  const std::string again = dir.file("again.safetensors");
  flat.save(again);
  std::vector<std::string> saved;
  for (const auto& [name, a] : ferry::load_safetensors(again, ferry::Device::cpu()))
    saved.push_back(name);
  EXPECT_EQ(saved, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                             "layers.1.bias", "norm.weight", "norm.bias"}));
  // A checkpoint of the nested model round-trips, "out_proj." and all.
  const std::string mha_path = dir.file("mha.safetensors");
  nn::MultiheadAttention mha(8, 2, dev, {.seed = 1});
  randomize(mha, dev, 70);
  mha.save(mha_path);
  nn::MultiheadAttention twin(8, 2, dev, {.seed = 2});
  twin.load(mha_path);
  EXPECT_EQ(params_of(twin), params_of(mha));
}

TEST_P(NNModules, ChildNamesAreCheckedSoNoFullNameRepeats) {
  nn::Sequential seq({{"layers.0", nn::Linear(2, 2, dev, {.seed = 1})}});
  expect_error<ferry::InvalidArgument>(
      [&] { seq.register_module("layers", nn::ModuleList(nn::Linear(2, 2, dev, {.seed = 2}))); },
      "[Sequential] submodule 'layers' would name a second parameter 'layers.0.weight'");
  EXPECT_EQ(seq.size(), 1u);
  // A parameter-free "layers" holding "0" names nothing twice; "layers" with its own weight
  // beside "layers.0" neither (PyTorch has such state_dicts too).
  seq.register_module("layers", nn::Linear(2, 2, dev, {.seed = 3}));
  EXPECT_EQ(seq.named_parameters()[2].first, "layers.weight");
  expect_error<ferry::InvalidArgument>([&] { seq.register_module("layers.0", nn::ReLU()); },
                                       "[Sequential] the name 'layers.0' is taken");
  for (const char* bad : {"", ".a", "a.", "a..b"}) {
    expect_error<ferry::InvalidArgument>([&] { seq.register_module(bad, nn::ReLU()); },
                                         std::string("[Sequential] the submodule name '") + bad +
                                             "' is empty or has an empty part");
  }
  EXPECT_THROW(nn::Sequential({{"a", nn::ReLU()}, {"a", nn::Tanh()}}), ferry::InvalidArgument);
  EXPECT_THROW(nn::Sequential({{"a", std::unique_ptr<nn::Module>()}}), ferry::InvalidArgument);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW(nn::Sequential({{"a", nn::Linear(2, 2, dev)}, {"b", nn::Linear(2, 2, other)}}),
               ferry::DeviceMismatch);
}

TEST_P(NNModules, LoadErrorsNameTheCallAndTheFile) {
  TempDir dir;
  nn::Sequential model({{"layers.0", nn::Linear(4, 8, dev, {.seed = 1})},
                        {"layers.1", nn::Linear(8, 2, dev, {.seed = 2})}});
  const Params before = params_of(model);
  const nn::NamedParameters current = model.named_parameters();
  auto write = [&](const std::string& name, const ferry::NamedArrays& contents) {
    const std::string path = dir.file(name);
    ferry::save_safetensors(path, contents);
    return path;
  };
  auto arrays = [&](std::size_t skip) {
    ferry::NamedArrays out;
    for (std::size_t i = 0; i < current.size(); ++i) {
      if (i != skip) out.emplace_back(current[i].first, current[i].second);
    }
    return out;
  };

  const std::string missing_file = dir.file("absent.safetensors");
  const std::string m = message_of<ferry::FileError>([&] { model.load(missing_file); });
  EXPECT_EQ(m.rfind("[Sequential::load] cannot read '" + missing_file + "': ", 0), 0u) << m;

  const std::string tiny = dir.file("tiny.safetensors");
  std::ofstream(tiny, std::ios::binary) << "abc";
  expect_error<ferry::FormatError>(
      [&] { model.load(tiny); },
      "[Sequential::load] '" + tiny +
          "': the file has 3 bytes, too few for the 8-byte header length");

  const std::string short_one = write("missing.safetensors", arrays(3));
  expect_error<ferry::InvalidArgument>(
      [&] { model.load(short_one); },
      "[Sequential::load] '" + short_one + "': parameter 'layers.1.bias' is missing");

  ferry::NamedArrays extra = arrays(99);
  extra.emplace_back("head.weight", ferry::full(dev, Shape{1}, 1.0f));
  const std::string unknown = write("unknown.safetensors", extra);
  expect_error<ferry::InvalidArgument>(
      [&] { model.load(unknown); },
      "[Sequential::load] '" + unknown + "': no parameter is named 'head.weight'");

  ferry::NamedArrays reshaped = arrays(0);
  reshaped.emplace_back("layers.0.weight", ferry::full(dev, Shape{8, 3}, 1.0f));
  const std::string wrong_shape = write("shape.safetensors", reshaped);
  expect_error<ferry::ShapeError>(
      [&] { model.load(wrong_shape); },
      "[Sequential::load] '" + wrong_shape +
          "': parameter 'layers.0.weight' has shape (8, 4), the file's (8, 3)");

  ferry::NamedArrays integers = arrays(1);
  integers.emplace_back("layers.0.bias", ferry::zeros<std::int32_t>(dev, Shape{8}));
  const std::string ints = write("ints.safetensors", integers);
  expect_error<ferry::InvalidArgument>(
      [&] { model.load(ints); },
      "[Sequential::load] '" + ints +
          "': parameter 'layers.0.bias' is stored as int32, not as a floating-point tensor");
  EXPECT_EQ(params_of(model), before);  // every failed load changed nothing

  // Each module names itself; one without parameters loads an empty file and refuses others.
  nn::Embedding emb(10, 4, dev, {.seed = 1});
  expect_error<ferry::InvalidArgument>(
      [&] { emb.load(short_one); },
      "[Embedding::load] '" + short_one + "': parameter 'weight' is missing");
  nn::MultiheadAttention mha(8, 2, dev, {.seed = 1});
  expect_error<ferry::FormatError>(
      [&] { mha.load(tiny); }, "[MultiheadAttention::load] '" + tiny +
                                   "': the file has 3 bytes, too few for the 8-byte header length");
  const std::string empty = write("empty.safetensors", {});
  nn::ReLU relu;
  relu.load(empty);
  expect_error<ferry::InvalidArgument>(
      [&] { relu.load(short_one); },
      "[ReLU::load] '" + short_one + "': no parameter is named 'layers.0.weight'");
  // set_parameters keeps its own name.
  EXPECT_NE(message_of<ferry::InvalidArgument>([&] {
              model.set_parameters({});
            }).find("[Sequential::set_parameters]"),
            std::string::npos);
}

}  // namespace

}  // namespace test_nn_modules
