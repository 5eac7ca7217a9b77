// Random programs against a plain reference evaluator. Each program is a random sequence of ops
// (elementwise with broadcasting, matmul, reductions, transposes, slices, concats, reshapes,
// flips, running sums, gathers, sorts, triangles, layout changes, moves between devices,
// donations) over float, int32, float16, int8, uint8 or int16 arrays whose sizes
// include 0 and 1, with exports at random points; programs run on several host threads at
// once, sharing two devices. Every exported value must equal the reference: exactly for
// integers (wrapping in their own width), within a relative 1e-4 for floats (sums may
// associate differently) and 2^-8 for float16 (its sums are rounded from double once; the
// reference's, through float, may round twice).
//
// Under injected faults (each program on two devices of its own, with a FaultPlan drawn from its
// seed), every export either matches the reference or throws the DeviceFault of a step it
// depends on: the program tracks, for each value, the submission indices of every step made on
// its behalf (the ranges each op call took on each device, which also hold the conversions an op
// makes for itself). With Fallback::host, every export must match. After every program, its
// devices' models hold no memory and their lower bound is at most their makespan.
//
// FERRY_FUZZ_ITERATIONS sets the number of programs per element type and mode (500 by default,
// what CI runs).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>

#include "fuzz/reference.hpp"

namespace {

using ferry::DeviceArray;
using ferry::Shape;
using ferry_fuzz::Tensor;

std::size_t iterations() {
  const char* env = std::getenv("FERRY_FUZZ_ITERATIONS");
  return env != nullptr ? static_cast<std::size_t>(std::strtoull(env, nullptr, 10)) : 500;
}

enum class Faults { off, failing, fallback };

/// The submission indices [lo, hi] some op call took on device `device`.
struct StepRange {
  int device = 0;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
};

template <class T>
struct Value {
  DeviceArray<T> array;
  Tensor<T> ref;
  int device = 0;
  std::vector<StepRange> deps;  // every step it depends on (tracked under faults only)
};

std::uint64_t submitted(const ferry::Device& d) {
  return ferry::detail::DeviceAccess::state(d)->submitted_steps();
}

/// One random program: generates ops, applies them to both ferry and the reference, and
/// records what it did so a failure can be replayed from its seed.
template <class T>
class Program {
 public:
  Program(std::uint64_t seed, std::vector<ferry::Device>& devices, Faults faults = Faults::off)
      : rng_(seed), devices_(devices), faults_(faults) {}

  /// Runs the program; returns an empty string or the first mismatch, with the op log.
  std::string run() {
    try {
      for (int i = 0; i < 2; ++i) pool_.push_back(fresh(dim(), dim(), 0));
      const int steps = 4 + pick(12);
      for (int s = 0; s < steps && failure_.empty(); ++s) step();
      for (const Value<T>& v : pool_) {
        if (!failure_.empty()) break;
        check(v, "final export");
      }
    } catch (const std::exception& e) {
      failure_ = std::string("threw ") + e.what();
    }
    return failure_.empty() ? failure_ : failure_ + "\n  ops: " + log_;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::int64_t dim() {
    static constexpr std::int64_t kDims[] = {0, 1, 1, 2, 3, 5, 8, 33};
    return kDims[pick(8)];
  }

  Value<T> fresh(std::int64_t rows, std::int64_t cols, int device) {
    Tensor<T> t = Tensor<T>::zeros(rows, cols);
    for (T& x : t.v) {
      if constexpr (std::is_integral_v<T>) {
        x = static_cast<T>(pick(11) - 5);
      } else {
        x = static_cast<T>(pick(17) - 8) / T{4};
      }
    }
    // A third of the imports are tiled, so that ops meet tiled operands they must convert.
    const bool tiled = pick(3) == 0 && !(rows == 0 && cols == 0);
    log_ += tiled ? "import-tiled " : "import ";
    const Mark before = mark();
    auto a = ferry::to_device(
        devices_[static_cast<std::size_t>(device)], t.v, Shape{rows, cols},
        ferry::Layout{.order = tiled ? ferry::Order::tiled : ferry::Order::row_major});
    Value<T> v{std::move(a), std::move(t), device, {}};
    add_ranges(v.deps, before);
    return v;
  }

  /// The next submission index of each device: what a later add_ranges() starts from.
  using Mark = std::array<std::uint64_t, 2>;
  Mark mark() const {
    if (faults_ == Faults::off) return {};
    return {submitted(devices_[0]), submitted(devices_[1])};
  }

  /// Adds to `deps` the steps submitted since `before`.
  void add_ranges(std::vector<StepRange>& deps, const Mark& before) const {
    if (faults_ == Faults::off) return;
    const Mark now = mark();
    for (int d = 0; d < 2; ++d) {
      const auto i = static_cast<std::size_t>(d);
      if (now[i] > before[i]) deps.push_back({d, before[i], now[i] - 1});
    }
  }

  static void add_deps(std::vector<StepRange>& deps, const Value<T>& input) {
    deps.insert(deps.end(), input.deps.begin(), input.deps.end());
  }

  /// Whether `f` is the fault of a step `deps` names.
  bool depends_on(const std::vector<StepRange>& deps, const ferry::DeviceFault& f) const {
    for (const StepRange& r : deps) {
      if (devices_[static_cast<std::size_t>(r.device)].name() == f.device() && r.lo <= f.step() &&
          f.step() <= r.hi) {
        return true;
      }
    }
    return false;
  }

  /// A partner for `x` in a binary op: its shape, or one broadcasting along rows or columns.
  Value<T> partner(const Value<T>& x) {
    const std::int64_t r = pick(3) == 0 ? 1 : x.ref.rows;
    const std::int64_t c = pick(3) == 0 ? 1 : x.ref.cols;
    for (const Value<T>& v : pool_) {
      if (v.device == x.device && v.ref.rows == r && v.ref.cols == c && pick(2) == 0) return v;
    }
    return fresh(r, c, x.device);
  }

  void check(const Value<T>& v, const char* where) {
    if (faults_ == Faults::failing) {
      const Mark before = mark();
      try {
        compare(v, where, v.array.to_host());
      } catch (const ferry::DeviceFault& f) {
        std::vector<StepRange> deps = v.deps;
        add_ranges(deps, before);  // the export's own copies
        if (!depends_on(deps, f)) {
          failure_ = std::string(where) + ": a fault of a step it does not depend on: " + f.what();
        }
        ++faults_seen_;
      }
      return;
    }
    compare(v, where, v.array.to_host());
  }

 public:
  /// Exports that threw a DeviceFault, all as they should.
  std::size_t faults_seen() const noexcept { return faults_seen_; }

 private:
  void compare(const Value<T>& v, const char* where, const ferry::HostArray<T>& h) {
    if (h.shape() != (Shape{v.ref.rows, v.ref.cols})) {
      failure_ = std::string(where) + ": shape " + h.shape().to_string() + ", reference (" +
                 std::to_string(v.ref.rows) + ", " + std::to_string(v.ref.cols) + ")";
      return;
    }
    for (std::size_t i = 0; i < v.ref.v.size(); ++i) {
      const T got = h.data()[i];
      const T want = v.ref.v[i];
      bool same = got == want;
      if constexpr (ferry_fuzz::kFloating<T>) {
        using C = std::conditional_t<ferry_fuzz::kHalf<T>, float, T>;
        const C g = got;
        const C w = want;
        const C tolerance = ferry_fuzz::kHalf<T> ? C(0x1p-8) : C(1e-4);
        same = same || (std::isnan(g) && std::isnan(w)) ||
               std::abs(g - w) <= tolerance * std::max(C{1}, std::abs(w));
      }
      if (!same) {
        using Shown = std::conditional_t<ferry_fuzz::kHalf<T>, float, T>;
        failure_ = std::string(where) + ": element " + std::to_string(i) + " is " +
                   std::to_string(+static_cast<Shown>(got)) + ", reference " +
                   std::to_string(+static_cast<Shown>(want));
        return;
      }
    }
  }

  void step() {
    const std::size_t at = static_cast<std::size_t>(pick(static_cast<int>(pool_.size())));
    Value<T> x = pool_[at];
    const std::int64_t r = x.ref.rows;
    const std::int64_t c = x.ref.cols;
    Value<T> y{{}, {}, x.device, x.deps};
    const Mark before = mark();
    switch (pick(16)) {
      case 0:
      case 1: {
        const Value<T> p = partner(x);
        const auto op = static_cast<ferry_fuzz::Binary>(pick(4));
        log_ += "binary" + std::to_string(static_cast<int>(op)) + " ";
        add_deps(y.deps, p);
        const bool swap = pick(2) == 0;
        const DeviceArray<T>& a = swap ? p.array : x.array;
        const DeviceArray<T>& b = swap ? x.array : p.array;
        switch (op) {
          case ferry_fuzz::Binary::add: y.array = a + b; break;
          case ferry_fuzz::Binary::sub: y.array = a - b; break;
          case ferry_fuzz::Binary::mul: y.array = a * b; break;
          case ferry_fuzz::Binary::max: y.array = ferry::maximum(a, b); break;
        }
        y.ref = swap ? ferry_fuzz::binary(op, p.ref, x.ref) : ferry_fuzz::binary(op, x.ref, p.ref);
        break;
      }
      case 2: {
        auto op = static_cast<ferry_fuzz::Unary>(pick(ferry_fuzz::kFloating<T> ? 4 : 3));
        log_ += "unary" + std::to_string(static_cast<int>(op)) + " ";
        switch (op) {
          case ferry_fuzz::Unary::neg: y.array = -x.array; break;
          case ferry_fuzz::Unary::abs: y.array = ferry::abs(x.array); break;
          case ferry_fuzz::Unary::relu: y.array = ferry::relu(x.array); break;
          case ferry_fuzz::Unary::tanh:
            if constexpr (ferry_fuzz::kFloating<T>) y.array = ferry::tanh(x.array);
            break;
        }
        y.ref = ferry_fuzz::unary(op, x.ref);
        break;
      }
      case 3: {
        log_ += "matmul ";
        const Value<T> w = fresh(c, dim(), x.device);
        add_deps(y.deps, w);
        y.array = ferry::matmul(x.array, w.array);
        y.ref = ferry_fuzz::matmul(x.ref, w.ref);
        break;
      }
      case 4: {
        const int axis = pick(2);
        log_ += "sum" + std::to_string(axis) + " ";
        y.array = ferry::sum(x.array, {axis}, true);
        y.ref = ferry_fuzz::sum(x.ref, axis);
        break;
      }
      case 5:
        log_ += "transpose ";
        y.array = ferry::transpose(x.array);
        y.ref = ferry_fuzz::transpose(x.ref);
        break;
      case 6: {
        const int axis = pick(2);
        const std::int64_t n = axis == 0 ? r : c;
        const std::int64_t begin = n == 0 ? 0 : pick(static_cast<int>(n + 1));
        const std::int64_t end = begin + pick(static_cast<int>(n - begin + 1));
        log_ += "slice" + std::to_string(axis) + "[" + std::to_string(begin) + "," +
                std::to_string(end) + ") ";
        y.array = ferry::slice(x.array, axis, begin, end);
        y.ref = ferry_fuzz::slice(x.ref, axis, begin, end);
        break;
      }
      case 7: {
        const int axis = pick(2);
        log_ += "concat" + std::to_string(axis) + " ";
        const Value<T> other = axis == 0 ? fresh(dim(), c, x.device) : fresh(r, dim(), x.device);
        add_deps(y.deps, other);
        y.array = ferry::concat({x.array, other.array}, axis);
        y.ref = ferry_fuzz::concat(x.ref, other.ref, axis);
        break;
      }
      case 8:
        log_ += "reshape ";
        y.array = ferry::reshape(x.array, Shape{c, r});
        y.ref = ferry_fuzz::reshape(x.ref, c, r);
        break;
      case 9: {
        const bool tiled = pick(2) == 0 && !(r == 0 && c == 0);
        log_ += tiled ? "tile " : "untile ";
        y.array = ferry::to_layout(
            x.array, ferry::Layout{ferry::MemorySpace::dram,
                                   tiled ? ferry::Order::tiled : ferry::Order::row_major});
        y.ref = x.ref;
        break;
      }
      case 10:
        log_ += "move ";
        y.device = 1 - x.device;
        y.array = x.array.to(devices_[static_cast<std::size_t>(y.device)]);
        y.ref = x.ref;
        break;
      case 11: {
        // Donation: the pool gives its handle away, so relu may overwrite the buffer in place.
        log_ += "donate ";
        Value<T> taken = std::move(pool_[at]);
        pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(at));
        x.array = {};
        y.array = ferry::relu(std::move(taken.array));
        y.ref = ferry_fuzz::unary(ferry_fuzz::Unary::relu, taken.ref);
        break;
      }
      case 12:
      case 13:
      case 15: {
        // An op along one axis: flip, cumsum or sort.
        const int axis = pick(2);
        const int which = pick(3);
        static constexpr const char* kAlongAxis[] = {"flip", "cumsum", "sort"};
        log_ += kAlongAxis[which] + std::to_string(axis) + " ";
        if (which == 0) {
          y.array = ferry::flip(x.array, axis);
          y.ref = ferry_fuzz::flip(x.ref, axis);
        } else if (which == 1) {
          y.array = ferry::cumsum(x.array, axis);
          y.ref = ferry_fuzz::cumsum(x.ref, axis);
        } else {
          y.array = ferry::sort(x.array, axis);
          y.ref = ferry_fuzz::sort(x.ref, axis);
        }
        break;
      }
      case 14: {
        if (r == 0) {  // nothing to gather from: a lower triangle instead
          const std::int64_t k = pick(5) - 2;
          log_ += "tril" + std::to_string(k) + " ";
          y.array = ferry::tril(x.array, k);
          y.ref = ferry_fuzz::tril(x.ref, k);
          break;
        }
        // Rows gathered by indices made on the same device, repeats and negatives included.
        std::vector<std::int64_t> rows(static_cast<std::size_t>(dim()));
        for (std::int64_t& i : rows) i = pick(static_cast<int>(2 * r)) - r;
        log_ += "take" + std::to_string(rows.size()) + " ";
        const auto idx = ferry::to_device(devices_[static_cast<std::size_t>(x.device)], rows,
                                          Shape{static_cast<std::int64_t>(rows.size())});
        y.array = ferry::take(x.array, idx, 0);
        y.ref = ferry_fuzz::take_rows(x.ref, rows);
        break;
      }
    }
    add_ranges(y.deps, before);
    if (pick(4) == 0) check(y, "export mid-program");
    pool_.push_back(std::move(y));
  }

  std::mt19937_64 rng_;
  std::vector<ferry::Device>& devices_;
  Faults faults_;
  std::size_t faults_seen_ = 0;
  std::vector<Value<T>> pool_;
  std::string log_;
  std::string failure_;
};

/// Two devices of a program of their own, failing as `seed` draws, on `second`'s executor for
/// the second one.
std::vector<ferry::Device> faulty_devices(std::uint64_t seed, Faults faults,
                                          const ferry::Executor& second) {
  std::mt19937_64 rng(seed);
  ferry::DeviceSpec spec = ferry::specs::pcie_accelerator();
  spec.faults = {.seed = seed,
                 .h2d_failure_rate = 0.03,
                 .d2h_failure_rate = 0.03,
                 .kernel_failure_rate = 0.05,
                 .fail_steps = {rng() % 40}};
  spec.fallback = faults == Faults::fallback ? ferry::Fallback::host : ferry::Fallback::none;
  return {ferry::Device::modeled(spec), ferry::Device::modeled(spec, second)};
}

/// What a program leaves on a device once its arrays are gone: an empty string, or what is
/// wrong. The model holds no memory, and no schedule beats its lower bound.
std::string bookkeeping(const ferry::Device& d) {
  const ferry::DeviceStats s = d.stats();
  std::string wrong;
  if (s.dram_bytes_in_use != 0 || s.l1_bytes_in_use != 0) {
    wrong += " holds " + std::to_string(s.dram_bytes_in_use) + " DRAM and " +
             std::to_string(s.l1_bytes_in_use) + " L1 bytes;";
  }
  if (s.lower_bound > s.makespan) {
    wrong += " lower bound " + std::to_string(s.lower_bound.count()) + " ns > makespan " +
             std::to_string(s.makespan.count()) + " ns;";
  }
  return wrong.empty() ? wrong : d.name() + wrong;
}

template <class T>
void fuzz(const char* type, std::uint64_t base_seed, Faults faults = Faults::off) {
  const ferry::Executor second(2);
  std::vector<ferry::Device> shared{ferry::Device(), ferry::Device(second)};
  const std::size_t total = iterations();
  constexpr std::size_t kThreads = 4;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> faults_seen{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (std::size_t i = next++; i < total; i = next++) {
        const std::uint64_t seed = base_seed + i;
        std::vector<ferry::Device> own;
        if (faults != Faults::off) own = faulty_devices(seed, faults, second);
        std::string failure;
        {
          Program<T> program(seed, faults == Faults::off ? shared : own, faults);
          failure = program.run();
          faults_seen += program.faults_seen();
        }
        for (const ferry::Device& d : own) {  // a program's own devices: checked after each
          if (failure.empty()) failure = bookkeeping(d);
        }
        if (!failure.empty()) {
          const std::lock_guard lock(mutex);
          failures.push_back(std::string(type) + " program " + std::to_string(seed) + ": " +
                             failure);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const ferry::Device& d : shared) EXPECT_EQ(bookkeeping(d), "");
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << total << " programs differ; first: "
                                << (failures.empty() ? "" : failures.front());
  // The failing mode must fail some exports, or it proves nothing.
  if (faults == Faults::failing && total >= 100) {
    EXPECT_GT(faults_seen.load(), total / 10);
  }
}

TEST(Fuzz, FloatProgramsMatchTheReference) { fuzz<float>("float", 1'000'000); }
TEST(Fuzz, IntProgramsMatchTheReference) { fuzz<std::int32_t>("int32", 2'000'000); }
TEST(Fuzz, Float16ProgramsMatchTheReference) { fuzz<ferry::float16>("float16", 7'000'000); }
TEST(Fuzz, NarrowIntProgramsMatchTheReference) {
  fuzz<std::int8_t>("int8", 8'000'000);
  fuzz<std::uint8_t>("uint8", 9'000'000);
  fuzz<std::int16_t>("int16", 10'000'000);
}
TEST(Fuzz, UnderFaultsEveryExportMatchesOrThrowsAFaultItDependsOn) {
  fuzz<float>("float", 3'000'000, Faults::failing);
  fuzz<std::int32_t>("int32", 4'000'000, Faults::failing);
}
TEST(Fuzz, WithHostFallbackEveryExportMatchesUnderFaults) {
  fuzz<float>("float", 5'000'000, Faults::fallback);
  fuzz<std::int32_t>("int32", 6'000'000, Faults::fallback);
}

}  // namespace
