// optim: SGD, Adam and AdamW follow PyTorch's update rules (written out here in double on the
// host), keep their state on the parameters' devices, and update parameters and state in place:
// the same buffers step after step, and device memory flat from the second step on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"

namespace test_optim {

namespace {

using ferry_test::buffer_of;

using ferry::DeviceArray;
using ferry::Shape;
namespace nn = ferry::nn;
namespace optim = ferry::optim;

std::vector<double> doubles_of(const DeviceArray<float>& a) {
  const auto h = a.to_host();
  return {h.data().begin(), h.data().end()};
}

/// Values of magnitude 0.5 to 3, away from 0 so that a relative comparison means something.
std::vector<float> start_values(std::size_t n, float sign_flip) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = (0.5f + 0.37f * static_cast<float>(i % 7)) * (i % 2 == 0 ? 1.0f : sign_flip);
  return v;
}

/// The gradient of step `t`: changes sign and size from step to step.
std::vector<float> gradient(std::size_t n, int t) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = 0.8f * std::sin(1.3f * static_cast<float>(i) + 0.7f * static_cast<float>(t)) +
           0.05f * static_cast<float>(t);
  }
  return g;
}

// ---- the update rules, in double, as PyTorch documents them ----

struct SgdReference {
  optim::SGDOptions o;
  std::vector<double> buf;
  void step(std::vector<double>& p, std::vector<double> g) {
    for (std::size_t i = 0; i < p.size(); ++i) g[i] += o.weight_decay * p[i];
    if (o.momentum != 0) {
      if (buf.empty()) {
        buf = g;
      } else {
        for (std::size_t i = 0; i < p.size(); ++i)
          buf[i] = o.momentum * buf[i] + (1 - o.dampening) * g[i];
      }
      for (std::size_t i = 0; i < p.size(); ++i)
        g[i] = o.nesterov ? g[i] + o.momentum * buf[i] : buf[i];
    }
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * g[i];
  }
};

struct AdamReference {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& p, std::vector<double> g) {
    if (m.empty()) m = v = std::vector<double>(p.size(), 0.0);
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decoupled) {
        p[i] *= 1 - lr * weight_decay;
      } else {
        g[i] += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double c1 = 1 - std::pow(beta1, t);
      const double c2 = 1 - std::pow(beta2, t);
      p[i] -= lr / c1 * m[i] / (std::sqrt(v[i]) / std::sqrt(c2) + eps);
    }
  }
};

AdamReference reference_of(const optim::AdamOptions& o) {
  return {o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, false, {}, {}};
}
AdamReference reference_of(const optim::AdamWOptions& o) {
  return {o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, true, {}, {}};
}

void expect_relative(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i])) << "at " << i;
  }
}

/// Steps two plain arrays with `opt` and a reference with `ref` for 5 steps, comparing after
/// each; `ref_step(k, p, g)` steps the reference of array k.
template <class Ref>
void check_rule(const ferry::Device& dev, optim::Optimizer& opt, std::vector<Ref> refs) {
  const std::vector<Shape> shapes{Shape{2, 3}, Shape{5}};
  std::vector<DeviceArray<float>> params;
  std::vector<std::vector<double>> expected;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const auto n = static_cast<std::size_t>(shapes[k].numel());
    const std::vector<float> v = start_values(n, k == 0 ? -1.0f : 1.0f);
    params.push_back(ferry::to_device(dev, v, shapes[k]));
    expected.emplace_back(v.begin(), v.end());
  }
  for (int t = 1; t <= 5; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    std::vector<DeviceArray<float>> grads;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const std::vector<float> g =
          gradient(static_cast<std::size_t>(shapes[k].numel()), t + static_cast<int>(k));
      grads.push_back(ferry::to_device(dev, g, shapes[k]));
      refs[k].step(expected[k], std::vector<double>(g.begin(), g.end()));
    }
    opt.step(params, grads);
    for (std::size_t k = 0; k < shapes.size(); ++k)
      expect_relative(doubles_of(params[k]), expected[k]);
  }
  EXPECT_EQ(opt.steps(), 5);
}

class Optim : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Optim);

TEST_P(Optim, SgdFollowsPyTorchsRule) {
  const std::vector<optim::SGDOptions> variants{
      {.lr = 0.05},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3},
      {.lr = 0.05, .momentum = 0.8, .nesterov = true},
      {.lr = 0.05, .weight_decay = 0.1},
      {.lr = 0.03, .momentum = 0.7, .weight_decay = 0.05, .nesterov = true},
  };
  for (std::size_t i = 0; i < variants.size(); ++i) {
    SCOPED_TRACE("variant " + std::to_string(i));
    optim::SGD sgd(variants[i]);
    check_rule(dev, sgd, std::vector<SgdReference>(2, SgdReference{variants[i], {}}));
  }
}

TEST_P(Optim, AdamFollowsPyTorchsRule) {
  for (const optim::AdamOptions& o :
       {optim::AdamOptions{.lr = 0.01},
        optim::AdamOptions{.lr = 0.02, .betas = {0.8, 0.99}, .eps = 1e-6},
        optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1}}) {
    SCOPED_TRACE("lr " + std::to_string(o.lr) + ", weight_decay " + std::to_string(o.weight_decay));
    optim::Adam adam(o);
    check_rule(dev, adam, std::vector<AdamReference>(2, reference_of(o)));
  }
}

TEST_P(Optim, AnOptimizerMovedFromRefusesToStep) {
  // Its state went with it: a moved-from Adam indexed state it no longer had (ASan: SEGV).
  optim::Adam adam({.lr = 0.01});
  optim::Adam taken = std::move(adam);
  std::vector<DeviceArray<float>> params{ferry::zeros<float>(dev, Shape{3})};
  const std::vector<DeviceArray<float>> grads{ferry::ones<float>(dev, Shape{3})};
  const std::string refused = "[optimizer] was moved from: step the optimizer it was moved into";
  EXPECT_EQ(ferry_test::message_of<ferry::InvalidArgument>(
                [&] { adam.step(params, grads); }),  // NOLINT: moved from, on purpose
            refused);
  // Moved back by assignment, it steps again, and the one it came from is refused.
  taken.step(params, grads);
  adam = std::move(taken);
  adam.step(params, grads);
  EXPECT_EQ(ferry_test::message_of<ferry::InvalidArgument>(
                [&] { taken.step(params, grads); }),  // NOLINT: moved from, on purpose
            refused);
  EXPECT_EQ(adam.steps(), 2);
}

TEST_P(Optim, AdamWDecaysTheWeightsApartFromTheGradient) {
  for (const optim::AdamWOptions& o :
       {optim::AdamWOptions{.lr = 0.01},
        optim::AdamWOptions{.lr = 0.05, .betas = {0.85, 0.995}, .weight_decay = 0.2}}) {
    SCOPED_TRACE("weight_decay " + std::to_string(o.weight_decay));
    optim::AdamW adamw(o);
    check_rule(dev, adamw, std::vector<AdamReference>(2, reference_of(o)));
  }
}

TEST_P(Optim, AModuleIsSteppedByNameThroughItsOwnParameters) {
  nn::Linear lin(3, 2, dev, {.seed = 8});
  std::vector<double> w = doubles_of(lin.weight());
  std::vector<double> b = doubles_of(lin.bias());
  const optim::SGDOptions o{.lr = 0.1, .momentum = 0.5};
  optim::SGD sgd(o);
  SgdReference rw{o, {}};
  SgdReference rb{o, {}};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> gw = gradient(6, t);
    const std::vector<float> gb = gradient(2, -t);
    sgd.step(lin, {{"weight", ferry::to_device(dev, gw, Shape{2, 3})},
                   {"bias", ferry::to_device(dev, gb, Shape{2})}});
    rw.step(w, {gw.begin(), gw.end()});
    rb.step(b, {gb.begin(), gb.end()});
  }
  for (std::size_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(doubles_of(lin.weight())[i], w[i], 1e-6 * std::max(1.0, std::abs(w[i])));
  for (std::size_t i = 0; i < b.size(); ++i)
    EXPECT_NEAR(doubles_of(lin.bias())[i], b[i], 1e-6 * std::max(1.0, std::abs(b[i])));
}

/// A small model and gradients computed from its parameters on the device, as a backward
/// pass would: each step's gradients depend on the last step's update.
nn::NamedParameters gradients_of(const nn::Linear& lin) {
  return {{"weight", lin.weight() * 0.5f + 0.25f}, {"bias", lin.bias() * 0.5f - 0.25f}};
}

void check_in_place(const ferry::Device& dev, optim::Optimizer& opt) {
  nn::Linear lin(64, 32, dev, {.seed = 3});
  std::vector<const std::byte*> first;  // weight, bias, then each state array
  for (int t = 1; t <= 10; ++t) {
    opt.step(lin, gradients_of(lin));
    std::vector<const std::byte*> now{buffer_of(lin.weight()), buffer_of(lin.bias())};
    for (const auto& [name, s] : opt.state()) {
      EXPECT_EQ(s.device(), dev) << name;
      now.push_back(buffer_of(s));
    }
    if (t == 1) {
      first = now;
    } else {
      EXPECT_EQ(now, first) << "step " << t;
    }
  }
}

void check_flat_memory(const ferry::Device& dev, optim::Optimizer& opt) {
  nn::Linear lin(64, 32, dev, {.seed = 3});
  std::uint64_t after_two = 0;
  for (int t = 1; t <= 10; ++t) {
    opt.step(lin, gradients_of(lin));  // no export: the steps pipeline
    if (t == 2) after_two = dev.stats().peak_dram_bytes;
  }
  ferry::wait(lin.weight());
  const ferry::DeviceStats s = dev.stats();
  EXPECT_EQ(s.peak_dram_bytes, after_two);
  EXPECT_GE(s.donations, 10u);
}

TEST_P(Optim, UpdatesReuseTheSameBuffersAndMemoryStaysFlat) {
  {
    SCOPED_TRACE("SGD");
    optim::SGD a({.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    check_in_place(dev, a);
    optim::SGD b({.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    check_flat_memory(ferry_test::make_device(GetParam()), b);
  }
  {
    SCOPED_TRACE("Adam");
    optim::Adam a({.lr = 0.01, .weight_decay = 0.01});
    check_in_place(dev, a);
    optim::Adam b({.lr = 0.01, .weight_decay = 0.01});
    check_flat_memory(ferry_test::make_device(GetParam()), b);
  }
  {
    SCOPED_TRACE("AdamW");
    optim::AdamW a;
    check_in_place(dev, a);
    optim::AdamW b;
    check_flat_memory(ferry_test::make_device(GetParam()), b);
  }
}

TEST_P(Optim, StateLivesOnTheParametersDeviceAndFollowsIt) {
  nn::Linear lin(4, 3, dev, {.seed = 5});
  optim::Adam adam;
  EXPECT_TRUE(adam.state().empty());
  adam.step(lin, gradients_of(lin));
  std::vector<std::string> names;
  for (const auto& [name, s] : adam.state()) {
    names.push_back(name);
    EXPECT_EQ(s.device(), dev) << name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.exp_avg", "0.exp_avg_sq", "1.exp_avg", "1.exp_avg_sq"}));
  ferry::Device other = ferry_test::make_device(GetParam());
  lin.to(other);
  adam.step(lin, gradients_of(lin));
  for (const auto& [name, s] : adam.state()) EXPECT_EQ(s.device(), other) << name;
  EXPECT_EQ(lin.weight().device(), other);

  optim::SGD plain;
  plain.step(lin, gradients_of(lin));
  EXPECT_TRUE(plain.state().empty());  // no momentum, no state
  optim::SGD heavy({.momentum = 0.9});
  heavy.step(lin, gradients_of(lin));
  ASSERT_EQ(heavy.state().size(), 2u);
  EXPECT_EQ(heavy.state()[1].first, "1.momentum_buffer");
  EXPECT_EQ(heavy.state()[1].second.device(), other);
}

TEST_P(Optim, ABadStepThrowsAndChangesNothing) {
  nn::Linear lin(4, 3, dev, {.seed = 5});
  optim::SGD sgd({.lr = 0.1, .momentum = 0.9});
  const ferry::detail::Step* weight = ferry::detail::ArrayAccess::step(lin.weight());
  const ferry::detail::Step* bias = ferry::detail::ArrayAccess::step(lin.bias());
  auto message = [&](auto&& f) -> std::string {
    try {
      f();
    } catch (const ferry::Error& e) {
      return e.what();
    }
    return "nothing thrown";
  };
  const auto w = ferry::zeros<float>(dev, Shape{3, 4});
  const auto b = ferry::zeros<float>(dev, Shape{3});
  std::string m = message([&] { sgd.step(lin, {{"weight", w}, {"b", b}}); });
  EXPECT_NE(m.find("[SGD] gradient 1 is named 'b' but parameter 1 is 'bias'"), std::string::npos)
      << m;
  EXPECT_THROW(sgd.step(lin, {{"weight", w}}), ferry::InvalidArgument);
  EXPECT_THROW(sgd.step(lin, {{"weight", w}, {"bias", DeviceArray<float>()}}),
               ferry::InvalidArgument);
  m = message([&] {
    sgd.step(lin, {{"weight", w}, {"bias", ferry::zeros<float>(dev, Shape{4})}});
  });
  EXPECT_NE(m.find("[SGD] parameter 'bias' has shape (3), its gradient (4)"), std::string::npos)
      << m;
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW(sgd.step(lin, {{"weight", w}, {"bias", ferry::zeros<float>(other, Shape{3})}}),
               ferry::DeviceMismatch);
  EXPECT_EQ(ferry::detail::ArrayAccess::step(lin.weight()), weight);
  EXPECT_EQ(ferry::detail::ArrayAccess::step(lin.bias()), bias);
  EXPECT_EQ(sgd.steps(), 0);
  EXPECT_TRUE(sgd.state().empty());

  // Plain arrays: counts, and the same parameters every time.
  std::vector<DeviceArray<float>> params{ferry::zeros<float>(dev, Shape{2})};
  std::vector<DeviceArray<float>> grads{ferry::ones<float>(dev, Shape{2})};
  EXPECT_THROW(sgd.step(params, std::vector<DeviceArray<float>>{}), ferry::InvalidArgument);
  sgd.step(params, grads);
  std::vector<DeviceArray<float>> two{params[0], params[0]};
  EXPECT_THROW(sgd.step(two, std::vector<DeviceArray<float>>{grads[0], grads[0]}),
               ferry::InvalidArgument);
  std::vector<DeviceArray<float>> wider{ferry::zeros<float>(dev, Shape{3})};
  EXPECT_THROW(sgd.step(wider, std::vector<DeviceArray<float>>{ferry::ones<float>(dev, Shape{3})}),
               ferry::ShapeError);
}

TEST(OptimOptions, DefaultsArePyTorchs) {
  const optim::SGDOptions s;
  EXPECT_EQ(s.lr, 1e-3);
  EXPECT_EQ(s.momentum, 0);
  EXPECT_EQ(s.dampening, 0);
  EXPECT_EQ(s.weight_decay, 0);
  EXPECT_FALSE(s.nesterov);
  const optim::AdamOptions a;
  EXPECT_EQ(a.lr, 1e-3);
  EXPECT_EQ(a.betas[0], 0.9);
  EXPECT_EQ(a.betas[1], 0.999);
  EXPECT_EQ(a.eps, 1e-8);
  EXPECT_EQ(a.weight_decay, 0);
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 1e-2);
  optim::AdamW w;
  w.set_lr(0.5);
  EXPECT_EQ(w.options().lr, 0.5);
  EXPECT_THROW(w.set_lr(-1), ferry::InvalidArgument);
}

TEST(OptimOptions, BadOptionsThrowInvalidArgumentNamingTheOptimizerAndTheValue) {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const ferry::InvalidArgument& e) {
      return e.what();
    }
    return "nothing thrown";
  };
  EXPECT_NE(message([] { optim::SGD({.lr = -0.1}); }).find("[SGD] invalid lr -0.1"),
            std::string::npos);
  EXPECT_NE(message([] { optim::SGD({.momentum = -1}); }).find("[SGD] invalid momentum -1"),
            std::string::npos);
  EXPECT_NE(message([] { optim::SGD({.weight_decay = -1}); }).find("weight_decay"),
            std::string::npos);
  EXPECT_NE(message([] { optim::SGD({.nesterov = true}); }).find("[SGD] nesterov"),
            std::string::npos);
  EXPECT_NE(message([] {
              optim::SGD({.momentum = 0.9, .dampening = 0.1, .nesterov = true});
            }).find("dampening 0.1"),
            std::string::npos);
  EXPECT_NE(message([] { optim::SGD({.lr = std::nan("")}); }).find("[SGD] invalid lr"),
            std::string::npos);
  EXPECT_NE(message([] {
              optim::Adam({.betas = {1.0, 0.999}});
            }).find("[Adam] invalid beta1 1"),
            std::string::npos);
  EXPECT_NE(message([] {
              optim::Adam({.betas = {0.9, -0.1}});
            }).find("[Adam] invalid beta2 -0.1"),
            std::string::npos);
  EXPECT_NE(message([] { optim::Adam({.eps = -1e-8}); }).find("[Adam] invalid eps"),
            std::string::npos);
  EXPECT_NE(message([] { optim::Adam({.lr = -1}); }).find("[Adam] invalid lr -1"),
            std::string::npos);
  EXPECT_NE(message([] {
              optim::AdamW({.weight_decay = -0.5});
            }).find("[AdamW] invalid weight_decay -0.5"),
            std::string::npos);
  EXPECT_NE(message([] {
              optim::AdamW({.betas = {0.9, 1.5}});
            }).find("[AdamW] invalid beta2 1.5"),
            std::string::npos);
}

}  // namespace

}  // namespace test_optim
