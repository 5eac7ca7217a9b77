#pragma once
// nn::DataParallel: a module replicated on every device of a mesh, each replica fed its own
// part of the batch, the gradients averaged across replicas by all-reduces in buckets (PyTorch's
// DistributedDataParallel). A bucket's all-reduce is placed on the mesh's links as soon as the
// gradients in it exist on the model, so it runs while the backward of the layers below it is
// still computing.
//
// One module object serves every replica: DataParallel keeps each replica's parameters itself
// (the arrays an optimizer overwrites) and lends replica r's to the module's parameter slots
// while it records replica r's work, then takes them back. So any Module works, without a way
// to copy it, and between calls the parameters have one handle each, DataParallel's, so that an
// optimizer updates them in place.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/nn/grad.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry::nn {

/// How DataParallel averages the gradients.
struct DataParallelOptions {
  /// The most bytes of gradients one all-reduce carries (PyTorch's bucket_cap_mb, 25 MiB). The
  /// gradients are taken in reverse parameter order (the last layer's are ready first in the
  /// backward) and cut into buckets of at most this many bytes; a parameter larger than a
  /// bucket is a bucket of its own.
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
};

template <class LossFn>
class DataParallelValueAndGrad;

/// A module replicated on every device of a mesh for data-parallel training: `dp(x)` applies
/// replica i to shard i of `x` (device i's local batch), nn::value_and_grad(dp, loss_fn)
/// averages the replicas' gradients across mesh axis `axis` (-1: the whole mesh) with bucketed
/// all-reduces, and an optimizer stepping parameters() with those gradients keeps the replicas
/// identical. Movable, not copyable; not for concurrent calls from several threads (like a
/// Module's to()).
class DataParallel {
 public:
  /// Takes over `module` (moved in) and replicates it on every device of `mesh`: the device it
  /// lives on keeps its parameters, every other device gets a copy (over the mesh's links; on a
  /// mesh over processes, ferry::mpi::mesh_over, by a broadcast from it, which every process
  /// makes: each builds the module on the same device, which only its owner computes).
  /// Throws, at the call and before `module` is moved from: InvalidArgument naming
  /// DataParallel for a module without parameters, one whose device is not one of `mesh`'s
  /// (naming both), a `bucket_bytes` not positive, and an axis the mesh lacks; UseAfterFree for
  /// a freed parameter; on a mesh over processes, what broadcast throws at the call (the mesh's
  /// earlier failure).
  template <class M>
  requires std::derived_from<M, Module> &&
      (!std::is_lvalue_reference_v<M>)DataParallel(M&& module, const Mesh& mesh, int axis = -1,
                                                   DataParallelOptions options = {})
      : mesh_(mesh), axis_(axis), options_(options) {
    check(module, mesh, axis, options);
    module_ = std::make_unique<M>(std::move(module));
    replicate();
  }

  /// The same, averaging along the mesh axis named `axis` (one of the spec's axis_names, as
  /// "dp"). Throws as the other, and InvalidArgument naming DataParallel and the mesh for a
  /// name it lacks.
  template <class M>
  requires std::derived_from<M, Module> &&
      (!std::is_lvalue_reference_v<M>)DataParallel(M&& module, const Mesh& mesh,
                                                   std::string_view axis,
                                                   DataParallelOptions options = {})
      : DataParallel(std::forward<M>(module), mesh, mesh.axis(axis, "DataParallel"), options) {}

  /// The mesh and the axis the gradients are averaged along (-1: the whole mesh). Never throw.
  const Mesh& mesh() const noexcept { return mesh_; }
  int axis() const noexcept { return axis_; }
  const DataParallelOptions& options() const noexcept { return options_; }

  /// How many replicas: the mesh's size. Never throws.
  std::int64_t replicas() const noexcept { return mesh_.size(); }

  /// Every replica's parameters, replica by replica (row-major over the mesh), each in the
  /// module's named_parameters() order: what an optimizer steps, in place, with the gradients
  /// nn::value_and_grad(dp, loss_fn) returns (`opt.step(dp.parameters(), grads)`). The arrays
  /// are DataParallel's own: copies of them kept across a step would keep it from updating
  /// them in place. Never throws.
  std::span<DeviceArray<float>> parameters() noexcept { return params_; }

  /// Replica `replica`'s parameters with their names, new handles to its buffers (drop them
  /// before the next step). Throws InvalidArgument naming DataParallel::named_parameters for a
  /// replica outside [0, replicas()).
  NamedParameters named_parameters(std::int64_t replica) const {
    if (replica < 0 || replica >= replicas()) {
      ferry::detail::fail<InvalidArgument>("DataParallel::named_parameters", "replica ", replica,
                                           " is outside the ", replicas(), " replicas");
    }
    NamedParameters out;
    const std::size_t base = static_cast<std::size_t>(replica) * names_.size();
    for (std::size_t k = 0; k < names_.size(); ++k) out.emplace_back(names_[k], params_[base + k]);
    return out;
  }

  /// Replica i applied to shard i of `x`, for every device i: a MeshArray of the outputs (no
  /// global view). Throws InvalidArgument naming DataParallel for an empty `x` or one on another
  /// mesh, and what the module throws (ShapeError for a shard it cannot take).
  MeshArray<float> operator()(const MeshArray<float>& x) {
    check_operand("DataParallel", x);
    std::vector<DeviceArray<float>> out;
    out.reserve(static_cast<std::size_t>(replicas()));
    for (std::int64_t r = 0; r < replicas(); ++r) {
      out.push_back(with_replica(r, [&](Module& m) { return m(x.shard(r)); }));
    }
    return MeshArray<float>::from_shards(mesh_, std::move(out));
  }

 private:
  template <class LossFn>
  friend class DataParallelValueAndGrad;

  static void check(const Module& module, const Mesh& mesh, int axis,
                    const DataParallelOptions& options) {
    constexpr std::string_view op = "DataParallel";
    if (options.bucket_bytes <= 0) {
      ferry::detail::fail<InvalidArgument>(op, "bucket_bytes must be positive, got ",
                                           options.bucket_bytes);
    }
    (void)ferry::detail::mesh_groups(mesh.spec(), axis, op);  // throws for an axis it lacks
    const std::vector<DeviceArray<float>> ps = module.parameters();
    if (ps.empty()) {
      ferry::detail::fail<InvalidArgument>(op, "the ", module.type_name(),
                                           " has no parameters to replicate");
    }
    const Device home = module.device();
    if (mesh.index_of(home) < 0) {
      ferry::detail::fail<InvalidArgument>(op, "the ", module.type_name(), " lives on ",
                                           home.name(), ", which is not a device of mesh ",
                                           mesh.spec().name, " ", mesh.shape().to_string());
    }
  }

  /// Takes the parameters out of the module's slots: the home device's replica keeps them,
  /// every other device gets a copy.
  void replicate() {
    std::vector<detail::ParameterSlot> slots = detail::ModuleAccess::slots(*module_);
    const std::int64_t home = mesh_.index_of(module_->device());
    const std::size_t n = slots.size();
    names_.reserve(n);
    for (const detail::ParameterSlot& s : slots) names_.push_back(s.name);
    params_.resize(n * static_cast<std::size_t>(replicas()));
    if (ferry::detail::MeshAccess::state(mesh_).remote != nullptr) {
      broadcast_from(home, slots);
      return;
    }
    for (std::int64_t r = 0; r < replicas(); ++r) {
      if (r == home) continue;
      const Device& d = mesh_.devices()[static_cast<std::size_t>(r)];
      for (std::size_t k = 0; k < n; ++k)
        params_[static_cast<std::size_t>(r) * n + k] = slots[k].array->to(d);
    }
    for (std::size_t k = 0; k < n; ++k) {
      params_[static_cast<std::size_t>(home) * n + k] = std::move(*slots[k].array);
      *slots[k].array = DeviceArray<float>();
    }
  }

  /// replicate() on a mesh over processes: the home device's values exist only in the process
  /// that owns it (elsewhere it is a stand-in), so a copy from it cannot be made here; each
  /// parameter is broadcast from it instead (PyTorch's DDP broadcasts rank 0's parameters at
  /// construction too). The broadcast reads only the home shard's values: the other members'
  /// shards, zeros, only give it their devices.
  void broadcast_from(std::int64_t home, std::vector<detail::ParameterSlot>& slots) {
    const std::size_t n = slots.size();
    for (std::size_t k = 0; k < n; ++k) {
      const Shape shape = slots[k].array->shape();
      std::vector<DeviceArray<float>> shards;
      shards.reserve(static_cast<std::size_t>(replicas()));
      for (std::int64_t r = 0; r < replicas(); ++r) {
        shards.push_back(r == home ? std::exchange(*slots[k].array, DeviceArray<float>())
                                   : ferry::zeros<float>(mesh_.device(r), shape));
      }
      std::vector<DeviceArray<float>> copies =
          broadcast(MeshArray<float>::from_shards(mesh_, std::move(shards)), home).shards();
      for (std::size_t r = 0; r < copies.size(); ++r) params_[r * n + k] = std::move(copies[r]);
    }
  }

  /// f(module) with replica r's parameters lent to the module; they are taken back whether f
  /// returns or throws.
  template <class F>
  std::invoke_result_t<F&, Module&> with_replica(std::int64_t r, F&& f) {
    std::vector<detail::ParameterSlot> slots = detail::ModuleAccess::slots(*module_);
    const std::size_t base = static_cast<std::size_t>(r) * names_.size();
    for (std::size_t k = 0; k < slots.size(); ++k) *slots[k].array = params_[base + k];
    struct TakeBack {
      std::vector<detail::ParameterSlot>& slots;
      ~TakeBack() {
        for (detail::ParameterSlot& s : slots) *s.array = DeviceArray<float>();
      }
    } take_back{slots};
    return f(*module_);
  }

  /// Throws InvalidArgument, as `op`, unless `x` is a mesh array on this mesh.
  void check_operand(std::string_view op, const MeshArray<float>& x) const {
    if (!x.valid()) ferry::detail::fail<InvalidArgument>(op, "got an empty mesh array");
    const Mesh other = x.mesh();
    if (!(other == mesh_)) {
      ferry::detail::fail<InvalidArgument>(op, "the input lives on mesh ", other.spec().name, " ",
                                           other.shape().to_string(), ", the replicas on mesh ",
                                           mesh_.spec().name, " ", mesh_.shape().to_string());
    }
  }

  Mesh mesh_;
  int axis_;
  DataParallelOptions options_;
  std::unique_ptr<Module> module_;
  std::vector<std::string> names_;          // the module's parameter names, in its order
  std::vector<DeviceArray<float>> params_;  // [replica * names_.size() + parameter]
};

namespace detail {

/// The buckets of parameters `sizes` (bytes each) of at most `cap` bytes: indices in reverse
/// order, a parameter larger than `cap` alone.
inline std::vector<std::vector<std::size_t>> gradient_buckets(
    const std::vector<std::int64_t>& sizes, std::int64_t cap) {
  std::vector<std::vector<std::size_t>> out;
  std::int64_t filled = 0;
  for (std::size_t k = sizes.size(); k-- > 0;) {
    if (out.empty() || filled + sizes[k] > cap) {
      out.emplace_back();
      filled = 0;
    }
    out.back().push_back(k);
    filled += sizes[k];
  }
  return out;
}

/// Replica r's part of a loss function's argument: a mesh array's shard r, anything else as is.
template <class A>
decltype(auto) replica_argument(const A& a, std::int64_t r) {
  if constexpr (std::is_same_v<A, MeshArray<float>>) {
    return a.shard(r);
  } else {
    return (a);
  }
}

}  // namespace detail

/// nn::value_and_grad(dp, loss_fn) as a callable: see nn::value_and_grad(DataParallel&, ...).
template <class LossFn>
class DataParallelValueAndGrad {
 public:
  DataParallelValueAndGrad(DataParallel& dp, LossFn loss_fn)
      : dp_(&dp), loss_fn_(std::move(loss_fn)) {}

  /// Each replica's loss and the averaged gradients: see nn::value_and_grad(DataParallel&, ...).
  template <class... Args>
  std::pair<MeshArray<float>, std::vector<DeviceArray<float>>> operator()(
      const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad(DataParallel)";
    DataParallel& dp = *dp_;
    (check_argument(op, args), ...);
    const std::size_t n = dp.names_.size();
    const auto replicas = static_cast<std::size_t>(dp.replicas());
    // Every replica's backward first: all of it is on the devices' models before the first
    // all-reduce is placed, so each bucket's all-reduce starts when its own gradients exist.
    std::vector<DeviceArray<float>> losses;
    std::vector<DeviceArray<float>> local(n * replicas);
    losses.reserve(replicas);
    for (std::size_t r = 0; r < replicas; ++r) {
      const auto ri = static_cast<std::int64_t>(r);
      auto [loss, grads] = dp.with_replica(ri, [&](Module& m) {
        return nn::value_and_grad(m, [&](const auto&... a) {
          return loss_fn_(static_cast<const Module&>(m), a...);
        })(detail::replica_argument(args, ri)...);
      });
      losses.push_back(std::move(loss));
      for (std::size_t k = 0; k < n; ++k) local[r * n + k] = std::move(grads[k].second);
    }
    std::vector<std::int64_t> bytes(n);
    std::vector<Shape> shapes(n);
    for (std::size_t k = 0; k < n; ++k) {
      shapes[k] = dp.params_[k].shape();
      bytes[k] = shapes[k].numel() * static_cast<std::int64_t>(sizeof(float));
    }
    std::vector<DeviceArray<float>> out(n * replicas);
    for (const std::vector<std::size_t>& bucket :
         detail::gradient_buckets(bytes, dp.options_.bucket_bytes)) {
      // One flat buffer a replica: its gradients of the bucket, flattened and concatenated. A
      // bucket of one parameter is that gradient as it is: a flattened view would read its
      // buffer, and the all-reduce would then not write its mean into it (donation).
      std::vector<DeviceArray<float>> flats;
      flats.reserve(replicas);
      for (std::size_t r = 0; r < replicas; ++r) {
        if (bucket.size() == 1) {
          flats.push_back(std::move(local[r * n + bucket.front()]));
          continue;
        }
        std::vector<DeviceArray<float>> parts;
        parts.reserve(bucket.size());
        for (std::size_t k : bucket) {
          parts.push_back(reshape(std::move(local[r * n + k]), Shape{shapes[k].numel()}));
        }
        flats.push_back(concat(parts, 0));
      }
      MeshArray<float> averaged = all_reduce(
          MeshArray<float>::from_shards(dp.mesh_, std::move(flats)), ReduceOp::mean, dp.axis_);
      for (std::size_t r = 0; r < replicas; ++r) {
        const DeviceArray<float>& flat = averaged.shard(static_cast<std::int64_t>(r));
        if (bucket.size() == 1) {
          out[r * n + bucket.front()] = flat;
          continue;
        }
        std::int64_t at = 0;
        for (std::size_t k : bucket) {
          const std::int64_t size = shapes[k].numel();
          out[r * n + k] = reshape(slice(flat, 0, at, at + size), shapes[k]);
          at += size;
        }
      }
    }
    return {MeshArray<float>::from_shards(dp.mesh_, std::move(losses)), std::move(out)};
  }

 private:
  template <class A>
  void check_argument(std::string_view op, const A& a) const {
    if constexpr (std::is_same_v<A, MeshArray<float>>) dp_->check_operand(op, a);
  }

  DataParallel* dp_;
  LossFn loss_fn_;
};

/// A callable that returns each replica's loss and the gradients of `dp`'s parameters,
/// averaged across the replicas along dp's axis: called with loss_fn's arguments, a
/// MeshArray<float> among them standing for its shards (replica i gets shard i) and anything
/// else passed to every replica as it is, it runs `loss_fn(replica, args...)` for every replica
/// (the replica as a `const nn::Module&`, to be applied to its local batch: the loss should be
/// the mean over it) under nn::value_and_grad, then all-reduces the gradients with
/// ReduceOp::mean in buckets of options().bucket_bytes, last parameters first, each bucket one
/// flat buffer a replica. Returns std::pair{the losses (a MeshArray of scalars, replica i's on
/// device i), the gradients in parameters() order}: what `opt.step(dp.parameters(), grads)`
/// takes. Returns at once; `dp` is held by reference and must outlive the callable. Throws, at
/// the call, InvalidArgument naming nn::value_and_grad(DataParallel) for a mesh array argument
/// that is empty or on another mesh, and what nn::value_and_grad and loss_fn throw.
template <class LossFn>
DataParallelValueAndGrad<std::decay_t<LossFn>> value_and_grad(DataParallel& dp, LossFn&& loss_fn) {
  return DataParallelValueAndGrad<std::decay_t<LossFn>>(dp, std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
