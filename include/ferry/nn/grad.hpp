#pragma once
// nn::value_and_grad: the gradients of a loss with respect to a module's parameters, named as
// the module names them, ready for an optimizer's step.

#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/autodiff/grad.hpp"
#include "ferry/nn/module.hpp"

namespace ferry::nn {

/// nn::value_and_grad(module, loss_fn) and nn::value_and_grad(module, loss_fn, has_aux) as a
/// callable: see nn::value_and_grad.
template <class LossFn, bool kHasAux = false>
class ValueAndGrad {
 public:
  ValueAndGrad(Module& module, LossFn loss_fn) : module_(&module), loss_fn_(std::move(loss_fn)) {}

  /// loss_fn(args...)'s value (and with has_aux its aux) and one gradient per parameter of the
  /// module, in named_parameters() order and with its names: `auto [loss, grads] = step(x, y);`,
  /// `auto [loss, logits, grads] = step_with_aux(x, y);`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    constexpr std::string_view op = "nn::value_and_grad";
    const NamedParameters params = module_->named_parameters();
    std::vector<ferry::detail::Step*> vars;
    vars.reserve(params.size());
    for (const auto& p : params) vars.push_back(&ferry::detail::step_of(op, p.second));
    auto call = [&] { return loss_fn_(args...); };
    if constexpr (kHasAux) {
      auto [d, aux] = ferry::detail::differentiate_with_aux(op, std::move(vars), call);
      NamedParameters grads = named_grads(params, d);
      return std::tuple<decltype(d.value), decltype(aux), NamedParameters>{
          std::move(d.value), std::move(aux), std::move(grads)};
    } else {
      auto d = ferry::detail::differentiate(op, std::move(vars), call);
      NamedParameters grads = named_grads(params, d);
      return std::pair{std::move(d.value), std::move(grads)};
    }
  }

 private:
  /// The gradients `d` holds, one per parameter of `params`, under its name.
  template <class D>
  static NamedParameters named_grads(const NamedParameters& params, D& d) {
    NamedParameters grads;
    grads.reserve(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      grads.emplace_back(params[i].first,
                         ferry::detail::gradient_for<float>(*d.vars[i], std::move(d.grads[i])));
    }
    return grads;
  }

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

/// nn::value_and_grad for a `loss_fn` that returns std::pair{loss, aux} (JAX's has_aux): the
/// callable returns the flat std::tuple (loss, aux, gradients as NamedParameters), aux as
/// loss_fn returned it and never differentiated (the logits, say, for an accuracy): `auto
/// [loss, logits, grads] = step(x, y);`. Throws like nn::value_and_grad(module, loss_fn);
/// loss_fn returning anything but a std::pair (or a std::tuple of two) is a compile error.
template <class LossFn>
ValueAndGrad<std::decay_t<LossFn>, true> value_and_grad(Module& module, LossFn&& loss_fn, HasAux) {
  return ValueAndGrad<std::decay_t<LossFn>, true>(module, std::forward<LossFn>(loss_fn));
}

}  // namespace ferry::nn
