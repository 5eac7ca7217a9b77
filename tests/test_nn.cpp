// nn: modules own named parameters (PyTorch's names and layouts), move between devices, check
// their inputs at the call, replace their parameters all or nothing; losses match references
// computed here on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"

namespace test_nn {

namespace {

using ferry_test::values_of;

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::DeviceArray;
using ferry::Shape;
namespace nn = ferry::nn;

std::vector<float> ramp(std::size_t n, float scale, float offset = 0) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = offset + scale * static_cast<float>(static_cast<int>(i % 11) - 5);
  return v;
}

/// A model with a parameter of its own, a Sequential and a head: names nest as in PyTorch.
class Net : public nn::Module {
 public:
  Net(const ferry::Device& dev, std::uint64_t seed)
      : layers_(&register_module("layers",
                                 nn::Sequential(nn::Linear(3, 4, dev, {.seed = seed}), nn::ReLU(),
                                                nn::Linear(4, 2, dev, {.seed = seed + 1})))),
        head_(&register_module("head", nn::Linear(2, 1, dev, {.bias = false, .seed = seed + 2}))) {
    scale_ = register_parameter("scale", ferry::full(dev, Shape{1}, 2.0f));
  }
  std::string_view type_name() const override { return "Net"; }
  // Registration errors, reachable from the test.
  void add(const std::string& name, DeviceArray<float> p) {
    register_parameter(name, std::move(p));
  }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    return (*head_)((*layers_)(x)) * parameter(scale_);
  }

 private:
  // Pointers into the heap-held submodules: stable when the Net moves.
  nn::Sequential* layers_;
  nn::Linear* head_;
  std::size_t scale_ = 0;
};

/// y = x W^T + b for x (rows, in), on the host.
std::vector<float> linear_reference(const std::vector<float>& x, std::int64_t rows,
                                    const std::vector<float>& w, const std::vector<float>& b,
                                    std::int64_t in, std::int64_t out) {
  std::vector<float> y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[static_cast<std::size_t>(r * in + i)]) *
               w[static_cast<std::size_t>(o * in + i)];
      }
      y[static_cast<std::size_t>(r * out + o)] = static_cast<float>(acc);
    }
  }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(static_cast<double>(want[i]))))
        << "at " << i;
  }
}

class NN : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(NN);

TEST_P(NN, ParameterNamesFollowRegistrationDepthFirst) {
  nn::Sequential seq(nn::Linear(3, 4, dev, {.seed = 1}), nn::ReLU(),
                     nn::Linear(4, 2, dev, {.seed = 2}));
  std::vector<std::string> names;
  for (const auto& [name, p] : seq.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));

  const Net net(dev, 5);
  names.clear();
  std::vector<Shape> shapes;
  for (const auto& [name, p] : net.named_parameters()) {
    names.push_back(name);
    shapes.push_back(p.shape());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "layers.0.weight", "layers.0.bias",
                                             "layers.2.weight", "layers.2.bias", "head.weight"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{Shape{1}, Shape{4, 3}, Shape{4}, Shape{2, 4}, Shape{2},
                                        Shape{1, 2}}));
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(net.parameter_count(), 1 + 12 + 4 + 8 + 2 + 2);
  EXPECT_EQ(nn::ReLU().parameter_count(), 0);
  EXPECT_THROW((void)nn::ReLU().device(), ferry::InvalidArgument);
}

TEST_P(NN, ToMovesEveryParameterAndTheForwardGivesTheSameValues) {
  Net net(dev, 9);
  const std::vector<float> xv = ramp(5 * 3, 0.3f);
  const auto before = values_of(net(ferry::to_device(dev, xv, Shape{5, 3})));
  ferry::Device other = ferry_test::make_device(GetParam());
  nn::Module& moved = net.to(other);
  EXPECT_EQ(&moved, static_cast<nn::Module*>(&net));
  EXPECT_EQ(net.device(), other);
  for (const auto& [name, p] : net.named_parameters()) EXPECT_EQ(p.device(), other) << name;
  const DeviceArray<float> y = net(ferry::to_device(other, xv, Shape{5, 3}));
  EXPECT_EQ(y.device(), other);
  EXPECT_EQ(values_of(y), before);
  // A module moved as a C++ object keeps its parameters and its submodules; the one moved
  // from is refused at the call (it read a parameter it no longer has, out of bounds).
  Net taken = std::move(net);
  EXPECT_EQ(values_of(taken(ferry::to_device(other, xv, Shape{5, 3}))), before);
  const auto x = ferry::to_device(other, xv, Shape{5, 3});
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)net(x); }),  // NOLINT: moved from
            "[" + std::string(net.type_name()) +
                "] was moved from: call the module it was moved into");
  nn::Linear lin(3, 2, other, {.seed = 1});
  const nn::Sequential seq(std::move(lin));
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)lin(x); }),  // NOLINT: moved from
            "[Linear] was moved from: call the module it was moved into");
  // Its accessors give empty handles (weight() read past an empty list: ASan).
  EXPECT_FALSE(lin.weight().valid());  // NOLINT: moved from
  EXPECT_FALSE(lin.bias().valid());
  EXPECT_TRUE(lin.named_parameters().empty());
  EXPECT_EQ(seq(x).shape(), (Shape{5, 2}));
}

TEST_P(NN, LinearMatchesAReferenceLoop) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    const nn::Linear lin(5, 3, dev, {.bias = bias, .seed = 11});
    EXPECT_EQ(lin.weight().shape(), (Shape{3, 5}));
    const std::vector<float> w = values_of(lin.weight());
    const std::vector<float> b = bias ? values_of(lin.bias()) : std::vector<float>{};
    const std::vector<float> x = ramp(2 * 3 * 5, 0.25f, 0.1f);
    const DeviceArray<float> flat = lin(ferry::to_device(dev, x, Shape{6, 5}));
    EXPECT_EQ(flat.shape(), (Shape{6, 3}));
    expect_close(values_of(flat), linear_reference(x, 6, w, b, 5, 3));
    const DeviceArray<float> batched = lin(ferry::to_device(dev, x, Shape{2, 3, 5}));
    EXPECT_EQ(batched.shape(), (Shape{2, 3, 3}));
    expect_close(values_of(batched), linear_reference(x, 6, w, b, 5, 3));
    const DeviceArray<float> vec =
        lin(ferry::to_device(dev, std::vector<float>(x.begin(), x.begin() + 5), Shape{5}));
    EXPECT_EQ(vec.shape(), (Shape{3}));
    expect_close(values_of(vec), linear_reference(x, 1, w, b, 5, 3));
  }
  EXPECT_THROW((void)nn::Linear(5, 3, dev, {.bias = false}).bias(), ferry::InvalidArgument);
  EXPECT_THROW(nn::Linear(-1, 3, dev), ferry::InvalidArgument);
}

TEST_P(NN, InitIsUniformInPyTorchsBoundsAndFollowsTheSeed) {
  const nn::Linear a(16, 32, dev, {.seed = 42});
  const nn::Linear b(16, 32, dev, {.seed = 42});
  const nn::Linear c(16, 32, dev, {.seed = 43});
  const auto bound = static_cast<float>(1.0 / std::sqrt(16.0));
  const std::vector<float> wa = values_of(a.weight());
  const std::vector<float> ba = values_of(a.bias());
  float lo = 1;
  float hi = -1;
  for (float v : wa) {
    EXPECT_LE(std::abs(v), bound);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (float v : ba) EXPECT_LE(std::abs(v), bound);
  EXPECT_LT(lo, -0.9f * bound);  // 512 draws cover the range
  EXPECT_GT(hi, 0.9f * bound);
  EXPECT_EQ(values_of(b.weight()), wa);
  EXPECT_EQ(values_of(b.bias()), ba);
  EXPECT_NE(values_of(c.weight()), wa);
  // Without a seed, each layer takes the next from a stream that manual_seed restarts.
  nn::manual_seed(123);
  const nn::Linear d(16, 32, dev);
  const nn::Linear e(16, 32, dev);
  nn::manual_seed(123);
  const nn::Linear f(16, 32, dev);
  EXPECT_NE(values_of(d.weight()), values_of(e.weight()));
  EXPECT_EQ(values_of(d.weight()), values_of(f.weight()));
}

TEST_P(NN, ACallOnAnotherDeviceThrowsBeforeAnythingIsSubmitted) {
  ferry::Device other = ferry_test::make_device(GetParam());
  const nn::Linear lin(4, 2, dev, {.seed = 1});
  const nn::Sequential seq(nn::ReLU(), nn::Linear(4, 2, dev, {.seed = 2}));
  const auto x = ferry::to_device(other, ramp(8, 1.0f), Shape{2, 4});
  ferry::wait(x);
  const std::uint64_t steps_dev = dev.stats().steps;
  const std::uint64_t steps_other = other.stats().steps;
  const std::string m = message_of<ferry::DeviceMismatch>([&] { (void)lin(x); });
  EXPECT_NE(m.find("[Linear] input lives on " + other.name() + ", parameters on " + dev.name()),
            std::string::npos)
      << m;
  EXPECT_NE(message_of<ferry::DeviceMismatch>([&] { (void)seq(x); }).find("[Sequential]"),
            std::string::npos);
  EXPECT_EQ(dev.stats().steps, steps_dev);
  EXPECT_EQ(other.stats().steps, steps_other);
  // Without parameters, a module takes an input anywhere.
  EXPECT_EQ(values_of(nn::ReLU()(x)), (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2}));
  EXPECT_THROW((void)lin(DeviceArray<float>()), ferry::InvalidArgument);
}

TEST_P(NN, AWrongInnerSizeIsAShapeErrorNamingTheModuleAndBothShapes) {
  const nn::Linear lin(4, 3, dev, {.seed = 1});
  const auto x = ferry::to_device(dev, ramp(10, 1.0f), Shape{2, 5});
  const std::string m = message_of<ferry::ShapeError>([&] { (void)lin(x); });
  EXPECT_NE(m.find("[Linear]"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 5)"), std::string::npos) << m;
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_THROW((void)lin(ferry::full(dev, Shape{}, 1.0f)), ferry::ShapeError);
}

TEST_P(NN, SetParametersIsAllOrNothing) {
  Net net(dev, 3);
  const nn::NamedParameters original = net.named_parameters();
  auto same_as_original = [&] {
    const nn::NamedParameters now = net.named_parameters();
    for (std::size_t i = 0; i < now.size(); ++i) {
      if (ferry::detail::ArrayAccess::step(now[i].second) !=
          ferry::detail::ArrayAccess::step(original[i].second)) {
        return false;
      }
    }
    return true;
  };
  // Each replacement is fine but one: nothing may change.
  nn::NamedParameters fresh;
  for (const auto& [name, p] : original)
    fresh.emplace_back(name, ferry::full(dev, p.shape(), 0.5f));

  nn::NamedParameters renamed = fresh;
  renamed[3].first = "layers.1.weight";
  std::string m = message_of<ferry::InvalidArgument>([&] { net.set_parameters(renamed); });
  EXPECT_NE(m.find("'layers.2.weight' is missing"), std::string::npos) << m;
  EXPECT_TRUE(same_as_original());

  nn::NamedParameters reshaped = fresh;
  reshaped[4].second = ferry::full(dev, Shape{3}, 0.5f);
  m = message_of<ferry::ShapeError>([&] { net.set_parameters(reshaped); });
  EXPECT_NE(m.find("'layers.2.bias' has shape (2), the new value (3)"), std::string::npos) << m;
  EXPECT_TRUE(same_as_original());

  nn::NamedParameters extra = fresh;
  extra.emplace_back("head.bias", ferry::full(dev, Shape{1}, 0.5f));
  m = message_of<ferry::InvalidArgument>([&] { net.set_parameters(extra); });
  EXPECT_NE(m.find("'head.bias'"), std::string::npos) << m;
  EXPECT_TRUE(same_as_original());

  nn::NamedParameters twice = fresh;
  twice.back().first = "scale";
  EXPECT_THROW(net.set_parameters(twice), ferry::InvalidArgument);
  nn::NamedParameters empty = fresh;
  empty[1].second = DeviceArray<float>();
  EXPECT_THROW(net.set_parameters(empty), ferry::InvalidArgument);
  ferry::Device other = ferry_test::make_device(GetParam());
  nn::NamedParameters elsewhere = fresh;
  elsewhere[2].second = ferry::full(other, Shape{4}, 0.5f);
  EXPECT_THROW(net.set_parameters(elsewhere), ferry::DeviceMismatch);
  EXPECT_TRUE(same_as_original());

  // In another order, by name: all replaced.
  nn::NamedParameters reversed(fresh.rbegin(), fresh.rend());
  net.set_parameters(reversed);
  for (const auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(values_of(p), std::vector<float>(static_cast<std::size_t>(p.shape().numel()), 0.5f))
        << name;
  }
}

TEST_P(NN, RegistrationRejectsBadNamesAndMixedDevices) {
  Net net(dev, 1);
  EXPECT_THROW(net.add("scale", ferry::full(dev, Shape{1}, 1.0f)), ferry::InvalidArgument);
  EXPECT_THROW(net.add("head", ferry::full(dev, Shape{1}, 1.0f)), ferry::InvalidArgument);
  EXPECT_THROW(net.add("a.b", ferry::full(dev, Shape{1}, 1.0f)), ferry::InvalidArgument);
  EXPECT_THROW(net.add("", ferry::full(dev, Shape{1}, 1.0f)), ferry::InvalidArgument);
  EXPECT_THROW(net.add("x", DeviceArray<float>()), ferry::InvalidArgument);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW(net.add("x", ferry::full(other, Shape{1}, 1.0f)), ferry::DeviceMismatch);
  nn::Sequential seq(nn::Linear(2, 2, dev, {.seed = 1}));
  EXPECT_THROW(seq.append(nn::Linear(2, 2, other, {.seed = 1})), ferry::DeviceMismatch);
  EXPECT_EQ(seq.size(), 1u);
  EXPECT_THROW(seq.append(std::unique_ptr<nn::Module>()), ferry::InvalidArgument);
  net.add("x", ferry::full(dev, Shape{1}, 1.0f));
  EXPECT_EQ(net.named_parameters()[1].first, "x");  // own parameters come before submodules'
}

TEST_P(NN, ActivationsAndSequentialComposeTheOps) {
  const std::vector<float> xv{-2.0f, -0.5f, 0.0f, 0.5f, 2.0f, 3.0f};
  const auto x = ferry::to_device(dev, xv, Shape{2, 3});
  expect_close(values_of(nn::ReLU()(x)), values_of(ferry::relu(x)), 0);
  expect_close(values_of(nn::Tanh()(x)), values_of(ferry::tanh(x)), 0);
  expect_close(values_of(nn::Sigmoid()(x)), values_of(ferry::sigmoid(x)), 0);
  std::vector<float> gelu(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    gelu[i] = static_cast<float>(0.5 * xv[i] * (1 + std::erf(xv[i] / std::sqrt(2.0))));
  }
  expect_close(values_of(nn::GELU()(x)), gelu);
  nn::Sequential seq(nn::Linear(3, 3, dev, {.seed = 4}), nn::Tanh());
  seq.append(nn::Sequential(nn::ReLU()));
  const auto& first = static_cast<const nn::Linear&>(seq[0]);
  expect_close(values_of(seq(x)), values_of(ferry::relu(ferry::tanh(first(x)))), 0);
  EXPECT_EQ(values_of(nn::Sequential()(x)), xv);
}

TEST_P(NN, MseAndL1MatchTheirDefinitions) {
  const std::vector<float> p{0.5f, -1.0f, 2.0f, 3.5f, 0.0f, -2.5f};
  const std::vector<float> t{1.0f, -1.5f, 2.0f, 1.0f, 0.25f, 0.5f};
  double se = 0;
  double ae = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    se += (p[i] - t[i]) * (p[i] - t[i]);
    ae += std::abs(p[i] - t[i]);
  }
  const auto pred = ferry::to_device(dev, p, Shape{2, 3});
  const auto target = ferry::to_device(dev, t, Shape{2, 3});
  const DeviceArray<float> mse = nn::mse_loss(pred, target);
  EXPECT_EQ(mse.shape().rank(), 0u);
  EXPECT_NEAR(mse.to_host()(), se / 6, 1e-6);
  EXPECT_NEAR(nn::l1_loss(pred, target).to_host()(), ae / 6, 1e-6);
  const auto flat = ferry::to_device(dev, t, Shape{6});
  EXPECT_NE(
      message_of<ferry::ShapeError>([&] { (void)nn::mse_loss(pred, flat); }).find("[mse_loss]"),
      std::string::npos);
  EXPECT_THROW((void)nn::l1_loss(pred, flat), ferry::ShapeError);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW((void)nn::mse_loss(pred, ferry::to_device(other, t, Shape{2, 3})),
               ferry::DeviceMismatch);
}

TEST_P(NN, MseAndL1ReplayForEveryBatchSize) {
  // Their shape check compares the two arrays' sizes, not each size with the first call's.
  nn::Linear lin(3, 2, dev, {.seed = 1});
  auto mse = ferry::jit([&](DeviceArray<float> x, DeviceArray<float> y) {
    return nn::mse_loss(lin(x), y);
  });
  auto l1 = ferry::jit([&](DeviceArray<float> x, DeviceArray<float> y) {
    return nn::l1_loss(lin(x), y);
  });
  for (const std::int64_t n : {5, 7, 9}) {
    SCOPED_TRACE(n);
    const auto x = ferry::full<float>(dev, Shape{n, 3}, 0.5f);
    const auto y = ferry::full<float>(dev, Shape{n, 2}, 0.25f);
    EXPECT_EQ(mse(x, y).to_host()(), nn::mse_loss(lin(x), y).to_host()());
    EXPECT_EQ(l1(x, y).to_host()(), nn::l1_loss(lin(x), y).to_host()());
  }
  EXPECT_EQ(mse.cache_size(), 1u);
  EXPECT_EQ(l1.cache_size(), 1u);
  // A replay still refuses sizes that differ between the two.
  const auto x = ferry::full<float>(dev, Shape{7, 3}, 0.5f);
  EXPECT_NE(message_of<ferry::ShapeError>(
                [&] { (void)mse(x, ferry::full<float>(dev, Shape{6, 2}, 0.25f)); })
                .find("[mse_loss] prediction (7, 2) and target (6, 2) differ in shape"),
            std::string::npos);
}

/// -mean(log_softmax(logits)[i, label_i]) in double, by log-sum-exp around the row maximum.
double cross_entropy_reference(const std::vector<float>& logits,
                               const std::vector<std::int64_t>& labels, std::int64_t c) {
  double total = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* row = logits.data() + static_cast<std::int64_t>(i) * c;
    double m = row[0];
    for (std::int64_t j = 1; j < c; ++j) m = std::max(m, static_cast<double>(row[j]));
    double s = 0;
    for (std::int64_t j = 0; j < c; ++j) s += std::exp(row[j] - m);
    total += m + std::log(s) - row[labels[i]];
  }
  return total / static_cast<double>(labels.size());
}

TEST_P(NN, CrossEntropyIsTheStableLogSumExp) {
  const std::vector<float> logits{0.5f, 1.5f, -0.25f, 2.0f,  //
                                  -1.0f, 0.0f, 3.0f, 0.5f,   //
                                  0.1f, 0.2f, 0.3f, 0.4f};
  const std::vector<std::int64_t> labels{3, 0, 2};
  const DeviceArray<float> loss = nn::cross_entropy(ferry::to_device(dev, logits, Shape{3, 4}),
                                                    ferry::to_device(dev, labels, Shape{3}));
  EXPECT_EQ(loss.shape().rank(), 0u);
  const double want = cross_entropy_reference(logits, labels, 4);
  EXPECT_NEAR(loss.to_host()(), want, 1e-6 * want);

  // exp(1000) overflows a float: only the shifted form stays finite.
  const std::vector<float> huge{1000.0f, -1000.0f, 0.0f, -1000.0f, 1000.0f, 999.0f};
  const std::vector<std::int64_t> picks{1, 2};
  const float got = nn::cross_entropy(ferry::to_device(dev, huge, Shape{2, 3}),
                                      ferry::to_device(dev, picks, Shape{2})).to_host()();
  const double big = cross_entropy_reference(huge, picks, 3);  // (2000 + log1p(2e^-1000)... )
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, big, 1e-6 * big);
  EXPECT_NEAR(big, (2000.0 + (1.0 + std::log1p(std::exp(-1.0)))) / 2, 1e-9);
}

TEST_P(NN, CrossEntropyChecksItsArguments) {
  const auto logits = ferry::to_device(dev, ramp(6, 0.5f), Shape{2, 3});
  const auto labels = ferry::to_device(dev, std::vector<std::int64_t>{0, 7}, Shape{2});
  // 7 is out of range: the step that picks the label's entry fails, and the export says so.
  const std::string range = message_of<ferry::InvalidArgument>(
      [&] { (void)nn::cross_entropy(logits, labels).to_host(); });
  EXPECT_NE(range.find("7"), std::string::npos) << range;
  const std::string m = message_of<ferry::ShapeError>([&] {
    (void)nn::cross_entropy(logits,
                            ferry::to_device(dev, std::vector<std::int64_t>{0, 1, 2}, Shape{3}));
  });
  EXPECT_NE(m.find("[cross_entropy]"), std::string::npos) << m;
  EXPECT_THROW((void)nn::cross_entropy(ferry::reshape(logits, Shape{6}), labels),
               ferry::ShapeError);
  EXPECT_THROW((void)nn::cross_entropy(ferry::zeros<float>(dev, Shape{2, 0}), labels),
               ferry::ShapeError);
  ferry::Device other = ferry_test::make_device(GetParam());
  EXPECT_THROW((void)nn::cross_entropy(
                   logits, ferry::to_device(other, std::vector<std::int64_t>{0, 1}, Shape{2})),
               ferry::DeviceMismatch);
}

}  // namespace

}  // namespace test_nn
