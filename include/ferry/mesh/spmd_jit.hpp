#pragma once
// jit(spmd(mesh, fn)): an spmd function traced and replayed. The first call with given sizes
// runs the function once per device, as spmd does, while each device's thread records its own
// trace (program/trace.hpp); each named-axis collective is one op of that trace, whose replay
// makes the same named-axis call (mesh/spmd_run.hpp's exchange). Later calls whose every
// device's guards hold replay the devices' traces instead, on the devices' threads under the
// same baton as spmd: device 0's ops up to its first collective, device 1's, ..., the
// collective, and so on. So the calls the devices and links see come in spmd's order.
//
// Why a trace per device and not one trace replayed on all: a device's function may read its
// position (axis_index), capture each device's own arrays, or make arrays on its own device;
// each is a constant of that device's trace. The traces share one cache entry and are matched
// together, so a new size on any device replays every trace or retraces them all.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/spmd.hpp"
#include "ferry/mesh/spmd_run.hpp"
#include "ferry/program/entry.hpp"
#include "ferry/program/jit.hpp"
#include "ferry/program/trace.hpp"

namespace ferry {

namespace detail {

/// How jit(spmd) holds an argument while it runs: a MeshArray given away (an rvalue) by value,
/// so that a replay can take its shards over; anything else as the caller's const reference.
template <class A>
using SpmdJitArg = std::conditional_t<kIsMeshArray<std::remove_cvref_t<A>> &&
                                          !std::is_lvalue_reference_v<A>,
                                      std::remove_cvref_t<A>, const std::remove_cvref_t<A>&>;

template <class A>
const A& spmd_jit_value(const A& a) noexcept {
  return a;
}

/// Hands a given MeshArray's shards to the devices' replays: shard k becomes given[k][at]; a
/// MeshArray input moves `at` on either way (numbers are not inputs).
template <class A>
void take_spmd_shards(A& held, std::size_t& at, std::vector<std::vector<Handle>>& given) {
  using Plain = std::remove_cvref_t<A>;
  if constexpr (kIsMeshArray<Plain>) {
    if constexpr (!std::is_const_v<std::remove_reference_t<A>>) {
      std::vector<DeviceArray<typename Plain::value_type>> shards = std::move(held).shards();
      for (std::size_t k = 0; k < shards.size(); ++k) {
        given[k][at] = ArrayAccess::take(shards[k]);
      }
    }
    ++at;
  }
}

/// Whether jit(spmd) takes an argument of type A: a MeshArray (each device's shard an input of
/// its trace) or a number (a constant of the traces: each value its own entry). A DeviceArray
/// passes here to get spmd's error at the call.
template <class A>
inline constexpr bool kSpmdJitArgument =
    kIsMeshArray<A> || kIsDeviceArray<A> || (std::is_arithmetic_v<A> && !std::is_same_v<A, bool>);

/// One cached call of an spmd program: the traces of its devices, matched together.
struct SpmdEntry {
  std::vector<std::int64_t> scalars;  // the numbers it was traced with (floats as float_word)
  std::vector<Layout> layouts;        // device 0's inputs' layouts (all devices': same shards)
  std::vector<std::unique_ptr<const Entry>> devices;
};

struct SpmdCache {
  std::mutex mutex;
  std::vector<std::unique_ptr<const SpmdEntry>> entries;
  std::size_t hits = 0;
  std::size_t misses = 0;
  std::vector<std::string> refusals;  // the most recent traces not cached, and why
};

}  // namespace detail

/// An spmd function traced once per device and replayed: what jit(spmd(mesh, fn)) returns.
/// Call it as the Spmd it wraps; cache_size, cache_hits, cache_misses and explain are
/// Program's. Arguments are MeshArrays (each device's shard is an input of its trace) and
/// numbers (constants: each value traces anew); the function must not reach the host (to_host,
/// printing: the trace is refused and every call runs the function, as jit does).
template <class F>
class SpmdProgram {
 public:
  SpmdProgram(Spmd<F> spmd, CacheMode mode)
      : spmd_(std::move(spmd)), mode_(mode), cache_(std::make_shared<detail::SpmdCache>()) {}

  /// Replays the devices' traces when every device's guards hold for its shards, else runs
  /// the function once per device while tracing it. Returns what Spmd::operator() returns.
  /// A MeshArray given away (std::move, a temporary) is left empty, and a replay takes its
  /// shards over: each device's replay may donate its shard as a one-device replay donates a
  /// moved array (Program). Under a gradient tape or inside another trace it runs the function
  /// untraced, as a jit program does. Throws what Spmd::operator() throws.
  template <class... Args>
  auto operator()(Args&&... args) const {
    static_assert((detail::kSpmdJitArgument<std::remove_cvref_t<Args>> && ...),
                  "ferry::jit(spmd): arguments are MeshArrays and numbers (integers, floats, "
                  "doubles); SymInt, SymFloat and other objects cannot be traced yet");
    // Taken into locals: what the caller gave away is gone whichever path the call takes.
    return call(std::tuple<detail::SpmdJitArg<Args>...>(std::forward<Args>(args)...),
                std::index_sequence_for<Args...>());
  }

  /// The number of cached entries (each holds every device's trace).
  std::size_t cache_size() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->entries.size();
  }
  /// Calls that replayed an entry.
  std::size_t cache_hits() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->hits;
  }
  /// Calls that ran the function (once per device), whether or not the traces were cached.
  std::size_t cache_misses() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->misses;
  }

  /// Each cached entry's traces, device by device, then the traces not cached and why.
  std::string explain() const {
    const std::lock_guard lock(cache_->mutex);
    std::string out = "spmd program on " + spmd_.mesh_.spec().name + ": " +
                      std::to_string(cache_->entries.size()) + " entries, " +
                      std::to_string(cache_->hits) + " hits, " + std::to_string(cache_->misses) +
                      " misses (" + (mode_ == CacheMode::symbolic ? "symbolic" : "static_shapes") +
                      ")";
    for (std::size_t i = 0; i < cache_->entries.size(); ++i) {
      const detail::SpmdEntry& e = *cache_->entries[i];
      for (std::size_t k = 0; k < e.devices.size(); ++k) {
        out += "\nentry " + std::to_string(i) + ", device " + std::to_string(k) + ":\n" +
               e.devices[k]->explain();
      }
    }
    for (const std::string& r : cache_->refusals) out += "\nnot cached: " + r;
    return out;
  }

 private:
  static constexpr std::size_t kMaxRefusals = 8;

  template <class Tuple, std::size_t... I>
  auto call(Tuple held, std::index_sequence<I...>) const {
    // Each argument as the untraced call sees it (given or kept, the caller's value).
    return call_with(held, detail::spmd_jit_value(std::get<I>(held))...);
  }

  template <class Tuple, class... Args>
  auto call_with(Tuple& held, const Args&... args) const {
    if (detail::t_recorder != nullptr || detail::t_tape != nullptr ||
        detail::t_spmd_run != nullptr) {
      return spmd_(args...);
    }
    {
      std::size_t i = 0;
      (detail::check_spmd_argument(spmd_.mesh_, i++, args), ...);
    }
    using R = std::remove_cvref_t<std::invoke_result_t<const F&, detail::spmd_shard_t<Args>...>>;
    detail::check_out_count<R>(spmd_.out_);
    const Mesh& mesh = spmd_.mesh_;
    const auto n = static_cast<std::size_t>(mesh.size());
    std::vector<std::vector<detail::Step*>> inputs(n);
    std::vector<std::int64_t> scalars;
    auto collect = [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      if constexpr (detail::kIsMeshArray<A>) {
        for (std::size_t k = 0; k < n; ++k) {
          inputs[k].push_back(&detail::step_of("jit", a.shard(static_cast<std::int64_t>(k))));
        }
      } else if constexpr (detail::kIsDeviceArray<A>) {
        // check_spmd_argument has thrown.
      } else if constexpr (std::is_floating_point_v<A>) {
        scalars.push_back(detail::float_word(static_cast<double>(a)));
      } else {
        scalars.push_back(static_cast<std::int64_t>(a));
      }
    };
    (collect(args), ...);

    std::vector<std::vector<std::int64_t>> envs(n);
    if (const detail::SpmdEntry* hit = lookup(inputs, scalars, envs)) {
      std::vector<std::vector<detail::Handle>> handles(n);
      for (auto& h : handles) h.resize(hit->devices[0]->output_count());
      // Device k's replay takes device k's shard of each MeshArray given away.
      std::vector<std::vector<detail::Handle>> given(n);
      for (std::size_t k = 0; k < n; ++k) given[k].resize(inputs[k].size());
      std::apply([&](auto&... h) {
        std::size_t at = 0;
        (detail::take_spmd_shards(h, at, given), ...);
      }, held);
      detail::run_on_devices(mesh, nullptr, [&](std::size_t k) {
        hit->devices[k]->replay(inputs[k], envs[k], handles[k], given[k]);
      });
      std::vector<std::optional<R>> out(n);
      for (std::size_t k = 0; k < n; ++k) {
        std::size_t at = 0;
        out[k].emplace(detail::ResultTraits<R>::rebuild(handles[k], at));
      }
      return detail::assemble<R>(mesh, out, spmd_.out_);
    }
    return trace(inputs, std::move(scalars), args...);
  }

  /// The entry whose every device matches its inputs, with the expressions' values in `envs`;
  /// counts the hit or miss.
  const detail::SpmdEntry* lookup(const std::vector<std::vector<detail::Step*>>& inputs,
                                  const std::vector<std::int64_t>& scalars,
                                  std::vector<std::vector<std::int64_t>>& envs) const {
    std::vector<const Shape*> shapes;
    const std::lock_guard lock(cache_->mutex);
    const detail::SpmdEntry* hit = nullptr;
    for (const auto& e : cache_->entries) {
      if (e->scalars != scalars) continue;
      bool match = true;
      for (std::size_t i = 0; i < e->layouts.size() && match; ++i) {
        match = inputs[0][i]->layout() == e->layouts[i];
      }
      for (std::size_t k = 0; k < inputs.size() && match; ++k) {
        match = e->devices[k]->matches(inputs[k], {}, envs[k], shapes);
      }
      if (match) {
        hit = e.get();
        break;
      }
    }
    ++(hit ? cache_->hits : cache_->misses);
    return hit;
  }

  template <class... Args>
  auto trace(const std::vector<std::vector<detail::Step*>>& inputs,
             std::vector<std::int64_t> scalars, const Args&... args) const {
    using R = std::remove_cvref_t<std::invoke_result_t<const F&, detail::spmd_shard_t<Args>...>>;
    const Mesh& mesh = spmd_.mesh_;
    const std::size_t n = inputs.size();
    std::vector<std::unique_ptr<detail::Trace>> traces;
    for (std::size_t k = 0; k < n; ++k) {
      traces.push_back(std::make_unique<detail::Trace>(mode_ == CacheMode::symbolic, inputs[k],
                                                       std::span<const std::int64_t>(),
                                                       std::span<const bool>(),
                                                       std::span<const bool>()));
    }
    std::vector<detail::SpmdTracing> tracing(n);
    std::vector<std::optional<R>> out(n);
    detail::run_on_devices(mesh, nullptr, [&](std::size_t k) {
      const detail::TraceScope scope(*traces[k]);
      tracing[k].trace = traces[k].get();
      struct Tracing {  // the device's thread ends with the body, but an error must not skip it
        explicit Tracing(detail::SpmdTracing& t) noexcept { detail::t_spmd_tracing = &t; }
        ~Tracing() { detail::t_spmd_tracing = nullptr; }
        Tracing(const Tracing&) = delete;
        Tracing& operator=(const Tracing&) = delete;
      } const seen(tracing[k]);
      out[k].emplace(std::invoke(spmd_.fn_, detail::spmd_shard(args, k)...));
    });
    std::string reason;
    std::vector<std::vector<detail::Step*>> results(n);
    for (std::size_t k = 0; k < n; ++k) {
      detail::ResultTraits<R>::flatten(*out[k], results[k]);
      if (!traces[k]->refusal().empty() && reason.empty()) {
        reason = "device " + std::to_string(k) + ": " + traces[k]->refusal();
      }
      for (detail::Step* s : results[k]) {
        if (s == nullptr && reason.empty()) reason = "an empty result (spmd's error follows)";
      }
    }
    if (!reason.empty()) {
      const std::lock_guard lock(cache_->mutex);
      if (cache_->refusals.size() == kMaxRefusals) cache_->refusals.erase(cache_->refusals.begin());
      cache_->refusals.push_back(std::move(reason));
      // Throws for an empty result, as spmd does.
      return detail::assemble<R>(mesh, out, spmd_.out_);
    }
    auto entry = std::make_unique<detail::SpmdEntry>();
    entry->scalars = std::move(scalars);
    for (detail::Step* s : inputs[0]) entry->layouts.push_back(s->layout());
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<std::uint32_t> values;
      for (detail::Step* s : results[k]) values.push_back(traces[k]->value_of(*s));
      entry->devices.push_back(std::make_unique<const detail::Entry>(*traces[k], std::move(values),
                                                                     tracing[k].collectives));
    }
    // Checks each result's device first.
    auto assembled = detail::assemble<R>(mesh, out, spmd_.out_);
    const std::lock_guard lock(cache_->mutex);
    cache_->entries.push_back(std::move(entry));
    return assembled;
  }

  Spmd<F> spmd_;
  CacheMode mode_;
  std::shared_ptr<detail::SpmdCache> cache_;
};

/// `s` traced and replayed (see SpmdProgram): the first call with given sizes runs the
/// function once per device while recording each device's trace, with its named-axis
/// collectives; later calls whose sizes every device's guards accept (in symbolic mode, a new
/// batch size) replay the traces without running the function.
template <class F>
SpmdProgram<F> jit(const Spmd<F>& s, CacheMode mode = CacheMode::symbolic) {
  return SpmdProgram<F>(s, mode);
}
template <class F>
SpmdProgram<F> jit(Spmd<F>& s, CacheMode mode = CacheMode::symbolic) {
  return SpmdProgram<F>(s, mode);
}
template <class F>
SpmdProgram<F> jit(Spmd<F>&& s, CacheMode mode = CacheMode::symbolic) {
  return SpmdProgram<F>(std::move(s), mode);
}

}  // namespace ferry
