#pragma once
// nn::value_and_grad over mesh-array parameters (nn::MeshValueAndGrad): the gradient of each
// parameter, placed as the parameter is. A Replicate axis's copies are one value, so their
// gradients add (Replicate transposes into Partial(sum)): each is all-reduced along its
// Replicate axes, which keeps the copies equal under any optimizer. It is its own file because
// it serves any placed parameters (the tensor-parallel layers' or anyone's), not one layer, and
// it is where autodiff meets the mesh.

#include <cstddef>
#include <cstdint>
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
#include "ferry/mesh/redistribute.hpp"

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
  std::pair<DeviceArray<float>, std::vector<MeshArray<float>>> operator()(
      const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad(mesh parameters)";
    std::vector<ferry::detail::Step*> vars;
    for (const MeshArray<float>& p : params_) {
      for (const DeviceArray<float>& s : p.shards()) vars.push_back(&ferry::detail::step_of(op, s));
    }
    auto d = ferry::detail::differentiate(
        op, std::move(vars), [&] { return loss_fn_(args...); }, nullptr);
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
        shards.push_back(
            ferry::detail::gradient_for<float>(*d.vars[next], std::move(d.grads[next])));
      }
      MeshArray<float> g =
          MeshArray<float>::from_shards(p.mesh(), std::move(shards), p.global_shape(), summed);
      grads.push_back(replicated ? ferry::redistribute(g, p.placements()) : std::move(g));
    }
    return {std::move(d.value), std::move(grads)};
  }

 private:
  std::vector<MeshArray<float>> params_;
  LossFn loss_fn_;
};

/// A callable that returns `loss_fn`'s value and its gradient with respect to the global value
/// of each of `params` (mesh arrays placed Shard or Replicate on every axis: a tensor-parallel
/// layer's parameters(), or any placed array `loss_fn` uses, an input among them): called with
/// loss_fn's arguments, it runs loss_fn (which uses the arrays as `params` holds them: the
/// layers, held by reference, must not change their parameters in between) and returns
/// std::pair{the value (rank 0, on the device loss_fn put it), one gradient per parameter,
/// placed as the parameter is}. A Shard axis's gradient shards are the gradients of the shards;
/// along a Replicate axis the copies are one value, so their gradients are summed by an
/// all-reduce along that axis (Replicate's transpose is Partial(sum), made Replicate again), and
/// every copy gets the same gradient. Returns at once. Throws, at the construction,
/// InvalidArgument naming nn::value_and_grad(mesh parameters) for an empty or unplaced parameter
/// or one with a Partial axis; at the call what ferry::value_and_grad throws (InvalidArgument for
/// a value that is not a scalar) and what loss_fn throws.
template <class LossFn>
MeshValueAndGrad<std::decay_t<LossFn>> value_and_grad(std::vector<MeshArray<float>> params,
                                                      LossFn&& loss_fn) {
  return MeshValueAndGrad<std::decay_t<LossFn>>(std::move(params), std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
