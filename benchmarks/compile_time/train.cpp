// A small nn program: an MLP, a loss, its gradients, Adam steps, a safetensors round trip.
#include <ferry/ferry.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace nn = ferry::nn;

int main() {
  ferry::Device dev;  // a modeled accelerator
  nn::Sequential model(nn::Linear(16, 32, dev, {.seed = 1}), nn::ReLU(),
                       nn::Linear(32, 4, dev, {.seed = 2}));
  std::vector<float> xs(64 * 16);
  std::vector<std::int64_t> ys(64);
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int64_t>(i % 4);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = (i % 4 == i / 16 % 4) ? 1.0f : 0.0f;
  const auto x = ferry::to_device(dev, xs, ferry::Shape{64, 16});
  const auto y = ferry::to_device(dev, ys, ferry::Shape{64});

  auto step = nn::value_and_grad(model, [&](const auto& in, const auto& labels) {
    return nn::cross_entropy(model(in), labels);
  });
  ferry::optim::Adam adam({.lr = 1e-2});
  float first = 0, last = 0;
  for (int s = 0; s < 20; ++s) {
    auto [loss, grads] = step(x, y);
    adam.step(model, grads);  // in place; nothing is exported
    if (s == 0) first = loss.to_host().data()[0];
    if (s == 19) last = loss.to_host().data()[0];
  }

  const auto path =
      (std::filesystem::temp_directory_path() / "ferry_compile_time.safetensors").string();
  model.save(path);
  nn::Sequential copy(nn::Linear(16, 32, dev, {.seed = 3}), nn::ReLU(),
                      nn::Linear(32, 4, dev, {.seed = 4}));
  copy.load(path);
  std::filesystem::remove(path);
  const float same = ferry::max(ferry::abs(copy(x) - model(x))).to_host().data()[0];
  std::printf("loss %.4f -> %.4f after 20 Adam steps; reloaded model differs by %g\n",
              static_cast<double>(first), static_cast<double>(last), static_cast<double>(same));
  return 0;
}
