// 01 · First steps: arrays are futures.
//
// Every op returns at once with the result's shape; the values are computed on the device's
// worker threads while the host goes on. Only an export (to_host, wait) blocks.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}
}  // namespace

int main() {
  ferry::ManualExecutor manual;  // runs nothing until an export asks: lets us watch the futures
  ferry::Device dev(manual);

  std::puts("1. Import host data; an op returns a future whose shape is known at once.");
  std::vector<float> pixels(4 * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i) / 10;
  auto x = ferry::to_device(dev, std::span<const float>(pixels), ferry::Shape{4, 3});
  auto w = ferry::to_device(dev, std::vector<float>{1, -1, 0.5f, 2, -2, 1}, ferry::Shape{3, 2});
  auto y = ferry::relu(ferry::matmul(x, w) + 1.0f);
  std::printf("  y has shape %s and ready() = %s\n", y.shape().to_string().c_str(),
              y.ready() ? "true" : "false");
  check(y.shape() == ferry::Shape{4, 2}, "the shape of y is known before anything ran");
  check(!y.ready(), "no kernel has run yet");

  std::puts("2. Export: to_host is the sync point; it runs what y needs and copies it back.");
  const ferry::HostArray<float> h = y.to_host();
  for (std::int64_t i = 0; i < 4; ++i)
    std::printf("  y[%lld] = [%5.2f, %5.2f]\n", static_cast<long long>(i), h(i, 0), h(i, 1));
  // Row 1 of x is [0.3, 0.4, 0.5]: 0.3*1 + 0.4*0.5 + 0.5*-2 + 1 = 0.5, and -0.3 + 0.8 + 0.5 + 1
  // = 2.0
  check(std::abs(h(1, 0) - 0.5f) < 1e-6f && std::abs(h(1, 1) - 2.0f) < 1e-6f,
        "y = relu(x @ w + 1)");

  std::puts("3. Broadcasting, reductions and a batched export: one sync for several arrays.");
  auto centered = x - ferry::mean(x, {0}, /*keepdims=*/true);  // (4, 3) - (1, 3)
  auto [column_sums, best] = ferry::to_host(ferry::sum(centered, {0}), ferry::argmax(y, 1));
  std::printf("  column sums of x - mean(x) = [%g, %g, %g]\n", column_sums(0), column_sums(1),
              column_sums(2));
  check(std::abs(column_sums(0)) < 1e-6f, "centering removes the mean");
  check(best(1) == 1, "argmax picks the larger column");

  std::puts("4. Errors in shapes are thrown at the call, naming the op and the shapes.");
  try {
    (void)ferry::matmul(x, x);
    check(false, "matmul of (4, 3) x (4, 3) throws");
  } catch (const ferry::ShapeError& e) {
    std::printf("  caught: %s\n", e.what());
    check(true, "matmul of (4, 3) x (4, 3) throws ShapeError at the call");
  }
  return 0;
}
