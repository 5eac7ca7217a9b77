#pragma once
// ferry::spmd: one function run once per device of a mesh on that device's shards, as JAX's
// shard_map runs it, with collectives along named mesh axes (all_reduce(x, "tp")) inside. Here
// are spmd's arguments and results and the named-axis collectives; the per-device run they
// share (the baton and the meeting at each collective) is mesh/spmd_run.hpp.
//
// How it runs: one host thread per device, but only one of them runs at a time. A baton goes
// to the lowest-numbered device whose function can go on; a device gives it up when its
// function reaches a collective or returns. When every device waits at its k-th collective,
// the last of them checks that all made the same call and runs the mesh collective
// (mesh/collectives.hpp) over all of their operands at once; then the baton starts again at
// device 0. So the sequence of calls the devices and the links see is a function of the
// program alone (device 0's ops up to its first collective, device 1's, ..., the collective,
// device 0's next ops, ...), never of thread timing, and the timeline is the same on every run.
// Ops return futures at once, so running the functions one at a time costs the host little:
// the kernels still run concurrently on the executor. A gradient tape open on the calling
// thread records every device's ops (they run on it one at a time).
//
// Every device must make the same sequence of collective calls (as every device runs the same
// program under shard_map). A device that returns, or throws, while others wait at a collective
// makes each waiter's collective throw InvalidArgument naming the missing devices, so nothing
// hangs; two devices making different calls at the same point make every device's call throw
// InvalidArgument naming both.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/spmd_run.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry {

namespace detail {

template <class A>
struct SpmdShard {
  using type = const A&;
};
template <Element T>
struct SpmdShard<MeshArray<T>> {
  using type = const DeviceArray<T>&;
};
/// What device k's function receives for an argument of type A: a MeshArray's shard, or the
/// argument itself.
template <class A>
using spmd_shard_t = typename SpmdShard<std::remove_cvref_t<A>>::type;

template <class R>
struct SpmdResult : std::false_type {};
template <Element T>
struct SpmdResult<DeviceArray<T>> : std::true_type {
  using type = MeshArray<T>;
};
template <Element... Ts>
struct SpmdResult<std::tuple<DeviceArray<Ts>...>> : std::true_type {
  using type = std::tuple<MeshArray<Ts>...>;
};
template <Element A, Element B>
struct SpmdResult<std::pair<DeviceArray<A>, DeviceArray<B>>> : std::true_type {
  using type = std::pair<MeshArray<A>, MeshArray<B>>;
};

template <class A>
inline constexpr bool kIsDeviceArray = false;
template <Element T>
inline constexpr bool kIsDeviceArray<DeviceArray<T>> = true;

/// Checks spmd's argument `i`: a mesh array of `mesh`; no DeviceArray (it lives on one device).
template <class A>
void check_spmd_argument(const Mesh& mesh, std::size_t i, const A& a) {
  if constexpr (kIsMeshArray<A>) {
    if (!a.valid()) fail<InvalidArgument>("spmd", "argument ", i, " is an empty mesh array");
    if (!(a.mesh() == mesh)) {
      fail<InvalidArgument>("spmd", "argument ", i, " lives on mesh ", a.mesh().spec().name, " ",
                            a.mesh().shape(), ", not on the mesh ", mesh.spec().name, " ",
                            mesh.shape(), " the function runs on");
    }
  } else if constexpr (kIsDeviceArray<A>) {
    fail<InvalidArgument>("spmd", "argument ", i, " is a DeviceArray ",
                          a.valid() ? "on " + a.device().name() : std::string("(empty)"),
                          ", which one device holds: give a MeshArray (ferry::distribute or "
                          "MeshArray::from_shards) so each device gets its own shard");
  }
}

template <class A>
spmd_shard_t<A> spmd_shard(const A& a, std::size_t k) {
  if constexpr (kIsMeshArray<A>) {
    return a.shard(static_cast<std::int64_t>(k));
  } else {
    return a;
  }
}

/// The number of arrays a function run by spmd returns (R: a DeviceArray, a tuple or a pair).
template <class R>
constexpr std::size_t spmd_result_count() {
  if constexpr (kIsDeviceArray<R>) {
    return 1;
  } else {
    return std::tuple_size_v<R>;
  }
}

/// Checks spmd's out placements `out` (when given) against a function returning R: one
/// Placements per result.
template <class R>
void check_out_count(const std::optional<std::vector<Placements>>& out) {
  constexpr std::size_t n = spmd_result_count<R>();
  if (out && out->size() != n) {
    fail<InvalidArgument>("spmd", "out_placements give placements for ", out->size(),
                          out->size() == 1 ? " result" : " results", ", the function returns ", n,
                          n == 1 ? " array" : " arrays", ": give one Placements per result");
  }
}

/// Result `index` (every device's `shards`, checked) placed by `ps`: the global shape is
/// device 0's shard's, each Shard(d) axis's dim d summed over the devices along that axis.
/// Throws InvalidArgument naming spmd for placements that do not fit the mesh or the rank,
/// ShapeError naming spmd, the device and the placements for a shard whose shape is not the
/// one the placements give it (array_split's sizes along a Shard axis, the same elsewhere).
template <Element T>
MeshArray<T> placed_result(const Mesh& mesh, std::vector<DeviceArray<T>> shards,
                           std::size_t index, const Placements& ps) {
  constexpr std::string_view op = "spmd";
  const Shape first = shards[0].shape();
  const Placements norm = normalized_placements(op, mesh.spec(), first, ps);
  std::vector<std::int64_t> dims(first.dims().begin(), first.dims().end());
  const std::vector<std::int64_t>& sizes = mesh.shape().sizes();
  for (std::size_t x = 0; x < norm.size(); ++x) {
    const auto* shard = std::get_if<Shard>(&norm[x]);
    if (shard == nullptr) continue;
    std::int64_t stride = 1;  // devices are row-major: the step between positions along x
    for (std::size_t y = x + 1; y < sizes.size(); ++y) stride *= sizes[y];
    const auto d = static_cast<std::size_t>(shard->dim);
    dims[d] = 0;
    for (std::int64_t p = 0; p < sizes[x]; ++p) {
      const Shape& s = shards[static_cast<std::size_t>(p * stride)].shape();
      if (s.rank() == first.rank()) dims[d] += s.dims()[d];
    }
  }
  const Shape global{std::span<const std::int64_t>(dims)};
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const MeshCoordinate at = mesh.shape().coordinate_of(static_cast<std::int64_t>(k));
    const Shape want = block_of(global, norm, mesh.shape(), at).shape();
    if (shards[k].shape() != want) {
      fail<ShapeError>(op, "result ", index, " of device ", k, " has shape ", shards[k].shape(),
                       "; out placements ", placements_text(norm), " of global shape ", global,
                       " (from the shards along each Shard axis) give device ", k, " ", at,
                       " the shape ", want);
    }
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards), global, norm);
}

/// The MeshArray of result `index` of every device's function (checked to live on its device),
/// placed by `ps` when given.
template <Element T, class Get>
MeshArray<T> gather_results(const Mesh& mesh, std::size_t n, std::size_t index, Get get,
                            const Placements* ps) {
  std::vector<DeviceArray<T>> shards;
  for (std::size_t k = 0; k < n; ++k) {
    DeviceArray<T> s = get(k);
    const Device here = mesh.devices()[k];
    if (!s.valid()) {
      fail<InvalidArgument>("spmd", "result ", index, " of device ", k, " (", here.name(),
                            ") is an empty handle");
    }
    if (!(s.device() == here)) {
      fail<InvalidArgument>("spmd", "result ", index, " of device ", k, " (", here.name(),
                            ") lives on ", s.device().name(),
                            ": each device's function must return arrays on its own device");
    }
    shards.push_back(std::move(s));
  }
  if (ps != nullptr) return placed_result(mesh, std::move(shards), index, *ps);
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

/// Every device's results as MeshArrays, placed by `places` (one per result) when given.
template <class R>
typename SpmdResult<R>::type assemble(const Mesh& mesh, std::vector<std::optional<R>>& out,
                                      const std::optional<std::vector<Placements>>& places) {
  const std::size_t n = out.size();
  auto placements = [&](std::size_t i) { return places ? &(*places)[i] : nullptr; };
  if constexpr (kIsDeviceArray<R>) {
    using T = typename R::value_type;
    return gather_results<T>(
        mesh, n, 0, [&](std::size_t k) { return std::move(*out[k]); }, placements(0));
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return typename SpmdResult<R>::type{
          gather_results<typename std::tuple_element_t<I, R>::value_type>(
              mesh, n, I, [&](std::size_t k) { return std::move(std::get<I>(*out[k])); },
              placements(I))...};
    }
    (std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

}  // namespace detail

template <class F>
class SpmdProgram;  // mesh/spmd_jit.hpp

/// A function run once per device of a mesh: see ferry::spmd.
template <class F>
class Spmd {
 public:
  Spmd(Mesh mesh, F fn, std::optional<std::vector<Placements>> out_placements = std::nullopt)
      : mesh_(std::move(mesh)), fn_(std::move(fn)), out_(std::move(out_placements)) {}

  /// Runs the function once per device, device k's call given the shard of device k of each
  /// MeshArray argument and every other argument as it is; returns a MeshArray of the
  /// DeviceArrays the calls return (no global view, or placed by the out placements when
  /// given), or a tuple (pair) of them for a tuple (pair). Returns once every call has
  /// returned; their ops run on as futures. Throws InvalidArgument for an empty MeshArray
  /// argument, one on another mesh, a DeviceArray argument, out placements for another number
  /// of results (before any device runs), a result not on its device; for placed results, as
  /// spmd(mesh, fn, out_placements) says; otherwise what a device's function threw, the first
  /// by device order (preferring a cause to the errors it gave devices waiting at a
  /// collective).
  template <class... Args>
  auto operator()(const Args&... args) const {
    static_assert(std::is_invocable_v<const F&, detail::spmd_shard_t<Args>...>,
                  "ferry::spmd: the function must take each MeshArray<T> argument as a "
                  "DeviceArray<T> (its shard) and every other argument as given");
    using R = std::remove_cvref_t<std::invoke_result_t<const F&, detail::spmd_shard_t<Args>...>>;
    static_assert(detail::SpmdResult<R>::value,
                  "ferry::spmd: the function must return a DeviceArray<T>, or a std::tuple or "
                  "std::pair of them");
    {
      std::size_t i = 0;
      (detail::check_spmd_argument(mesh_, i++, args), ...);
    }
    detail::check_out_count<R>(out_);
    if (detail::t_recorder != nullptr) {
      // A trace of the calling thread sees none of the devices' threads: trace the spmd
      // function itself, jit(spmd(mesh, fn)) (mesh/spmd_jit.hpp).
      detail::t_recorder->refuse(
          "spmd inside a traced function cannot be traced: its devices' functions run on "
          "threads of their own (jit the spmd function itself: jit(spmd(mesh, fn)))");
    }
    std::vector<std::optional<R>> out(static_cast<std::size_t>(mesh_.size()));
    detail::run_on_devices(mesh_, detail::t_tape, [&](std::size_t k) {
      out[k].emplace(std::invoke(fn_, detail::spmd_shard(args, k)...));
    });
    return detail::assemble<R>(mesh_, out, out_);
  }

 private:
  template <class G>
  friend class SpmdProgram;

  Mesh mesh_;
  F fn_;
  std::optional<std::vector<Placements>> out_;  // one per result, when given
};

/// `fn` run once per device of `mesh`, as JAX's shard_map runs it: `spmd(mesh, fn)(args...)`
/// calls `fn` on each device with that device's shard (a DeviceArray) of each MeshArray
/// argument and every other argument as given, and returns the MeshArray of what the calls
/// return. Inside `fn`, the named-axis collectives (all_reduce(x, "tp"), ...) and axis_index,
/// axis_size work along the mesh's named axes (MeshSpec::axis_names). Every device must make
/// the same collective calls in the same order. Deterministic: the devices' and the links'
/// timelines depend on the program only. jit(spmd(mesh, fn)) traces it once per device and
/// replays it (mesh/spmd_jit.hpp); an spmd call inside another traced function is refused (that
/// program runs its function every time). Throws nothing itself; see Spmd::operator().
template <class F>
Spmd<std::decay_t<F>> spmd(Mesh mesh, F&& fn) {
  return Spmd<std::decay_t<F>>(std::move(mesh), std::forward<F>(fn));
}

/// spmd(mesh, fn) whose results are placed (JAX's out_specs): `out_placements` holds one
/// Placements per result of fn (one for a function returning a DeviceArray, in order for a
/// tuple or pair), one placement per mesh axis each. Result i is MeshArray::from_shards(mesh,
/// shards, global, out_placements[i]) with the global shape the shards form: device 0's shard's
/// shape, along each Shard(d) axis dim d the sum of the shards' along that axis (which must be
/// array_split's sizes), every other dim the same on every device; a Replicate axis says the
/// devices along it hold copies, a Partial one summands (what the function computed is not
/// checked: all_reduce along a Replicate axis is the function's to call).
/// `ferry::spmd(mesh, fn, {{ferry::Replicate{}}})(x)`: a loss every device holds, as
/// value_and_grad takes it. Throws, at the call, InvalidArgument naming spmd for a count of
/// Placements other than the results' (before any device runs) and for placements that do not
/// fit the mesh or the rank; ShapeError naming spmd, the result, the device and the placements
/// for a shard whose shape is not the one they give it; otherwise like spmd(mesh, fn).
template <class F>
Spmd<std::decay_t<F>> spmd(Mesh mesh, F&& fn, std::vector<Placements> out_placements) {
  return Spmd<std::decay_t<F>>(std::move(mesh), std::forward<F>(fn), std::move(out_placements));
}

/// This device's position along the named mesh axis `axis`, inside a function run by spmd.
/// Throws InvalidArgument outside spmd or for an axis the mesh does not name.
inline std::int64_t axis_index(std::string_view axis) {
  constexpr std::string_view name = "axis_index";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  return run.mesh()
      .shape()
      .coordinate_of(static_cast<std::int64_t>(detail::t_spmd_device))
      .indices()[static_cast<std::size_t>(a)];
}

/// The number of devices along the named mesh axis `axis`, inside a function run by spmd.
/// Throws like axis_index.
inline std::int64_t axis_size(std::string_view axis) {
  constexpr std::string_view name = "axis_size";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  return run.mesh().shape().sizes()[static_cast<std::size_t>(run.mesh().axis(axis, name))];
}

/// Inside spmd: the reduction of `x` over the devices along the named mesh axis `axis` (sum
/// unless `op` says otherwise), on each of them; what all_reduce(mesh_array, op, axis) gives.
/// Throws InvalidArgument outside spmd, for an axis the mesh does not name, an operand not on
/// this device, calls that differ between devices, a device that never makes the call; and
/// what the mesh all_reduce throws (ShapeError when two devices' operands differ in shape).
template <Numeric T>
DeviceArray<T> all_reduce(DeviceArray<T> x, std::string_view axis, ReduceOp op = ReduceOp::sum) {
  constexpr std::string_view name = "all_reduce";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  detail::check_reducible<T>(name, op);
  return detail::exchange(
      name, run, axis, ", " + detail::reduce_op_text(op), std::move(x),
      [a, op](MeshArray<T> m) { return ferry::all_reduce(std::move(m), op, a); }, true);
}

/// Inside spmd: `x` of every device along the named mesh axis `axis`, concatenated along `dim`
/// in axis order; what all_gather(mesh_array, dim, axis) gives. Throws like the named
/// all_reduce, and what the mesh all_gather throws.
template <Element T>
DeviceArray<T> all_gather(DeviceArray<T> x, std::string_view axis, int dim = 0) {
  constexpr std::string_view name = "all_gather";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  return detail::exchange(
      name, run, axis, ", dim " + std::to_string(dim), std::move(x),
      [a, dim](MeshArray<T> m) { return ferry::all_gather(std::move(m), dim, a); }, false);
}

/// Inside spmd: the reduction of `x` over the devices along the named mesh axis `axis`, cut
/// along `dim` into one part per device: position p keeps part p; what
/// reduce_scatter(mesh_array, dim, op, axis) gives. Throws like the named all_reduce, and what
/// the mesh reduce_scatter throws.
template <Numeric T>
DeviceArray<T> reduce_scatter(DeviceArray<T> x, std::string_view axis, int dim = 0,
                              ReduceOp op = ReduceOp::sum) {
  constexpr std::string_view name = "reduce_scatter";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  detail::check_reducible<T>(name, op);
  return detail::exchange(
      name, run, axis, ", dim " + std::to_string(dim) + ", " + detail::reduce_op_text(op),
      std::move(x),
      [a, dim, op](MeshArray<T> m) { return ferry::reduce_scatter(std::move(m), dim, op, a); },
      false);
}

/// Inside spmd: `x` cut along `split_dim` into one part per device along the named mesh axis
/// `axis`; position p receives part p of every device's `x`, concatenated along `concat_dim`;
/// what all_to_all(mesh_array, split_dim, concat_dim, axis) gives. Throws like the named
/// all_reduce, and what the mesh all_to_all throws.
template <Element T>
DeviceArray<T> all_to_all(DeviceArray<T> x, std::string_view axis, int split_dim, int concat_dim) {
  constexpr std::string_view name = "all_to_all";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  return detail::exchange(
      name, run, axis,
      ", split_dim " + std::to_string(split_dim) + ", concat_dim " + std::to_string(concat_dim),
      std::move(x), [a, split_dim, concat_dim](MeshArray<T> m) {
        return ferry::all_to_all(std::move(m), split_dim, concat_dim, a);
      }, false);
}

/// Inside spmd: the `x` of position `from` along the named mesh axis `axis`, on every device
/// along it; what broadcast(mesh_array, from, axis) gives. Throws like the named all_reduce,
/// and what the mesh broadcast throws.
template <Element T>
DeviceArray<T> broadcast(DeviceArray<T> x, std::string_view axis, std::int64_t from) {
  constexpr std::string_view name = "broadcast";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  return detail::exchange(
      name, run, axis, ", from " + std::to_string(from), std::move(x),
      [a, from](MeshArray<T> m) { return ferry::broadcast(std::move(m), from, a); }, false);
}

/// Inside spmd: each {source, target} pair of positions along the named mesh axis `axis` sends
/// the source's `x` to the target; a position no pair targets gets zeros (JAX's ppermute);
/// what permute(mesh_array, pairs, axis) gives. Throws like the named all_reduce, and what the
/// mesh permute throws.
template <Element T>
DeviceArray<T> permute(DeviceArray<T> x, std::string_view axis,
                       const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs) {
  constexpr std::string_view name = "permute";
  detail::SpmdRun& run = detail::spmd_run(name, axis);
  const int a = run.mesh().axis(axis, name);
  std::string text = ", {";
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    text += (i == 0 ? "{" : ", {") + std::to_string(pairs[i].first) + ", " +
            std::to_string(pairs[i].second) + "}";
  }
  text += "}";
  return detail::exchange(name, run, axis, text, std::move(x), [a, pairs](MeshArray<T> m) {
    return ferry::permute(std::move(m), pairs, a);
  }, true);
}

}  // namespace ferry
