// 07 · Training across devices: the model on the accelerator, the loss on the host.
//
// An MLP's parameters move to a modeled H100 with `.to()` and stay there. Each step runs the
// model on the device, brings its logits to the host with `.to(cpu)`, computes the
// cross-entropy on `Device::cpu()`, and `nn::value_and_grad` sends the gradient back into the
// device, over its copy-in engine, without the user wiring anything across the boundary; Adam
// then updates every weight in place. Nothing waits until the loss is printed. The task: three
// classes of points by their angle around the origin, which a linear model cannot separate.
// Then the weights are saved as safetensors (the file PyTorch and JAX read) and loaded into a
// fresh model on the host, which classifies as the trained one does.
#include <ferry/ferry.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace {

namespace nn = ferry::nn;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

constexpr std::int64_t kPoints = 256;
constexpr std::int64_t kClasses = 3;

struct Data {
  std::vector<float> x;
  std::vector<std::int64_t> y;
};

/// Points on rings around the origin, labelled by which third of the circle they fall in.
Data spiral_thirds() {
  Data d;
  for (std::int64_t i = 0; i < kPoints; ++i) {
    const double angle = 2 * 3.141592653589793 * static_cast<double>((i * 97) % kPoints) / kPoints;
    const double radius = 0.3 + 0.7 * static_cast<double>(i % 7) / 7;
    d.x.push_back(static_cast<float>(radius * std::cos(angle)));
    d.x.push_back(static_cast<float>(radius * std::sin(angle)));
    d.y.push_back(static_cast<std::int64_t>(angle / (2 * 3.141592653589793 / 3)) % kClasses);
  }
  return d;
}

nn::Sequential make_model(std::uint64_t seed) {
  return nn::Sequential(nn::Linear(2, 32, ferry::Device::cpu(), {.seed = seed}), nn::Tanh(),
                        nn::Linear(32, 32, ferry::Device::cpu(), {.seed = seed + 1}), nn::Tanh(),
                        nn::Linear(32, kClasses, ferry::Device::cpu(), {.seed = seed + 2}));
}

/// The share of points whose largest logit is their label's.
double accuracy(const ferry::DeviceArray<float>& logits, const ferry::DeviceArray<std::int64_t>& y) {
  const auto hits = ferry::equal(ferry::argmax(logits, 1), y).astype<float>();
  return ferry::mean(hits).to_host().data()[0];
}

}  // namespace

int main() {
  const ferry::Device gpu = ferry::Device::modeled(ferry::specs::h100_sxm());
  const ferry::Device cpu = ferry::Device::cpu();
  const Data data = spiral_thirds();

  nn::Sequential model = make_model(1);
  model.to(gpu);  // every parameter moves once and stays resident
  std::printf("an MLP of %lld parameters on %s, the loss on %s\n",
              static_cast<long long>(model.parameter_count()), gpu.name().c_str(), cpu.name().c_str());

  const auto x = ferry::to_device(gpu, data.x, ferry::Shape{kPoints, 2});
  const auto y = ferry::to_device(cpu, data.y, ferry::Shape{kPoints});  // labels live on the host
  auto loss_fn = [&](const ferry::DeviceArray<float>& xs, const ferry::DeviceArray<std::int64_t>& ys) {
    return nn::cross_entropy(model(xs).to(cpu), ys);
  };
  auto step = nn::value_and_grad(model, loss_fn);
  ferry::optim::Adam adam({.lr = 0.02});

  const std::byte* weight_buffer = nullptr;
  float first_loss = 0;
  float loss_now = 0;
  for (int s = 0; s < 300; ++s) {
    auto [loss, grads] = step(x, y);  // forward on the GPU, loss on the host, gradients back
    adam.step(model, grads);          // in place, by donation
    if (s % 60 == 0 || s == 299) {
      loss_now = loss.to_host().data()[0];  // the only wait of the step
      if (s == 0) first_loss = loss_now;
      std::printf("  step %3d  loss %.4f\n", s, static_cast<double>(loss_now));
    }
    if (s == 1) {
      ferry::wait(model.parameters()[0]);
      weight_buffer = ferry::detail::ArrayAccess::step(model.parameters()[0])->output().data();
    }
  }
  const double acc = accuracy(model(x).to(cpu), y);
  std::printf("accuracy after 300 steps: %.1f%%\n", 100 * acc);

  const ferry::DeviceStats stats = gpu.stats();
  std::printf("modeled on the H100: makespan %.1f us, %llu steps, %llu bytes in, %llu bytes out, "
              "peak DRAM %llu bytes, %llu donations\n",
              static_cast<double>(stats.makespan.count()) / 1e3,
              static_cast<unsigned long long>(stats.steps),
              static_cast<unsigned long long>(stats.bytes_h2d),
              static_cast<unsigned long long>(stats.bytes_d2h),
              static_cast<unsigned long long>(stats.peak_dram_bytes),
              static_cast<unsigned long long>(stats.donations));

  check(loss_now < first_loss / 5, "the loss fell to under a fifth of where it started");
  check(acc > 0.95, "the model learned the three classes (over 95% of points right)");
  check(stats.bytes_h2d > 300 * kPoints * kClasses * sizeof(float),
        "every step's gradient of the logits came back into the GPU over its copy-in engine");
  check(stats.bytes_d2h == 301 * kPoints * kClasses * sizeof(float),
        "the logits of every step (and of the accuracy) left the GPU over its copy-out engine");
  ferry::wait(model.parameters()[0]);
  check(ferry::detail::ArrayAccess::step(model.parameters()[0])->output().data() == weight_buffer,
        "the first weight still lives in the buffer it had at step 2: updates were in place");

  // Weights out as safetensors, into a fresh model on the host.
  const auto path = (std::filesystem::temp_directory_path() / "ferry_07_training.safetensors").string();
  model.save(path);
  nn::Sequential host_model = make_model(42);
  host_model.load(path);
  std::filesystem::remove(path);
  const double host_acc = accuracy(host_model(ferry::to_device(cpu, data.x, ferry::Shape{kPoints, 2})), y);
  std::printf("the saved weights loaded on the host: accuracy %.1f%%\n", 100 * host_acc);
  check(host_acc == acc, "a model loaded from the checkpoint classifies exactly as the trained one");
  return 0;
}
