// A downstream program: computes a small product on a ferry device and checks it.
#include <ferry/ferry.hpp>

#include <cstdio>

int main() {
  ferry::Device dev;
  auto x = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, ferry::Shape{2, 2});
  const ferry::HostArray<float> y = ferry::matmul(x, x).to_host();  // [[7, 10], [15, 22]]
  const bool ok = y(0, 0) == 7 && y(0, 1) == 10 && y(1, 0) == 15 && y(1, 1) == 22;
  std::printf("consumer: %s\n", ok ? "ok" : "wrong result");
  return ok ? 0 : 1;
}
