#pragma once
// Reverse-mode differentiation over futures, in the style of JAX and MLX: value_and_grad, grad
// and vjp wrap a function of DeviceArrays. Calling the wrapper runs the function (its ops
// return at once, as always) while a tape local to the call records the ops that depend on the
// differentiated arguments, then submits the backward pass, op by op, and returns: the
// gradients are futures on the devices of their arguments, and only an export waits. A
// std::vector of arrays is a run-time list of variables (its gradient is a vector too), so a
// caller with a list known only at run time needs no switch over its length. A placed MeshArray
// is a variable too, and the value may be one (mesh/mesh_gradients.hpp). Which arguments
// are variables, and how their gradients come back typed, is autodiff/arguments.hpp; here are
// the tape, the backward pass and the public wrappers.

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/arguments.hpp"
#include "ferry/autodiff/backward.hpp"
#include "ferry/autodiff/attention_rules.hpp"
#include "ferry/autodiff/convolution_rules.hpp"
#include "ferry/autodiff/elementwise_rules.hpp"
#include "ferry/autodiff/indexing_rules.hpp"
#include "ferry/autodiff/reduce_rules.hpp"
#include "ferry/autodiff/shape_rules.hpp"
#include "ferry/autodiff/support.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/layout.hpp"

namespace ferry {

/// The type of ferry::has_aux. Not constructible from `{}` (as std::nullopt_t), so that
/// value_and_grad(f, {}) still means an empty list of positions.
struct HasAux {
  struct Tag {};
  explicit constexpr HasAux(Tag) noexcept {}
};

/// Tells value_and_grad that f returns std::pair{loss, aux}: the loss is differentiated and aux
/// is carried out as f returned it, never differentiated (JAX's has_aux).
inline constexpr HasAux has_aux{HasAux::Tag{}};

namespace detail {

/// Whether R is what a function under has_aux returns: a std::pair (or a std::tuple of two).
template <class R>
inline constexpr bool kIsPair = false;
template <class L, class A>
inline constexpr bool kIsPair<std::pair<L, A>> = true;
template <class L, class A>
inline constexpr bool kIsPair<std::tuple<L, A>> = true;

/// What one differentiated call gives: f's value (an array, or a tuple of them for vjp) and the
/// cotangent of each variable.
template <class Value>
struct Differentiated {
  Value value;
  std::vector<Step*> vars;  // the differentiated arguments' steps, in argument order
  std::vector<Handle> grads;
};

/// Cotangent `c` as the seed of output `out` (output `index` of several when `many`);
/// ShapeError or DeviceMismatch naming `op` when it is unlike the output.
inline Handle seed_from(std::string_view op, Step& c, const Step& out, std::size_t index,
                        bool many) {
  if (c.shape() != out.shape()) {
    if (many) {
      fail<ShapeError>(op, "cotangent ", index, " has shape ", c.shape(), ", output ", index, " ",
                       out.shape());
    }
    fail<ShapeError>(op, "the cotangent has shape ", c.shape(), ", the function's value ",
                     out.shape());
  }
  if (c.device() != out.device()) {
    if (many) {
      fail<DeviceMismatch>(op, "cotangent ", index, " lives on ", c.device()->name(), ", output ",
                           index, " on ", out.device()->name());
    }
    fail<DeviceMismatch>(op, "the cotangent lives on ", c.device()->name(),
                         ", the function's value on ", out.device()->name());
  }
  return Handle(Ref<Step>::share(&c));
}

/// The cotangents of `vars` (empty where nothing reaches one) given cotangents `seeds` of the
/// outputs `outs` (copies along the axes of `copies`, when given: see CopyWalk); an output that
/// depends on no variable passes nothing back.
inline std::vector<Handle> pull_back(Tape& tape, std::span<Step* const> outs,
                                     std::span<Handle> seeds, std::span<Step* const> vars,
                                     const CopySeeds* copies = nullptr) {
  bool reached = false;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (tape.tracks(*outs[i])) {
      reached = true;
    } else {
      seeds[i] = Handle();
    }
  }
  if (!reached) return std::vector<Handle>(vars.size());
  return backward(tape, outs, seeds, vars, copies);
}

/// The seeds of a function's value that is a mesh array: each shard's step and its seed, and
/// the copies among them (the axes along which the value is Replicate).
struct MeshSeeds {
  std::vector<Step*> outs;
  std::vector<Handle> seeds;
  CopySeeds copies;
};

/// The seeds of mesh value `value` (defined in mesh/mesh_gradients.hpp, as check_mesh_variable):
/// ones for a loss (`cotangent` null), the cotangent's shards for vjp; along a Partial axis
/// every summand gets the whole cotangent (1/n of it for a mean), along a Replicate axis each
/// copy gets a copy (CopySeeds). `index` is the value's position among the outputs of a
/// function returning a std::tuple (-1 for a function's only value), named in errors. Throws
/// InvalidArgument naming `op` for a value without a global view, Partial by max or min, or
/// (without a cotangent) not a scalar; for a cotangent without a global view, on another mesh
/// or placed otherwise, InvalidArgument, and ShapeError for another global shape.
template <Floating T>
MeshSeeds mesh_seeds(std::string_view op, const MeshArray<T>& value, const MeshArray<T>* cotangent,
                     std::ptrdiff_t index = -1);

/// Runs `call()` with a tape over `vars` and the backward pass from its value with cotangent
/// `*cotangent` (ones, for a scalar value, when null). The value is a DeviceArray or a placed
/// MeshArray (seeded by mesh_seeds). `op` names the API in errors.
template <class Call, class Cot = void>
auto differentiate(std::string_view op, std::vector<Step*> vars, const Call& call,
                   const Cot* cotangent = nullptr) {
  using Out = std::remove_cvref_t<std::invoke_result_t<const Call&>>;
  static_assert(kIsArray<Out> || kIsMeshArray<Out>,
                "ferry::grad: the function must return a DeviceArray or a MeshArray (one that "
                "returns std::pair{loss, aux} takes ferry::has_aux)");
  using V = typename Out::value_type;
  static_assert(Floating<V>, "ferry::grad: the function's value must have a floating-point "
                             "element type");
  Tape tape(vars);
  Out value;
  {
    TapeScope scope(tape);
    value = call();
  }
  std::vector<Handle> grads;
  if constexpr (kIsMeshArray<Out>) {
    const Out* c = nullptr;
    if constexpr (!std::is_void_v<Cot>) c = cotangent;
    MeshSeeds s = mesh_seeds(op, value, c);
    grads = pull_back(tape, s.outs, s.seeds, vars, &s.copies);
  } else {
    Step& out = step_of(op, value);
    Handle seed;
    if constexpr (std::is_void_v<Cot>) {
      if (out.shape().rank() != 0) {
        fail<InvalidArgument>(op, "the function returned an array of shape ", out.shape(),
                              ": its value must be a scalar (rank 0); use vjp for other outputs");
      }
      seed = handle_of(ones<V>(value.device(), Shape{}));
    } else {
      seed = seed_from(op, step_of(op, *cotangent), out, 0, false);
    }
    Step* const outs[] = {&out};
    grads = pull_back(tape, outs, std::span<Handle>(&seed, 1), vars);
  }
  return Differentiated<Out>{std::move(value), std::move(vars), std::move(grads)};
}

/// differentiate for a `call` returning {loss, aux} (has_aux): the loss is differentiated, aux
/// carried out untouched. Returns the Differentiated of the loss and aux.
template <class Call>
auto differentiate_with_aux(std::string_view op, std::vector<Step*> vars, const Call& call) {
  using R = std::remove_cvref_t<std::invoke_result_t<const Call&>>;
  static_assert(kIsPair<R>, "ferry::value_and_grad: with ferry::has_aux, the function must "
                            "return std::pair{loss, aux}");
  // Why an optional: aux need not be default-constructible, and it exists only once f ran.
  std::optional<std::remove_cvref_t<std::tuple_element_t<1, R>>> aux;
  auto d = differentiate(op, std::move(vars), [&] {
    R r = call();
    aux.emplace(std::get<1>(std::move(r)));
    return std::get<0>(std::move(r));
  });
  return std::pair{std::move(d), std::move(*aux)};
}

/// differentiate for vjp of a `call` returning one array (a DeviceArray or a MeshArray), with
/// its cotangent.
template <class Call, class A>
  requires(kIsArray<A> || kIsMeshArray<A>)
auto differentiate_vjp(std::string_view op, std::vector<Step*> vars, const Call& call,
                       const A& cotangent) {
  // An empty array is refused before f runs; a mesh cotangent is checked against the value.
  if constexpr (kIsArray<A>) static_cast<void>(step_of(op, cotangent));
  return differentiate(op, std::move(vars), call, &cotangent);
}

/// The seeds of several outputs (vjp of a std::tuple) as one: `parts` holds each output's (a
/// DeviceArray's without copies). The backward walk carries copies along one set of axes of one
/// mesh (CopyWalk), so the seeds stay copies only along the axes where every output is one (all
/// mesh arrays of one mesh, each Replicate there); along an output's other Replicate axes the
/// member at position 0 alone keeps its seed, the output read there as a DeviceArray output is,
/// and the transposes bring the cotangent to the rest. Returns the copies to walk with (no
/// axes: none).
inline CopySeeds shared_copies(std::span<MeshSeeds> parts) {
  auto has = [](const std::vector<int>& axes, int a) {
    return std::ranges::find(axes, a) != axes.end();
  };
  std::vector<int> shared = parts[0].copies.axes;
  for (const MeshSeeds& p : parts) {
    if (p.copies.mesh == nullptr || p.copies.mesh != parts[0].copies.mesh) shared.clear();
    std::erase_if(shared, [&](int a) { return !has(p.copies.axes, a); });
  }
  for (MeshSeeds& p : parts) {
    for (const int a : p.copies.axes) {
      if (has(shared, a)) continue;
      for (std::size_t i = 0; i < p.outs.size(); ++i) {
        if (p.seeds[i] && !p.copies.first(*p.outs[i], a)) p.seeds[i] = Handle();
      }
    }
  }
  CopySeeds copies = parts[0].copies;
  copies.axes = std::move(shared);
  return copies;
}

/// differentiate for vjp of a `call` returning a std::tuple of arrays (DeviceArrays and placed
/// MeshArrays), with one cotangent per output: cotangent^T J summed over the outputs.
template <class Call, class... Outs>
Differentiated<std::tuple<Outs...>> differentiate_vjp(std::string_view op, std::vector<Step*> vars,
                                                      const Call& call,
                                                      const std::tuple<Outs...>& cotangents) {
  static_assert(sizeof...(Outs) != 0, "ferry::vjp: the function returns an empty std::tuple");
  static_assert(((kDiffArg<Outs> || kDiffMesh<Outs>) && ...),
                "ferry::vjp: a function returning a std::tuple must return floating-point "
                "DeviceArrays or MeshArrays");
  Tape tape(vars);
  std::tuple<Outs...> values;
  {
    TapeScope scope(tape);
    values = call();
  }
  // Each output's seeds, in order: a DeviceArray's one, a mesh array's one per shard.
  std::vector<MeshSeeds> parts;
  auto seeds_of = [&](const auto& value, const auto& cotangent, std::size_t i) {
    if constexpr (kDiffMesh<std::remove_cvref_t<decltype(value)>>) {
      parts.push_back(mesh_seeds(op, value, &cotangent, static_cast<std::ptrdiff_t>(i)));
    } else {
      Step& out = step_of(op, value);
      MeshSeeds s;
      s.outs.push_back(&out);
      s.seeds.push_back(seed_from(op, step_of(op, cotangent), out, i, true));
      parts.push_back(std::move(s));
    }
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (seeds_of(std::get<I>(values), std::get<I>(cotangents), I), ...);
  }(std::index_sequence_for<Outs...>{});
  const CopySeeds copies = shared_copies(parts);
  std::vector<Step*> outs;
  std::vector<Handle> seeds;
  for (MeshSeeds& p : parts) {
    outs.insert(outs.end(), p.outs.begin(), p.outs.end());
    for (Handle& h : p.seeds) seeds.push_back(std::move(h));
  }
  // Two outputs may be one array, whose seeds the backward pass sums before any rule has made
  // (and so taught it to sum) a cotangent of that type.
  (cotangent_sum(dtype_of<typename Outs::value_type>)
       .store(&add_cotangents_as<typename Outs::value_type>, std::memory_order_relaxed),
   ...);
  std::vector<Handle> grads =
      pull_back(tape, outs, seeds, vars, copies.axes.empty() ? nullptr : &copies);
  return {std::move(values), std::move(vars), std::move(grads)};
}

}  // namespace detail

/// value_and_grad(f) and value_and_grad(f, has_aux) as a callable: see ferry::value_and_grad.
template <class F, bool kHasAux = false>
class ValueAndGrad {
 public:
  /// `op` names the transform in errors (grad's wrapper says "grad").
  explicit ValueAndGrad(F f, std::string_view op = "value_and_grad")
      : f_(std::move(f)), op_(op) {}

  /// f(args...)'s value (and with has_aux its aux) and its gradient with respect to each
  /// floating-point DeviceArray argument and each std::vector of them, in argument order:
  /// `auto [loss, dx, dw] = vg(x, w);`, `auto [loss, aux, dx] = vga(x);`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    const std::string_view op = op_;
    constexpr std::array<bool, sizeof...(Args)> all{detail::kVariable<Args>...};
    auto vars = detail::variables_of(op, all, args...);
    auto call = [&] { return f_(args...); };
    if constexpr (kHasAux) {
      auto [d, aux] = detail::differentiate_with_aux(op, std::move(vars), call);
      return std::tuple_cat(std::tuple<decltype(d.value), decltype(aux)>{std::move(d.value),
                                                                         std::move(aux)},
                            detail::typed_grads(d.grads, d.vars, args...));
    } else {
      auto d = detail::differentiate(op, std::move(vars), call);
      return std::tuple_cat(std::tuple<decltype(d.value)>{std::move(d.value)},
                            detail::typed_grads(d.grads, d.vars, args...));
    }
  }

 private:
  F f_;
  std::string_view op_;
};

/// value_and_grad(f, argnums) and value_and_grad(f, argnums, has_aux) as a callable: see
/// ferry::value_and_grad.
template <class F, bool kHasAux = false>
class ValueAndGradAt {
 public:
  /// `op` names the transform in errors (grad's wrapper says "grad").
  ValueAndGradAt(F f, std::vector<int> argnums, std::string_view op = "value_and_grad")
      : f_(std::move(f)), argnums_(std::move(argnums)), op_(op) {}

  /// f(args...)'s value (and with has_aux its aux) and its gradients with respect to the
  /// arguments picked, in the order picked: `auto [loss, grads] = vg(x, y, b); grads[1]`.
  template <class... Args>
  auto operator()(const Args&... args) const {
    const std::string_view op = op_;
    using G = typename detail::CommonGrad<Args...>::type;
    const auto picked = detail::pick<Args...>(op, argnums_);
    auto vars = detail::variables_of(op, picked, args...);
    auto call = [&] { return f_(args...); };
    // vars are in argument order; the result follows argnums.
    if constexpr (kHasAux) {
      auto [d, aux] = detail::differentiate_with_aux(op, std::move(vars), call);
      std::vector<G> grads = detail::picked_grads<G>(argnums_, picked, d.vars, d.grads, args...);
      return std::tuple<decltype(d.value), decltype(aux), std::vector<G>>{
          std::move(d.value), std::move(aux), std::move(grads)};
    } else {
      auto d = detail::differentiate(op, std::move(vars), call);
      std::vector<G> grads = detail::picked_grads<G>(argnums_, picked, d.vars, d.grads, args...);
      return std::pair{std::move(d.value), std::move(grads)};
    }
  }

 private:
  F f_;
  std::vector<int> argnums_;
  std::string_view op_;
};

/// A callable that returns `f`'s value and its gradients: called with f's arguments, it runs f
/// (whose value must be a rank-0 floating-point array) and returns a std::tuple of the value
/// and then the gradient with respect to each floating-point DeviceArray argument, in argument
/// order, each of its argument's shape, layout and device: `auto [loss, dw, db] =
/// ferry::value_and_grad(loss_fn)(w, b, x_int);` (integer, bool and non-array arguments are
/// constants). A std::vector of floating DeviceArrays is a list of variables of any length,
/// known at run time: its gradient is a std::vector with one gradient per element, in order
/// (empty for an empty vector). A floating MeshArray placed Shard or Replicate on each mesh
/// axis is a variable: its gradient is a MeshArray placed as it is (along a Replicate axis the
/// copies' gradients summed by an all-reduce, every copy getting the whole). The value may be a
/// placed mesh scalar (global shape (), each axis Replicate, Partial(sum) or Partial(mean)),
/// returned as it is: every shard is seeded, along a Partial axis as a summand (1/n of the
/// cotangent for a mean), along a Replicate axis as a copy of the one cotangent, counted once
/// (see nn::value_and_grad over mesh parameters, which does the same). Everything returns at
/// once; the gradients are futures. An
/// array f captures instead of taking as an argument is a constant, unless it is a variable
/// itself: as PyTorch's autograd, ferry follows the array, not the handle f reaches it by, so a
/// captured handle of an argument's array is that variable (capture `x * 1.0f` to hold its value
/// constant). An array given twice (as
/// two arguments, twice in a vector, or in a vector and as an argument) is one variable, and
/// each of its positions gets the whole gradient (as PyTorch accumulates it). Ops f runs on
/// other threads are not seen. Throws what f throws; InvalidArgument naming value_and_grad for
/// an empty array argument (or vector element) or a value that is not a scalar, a mesh array
/// argument that is unplaced or Partial, a mesh value without placements or Partial by max or
/// min;
/// NotDifferentiable naming the op when the value depends on an argument through a floating op
/// without a gradient (a custom step given no rule). Integer and bool arrays (masks, indices,
/// casts to integers) are constants of the gradient: a path through them contributes zero, as
/// in JAX and PyTorch.
template <class F>
ValueAndGrad<std::decay_t<F>> value_and_grad(F&& f) {
  return ValueAndGrad<std::decay_t<F>>(std::forward<F>(f));
}

/// value_and_grad for an `f` that returns std::pair{loss, aux} (JAX's has_aux): the callable
/// returns the flat std::tuple (loss, aux, gradients...): `auto [loss, logits, dw] =
/// ferry::value_and_grad(f, ferry::has_aux)(w, x);`. aux may be any value (an array, a tuple of
/// them, a number); it is returned as f returned it and never differentiated. The loss must be
/// a rank-0 floating-point array, and the call throws like value_and_grad(f); f returning
/// anything but a std::pair (or a std::tuple of two) is a compile error.
template <class F>
ValueAndGrad<std::decay_t<F>, true> value_and_grad(F&& f, HasAux) {
  return ValueAndGrad<std::decay_t<F>, true>(std::forward<F>(f));
}

/// value_and_grad with respect to the arguments at `argnums` only: the callable returns a
/// std::pair of the value and a std::vector of the gradients, in the order of `argnums`
/// (`value_and_grad(f, {0, 2})`). A position picks a floating DeviceArray or a placed MeshArray
/// (its gradient placed as for value_and_grad(f)); the floating array arguments share one
/// element type (a compile error otherwise), and the vector holds their type, or
/// std::variant<DeviceArray<T>, MeshArray<T>> when f takes both (`std::get<1>(grads[0])`).
/// Arguments not picked, mesh arrays and std::vectors included, are constants: no cotangent is
/// computed for them (one that is the same array as a picked one is that variable, as a
/// captured array is: see value_and_grad(f)). The value may be a mesh scalar, as for
/// value_and_grad(f). The call throws
/// InvalidArgument for a position out of range, given twice, or not a floating-point
/// DeviceArray or MeshArray (a std::vector argument included), a picked mesh array as
/// value_and_grad(f) does, and otherwise like value_and_grad.
template <class F>
ValueAndGradAt<std::decay_t<F>> value_and_grad(F&& f, std::vector<int> argnums) {
  return ValueAndGradAt<std::decay_t<F>>(std::forward<F>(f), std::move(argnums));
}

/// value_and_grad(f, argnums) for an `f` that returns std::pair{loss, aux}: the callable
/// returns the std::tuple (loss, aux, std::vector of gradients in the order of `argnums`).
/// Throws like value_and_grad(f, argnums).
template <class F>
ValueAndGradAt<std::decay_t<F>, true> value_and_grad(F&& f, std::vector<int> argnums, HasAux) {
  return ValueAndGradAt<std::decay_t<F>, true>(std::forward<F>(f), std::move(argnums));
}

/// A callable that returns the gradients of `f` alone: a DeviceArray when f takes one
/// floating-point array (a std::vector of gradients when it takes one std::vector of them), a
/// std::tuple of them otherwise (`auto [dx, dw] = grad(f)(x, w)`); a MeshArray for a MeshArray
/// argument, as value_and_grad gives it. Differentiable again (`grad(grad(f))` for a function of
/// a scalar). Throws like value_and_grad, its errors naming grad.
template <class F>
auto grad(F&& f) {
  return [vg = ValueAndGrad<std::decay_t<F>>(std::forward<F>(f), "grad")](const auto&... args) {
    auto all = vg(args...);
    if constexpr (std::tuple_size_v<decltype(all)> == 2) {
      return std::get<1>(std::move(all));
    } else {
      return std::apply([](auto&&, auto&&... g) { return std::tuple{std::move(g)...}; },
                        std::move(all));
    }
  };
}

/// grad with respect to the arguments at `argnums`: a std::vector of gradients in that order,
/// of the type value_and_grad(f, argnums) gives. Throws like value_and_grad(f, argnums), its
/// errors naming grad.
template <class F>
auto grad(F&& f, std::vector<int> argnums) {
  return [vg = ValueAndGradAt<std::decay_t<F>>(std::forward<F>(f), std::move(argnums), "grad")](
             const auto&... args) { return vg(args...).second; };
}

/// The vector-Jacobian product of `f` at `primals` (its arguments) with `cotangent` (the last
/// argument, an array of f's output shape, element type and device): returns a std::tuple of
/// f's output and then cotangent^T J for each floating-point DeviceArray argument and each
/// std::vector of them (a std::vector of products), in order (`auto [y, dx] = ferry::vjp(f, x,
/// dy);`), for outputs of any shape. For an f that returns a std::tuple of floating arrays, the
/// cotangent is a std::tuple of the same types, one per output, and the products are summed
/// over the outputs: `auto [ys, dx] = ferry::vjp(f, x, std::tuple{dy1, dy2});` with ys f's
/// tuple. A cotangent of another type is a compile error. For an f returning a placed
/// MeshArray (any global shape, each axis Shard, Replicate, Partial(sum) or Partial(mean)), the
/// cotangent is a MeshArray of the same mesh, global shape and placements: each shard is seeded
/// with its block, along a Partial axis with the whole cotangent (its summands all-reduced
/// first; 1/n of it for a mean), along a Replicate axis as a copy counted once; MeshArray
/// arguments are variables as for value_and_grad. A std::tuple f returns may hold MeshArrays
/// and DeviceArrays, each mesh output and its cotangent as for one (copies along the Replicate
/// axes every output of the tuple shares, all mesh arrays of one mesh; along the others the
/// output is read at position 0, as a DeviceArray output is). Throws ShapeError or
/// DeviceMismatch for a cotangent unlike its output (naming its position in a tuple); for a
/// mesh value, InvalidArgument naming vjp (and the position in a tuple) for a value without
/// placements or Partial by max or min, a cotangent that is empty, unplaced, on another mesh or
/// placed otherwise, ShapeError for one of another global shape; otherwise like
/// value_and_grad.
template <class F, class... Args>
auto vjp(const F& f, const Args&... primals_then_cotangent) {
  static_assert(sizeof...(Args) >= 2, "ferry::vjp: give f's arguments, then the cotangent");
  const auto all = std::tie(primals_then_cotangent...);
  constexpr std::size_t n = sizeof...(Args) - 1;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    constexpr std::string_view op = "vjp";
    constexpr std::array<bool, n> diff{
        detail::kVariable<std::remove_cvref_t<std::tuple_element_t<I, std::tuple<Args...>>>>...};
    using Out = std::remove_cvref_t<std::invoke_result_t<const F&, decltype(std::get<I>(all))...>>;
    const auto& cotangent = std::get<n>(all);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(cotangent)>, Out>,
                  "ferry::vjp: the cotangent must be an array of f's output element type (a "
                  "std::tuple of the same array types for a function returning a std::tuple)");
    auto call = [&] { return f(std::get<I>(all)...); };
    auto d = detail::differentiate_vjp(op, detail::variables_of(op, diff, std::get<I>(all)...),
                                       call, cotangent);
    return std::tuple_cat(std::tuple<decltype(d.value)>{std::move(d.value)},
                          detail::typed_grads(d.grads, d.vars, std::get<I>(all)...));
  }(std::make_index_sequence<n>{});
}

}  // namespace ferry
