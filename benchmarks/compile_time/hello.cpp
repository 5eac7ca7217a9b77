// The README's first snippet as a program: two imports, an MLP layer's worth of ops, one export.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <vector>

int main() {
  ferry::Device dev;  // a modeled accelerator
  std::vector<float> pixels(32 * 784, 0.5f);
  std::vector<float> weights(784 * 10, 0.01f);
  auto x = ferry::to_device(dev, std::span<const float>(pixels), ferry::Shape{32, 784});
  auto w = ferry::to_device(dev, std::move(weights), ferry::Shape{784, 10});
  auto y = ferry::softmax(ferry::relu(ferry::matmul(x, w) + 1.0f), -1);
  auto total = ferry::sum(y);
  ferry::HostArray<float> h = total.to_host();  // the sync point
  std::printf("sum of %s: %g\n", y.shape().to_string().c_str(), static_cast<double>(h()));
  return 0;
}
