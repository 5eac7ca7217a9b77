#pragma once
// nn::value_and_grad: the gradients of a loss with respect to a module's parameters, named as
// the module names them, ready for an optimizer's step.

#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/autodiff/grad.hpp"
#include "ferry/nn/module.hpp"

namespace ferry::nn {

/// nn::value_and_grad(module, loss_fn) as a callable: see nn::value_and_grad.
template <class LossFn>
class ValueAndGrad {
 public:
  ValueAndGrad(Module& module, LossFn loss_fn) : module_(&module), loss_fn_(std::move(loss_fn)) {}

  /// loss_fn(args...)'s value and one gradient per parameter of the module, in
  /// named_parameters() order and with its names: `auto [loss, grads] = step(x, y);`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad";
    const NamedParameters params = module_->named_parameters();
    std::vector<ferry::detail::Step*> vars;
    vars.reserve(params.size());
    for (const auto& p : params) vars.push_back(&ferry::detail::step_of(op, p.second));
    auto d = ferry::detail::differentiate(op, std::move(vars), [&] { return loss_fn_(args...); },
                                          nullptr);
    NamedParameters grads;
    grads.reserve(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      grads.emplace_back(params[i].first,
                         ferry::detail::gradient_for<float>(*d.vars[i], std::move(d.grads[i])));
    }
    return std::pair{std::move(d.value), std::move(grads)};
  }

 private:
  Module* module_;
  LossFn loss_fn_;
};

/// A callable that returns `loss_fn`'s value and its gradient with respect to every parameter of
/// `module`: called with loss_fn's arguments, it runs loss_fn (which uses the module, held by
/// reference: it must outlive the callable) and returns a std::pair of the value (rank 0) and
/// the gradients as NamedParameters, each on its parameter's device and in its layout, in
/// named_parameters() order: what optim's step(module, grads) takes. Returns at once, like
/// ferry::value_and_grad, and throws like it (InvalidArgument naming nn::value_and_grad for a
/// value that is not a scalar).
template <class LossFn>
ValueAndGrad<std::decay_t<LossFn>> value_and_grad(Module& module, LossFn&& loss_fn) {
  return ValueAndGrad<std::decay_t<LossFn>>(module, std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
