// 05 · Programs: trace once, replay for new shapes, guarded by exactly what the trace relied on.
//
// ferry::jit wraps a function of arrays and sizes. Its first call runs the function eagerly and
// records the ops it calls; later calls replay the recording without running the function, for
// any input sizes that satisfy the guards the trace collected. Sizes are SymInts inside the
// function: arithmetic on them builds expressions, and every place a size turns into a C++ fact
// (a comparison in an `if`, a static_cast, a broadcasting decision) becomes a guard. A call that
// breaks a guard traces again, so a cached program never returns a stale answer.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

std::vector<float> values(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * static_cast<float>(static_cast<int>(i % 11) - 5);
  return v;
}

bool same(const ferry::DeviceArray<float>& a, const ferry::DeviceArray<float>& b) {
  const auto ha = a.to_host();
  const auto hb = b.to_host();
  if (!(ha.shape() == hb.shape())) return false;
  for (std::size_t i = 0; i < ha.data().size(); ++i) {
    if (ha.data()[i] != hb.data()[i]) return false;
  }
  return true;
}

}  // namespace

int main() {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::pcie_accelerator());
  const auto w = ferry::to_device(dev, values(64 * 32, 0.01f), ferry::Shape{64, 32});
  const auto b = ferry::to_device(dev, values(32, 0.1f), ferry::Shape{32});

  std::printf("1. One trace serves every batch size\n");
  auto layer = [w, b](ferry::DeviceArray<float> x) {
    return ferry::relu(ferry::matmul(x, w) + b) * 0.5f;
  };
  auto f = ferry::jit(layer);
  bool equal = true;
  for (int batch = 1; batch <= 64; ++batch) {
    const auto x = ferry::to_device(dev, values(batch * 64, 0.02f), ferry::Shape{batch, 64});
    equal = equal && same(f(x), layer(x));
  }
  std::printf("%s\n", f.explain().c_str());
  check(f.cache_size() == 1 && f.cache_misses() == 1 && f.cache_hits() == 63,
        "64 batch sizes: one trace, 63 replays");
  check(equal, "every replay equals the eager result");

  std::printf("\n2. A replay fuses elementwise runs: `+ b`, relu and `* 0.5` become one kernel\n");
  const auto x = ferry::to_device(dev, values(16 * 64, 0.02f), ferry::Shape{16, 64});
  ferry::wait(x);
  dev.reset_stats();
  ferry::wait(layer(x));
  const auto eager_steps = dev.stats().steps;
  dev.reset_stats();
  ferry::wait(f(x));
  const auto replay_steps = dev.stats().steps;
  std::printf("  eager: %llu steps, replay: %llu steps\n",
              static_cast<unsigned long long>(eager_steps),
              static_cast<unsigned long long>(replay_steps));
  check(eager_steps == 4 && replay_steps == 2, "matmul + one fused kernel instead of four steps");

  std::printf("\n3. A value-dependent branch is a guard\n");
  auto g = ferry::jit([](ferry::DeviceArray<float> a, ferry::SymInt flag) {
    if (flag > 5) return ferry::ones<float>(a.device(), ferry::Shape{1});
    return ferry::zeros<float>(a.device(), ferry::Shape{1});
  });
  const float g6 = g(x, 6).to_host()(0);
  const float g0 = g(x, 0).to_host()(0);  // "flag > 5" fails: traced again
  const float g9 = g(x, 9).to_host()(0);  // replays the first entry
  std::printf("%s\n", g.explain().c_str());
  check(g6 == 1 && g0 == 0 && g9 == 1, "g(a, 6) = ones, g(a, 0) = zeros, g(a, 9) = ones");
  check(g.cache_size() == 2 && g.cache_hits() == 1, "two entries, one per side of the guard");

  std::printf("\n4. Sizes computed from sizes replay for any input\n");
  auto parts = ferry::jit([](ferry::DeviceArray<float> a, ferry::SymInt d0, ferry::SymInt d1) {
    return ferry::split(a, {d0, d1, a.shape()[1] - d0 - d1}, 1);
  });
  const auto wide = ferry::to_device(dev, values(2 * 10, 1.0f), ferry::Shape{2, 10});
  const auto p1 = parts(wide, 3, 4);
  const auto p2 = parts(wide, 2, 5);
  check(p1[2].shape() == ferry::Shape{2, 3} && p2[2].shape() == ferry::Shape{2, 3} &&
            p2[1].shape() == ferry::Shape{2, 5} && parts.cache_hits() == 1,
        "split(a, {d0, d1, a.shape()[1] - d0 - d1}, 1): the third part follows d0 and d1");

  std::printf("\n5. Static shapes: every size is a constant\n");
  auto h = ferry::jit(layer, ferry::CacheMode::static_shapes);
  for (int batch : {1, 2, 3, 2, 1}) {
    (void)h(ferry::to_device(dev, values(batch * 64, 0.02f), ferry::Shape{batch, 64}));
  }
  check(h.cache_size() == 3 && h.cache_hits() == 2, "one entry per batch size");

  std::printf("\n6. A trace that lets the host see a value is not cached\n");
  auto peek = ferry::jit([](ferry::DeviceArray<float> a) {
    return a.to_host()(0, 0) > 0 ? a * 2.0f : a * 3.0f;  // a branch on data: no guard can check it
  });
  (void)peek(x);
  (void)peek(x);
  std::printf("%s\n", peek.explain().c_str());
  check(peek.cache_size() == 0 && peek.cache_misses() == 2,
        "every call runs the function: correct, never stale");
  return 0;
}
