// The CPU kernels beside the best baselines this machine has, measured in the same run: GEMM
// against OpenBLAS (1 thread and all threads) and Eigen where they were found at configure
// time (FERRY_HAVE_OPENBLAS, FERRY_HAVE_EIGEN), the memory-bound kernels against a plain loop
// over pre-touched buffers (the memory-bandwidth floor). Each row prints ferry's rate and its
// ratio to the fastest baseline of the row. GEMM rows time the kernel itself (kernels::gemm on
// one thread, or on a runner of std::threads) and the whole op through ferry::matmul on
// Device::cpu(). The gemm_threads rows time kernels::gemm on 1 and on all threads for growing
// cubes: where two threads first win is kGemmParallelFlops.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>

#ifdef FERRY_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef FERRY_HAVE_EIGEN
#include <Eigen/Core>
#endif

namespace {

using ferry::bfloat16;
using ferry::Shape;

int hardware_threads() {
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

/// Runs chunks on `threads` std::threads (the caller one of them), each taking the next chunk.
class ThreadRunner : public ferry::kernels::ChunkRunner {
 public:
  explicit ThreadRunner(int threads) : threads_(threads) {}
  void run_chunks(std::int64_t chunks, void (*fn)(void*, std::int64_t),
                  void* context) const noexcept override {
    std::atomic<std::int64_t> next{0};
    const auto work = [&] {
      for (std::int64_t i = next++; i < chunks; i = next++) fn(context, i);
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads_; ++t) helpers.emplace_back(work);
    work();
    for (auto& h : helpers) h.join();
  }
  std::int64_t parallelism() const noexcept override { return threads_; }

 private:
  int threads_;
};

/// Registers `fn` as row/entry, timed on the wall clock, `items` items per iteration.
void add(const std::string& row, const std::string& entry, double items, std::function<void()> fn) {
  benchmark::RegisterBenchmark((row + "/" + entry).c_str(),
                               [items, fn](benchmark::State& state) {
                                 fn();  // warm: scratch, page faults, thread start-up
                                 for (auto _ : state) fn();
                                 state.SetItemsProcessed(static_cast<std::int64_t>(
                                     items * static_cast<double>(state.iterations())));
                               })
      ->UseRealTime()
      ->MinTime(0.1)
      ->Unit(benchmark::kMillisecond);
}

template <class T>
std::vector<T> filled(std::size_t n, float scale) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = T(scale * static_cast<float>((i * 7919) % 1000) / 1000.0f);
  return v;
}

// ---- GEMM ----

template <class T>
struct Gemm {
  std::int64_t m, k, n;
  std::vector<T> a = filled<T>(static_cast<std::size_t>(m * k), 1.0f);
  std::vector<T> b = filled<T>(static_cast<std::size_t>(k * n), 0.5f);
  std::vector<T> c = std::vector<T>(static_cast<std::size_t>(m * n));
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  }
};

template <class T>
void ferry_rows(const std::string& row1, const std::string& row_all,
                const std::shared_ptr<Gemm<T>>& g) {
  static const ThreadRunner all(hardware_threads());
  add(row1, "ferry_kernel", g->flops(),
      [g] { ferry::kernels::gemm(g->a.data(), g->b.data(), g->c.data(), g->m, g->k, g->n); });
  add(row_all, "ferry_kernel", g->flops(),
      [g] { ferry::kernels::gemm(g->a.data(), g->b.data(), g->c.data(), g->m, g->k, g->n, all); });
  const ferry::Device dev = ferry::Device::cpu();
  const auto da = ferry::to_device(dev, g->a, Shape{g->m, g->k});
  const auto db = ferry::to_device(dev, g->b, Shape{g->k, g->n});
  add(row_all, "ferry_matmul", g->flops(), [da, db] { ferry::wait(ferry::matmul(da, db)); });
}

#ifdef FERRY_HAVE_OPENBLAS
template <class T>
void blas(const Gemm<T>& g) {
  const auto m = static_cast<int>(g.m);
  const auto k = static_cast<int>(g.k);
  const auto n = static_cast<int>(g.n);
  auto* c = const_cast<T*>(g.c.data());
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, g.a.data(), k, g.b.data(),
                n, 0.0f, c, n);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, g.a.data(), k, g.b.data(),
                n, 0.0, c, n);
  }
}
#endif

template <class T>
void baseline_rows(const std::string& row1, const std::string& row_all,
                   const std::shared_ptr<Gemm<T>>& g) {
#ifdef FERRY_HAVE_OPENBLAS
  add(row1, "openblas", g->flops(), [g] {
    openblas_set_num_threads(1);
    blas(*g);
  });
  add(row_all, "openblas", g->flops(), [g] {
    openblas_set_num_threads(hardware_threads());
    blas(*g);
  });
#endif
#ifdef FERRY_HAVE_EIGEN
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  add(row1, "eigen", g->flops(), [g] {
    Eigen::Map<const Matrix> a(g->a.data(), g->m, g->k);
    Eigen::Map<const Matrix> b(g->b.data(), g->k, g->n);
    Eigen::Map<Matrix> c(g->c.data(), g->m, g->n);
    c.noalias() = a * b;
  });
#endif
  (void)row1;
  (void)row_all;
  (void)g;
}

template <class T>
void gemm_rows(const char* name, std::int64_t m, std::int64_t k, std::int64_t n) {
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  const std::string row1 = std::string(name) + " " + shape + " 1 thread";
  const std::string row_all = std::string(name) + " " + shape + " all threads";
  auto g = std::make_shared<Gemm<T>>(Gemm<T>{m, k, n});
  ferry_rows<T>(row1, row_all, g);
  baseline_rows<T>(row1, row_all, g);
}

void bf16_rows() {
  constexpr std::int64_t kN = 1024;
  const std::string row1 = "bf16 1024^3 1 thread";
  const std::string row_all = "bf16 1024^3 all threads";
  auto g = std::make_shared<Gemm<bfloat16>>(Gemm<bfloat16>{kN, kN, kN});
  ferry_rows<bfloat16>(row1, row_all, g);
  // Debian's OpenBLAS is built without its bfloat16 GEMM: the baseline is its float GEMM of
  // the same size, which moves twice the bytes and does the same arithmetic.
  baseline_rows<float>(row1, row_all, std::make_shared<Gemm<float>>(Gemm<float>{kN, kN, kN}));
}

void batched_rows() {
  constexpr std::int64_t kBatch = 8;
  constexpr std::int64_t kN = 256;
  const std::string row = "batched 8x256^3 all threads";
  const double flops = 2.0 * kBatch * kN * kN * kN;
  auto g = std::make_shared<Gemm<float>>(Gemm<float>{kBatch * kN, kN, kN});  // a: 8 stacked
  const ferry::Device dev = ferry::Device::cpu();
  const auto da = ferry::to_device(dev, g->a, Shape{kBatch, kN, kN});
  const auto db = ferry::to_device(
      dev, filled<float>(static_cast<std::size_t>(kBatch * kN * kN), 0.5f), Shape{kBatch, kN, kN});
  add(row, "ferry_matmul", flops, [da, db] { ferry::wait(ferry::matmul(da, db)); });
#ifdef FERRY_HAVE_OPENBLAS
  add(row, "openblas", flops, [g] {
    openblas_set_num_threads(hardware_threads());
    for (std::int64_t i = 0; i < kBatch; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f,
                  g->a.data() + i * kN * kN, kN, g->b.data(), kN, 0.0f, g->c.data() + i * kN * kN,
                  kN);
    }
  });
#endif
}

/// kernels::gemm on one thread and on all, for cubes around the parallel threshold.
void threshold_rows() {
  for (std::int64_t n : {64, 128, 192, 256}) {
    auto g = std::make_shared<Gemm<float>>(Gemm<float>{n, n, n});
    const std::string row = "gemm_threads " + std::to_string(n) + "^3";
    add(row, "one_thread", g->flops(), [g] {
      ferry::detail::gemm_packed(ferry::detail::gemm_isa(), g->a.data(), g->b.data(), g->c.data(),
                                 g->m, g->k, g->n, ferry::kernels::inline_runner());
    });
    static const ThreadRunner all(hardware_threads());
    add(row, "ferry_all_threads", g->flops(), [g] {
      ferry::detail::gemm_packed(ferry::detail::gemm_isa(), g->a.data(), g->b.data(), g->c.data(),
                                 g->m, g->k, g->n, all);
    });
  }
}

// ---- memory-bound kernels: ferry on Device::cpu() against a plain loop ----

constexpr std::int64_t kSide = 4096;
constexpr std::int64_t kElems = kSide * kSide;  // 16M floats, 64 MB

struct Buffers {
  std::vector<float> x = filled<float>(kElems, 1.0f);
  std::vector<float> y = filled<float>(kElems, 2.0f);
  std::vector<float> out = std::vector<float>(kElems, 0.0f);
  std::vector<float> row = filled<float>(kSide, 3.0f);
};

void memory_rows() {
  auto buf = std::make_shared<Buffers>();
  const ferry::Device dev = ferry::Device::cpu();
  const auto x = ferry::to_device(dev, buf->x, Shape{kSide, kSide});
  const auto y = ferry::to_device(dev, buf->y, Shape{kSide, kSide});
  const auto r = ferry::to_device(dev, buf->row, Shape{kSide});
  const double n = kElems;

  add("add 16M", "ferry", n, [x, y] { ferry::wait(x + y); });
  add("add 16M", "loop", n, [buf] {
    float* o = buf->out.data();
    const float* a = buf->x.data();
    const float* b = buf->y.data();
    for (std::int64_t i = 0; i < kElems; ++i) o[i] = a[i] + b[i];
    benchmark::DoNotOptimize(o);
  });
  add("exp 16M", "ferry", n, [x] { ferry::wait(ferry::exp(x)); });
  add("exp 16M", "loop", n, [buf] {
    float* o = buf->out.data();
    const float* a = buf->x.data();
    for (std::int64_t i = 0; i < kElems; ++i) o[i] = std::exp(a[i]);
    benchmark::DoNotOptimize(o);
  });
  add("broadcast-add 16M", "ferry", n, [x, r] { ferry::wait(x + r); });
  add("broadcast-add 16M", "loop", n, [buf] {
    float* o = buf->out.data();
    const float* a = buf->x.data();
    const float* b = buf->row.data();
    for (std::int64_t i = 0; i < kSide; ++i) {
      for (std::int64_t j = 0; j < kSide; ++j) o[i * kSide + j] = a[i * kSide + j] + b[j];
    }
    benchmark::DoNotOptimize(o);
  });
  add("sum 4096x4096", "ferry", n, [x] { ferry::wait(ferry::sum(x)); });
  add("sum 4096x4096", "loop", n, [buf] {
    // Sixteen partial sums: the loop the compiler vectorizes without reassociating.
    float part[16] = {};
    const float* a = buf->x.data();
    for (std::int64_t i = 0; i < kElems; i += 16) {
      for (int l = 0; l < 16; ++l) part[l] += a[i + l];
    }
    float total = 0;
    for (float p : part) total += p;
    benchmark::DoNotOptimize(total);
  });
  add("softmax 4096x4096", "ferry", n, [x] { ferry::wait(ferry::softmax(x, -1)); });
  add("softmax 4096x4096", "loop", n, [buf] {
    for (std::int64_t i = 0; i < kSide; ++i) {
      const float* a = buf->x.data() + i * kSide;
      float* o = buf->out.data() + i * kSide;
      float top = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < kSide; ++j) top = std::max(top, a[j]);
      float total = 0;
      for (std::int64_t j = 0; j < kSide; ++j) {
        o[j] = std::exp(a[j] - top);
        total += o[j];
      }
      const float inv = 1.0f / total;
      for (std::int64_t j = 0; j < kSide; ++j) o[j] *= inv;
    }
    benchmark::DoNotOptimize(buf->out.data());
  });
  add("transpose 4096x4096", "ferry", n, [x] { ferry::wait(ferry::transpose(x)); });
  add("transpose 4096x4096", "loop", n, [buf] {
    constexpr std::int64_t kTile = 32;
    float* o = buf->out.data();
    const float* a = buf->x.data();
    for (std::int64_t i0 = 0; i0 < kSide; i0 += kTile) {
      for (std::int64_t j0 = 0; j0 < kSide; j0 += kTile) {
        for (std::int64_t i = i0; i < i0 + kTile; ++i) {
          for (std::int64_t j = j0; j < j0 + kTile; ++j) o[j * kSide + i] = a[i * kSide + j];
        }
      }
    }
    benchmark::DoNotOptimize(o);
  });
  add("to_host 64MB", "ferry", n, [x] { benchmark::DoNotOptimize(x.to_host()); });
  add("to_host 64MB", "memcpy", n, [buf] {
    std::memcpy(buf->out.data(), buf->x.data(), kElems * sizeof(float));
    benchmark::DoNotOptimize(buf->out.data());
  });
}

/// Google Benchmark's table, then one line per ferry entry: its rate and its ratio to the
/// fastest other entry of its row (the row is the name up to the last '/').
class BestBaselineReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const auto it = r.counters.find("items_per_second");
      if (r.error_occurred || it == r.counters.end() || it->second.value <= 0) continue;
      const std::string& name = r.run_name.function_name;  // row/entry, without the options
      const std::size_t slash = name.rfind('/');
      const std::string row = name.substr(0, slash);
      if (rates_.find(row) == rates_.end()) rows_.push_back(row);
      rates_[row].emplace_back(name.substr(slash + 1), it->second.value);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf(
        "\nrate (GFLOP/s for GEMM, G elements/s otherwise) and ratio to the best baseline of the "
        "row:\n");
    for (const std::string& row : rows_) {
      const auto& entries = rates_[row];
      std::string best_name;
      double best = 0;
      for (const auto& [entry, rate] : entries) {
        if (entry.rfind("ferry", 0) != 0 && rate > best) {
          best = rate;
          best_name = entry;
        }
      }
      for (const auto& [entry, rate] : entries) {
        if (entry.rfind("ferry", 0) != 0) continue;
        std::printf("  %-34s %-18s %8.2f", row.c_str(), entry.c_str(), rate / 1e9);
        if (best > 0)
          std::printf("   %5.2fx %s (%.2f)", rate / best, best_name.c_str(), best / 1e9);
        std::printf("\n");
      }
    }
  }

 private:
  std::vector<std::string> rows_;
  std::map<std::string, std::vector<std::pair<std::string, double>>> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  for (std::int64_t n : {256, 512, 1024, 2048}) gemm_rows<float>("sgemm", n, n, n);
  for (std::int64_t n : {256, 512, 1024, 2048}) gemm_rows<double>("dgemm", n, n, n);
  gemm_rows<float>("skinny sgemm", 32, 784, 10);
  bf16_rows();
  batched_rows();
  threshold_rows();
  memory_rows();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  BestBaselineReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
