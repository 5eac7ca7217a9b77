#pragma once
// The cost model: how a step's work meets the device a DeviceSpec describes.
//
// A kernel's work divides into tiles (Cost::tiles, or derived: one per tile_bytes of what it
// moves; a matmul's output tiles, chosen here). On u units its tiles run in ceil(tiles / u)
// waves of one tile's time each, at the achievable rate of its class (KernelRates). Its bytes
// come from L1 (a rate of its own), or from a shared pool, L2 when they fit there, DRAM
// otherwise, at the bandwidth the scheduler shares out to it, capped by what its units can move.
// It takes the larger of its compute and its memory time, after the kernel latency. A copy
// takes its link's latency, then its bytes at the link's rate; a copy between devices also
// draws on DRAM. Cost::fixed is exactly its duration on one unit.
//
// The scheduler decides units and bandwidth; here is what a step takes given them. Times are
// in nanoseconds, rounded up once, so timelines are whole nanoseconds.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "ferry/core/config.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/model/horizon.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// Where the conversions below stop (2^62 ns, inside a Duration: past it the cast to an
/// integer would be undefined). custom refuses a step longer than kLongestStep.
inline constexpr double kSaturatedNs = 4611686018427387904.0;

/// `seconds` as a Duration, rounded up to whole nanoseconds.
inline Duration to_duration(double seconds) {
  return Duration(static_cast<Duration::rep>(std::min(std::ceil(seconds * 1e9), kSaturatedNs)));
}

/// `ns` rounded up to whole nanoseconds, forgiving the last bits of floating-point error (so
/// 4 flops at 1 per ns is 4 ns, not 5): an error relative to `ns`, but never a thousandth of a
/// nanosecond or more, so that a long step is not cut short by whole nanoseconds.
inline Duration ns_up(double ns) {
  if (!(ns > 0)) return Duration::zero();
  const double forgiven = std::min(ns * 1e-12, 1e-3);
  return Duration(static_cast<Duration::rep>(std::min(std::ceil(ns - forgiven), kSaturatedNs)));
}

/// The peak of one compute unit for kernels computing on `t`.
inline double unit_rate(const DeviceSpec& spec, DType t) {
  switch (t) {
    // The 16-bit matrix units of the devices modeled run float16 at bfloat16's rate.
    case DType::bfloat16:
    case DType::float16: return spec.unit_flops_per_second.bfloat16;
    case DType::float32: return spec.unit_flops_per_second.float32;
    case DType::float64: return spec.unit_flops_per_second.float64;
    case DType::int8:
    case DType::uint8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
    case DType::boolean: return spec.unit_flops_per_second.integer;
  }
  return spec.unit_flops_per_second.float32;
}

inline const KernelClassRates& rates_of(const DeviceSpec& spec, Work w) {
  switch (w) {
    case Work::elementwise: return spec.kernel_rates.elementwise;
    case Work::reduction: return spec.kernel_rates.reduction;
    case Work::layout: return spec.kernel_rates.layout;
    case Work::matmul: return spec.kernel_rates.matmul;
  }
  return spec.kernel_rates.elementwise;
}

/// The shared bandwidth a step draws on.
enum class Pool : std::uint8_t { dram, l2, none };
inline constexpr std::size_t kPools = 2;  // all but `none`

/// Bytes per nanosecond each pool gives the work running together.
inline std::array<double, kPools> pool_capacity(const DeviceSpec& spec) {
  return {spec.dram_bytes_per_second * spec.dram_efficiency / 1e9,
          spec.l2_bytes > 0 ? spec.l2_bytes_per_second / 1e9 : 0.0};
}

/// What a step needs of the device; the scheduler adds units and bandwidth.
struct KernelPlan {
  std::int64_t tiles = 1;
  double tile_ns = 0;       // one tile's compute on one unit (a copy: its bytes at the link's rate)
  double local_ns = 0;      // traffic to memory nobody shares (L1)
  double shared_bytes = 0;  // bytes drawn from `pool`
  double unit_cap = 0;      // bytes per ns one unit can move; 0: no limit
  Pool pool = Pool::none;
  Duration latency{};       // kernel latency, or a copy's
  Duration fixed{-1};       // Cost::fixed's exact duration, or negative

  bool is_fixed() const noexcept { return fixed >= Duration::zero(); }

  /// The most units it can use.
  std::int64_t max_units(std::int64_t units) const noexcept { return std::min(tiles, units); }

  /// The rounds its tiles take on `units` >= 1 units: ceil(tiles / units), in integers (exact,
  /// and no call to ceil on the per-step path).
  double waves(std::int64_t units) const noexcept {
    return static_cast<double>((tiles + units - 1) / units);
  }

  /// Nanoseconds of work (after the latency) on `units` units with `bandwidth` bytes per ns of
  /// its pool.
  double work_ns(std::int64_t units, double bandwidth) const noexcept {
    units = std::max<std::int64_t>(units, 1);  // a copy holds no unit: its engine is its one
    const double compute = waves(units) * tile_ns;
    double memory = local_ns;
    if (shared_bytes > 0) {
      const double cap = unit_cap > 0 ? unit_cap * static_cast<double>(units) : bandwidth;
      memory += shared_bytes / std::min(bandwidth, cap);
    }
    return std::max(compute, memory);
  }

  /// The bandwidth beyond which it runs no faster on `units` units: what it asks of its pool.
  double demand(std::int64_t units) const noexcept {
    if (shared_bytes <= 0) return 0;
    units = std::max<std::int64_t>(units, 1);
    const double cap = unit_cap > 0 ? unit_cap * static_cast<double>(units)
                                    : std::numeric_limits<double>::infinity();
    const double slack = waves(units) * tile_ns - local_ns;  // time left for shared traffic
    return slack > 0 ? std::min(cap, shared_bytes / slack) : cap;
  }
};

namespace plan_detail {

/// Where `bytes` of a kernel's traffic come from.
inline void place_shared(const DeviceSpec& spec, double bytes, KernelPlan& p) {
  if (bytes <= 0) return;
  p.shared_bytes = bytes;
  p.pool = spec.l2_bytes > 0 && bytes <= static_cast<double>(spec.l2_bytes) ? Pool::l2 : Pool::dram;
}

/// The matmul's output tiling: tm x tn tiles, k split in `split` parts, the choice that finishes
/// first on the whole device (a tuned library's heuristic); split parts add their partial sums.
inline void plan_matmul(const DeviceSpec& spec, const Cost& cost, double rate_per_ns,
                        KernelPlan& p) {
  // Plain names, not a structured binding: lambdas below use them (clang 14 cannot capture one).
  const std::int64_t batch = cost.grid[0];
  const std::int64_t m = cost.grid[1];
  const std::int64_t k = cost.grid[2];
  const std::int64_t n = cost.grid[3];
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) {
    p.tiles = 1;
    p.tile_ns = 0;
    return;
  }
  const auto units = static_cast<double>(spec.compute_units);
  const auto wave_ns = static_cast<double>(spec.kernel_rates.matmul.tile_overhead.count());
  const double whole = spec.dram_bytes_per_second * spec.dram_efficiency / 1e9;
  // Edges of powers of two from 16 up to the largest, and 3/4 of each (a library's 192, 96...);
  // columns up to twice the largest.
  const std::int64_t largest = std::max<std::int64_t>(16, spec.matmul_tile);
  std::array<std::int64_t, 32> edges{};
  std::size_t count = 0;
  for (std::int64_t e = 2 * largest; e >= 16 && count + 2 <= edges.size(); e /= 2) {
    edges[count++] = e;
    if (e * 3 / 4 >= 16) edges[count++] = e * 3 / 4;
  }
  // Calls visit(tiles, tile_ns, partial_bytes, time alone) for every tiling.
  const auto each_tiling = [&](auto&& visit) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t tm = edges[i];
      if (tm > largest) continue;
      for (std::size_t j = 0; j < count; ++j) {
        const std::int64_t tn = edges[j];
        // A tile larger than the matrix computes only the matrix: small products are not
        // charged for padding, edge tiles of large ones are (wave quantization).
        const double area = static_cast<double>(std::min(tm, m) * std::min(tn, n));
        const double eff =
            spec.matmul_tile_half_area > 0 ? area / (area + spec.matmul_tile_half_area) : 1.0;
        const double out_tiles = static_cast<double>(batch) *
                                 std::ceil(static_cast<double>(m) / static_cast<double>(tm)) *
                                 std::ceil(static_cast<double>(n) / static_cast<double>(tn));
        for (std::int64_t split = 1; split == 1 || (split <= 64 && k / split >= 128); split *= 2) {
          const double tiles = out_tiles * static_cast<double>(split);
          if (split > 1 && tiles > 2 * units) break;  // splitting further only adds partial sums
          const double tile_k = std::ceil(static_cast<double>(k) / static_cast<double>(split));
          const double tile_ns = 2.0 * area * tile_k / (rate_per_ns * eff) + wave_ns;
          const double partials =
              split > 1 ? 2.0 * static_cast<double>(split * batch * m * n) * 4 : 0;
          visit(tiles, tile_ns, partials, std::ceil(tiles / units) * tile_ns + partials / whole);
        }
      }
    }
  };
  // The fastest time alone; then, of the tilings within the spec's slack of it, the one that
  // holds the fewest units for the least time: a library does not spread a small product over
  // every unit for a few percent, which leaves units to kernels beside it.
  double fastest = std::numeric_limits<double>::infinity();
  each_tiling([&](double, double, double, double time) { fastest = std::min(fastest, time); });
  double least = std::numeric_limits<double>::infinity();
  each_tiling([&](double tiles, double tile_ns, double partials, double time) {
    if (time > fastest * (1 + spec.matmul_tile_slack)) return;
    const double unit_time = tiles * tile_ns;
    if (unit_time < least) {
      least = unit_time;
      p.tiles = static_cast<std::int64_t>(tiles);
      p.tile_ns = tile_ns;
      p.shared_bytes = partials;  // added to the operands' bytes by the caller
    }
  });
}

}  // namespace plan_detail

/// The matmul tilings a model has chosen, by shape and element type: a program repeats its
/// shapes, and choosing one tries a few hundred tilings.
class MatmulTilings {
 public:
  struct Choice {
    std::int64_t tiles = 1;
    double tile_ns = 0;
    double partial_bytes = 0;
  };

  /// The choice for `cost` computing on `dtype`, made by `choose` the first time.
  template <class Choose>
  Choice get(const Cost& cost, DType dtype, Choose&& choose) {
    const Key key{cost.grid, dtype};
    if (const auto it = chosen_.find(key); it != chosen_.end()) return it->second;
    if (chosen_.size() >= kMostShapes) chosen_.clear();  // a program of ever new shapes
    return chosen_.emplace(key, choose()).first->second;
  }

 private:
  static constexpr std::size_t kMostShapes = 4096;
  struct Key {
    std::array<std::int64_t, 4> grid;
    DType dtype;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const noexcept {
      std::size_t h = static_cast<std::size_t>(k.dtype);
      for (std::int64_t v : k.grid) h = h * 1000003u ^ std::hash<std::int64_t>{}(v);
      return h;
    }
  };
  std::unordered_map<Key, Choice, Hash> chosen_;
};

/// The plan of a step of `kind` with `cost`, computing on `dtype`: `l1_share_read` of its reads
/// and all its writes (when `writes_l1`) stay in L1.
FERRY_DECL KernelPlan plan_step(const DeviceSpec& spec, StepKind kind, const Cost& cost,
                                DType dtype, double l1_share_read = 0, bool writes_l1 = false,
                                MatmulTilings* tilings = nullptr);
#if FERRY_DEFINES_DECLS
FERRY_DECL KernelPlan plan_step(const DeviceSpec& spec, StepKind kind, const Cost& cost,
                                DType dtype, double l1_share_read, bool writes_l1,
                                MatmulTilings* tilings) {
  KernelPlan p;
  const double moved = cost.bytes_read;  // a copy reads as much as it writes
  const auto copy = [&](double rate, Duration latency, Duration shortest = Duration::zero()) {
    p.tile_ns = std::max(moved / (rate / 1e9), static_cast<double>((shortest - latency).count()));
    p.latency = latency;
  };
  switch (kind) {
    case StepKind::view: return p;
    case StepKind::copy_in:
      copy(spec.h2d_bytes_per_second, spec.h2d_latency, spec.h2d_min_duration);
      return p;
    case StepKind::copy_out:
      copy(spec.d2h_bytes_per_second, spec.d2h_latency, spec.d2h_min_duration);
      return p;
    case StepKind::copy_d2d:
      if (cost.fixed_duration) {  // a mesh collective's receive: the links carried the bytes
        p.fixed = *cost.fixed_duration;
        return p;
      }
      copy(spec.d2d_bytes_per_second, spec.d2d_latency);
      plan_detail::place_shared(spec, moved, p);
      if (p.pool == Pool::l2) p.pool = Pool::dram;  // data from elsewhere is not in this cache
      return p;
    case StepKind::compute: break;
  }
  if (cost.fixed_duration) {
    p.fixed = *cost.fixed_duration;
    return p;
  }
  const KernelClassRates& r = rates_of(spec, cost.work);
  const double rate_per_ns = unit_rate(spec, dtype) * r.compute_efficiency / 1e9;
  const double l1_bytes = cost.bytes_read * l1_share_read + (writes_l1 ? cost.bytes_written : 0);
  const double other_bytes = cost.bytes_read + cost.bytes_written - l1_bytes;
  p.latency = spec.kernel_latency;
  p.local_ns = l1_bytes / (spec.l1_bytes_per_second / 1e9);
  p.unit_cap = r.unit_bytes_per_second / 1e9;
  if (cost.work == Work::matmul && cost.tiles == 0) {
    const auto choose = [&] {
      KernelPlan chosen;
      plan_detail::plan_matmul(spec, cost, rate_per_ns, chosen);
      return MatmulTilings::Choice{chosen.tiles, chosen.tile_ns, chosen.shared_bytes};
    };
    const MatmulTilings::Choice c =
        tilings != nullptr ? tilings->get(cost, dtype, choose) : choose();
    p.tiles = c.tiles;
    p.tile_ns = c.tile_ns;
    p.shared_bytes = c.partial_bytes;
    plan_detail::place_shared(spec, other_bytes + p.shared_bytes, p);
    return p;
  }
  const double all_bytes = cost.bytes_read + cost.bytes_written;
  p.tiles = cost.tiles > 0
                ? cost.tiles
                : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(
                                                all_bytes / static_cast<double>(spec.tile_bytes))));
  p.tile_ns = cost.flops / static_cast<double>(p.tiles) / rate_per_ns +
              static_cast<double>(r.tile_overhead.count());
  plan_detail::place_shared(spec, other_bytes, p);
  return p;
}
#endif

/// The shortest a step with plan `p` can take on the device: every unit it can use, its pool's
/// whole bandwidth. The duration when it runs alone, and what the lower bound counts.
inline Duration solo_duration(const DeviceSpec& spec, const KernelPlan& p) {
  if (p.is_fixed()) return p.fixed;
  const double pool = p.pool == Pool::none ? std::numeric_limits<double>::infinity()
                                           : pool_capacity(spec)[static_cast<std::size_t>(p.pool)];
  return p.latency + ns_up(p.work_ns(p.max_units(spec.compute_units), pool));
}

/// The modeled duration of a step of `kind` with `cost` when it runs alone on the device.
inline Duration step_duration(const DeviceSpec& spec, StepKind kind, const Cost& cost, DType dtype,
                              double l1_share_read = 0, bool writes_l1 = false) {
  if (kind == StepKind::view) return Duration::zero();
  return solo_duration(spec, plan_step(spec, kind, cost, dtype, l1_share_read, writes_l1));
}

/// How long a step the device rejected takes on the host instead (Fallback::host): the
/// `read_back` bytes of its device inputs over the d2h link, its kernel at the host CPU's rates
/// (specs::host_cpu), and the `send` bytes of its output over the h2d link. A copy does no host
/// work: a copy in is sent again, a copy out read again.
inline Duration fallback_duration(const DeviceSpec& spec, StepKind kind, const Cost& cost,
                                  DType dtype, double read_back, double send) {
  static const DeviceSpec host = specs::host_cpu();
  const auto link = [](double bytes, Duration latency, double rate) {
    return bytes > 0 ? latency + to_duration(bytes / rate) : Duration::zero();
  };
  const Duration work =
      kind == StepKind::compute ? step_duration(host, kind, cost, dtype) : Duration::zero();
  // Each part is held at 2^62 ns, their sum at the largest Duration: past the horizon, so the
  // device fails such a step (model/horizon.hpp) rather than overflow here.
  return held_sum(held_sum(link(read_back, spec.d2h_latency, spec.d2h_bytes_per_second), work),
                  link(send, spec.h2d_latency, spec.h2d_bytes_per_second));
}

}  // namespace ferry::detail
