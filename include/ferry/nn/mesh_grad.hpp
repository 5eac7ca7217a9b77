#pragma once
// nn::value_and_grad over mesh-array parameters (nn::MeshValueAndGrad): the gradient of each
// parameter, placed as the parameter is. A Replicate axis's copies are one value, so their
// gradients add (Replicate transposes into Partial(sum)): each is all-reduced along its
// Replicate axes, which keeps the copies equal under any optimizer. The seeds of a mesh loss and
// the placed gradients are mesh/mesh_gradients.hpp's, which ferry::value_and_grad shares; this
// file names the parameters as a list, the way an optimizer steps them.

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/grad.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_gradients.hpp"

namespace ferry::nn {

/// nn::value_and_grad(params, loss_fn) as a callable: see nn::value_and_grad (mesh parameters).
template <class LossFn>
class MeshValueAndGrad {
 public:
  MeshValueAndGrad(std::vector<MeshArray<float>> params, LossFn loss_fn)
      : params_(std::move(params)), loss_fn_(std::move(loss_fn)) {
    for (std::size_t k = 0; k < params_.size(); ++k)
      ferry::detail::check_mesh_variable(kOp, "parameter", k, params_[k]);
  }

  /// loss_fn(args...)'s value and one gradient per parameter: see nn::value_and_grad.
  template <class... Args>
  auto operator()(const Args&... args) const {
    std::vector<ferry::detail::Step*> vars;
    for (const MeshArray<float>& p : params_) {
      for (const DeviceArray<float>& s : p.shards())
        vars.push_back(&ferry::detail::step_of(kOp, s));
    }
    // A loss that is a mesh array is seeded on every shard (mesh/mesh_gradients.hpp).
    auto d = ferry::detail::differentiate(kOp, std::move(vars), [&] { return loss_fn_(args...); });
    std::vector<MeshArray<float>> grads;
    grads.reserve(params_.size());
    const std::span<ferry::detail::Step* const> all(d.vars);
    std::size_t next = 0;
    for (const MeshArray<float>& p : params_) {
      const auto n = static_cast<std::size_t>(p.size());
      grads.push_back(ferry::detail::mesh_gradient(p, all.subspan(next, n),
                                                   std::span(d.grads).subspan(next, n)));
      next += n;
    }
    return std::pair{std::move(d.value), std::move(grads)};
  }

 private:
  static constexpr std::string_view kOp = "nn::value_and_grad(mesh parameters)";

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
