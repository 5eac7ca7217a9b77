#pragma once
// Reverse-mode differentiation over futures, in the style of JAX and MLX: value_and_grad, grad
// and vjp wrap a function of DeviceArrays. Calling the wrapper runs the function (its ops
// return at once, as always) while a tape local to the call records the ops that depend on the
// differentiated arguments, then submits the backward pass, op by op, and returns: the
// gradients are futures on the devices of their arguments, and only an export waits.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/backward.hpp"
#include "ferry/autodiff/attention_rules.hpp"
#include "ferry/autodiff/convolution_rules.hpp"
#include "ferry/autodiff/elementwise_rules.hpp"
#include "ferry/autodiff/indexing_rules.hpp"
#include "ferry/autodiff/reduce_rules.hpp"
#include "ferry/autodiff/shape_rules.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/layout.hpp"

namespace ferry {

namespace detail {

/// Whether a parameter is differentiated: a DeviceArray of a floating element type.
template <class A>
inline constexpr bool kDiffArg = false;
template <Floating T>
inline constexpr bool kDiffArg<DeviceArray<T>> = true;

/// std::tuple<A> for a differentiated parameter type A, std::tuple<> otherwise.
template <class A>
using GradSlot = std::conditional_t<kDiffArg<A>, std::tuple<A>, std::tuple<>>;

/// The gradients of a call with arguments `Args`: one DeviceArray per floating array argument.
template <class... Args>
using Grads = decltype(std::tuple_cat(std::declval<GradSlot<std::remove_cvref_t<Args>>>()...));

/// The step of each argument `selected` marks, in argument order; InvalidArgument naming `op`
/// for an empty handle.
template <class... Args>
std::vector<Step*> variables_of(std::string_view op, std::span<const bool> selected,
                                const Args&... args) {
  std::vector<Step*> steps;
  std::size_t i = 0;
  auto add = [&](const auto& a) {
    if constexpr (kDiffArg<std::remove_cvref_t<decltype(a)>>) {
      if (selected[i]) steps.push_back(&step_of(op, a));
    }
    ++i;
  };
  (add(args), ...);
  return steps;
}

/// The gradient handle `g` of variable `v`: zeros when the value does not depend on it; in
/// the variable's layout when the backward pass left it in another.
template <Floating T>
DeviceArray<T> gradient_for(const Step& v, Handle g) {
  if (!g) return zeros<T>(DeviceAccess::wrap(v.device()), user_shape(v));
  DeviceArray<T> grad = ArrayAccess::wrap<T>(std::move(g));
  if (grad.layout() != v.layout()) grad = to_layout(grad, v.layout());
  return grad;
}

/// What one differentiated call gives: f's value and the cotangent of each variable.
template <Element V>
struct Differentiated {
  DeviceArray<V> value;
  std::vector<Step*> vars;  // the differentiated arguments' steps, in argument order
  std::vector<Handle> grads;
};

/// Runs `call()` with a tape over `vars` and the backward pass from its value with cotangent
/// `seed_step` (ones, for a scalar value, when null). `op` names the API in errors.
template <class Call>
auto differentiate(std::string_view op, std::vector<Step*> vars, const Call& call, Step* seed_step) {
  using Out = std::remove_cvref_t<std::invoke_result_t<const Call&>>;
  static_assert(kIsArray<Out>, "ferry::grad: the function must return a DeviceArray");
  using V = typename Out::value_type;
  static_assert(Floating<V>, "ferry::grad: the function's value must have a floating-point "
                             "element type");
  Tape tape(vars);
  Out value;
  {
    TapeScope scope(tape);
    value = call();
  }
  Step& out = step_of(op, value);
  Handle seed;
  if (seed_step == nullptr) {
    if (out.shape().rank() != 0) {
      fail<InvalidArgument>(op, "the function returned an array of shape ", out.shape(),
                            ": its value must be a scalar (rank 0); use vjp for other outputs");
    }
    seed = handle_of(ones<V>(value.device(), Shape{}));
  } else {
    Step& c = *seed_step;
    if (c.shape() != out.shape()) {
      fail<ShapeError>(op, "the cotangent has shape ", c.shape(), ", the function's value ",
                       out.shape());
    }
    if (c.device() != out.device()) {
      fail<DeviceMismatch>(op, "the cotangent lives on ", c.device()->name(),
                           ", the function's value on ", out.device()->name());
    }
    seed = Handle(Ref<Step>::share(&c));
  }
  std::vector<Handle> grads;
  if (tape.tracks(out)) {
    grads = backward(tape, out, std::move(seed), vars);
  } else {
    grads.resize(vars.size());
  }
  return Differentiated<V>{std::move(value), std::move(vars), std::move(grads)};
}

/// differentiate f(args...) with respect to the arguments `selected` marks.
template <class F, class... Args>
auto run_differentiated(std::string_view op, const F& f, std::span<const bool> selected,
                        Step* seed_step, Args&... args) {
  return differentiate(op, variables_of(op, selected, args...), [&] { return f(args...); },
                       seed_step);
}

/// The gradients of the differentiated arguments of `args`, typed, from `grads` (one per
/// differentiated argument, in order).
template <class... Args>
Grads<Args...> typed_grads(std::vector<Handle>& grads, const std::vector<Step*>& vars,
                           const Args&... args) {
  std::size_t next = 0;
  auto slot = [&](const auto& a) {
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (kDiffArg<A>) {
      const std::size_t k = next++;
      return std::tuple<A>{gradient_for<typename A::value_type>(*vars[k], std::move(grads[k]))};
    } else {
      return std::tuple<>{};
    }
  };
  // Braced initialization evaluates the slots left to right.
  return std::apply([](auto&&... parts) { return std::tuple_cat(std::move(parts)...); },
                    std::tuple<decltype(slot(args))...>{slot(args)...});
}

/// The element type every floating array parameter of a call shares (what a gradient picked by
/// position is).
template <class... Args>
struct CommonGrad {
  using Tuple = Grads<Args...>;
  static_assert(std::tuple_size_v<Tuple> != 0,
                "ferry::grad: the function takes no floating-point DeviceArray to differentiate");
  using type = std::tuple_element_t<0, Tuple>;
  static_assert([]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::is_same_v<std::tuple_element_t<I, Tuple>, type> && ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{}),
                "ferry::grad: picking arguments by position needs floating arrays of one element "
                "type; use value_and_grad(f) without positions, or convert with astype");
};

/// Marks the arguments `argnums` picks; InvalidArgument naming `op` for a position out of
/// range, given twice, or not a floating DeviceArray.
template <class... Args>
std::array<bool, sizeof...(Args)> pick(std::string_view op, const std::vector<int>& argnums) {
  constexpr std::array<bool, sizeof...(Args)> diff{kDiffArg<std::remove_cvref_t<Args>>...};
  std::array<bool, sizeof...(Args)> picked{};
  for (int i : argnums) {
    if (i < 0 || static_cast<std::size_t>(i) >= sizeof...(Args)) {
      fail<InvalidArgument>(op, "argument position ", i, " of a call with ", sizeof...(Args),
                            " arguments");
    }
    if (!diff[static_cast<std::size_t>(i)]) {
      fail<InvalidArgument>(op, "argument ", i, " is not a floating-point DeviceArray");
    }
    if (picked[static_cast<std::size_t>(i)]) {
      fail<InvalidArgument>(op, "argument position ", i, " is given twice");
    }
    picked[static_cast<std::size_t>(i)] = true;
  }
  return picked;
}

}  // namespace detail

/// value_and_grad(f) as a callable: see ferry::value_and_grad.
template <class F>
class ValueAndGrad {
 public:
  explicit ValueAndGrad(F f) : f_(std::move(f)) {}

  /// f(args...)'s value and its gradient with respect to each floating-point DeviceArray
  /// argument, in argument order: `auto [loss, dx, dw] = vg(x, w);`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    constexpr std::array<bool, sizeof...(Args)> all{detail::kDiffArg<Args>...};
    auto d = detail::run_differentiated("value_and_grad", f_, all, nullptr, args...);
    return std::tuple_cat(std::tuple{std::move(d.value)},
                          detail::typed_grads(d.grads, d.vars, args...));
  }

 private:
  F f_;
};

/// value_and_grad(f, argnums) as a callable: see ferry::value_and_grad.
template <class F>
class ValueAndGradAt {
 public:
  ValueAndGradAt(F f, std::vector<int> argnums) : f_(std::move(f)), argnums_(std::move(argnums)) {}

  /// f(args...)'s value and its gradients with respect to the arguments picked, in the order
  /// picked: `auto [loss, grads] = vg(x, y, b); grads[1]`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    using G = typename detail::CommonGrad<Args...>::type;
    const auto picked = detail::pick<Args...>("value_and_grad", argnums_);
    auto d = detail::run_differentiated("value_and_grad", f_, picked, nullptr, args...);
    // vars are in argument order; the result follows argnums.
    std::vector<G> grads;
    for (int i : argnums_) {
      std::size_t k = 0;
      for (int j = 0; j < i; ++j) k += picked[static_cast<std::size_t>(j)] ? 1 : 0;
      grads.push_back(detail::gradient_for<typename G::value_type>(*d.vars[k], d.grads[k]));
    }
    return std::pair{std::move(d.value), std::move(grads)};
  }

 private:
  F f_;
  std::vector<int> argnums_;
};

/// A callable that returns `f`'s value and its gradients: called with f's arguments, it runs f
/// (whose value must be a rank-0 floating-point array) and returns a std::tuple of the value
/// and then the gradient with respect to each floating-point DeviceArray argument, in argument
/// order, each of its argument's shape, layout and device: `auto [loss, dw, db] =
/// ferry::value_and_grad(loss_fn)(w, b, x_int);` (integer, bool and non-array arguments are
/// constants). Everything returns at once; the gradients are futures. An array f captures
/// instead of taking as an argument is a constant; an array given twice is one variable, and
/// each of its positions gets the whole gradient (as PyTorch accumulates it). Ops f runs on
/// other threads are not seen. Throws what f throws; InvalidArgument naming value_and_grad for
/// an empty array argument or a value that is not a scalar; NotDifferentiable naming the op
/// when the value depends on an argument through an op without a gradient.
template <class F>
ValueAndGrad<std::decay_t<F>> value_and_grad(F&& f) {
  return ValueAndGrad<std::decay_t<F>>(std::forward<F>(f));
}

/// value_and_grad with respect to the arguments at `argnums` only: the callable returns a
/// std::pair of the value and a std::vector of the gradients, in the order of `argnums`
/// (`value_and_grad(f, {0, 2})`). The picked arguments share one floating element type (a
/// compile error otherwise). The call throws InvalidArgument for a position out of range,
/// given twice, or not a floating-point DeviceArray, and otherwise like value_and_grad.
template <class F>
ValueAndGradAt<std::decay_t<F>> value_and_grad(F&& f, std::vector<int> argnums) {
  return ValueAndGradAt<std::decay_t<F>>(std::forward<F>(f), std::move(argnums));
}

/// A callable that returns the gradients of `f` alone: a DeviceArray when f takes one
/// floating-point array, a std::tuple of them otherwise (`auto [dx, dw] = grad(f)(x, w)`).
/// Differentiable again (`grad(grad(f))` for a function of a scalar). Throws like
/// value_and_grad.
template <class F>
auto grad(F&& f) {
  return [vg = ValueAndGrad<std::decay_t<F>>(std::forward<F>(f))](const auto&... args) {
    auto all = vg(args...);
    if constexpr (std::tuple_size_v<decltype(all)> == 2) {
      return std::get<1>(std::move(all));
    } else {
      return std::apply([](auto&&, auto&&... g) { return std::tuple{std::move(g)...}; },
                        std::move(all));
    }
  };
}

/// grad with respect to the arguments at `argnums`: a std::vector of gradients in that order.
template <class F>
auto grad(F&& f, std::vector<int> argnums) {
  return [vg = ValueAndGradAt<std::decay_t<F>>(std::forward<F>(f), std::move(argnums))](
             const auto&... args) { return vg(args...).second; };
}

/// The vector-Jacobian product of `f` at `primals` (its arguments) with `cotangent` (the last
/// argument, an array of f's output shape, element type and device): returns a std::tuple of
/// f's output and then cotangent^T J for each floating-point DeviceArray argument, in order
/// (`auto [y, dx] = ferry::vjp(f, x, dy);`), for outputs of any shape. Throws ShapeError or
/// DeviceMismatch for a cotangent unlike the output, otherwise like value_and_grad.
template <class F, class... Args>
auto vjp(const F& f, const Args&... primals_then_cotangent) {
  static_assert(sizeof...(Args) >= 2, "ferry::vjp: give f's arguments, then the cotangent");
  const auto all = std::tie(primals_then_cotangent...);
  constexpr std::size_t n = sizeof...(Args) - 1;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    constexpr std::array<bool, n> diff{
        detail::kDiffArg<std::remove_cvref_t<std::tuple_element_t<I, std::tuple<Args...>>>>...};
    using Out = std::remove_cvref_t<std::invoke_result_t<const F&, decltype(std::get<I>(all))...>>;
    const auto& cotangent = std::get<n>(all);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(cotangent)>, Out>,
                  "ferry::vjp: the cotangent must be an array of f's output element type");
    auto d = detail::run_differentiated("vjp", f, diff, &detail::step_of("vjp", cotangent),
                                        std::get<I>(all)...);
    return std::tuple_cat(std::tuple{std::move(d.value)},
                          detail::typed_grads(d.grads, d.vars, std::get<I>(all)...));
  }(std::make_index_sequence<n>{});
}

}  // namespace ferry
