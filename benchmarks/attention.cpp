// Attention as one op against the same attention written with three: softmax(q k^T / sqrt(D)) v
// by matmul, softmax and matmul, which holds the whole L x L score matrix. Modeled on
// specs::h100_sxm() (deterministic: the peak of device memory and the kernels' busy time), then
// in wall time on this machine's cores (Device::cpu()), as a ratio to the composed
// form measured in the same run. Causal, batch 1 x 8 heads, head size 64.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include <ferry/ferry.hpp>

#include "ratio_reporter.hpp"

namespace {

using A = ferry::DeviceArray<float>;
using ferry::Shape;

A ramp(const ferry::Device& dev, Shape shape, float scale) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = scale * (static_cast<float>(i % 13) / 13.0f - 0.5f);
  return ferry::to_device(dev, std::move(v), shape);
}

/// The three-op form, with the causal mask as an additive -inf above the diagonal.
A composed(const A& q, const A& k, const A& v) {
  const std::int64_t l = q.shape().dims()[2];
  const A mask = ferry::where(ferry::tril(ferry::ones<bool>(q.device(), Shape{l, l})),
                              ferry::zeros<float>(q.device(), Shape{l, l}),
                              -std::numeric_limits<float>::infinity());
  const A s = ferry::matmul(q, ferry::swapaxes(k, 2, 3)) * (1.0f / 8.0f) + mask;
  return ferry::matmul(ferry::softmax(s, -1), v);
}

A fused(const A& q, const A& k, const A& v) {
  return ferry::scaled_dot_product_attention(q, k, v, {.causal = true});
}

struct Modeled {
  double peak_kib = 0;
  double kernels_us = 0;
};

/// What the composed or fused form costs on the modeled H100, the inputs already resident: the
/// peak of device memory (the inputs included) and the kernels' busy time.
template <A (*kForm)(const A&, const A&, const A&)>
Modeled modeled(std::int64_t l) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::h100_sxm());
  const A x = ramp(dev, Shape{1, 8, l, 64}, 1.0f);
  ferry::wait(x);
  dev.reset_stats();
  ferry::wait(kForm(x, x, x));
  const ferry::DeviceStats s = dev.stats();
  Modeled m{static_cast<double>(s.peak_dram_bytes) / 1024, 0};
  for (const auto& e : s.engines) {
    if (e.name.rfind("compute", 0) == 0) m.kernels_us += static_cast<double>(e.busy.count()) / 1e3;
  }
  return m;
}

void report_modeled() {
  std::printf("modeled on h100_sxm, causal attention, 8 heads of 64:\n");
  for (std::int64_t l : {512, 2048}) {
    const Modeled c = modeled<composed>(l);
    const Modeled f = modeled<fused>(l);
    std::printf(
        "  L %5lld: composed peak %8.0f KiB, %7.1f us of kernels; fused peak %7.0f KiB, %6.1f us "
        "(%.1fx less memory, %.2fx the kernel time)\n",
        static_cast<long long>(l), c.peak_kib, c.kernels_us, f.peak_kib, f.kernels_us,
        c.peak_kib / f.peak_kib, f.kernels_us / c.kernels_us);
  }
}

template <A (*kForm)(const A&, const A&, const A&)>
void wall(benchmark::State& state) {
  const ferry::Device dev = ferry::Device::cpu();
  const A x = ramp(dev, Shape{1, 8, state.range(0), 64}, 1.0f);
  ferry::wait(kForm(x, x, x));
  for (auto _ : state) ferry::wait(kForm(x, x, x));
  state.SetItemsProcessed(state.iterations());
}

void runs(benchmark::internal::Benchmark* b) {
  b->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
}

BENCHMARK(wall<composed>)->Name("attention_composed")->Apply(runs);
BENCHMARK(wall<fused>)->Name("attention_fused")->Apply(runs);

}  // namespace

int main(int argc, char** argv) {
  report_modeled();
  return ferry_bench::run_with_ratios(argc, argv, {{"attention_fused", "attention_composed"}});
}
