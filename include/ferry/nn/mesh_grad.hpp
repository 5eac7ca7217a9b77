#pragma once
// nn::value_and_grad over mesh-array parameters (nn::MeshValueAndGrad): the gradient of each
// parameter, placed as the parameter is. A Replicate axis's copies are one value, so their
// gradients add (Replicate transposes into Partial(sum)): each is all-reduced along its
// Replicate axes, which keeps the copies equal under any optimizer. It is its own file because
// it serves any placed parameters (the tensor-parallel layers' or anyone's), not one layer, and
// it is where autodiff meets the mesh.

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/grad.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/mesh/spmd.hpp"
#include "ferry/ops/creation.hpp"

namespace ferry::nn {

/// nn::value_and_grad(params, loss_fn) as a callable: see nn::value_and_grad (mesh parameters).
template <class LossFn>
class MeshValueAndGrad {
 public:
  MeshValueAndGrad(std::vector<MeshArray<float>> params, LossFn loss_fn)
      : params_(std::move(params)), loss_fn_(std::move(loss_fn)) {
    constexpr std::string_view op = "nn::value_and_grad(mesh parameters)";
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const MeshArray<float>& p = params_[k];
      if (!p.valid()) ferry::detail::fail<InvalidArgument>(op, "parameter ", k, " is empty");
      if (!p.placed()) {
        ferry::detail::fail<InvalidArgument>(op, "parameter ", k,
                                             " has no global view (placements); give it some "
                                             "with MeshArray::from_shards or distribute");
      }
      for (std::size_t x = 0; x < p.placements().size(); ++x) {
        if (ferry::detail::is_partial(p.placements()[x])) {
          ferry::detail::fail<InvalidArgument>(
              op, "parameter ", k, " is placed ", ferry::detail::placements_text(p.placements()),
              "; a parameter is Shard or Replicate on each mesh axis, not ",
              ferry::detail::placement_text(p.placements()[x]), " (mesh axis ", x, ")");
        }
      }
    }
  }

  /// loss_fn(args...)'s value and one gradient per parameter: see nn::value_and_grad.
  template <class... Args>
  auto operator()(const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad(mesh parameters)";
    std::vector<ferry::detail::Step*> vars;
    for (const MeshArray<float>& p : params_) {
      for (const DeviceArray<float>& s : p.shards()) vars.push_back(&ferry::detail::step_of(op, s));
    }
    using Loss = std::remove_cvref_t<std::invoke_result_t<const LossFn&, const Args&...>>;
    if constexpr (ferry::detail::kIsMeshArray<Loss>) {
      auto [value, grads] = mesh_loss(op, vars, [&] { return loss_fn_(args...); });
      return std::pair{std::move(value), placed(vars, std::move(grads))};
    } else {
      auto d = ferry::detail::differentiate(
          op, std::move(vars), [&] { return loss_fn_(args...); }, nullptr);
      return std::pair{std::move(d.value), placed(d.vars, std::move(d.grads))};
    }
  }

 private:
  /// Runs `call` (a mesh loss) under a tape over `vars` and the backward from it: the value and
  /// the cotangent of each var. Each shard is seeded: with ones along a Partial(sum) axis (the
  /// shards are summands), 1/n along a Partial(mean) one, and along a Replicate axis as copies
  /// (the copies are one value, counted once: see autodiff/backward.hpp's CopyWalk).
  template <class Call>
  static std::pair<MeshArray<float>, std::vector<ferry::detail::Handle>> mesh_loss(
      std::string_view op, const std::vector<ferry::detail::Step*>& vars, const Call& call) {
    namespace fd = ferry::detail;
    fd::Tape tape(vars);
    MeshArray<float> value;
    {
      fd::TapeScope scope(tape);
      value = call();
    }
    if (!value.valid() || !value.placed() || value.global_shape().rank() != 0) {
      fd::fail<InvalidArgument>(op, "the loss is a mesh array ",
                                value.valid() && value.placed()
                                    ? "of global shape " + value.global_shape().to_string()
                                    : std::string("without a global view"),
                                "; it must be a placed scalar (global shape ())");
    }
    const Mesh mesh = value.mesh();
    double scale = 1.0;
    fd::CopySeeds copies;
    copies.mesh = fd::MeshAccess::handle(mesh).get();
    for (std::size_t x = 0; x < value.placements().size(); ++x) {
      const Placement& pl = value.placements()[x];
      const auto* partial = std::get_if<Partial>(&pl);
      if (std::holds_alternative<Replicate>(pl)) {
        copies.axes.push_back(static_cast<int>(x));
      } else if (partial != nullptr && partial->op == ReduceOp::mean) {
        scale /= static_cast<double>(mesh.shape().sizes()[x]);
      } else if (partial == nullptr || partial->op != ReduceOp::sum) {
        fd::fail<InvalidArgument>(
            op, "the loss is placed ", fd::placements_text(value.placements()),
            "; a loss is Replicate, Partial(sum) or Partial(mean) on each mesh axis, not ",
            fd::placement_text(pl), " (mesh axis ", x, ")");
      }
    }
    // first[a][d]: whether device d stands at position 0 of its group along axis a.
    std::vector<std::vector<bool>> first;
    for (std::size_t a = 0; a < mesh.shape().rank(); ++a) {
      std::vector<bool> f(static_cast<std::size_t>(mesh.size()), false);
      for (const fd::MeshGroup& g : fd::mesh_groups(mesh.spec(), static_cast<int>(a), op))
        f[static_cast<std::size_t>(g.members[0])] = true;
      first.push_back(std::move(f));
    }
    std::vector<const void*> states;
    for (const Device& d : mesh.devices()) states.push_back(fd::DeviceAccess::state(d).get());
    copies.first = [first = std::move(first), states = std::move(states)](const fd::Step& s,
                                                                          int a) {
      for (std::size_t d = 0; d < states.size(); ++d) {
        if (states[d] == s.device().get()) return bool(first[static_cast<std::size_t>(a)][d]);
      }
      return true;
    };
    std::vector<fd::Step*> outs;
    std::vector<fd::Handle> seeds;
    for (const DeviceArray<float>& s : value.shards()) {
      outs.push_back(&fd::step_of(op, s));
      DeviceArray<float> one = ferry::ones<float>(s.device(), Shape{});
      seeds.push_back(fd::handle_of(scale == 1.0 ? one : one * scale));
    }
    fd::cotangent_sum(dtype_of<float>).store(&fd::add_cotangents_as<float>,
                                             std::memory_order_relaxed);
    std::vector<fd::Handle> grads = fd::pull_back(tape, outs, seeds, vars, &copies);
    return {std::move(value), std::move(grads)};
  }

  /// The gradients of the parameters' shards (`grads`, in order) as mesh arrays placed as the
  /// parameters: a Replicate axis's copies' gradients all-reduced.
  std::vector<MeshArray<float>> placed(const std::vector<ferry::detail::Step*>& vars,
                                       std::vector<ferry::detail::Handle> raw) const {
    std::vector<MeshArray<float>> grads;
    grads.reserve(params_.size());
    std::size_t next = 0;
    for (const MeshArray<float>& p : params_) {
      std::vector<DeviceArray<float>> shards;
      shards.reserve(static_cast<std::size_t>(p.size()));
      Placements summed = p.placements();
      bool replicated = false;
      for (auto& pl : summed) {
        if (std::holds_alternative<Replicate>(pl)) {
          pl = Partial{};
          replicated = true;
        }
      }
      for (std::int64_t i = 0; i < p.size(); ++i, ++next) {
        shards.push_back(ferry::detail::gradient_for<float>(*vars[next], std::move(raw[next])));
      }
      MeshArray<float> g =
          MeshArray<float>::from_shards(p.mesh(), std::move(shards), p.global_shape(), summed);
      grads.push_back(replicated ? ferry::redistribute(g, p.placements()) : std::move(g));
    }
    return grads;
  }

  std::vector<MeshArray<float>> params_;
  LossFn loss_fn_;
};

/// A callable that returns `loss_fn`'s value and its gradient with respect to the global value
/// of each of `params` (mesh arrays placed Shard or Replicate on every axis: a tensor-parallel
/// layer's parameters(), or any placed array `loss_fn` uses, an input among them): called with
/// loss_fn's arguments, it runs loss_fn (which uses the arrays as `params` holds them: the
/// layers, held by reference, must not change their parameters in between) and returns
/// std::pair{the value (rank 0, on the device loss_fn put it), one gradient per parameter,
/// placed as the parameter is}. loss_fn may return the loss as a placed mesh scalar instead (a
/// MeshArray<float> of global shape [], each mesh axis Replicate, Partial(sum) or
/// Partial(mean)); the value is then that mesh array, and every shard is seeded: along a
/// Partial axis as a summand, along a Replicate axis as a copy of the one loss, counted once
/// (so a loss every chip of a tensor-parallel group holds starts its backward on each of them,
/// and the all-reduce that made the copies goes back with nothing sent; see
/// autodiff/backward.hpp's CopyWalk). A Shard axis's gradient shards are the gradients of the
/// shards; along a Replicate axis the copies are one value, so their gradients are summed by an
/// all-reduce along that axis (Replicate's transpose is Partial(sum), made Replicate again), and
/// every copy gets the same gradient. Returns at once. Throws, at the construction,
/// InvalidArgument naming nn::value_and_grad(mesh parameters) for an empty or unplaced parameter
/// or one with a Partial axis; at the call what ferry::value_and_grad throws (InvalidArgument for
/// a value that is not a scalar), InvalidArgument naming it for a mesh loss without a global
/// view, not a scalar, or Partial by max or min, and what loss_fn throws.
template <class LossFn>
MeshValueAndGrad<std::decay_t<LossFn>> value_and_grad(std::vector<MeshArray<float>> params,
                                                      LossFn&& loss_fn) {
  return MeshValueAndGrad<std::decay_t<LossFn>>(std::move(params), std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
