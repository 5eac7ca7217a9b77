// 07 · Training across devices: the model on the accelerator, the loss on the host.
//
// An MLP's parameters move to a modeled H100 with `.to()` and stay there. Each step runs the
// model on the device, brings its logits to the host with `.to(cpu)`, computes the
// cross-entropy on `Device::cpu()`, and `nn::value_and_grad` sends the gradient back into the
// device, over its copy-in engine, without the user wiring anything across the boundary; Adam
// then updates every weight in place. Nothing waits until the loss is printed. The task: three
// classes of points by their angle around the origin, which a linear model cannot separate.
// Then the weights are saved as safetensors (the file PyTorch and JAX read) and loaded into a
// fresh model on the host, which classifies as the trained one does. Last, a run is stopped
// half-way, its model and optimizer saved, both loaded into fresh objects, and trained on: it
// ends with exactly the weights of the run that went straight through.
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

/// `steps` Adam steps of `model` (on the GPU) on the points `x`, the loss on the host.
void train(nn::Sequential& model, ferry::optim::Adam& adam, const ferry::DeviceArray<float>& x,
           const ferry::DeviceArray<std::int64_t>& y, int steps) {
  auto step = nn::value_and_grad(model, [&](const auto& xs, const auto& ys) {
    return nn::cross_entropy(model(xs).to(ferry::Device::cpu()), ys);
  });
  for (int s = 0; s < steps; ++s) {
    auto [loss, grads] = step(x, y);
    adam.step(model, grads);
  }
}

/// The share of points whose largest logit is their label's.
double accuracy(const ferry::DeviceArray<float>& logits,
                const ferry::DeviceArray<std::int64_t>& y) {
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
              static_cast<long long>(model.parameter_count()), gpu.name().c_str(),
              cpu.name().c_str());

  const auto x = ferry::to_device(gpu, data.x, ferry::Shape{kPoints, 2});
  const auto y = ferry::to_device(cpu, data.y, ferry::Shape{kPoints});  // labels live on the host
  auto loss_fn = [&](const ferry::DeviceArray<float>& xs,
                     const ferry::DeviceArray<std::int64_t>& ys) {
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
  const auto path =
      (std::filesystem::temp_directory_path() / "ferry_07_training.safetensors").string();
  model.save(path);
  nn::Sequential host_model = make_model(42);
  host_model.load(path);
  std::filesystem::remove(path);
  const double host_acc =
      accuracy(host_model(ferry::to_device(cpu, data.x, ferry::Shape{kPoints, 2})), y);
  std::printf("the saved weights loaded on the host: accuracy %.1f%%\n", 100 * host_acc);
  check(host_acc == acc,
        "a model loaded from the checkpoint classifies exactly as the trained one");

  // Resuming: 150 steps, a checkpoint of the model and of Adam's moments and step count, then
  // 150 more in fresh objects that know nothing but the two files.
  const auto model_file =
      (std::filesystem::temp_directory_path() / "ferry_07_run.model.safetensors").string();
  const auto optim_file =
      (std::filesystem::temp_directory_path() / "ferry_07_run.optim.safetensors").string();
  {
    nn::Sequential first_half = make_model(1);
    first_half.to(gpu);
    ferry::optim::Adam first_adam({.lr = 0.02});
    train(first_half, first_adam, x, y, 150);
    first_half.save(model_file);
    ferry::save_safetensors(optim_file, first_adam.state_dict());
  }  // the run ends here: only the files are left
  nn::Sequential resumed = make_model(7);  // other weights: the load must replace them all
  resumed.to(gpu);
  resumed.load(model_file);
  ferry::optim::Adam resumed_adam({.lr = 0.02});
  resumed_adam.load_state_dict(ferry::load_safetensors(optim_file, gpu));
  nn::Sequential model_only = make_model(7);  // the model's file without the optimizer's
  model_only.to(gpu);
  model_only.load(model_file);
  ferry::optim::Adam fresh_adam({.lr = 0.02});
  std::filesystem::remove(model_file);
  std::filesystem::remove(optim_file);
  std::printf("resumed at step %lld from the two checkpoints\n",
              static_cast<long long>(resumed_adam.steps()));
  train(resumed, resumed_adam, x, y, 150);
  train(model_only, fresh_adam, x, y, 150);  // Adam's moments and step count start again from 0

  bool same = true;
  const auto straight = model.parameters();
  const auto continued = resumed.parameters();
  for (std::size_t i = 0; i < straight.size(); ++i)
    same = same && straight[i].to_host() == continued[i].to_host();
  const float resumed_loss = nn::cross_entropy(resumed(x).to(cpu), y).item();
  const float straight_loss = nn::cross_entropy(model(x).to(cpu), y).item();
  std::printf("after 300 steps: loss %.6f straight through, %.6f resumed at step 150\n",
              static_cast<double>(straight_loss), static_cast<double>(resumed_loss));
  check(resumed_adam.steps() == 300, "the resumed optimizer counts 300 steps");
  check(
      same && resumed_loss == straight_loss,
      "150 steps, a checkpoint and 150 more give every weight of 300 straight steps, bit for bit");
  check(!(model_only.parameters()[0].to_host() == model.parameters()[0].to_host()),
        "resumed from the model's file alone, with a fresh optimizer, the run ends elsewhere");
  return 0;
}
