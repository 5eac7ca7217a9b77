// Training across devices: an MLP whose parameters live on a modeled accelerator, its loss on
// Device::cpu(), stepped by nn::value_and_grad and an optimizer, compared step by step with a
// hand-written reference; memory over 100 steps; a whole step under jit; module checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/timeline.hpp"

namespace test_training {

namespace {

using ferry::DeviceArray;
using ferry::Shape;
namespace nn = ferry::nn;
namespace optim = ferry::optim;

constexpr std::int64_t kBatch = 8;
constexpr std::int64_t kIn = 2;
constexpr std::int64_t kHidden = 6;
constexpr std::int64_t kClasses = 3;

/// Points of three classes by angle around the origin.
struct Data {
  std::vector<float> x;
  std::vector<std::int64_t> y;
};

Data synthetic(std::int64_t n) {
  Data d;
  for (std::int64_t i = 0; i < n; ++i) {
    const double angle = 0.37 + 2.1 * static_cast<double>(i);
    const double radius = 0.5 + 0.1 * static_cast<double>(i % 5);
    d.x.push_back(static_cast<float>(radius * std::cos(angle)));
    d.x.push_back(static_cast<float>(radius * std::sin(angle)));
    const double turn = std::fmod(angle, 2 * 3.141592653589793);
    d.y.push_back(static_cast<std::int64_t>(turn / (2 * 3.141592653589793 / 3)) % kClasses);
  }
  return d;
}

std::vector<double> host(const DeviceArray<float>& a) {
  const auto h = a.to_host();
  return {h.data().begin(), h.data().end()};
}

/// The same MLP on the host, in double: Linear(2, 6), tanh, Linear(6, 3), cross-entropy, SGD.
struct Reference {
  std::vector<double> w1, b1, w2, b2;  // PyTorch's layouts: weight (out, in)

  double step(const Data& d, double lr) {
    const std::size_t n = d.y.size();
    std::vector<double> h(n * kHidden), a(n * kHidden), logits(n * kClasses), dlogits(n * kClasses);
    double loss = 0;
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < kHidden; ++j) {
        double s = b1[j];
        for (std::size_t k = 0; k < kIn; ++k) s += d.x[i * kIn + k] * w1[j * kIn + k];
        h[i * kHidden + j] = s;
        a[i * kHidden + j] = std::tanh(s);
      }
      double top = -1e300;
      for (std::size_t c = 0; c < kClasses; ++c) {
        double s = b2[c];
        for (std::size_t j = 0; j < kHidden; ++j) s += a[i * kHidden + j] * w2[c * kHidden + j];
        logits[i * kClasses + c] = s;
        top = std::max(top, s);
      }
      double total = 0;
      for (std::size_t c = 0; c < kClasses; ++c) total += std::exp(logits[i * kClasses + c] - top);
      for (std::size_t c = 0; c < kClasses; ++c) {
        const double p = std::exp(logits[i * kClasses + c] - top) / total;
        const double target = static_cast<std::int64_t>(c) == d.y[i] ? 1 : 0;
        dlogits[i * kClasses + c] = (p - target) / static_cast<double>(n);
        if (target == 1) loss -= std::log(p) / static_cast<double>(n);
      }
    }
    std::vector<double> gw1(w1.size()), gb1(b1.size()), gw2(w2.size()), gb2(b2.size());
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t c = 0; c < kClasses; ++c) {
        gb2[c] += dlogits[i * kClasses + c];
        for (std::size_t j = 0; j < kHidden; ++j)
          gw2[c * kHidden + j] += dlogits[i * kClasses + c] * a[i * kHidden + j];
      }
      for (std::size_t j = 0; j < kHidden; ++j) {
        double da = 0;
        for (std::size_t c = 0; c < kClasses; ++c)
          da += dlogits[i * kClasses + c] * w2[c * kHidden + j];
        const double dh = da * (1 - a[i * kHidden + j] * a[i * kHidden + j]);
        gb1[j] += dh;
        for (std::size_t k = 0; k < kIn; ++k) gw1[j * kIn + k] += dh * d.x[i * kIn + k];
      }
    }
    auto update = [lr](std::vector<double>& p, const std::vector<double>& g) {
      for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
    };
    update(w1, gw1);
    update(b1, gb1);
    update(w2, gw2);
    update(b2, gb2);
    return loss;
  }
};

nn::Sequential mlp(std::uint64_t seed) {
  return nn::Sequential(nn::Linear(kIn, kHidden, ferry::Device::cpu(), {.seed = seed}), nn::Tanh(),
                        nn::Linear(kHidden, kClasses, ferry::Device::cpu(), {.seed = seed + 1}));
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i])))
        << what << " element " << i;
  }
}

TEST(Training, AHostLossTrainsAnAcceleratorModelStepForStepWithTheReference) {
  const ferry::Device acc = ferry::Device::modeled(ferry::specs::tiny());
  const ferry::Device cpu = ferry::Device::cpu();
  nn::Sequential model = mlp(7);
  Reference ref;
  for (const auto& [name, p] : model.named_parameters()) {
    (name == "0.weight"   ? ref.w1
     : name == "0.bias"   ? ref.b1
     : name == "2.weight" ? ref.w2
                          : ref.b2) = host(p);
  }
  model.to(acc);
  const Data data = synthetic(kBatch);
  const auto x = ferry::to_device(acc, data.x, Shape{kBatch, kIn});
  const auto y = ferry::to_device(cpu, data.y, Shape{kBatch});
  auto loss_fn = [&](const DeviceArray<float>& xs, const DeviceArray<std::int64_t>& ys) {
    return nn::cross_entropy(model(xs).to(cpu), ys);  // the output crosses to the host
  };
  auto step = nn::value_and_grad(model, loss_fn);
  optim::SGD sgd({.lr = 0.5});
  const auto copies_in = [&] {
    const auto all = ferry_test::named(ferry_test::slices_of(acc), "to");
    return std::count_if(all.begin(), all.end(), [](const ferry_test::Slice& s) {
      return s.track == ferry_test::track_of("h2d");
    });
  };
  const auto in_before = copies_in();
  for (int s = 0; s < 5; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    auto [loss, grads] = step(x, y);
    EXPECT_EQ(loss.device(), cpu);
    for (const auto& [name, g] : grads) EXPECT_EQ(g.device(), acc) << name;
    sgd.step(model, grads);
    const double want_loss = ref.step(data, 0.5);
    EXPECT_NEAR(host(loss)[0], want_loss, 2e-5);
    const auto params = model.named_parameters();
    expect_close(host(params[0].second), ref.w1, "0.weight");
    expect_close(host(params[1].second), ref.b1, "0.bias");
    expect_close(host(params[2].second), ref.w2, "2.weight");
    expect_close(host(params[3].second), ref.b2, "2.bias");
  }
  // Each step's gradient of the logits came back into the accelerator over its copy-in engine.
  EXPECT_EQ(copies_in() - in_before, 5);
}

TEST(Training, AHundredStepsReuseTheWeightsBuffersAndKeepPeakMemoryFlat) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  nn::Sequential model = mlp(11);
  model.to(dev);
  const Data data = synthetic(kBatch);
  const auto x = ferry::to_device(dev, data.x, Shape{kBatch, kIn});
  const auto y = ferry::to_device(dev, data.y, Shape{kBatch});
  auto step = nn::value_and_grad(
      model, [&](const DeviceArray<float>& xs, const DeviceArray<std::int64_t>& ys) {
        return nn::cross_entropy(model(xs), ys);
      });
  optim::Adam adam({.lr = 0.01});
  auto buffers = [&] {
    std::vector<const std::byte*> out;
    for (const auto& p : model.parameters()) {
      ferry::wait(p);
      out.push_back(ferry::detail::ArrayAccess::step(p)->output().data());
    }
    return out;
  };
  std::vector<const std::byte*> first;
  std::uint64_t peak_after_two = 0;
  double first_loss = 0;
  double last_loss = 0;
  for (int s = 0; s < 100; ++s) {
    auto [loss, grads] = step(x, y);
    adam.step(model, grads);
    grads.clear();
    if (s == 0) first_loss = host(loss)[0];
    if (s == 99) last_loss = host(loss)[0];
    if (s == 0) first = buffers();
    if (s == 1) {
      ferry::wait(model.parameters());
      peak_after_two = dev.stats().peak_dram_bytes;
    }
  }
  EXPECT_EQ(buffers(), first);  // no weight was reallocated
  EXPECT_EQ(dev.stats().peak_dram_bytes, peak_after_two);
  EXPECT_LT(last_loss, first_loss * 0.5);
  // The gradients and activations are gone: what is left is the weights, the optimizer's two
  // moments of each, and the data.
  const std::uint64_t params_bytes =
      static_cast<std::uint64_t>(model.parameter_count()) * sizeof(float);
  const std::uint64_t data_bytes =
      data.x.size() * sizeof(float) + data.y.size() * sizeof(std::int64_t);
  EXPECT_EQ(dev.stats().dram_bytes_in_use, 3 * params_bytes + data_bytes);
}

TEST(Training, AWholeStepUnderJitIsTracedOnceForEveryBatchSize) {
  const ferry::Device dev;
  using A = DeviceArray<float>;
  auto loss_fn = [](const A& w1, const A& b1, const A& w2, const A& b2, const A& x,
                    const DeviceArray<std::int64_t>& y) {
    const A h = ferry::tanh(ferry::matmul(x, ferry::transpose(w1)) + b1);
    return nn::cross_entropy(ferry::matmul(h, ferry::transpose(w2)) + b2, y);
  };
  // Parameters in, updated parameters out (SGD written out): what a traced step carries.
  auto train_step = ferry::jit([&](A w1, A b1, A w2, A b2, A x, DeviceArray<std::int64_t> y) {
    auto [loss, g1, gb1, g2, gb2, gx] = ferry::value_and_grad(loss_fn)(w1, b1, w2, b2, x, y);
    return std::tuple{loss, w1 - 0.5f * g1, b1 - 0.5f * gb1, w2 - 0.5f * g2, b2 - 0.5f * gb2};
  });
  nn::Sequential model = mlp(3);
  auto p = model.parameters();
  Reference ref{host(p[0]), host(p[1]), host(p[2]), host(p[3])};
  A w1 = ferry::to_device(dev, p[0].to_host());
  A b1 = ferry::to_device(dev, p[1].to_host());
  A w2 = ferry::to_device(dev, p[2].to_host());
  A b2 = ferry::to_device(dev, p[3].to_host());
  for (std::int64_t batch : {4, 8, 5, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const Data data = synthetic(batch);
    auto [loss, nw1, nb1, nw2, nb2] =
        train_step(w1, b1, w2, b2, ferry::to_device(dev, data.x, Shape{batch, kIn}),
                   ferry::to_device(dev, data.y, Shape{batch}));
    EXPECT_NEAR(host(loss)[0], ref.step(data, 0.5), 2e-5);
    std::tie(w1, b1, w2, b2) = std::tuple{nw1, nb1, nw2, nb2};
    expect_close(host(w1), ref.w1, "w1");
    expect_close(host(b2), ref.b2, "b2");
  }
  EXPECT_EQ(train_step.cache_size(), 1u) << train_step.explain();
  EXPECT_EQ(train_step.cache_hits(), 3u);
}

TEST(Training, AnOptimizerStepInsideJitRefusesTheTraceInsteadOfGoingStale) {
  const ferry::Device dev;
  nn::Sequential model = mlp(9);
  model.to(dev);
  nn::Sequential twin = mlp(9);
  twin.to(dev);
  optim::Adam adam({.lr = 0.05});
  optim::Adam twin_adam({.lr = 0.05});
  const Data data = synthetic(kBatch);
  const auto x = ferry::to_device(dev, data.x, Shape{kBatch, kIn});
  const auto y = ferry::to_device(dev, data.y, Shape{kBatch});
  auto step_of = [](nn::Sequential& m, optim::Adam& opt) {
    return [&m, &opt](DeviceArray<float> xs, DeviceArray<std::int64_t> ys) {
      auto [loss, grads] = nn::value_and_grad(m, [&](const DeviceArray<float>& a) {
        return nn::cross_entropy(m(a), ys);
      })(xs);
      opt.step(m, grads);
      return loss;
    };
  };
  auto traced = ferry::jit(step_of(model, adam));
  auto eager = step_of(twin, twin_adam);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(host(traced(x, y)), host(eager(x, y)));
  EXPECT_EQ(traced.cache_size(), 0u);
  EXPECT_NE(traced.explain().find("Adam::step"), std::string::npos) << traced.explain();
  EXPECT_EQ(host(model.parameters()[0]), host(twin.parameters()[0]));
}

// ---- checkpoints of modules ----

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ferry_training_" + name + ".safetensors"))
      .string();
}

TEST(Training, AModuleSavesAndLoadsItsParametersByName) {
  const ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  nn::Sequential a = mlp(21);
  a.to(dev);
  const std::string path = temp_path("roundtrip");
  a.save(path);
  nn::Sequential b = mlp(99);
  b.to(dev);
  b.load(path);
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(host(pa[i].second), host(pb[i].second)) << pa[i].first;
    EXPECT_EQ(pb[i].second.device(), dev);
  }
  // The file holds what PyTorch's state_dict names: "0.weight" (6, 2) and so on.
  const auto loaded = ferry::load_safetensors(path, ferry::Device::cpu());
  ASSERT_EQ(loaded.size(), 4u);
  EXPECT_EQ(loaded[0].first, "0.weight");
  EXPECT_EQ(loaded[0].second.shape(), (Shape{kHidden, kIn}));
  std::filesystem::remove(path);
}

TEST(Training, AFailedLoadKeepsEveryOldParameter) {
  const ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  nn::Sequential model = mlp(5);
  model.to(dev);
  const auto before = model.named_parameters();
  auto unchanged = [&] {
    const auto now = model.named_parameters();
    for (std::size_t i = 0; i < now.size(); ++i) {
      EXPECT_EQ(host(now[i].second), host(before[i].second)) << now[i].first;
    }
  };
  // A checkpoint of another architecture: Linear(2, 4) cannot load into Linear(2, 6).
  const std::string wrong = temp_path("wrong_shape");
  nn::Sequential other(nn::Linear(kIn, 4, ferry::Device::cpu(), {.seed = 1}), nn::Tanh(),
                       nn::Linear(4, kClasses, ferry::Device::cpu(), {.seed = 2}));
  other.save(wrong);
  EXPECT_THROW(model.load(wrong), ferry::ShapeError);
  unchanged();
  // A checkpoint missing a parameter.
  const std::string missing = temp_path("missing");
  ferry::save_safetensors(missing, {{"0.weight", before[0].second}});
  EXPECT_THROW(model.load(missing), ferry::InvalidArgument);
  unchanged();
  // A truncated file.
  model.save(missing);
  std::filesystem::resize_file(missing, std::filesystem::file_size(missing) - 4);
  EXPECT_THROW(model.load(missing), ferry::FormatError);
  unchanged();
  EXPECT_THROW(model.load(temp_path("does_not_exist")), ferry::FileError);
  unchanged();
  std::filesystem::remove(wrong);
  std::filesystem::remove(missing);
}

}  // namespace

}  // namespace test_training
