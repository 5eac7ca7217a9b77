#pragma once
// The argument handling of value_and_grad, grad and vjp (autodiff/grad.hpp): which of a call's
// arguments are variables (a floating DeviceArray, a std::vector of them as a run-time list, or
// a placed MeshArray, a variable per shard), their steps in argument order, the positions
// value_and_grad(f, argnums) picks, and the gradients given back typed as the arguments are (or
// as a std::vector in the order picked). It is its own file because it is all about the types
// and positions of arguments, decided before the call and after the backward pass; the tape and
// the backward pass between are grad.hpp's.

#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/layout.hpp"
#include "ferry/runtime/recorder.hpp"

namespace ferry::detail {

/// Whether a parameter is one variable: a DeviceArray of a floating element type.
template <class A>
inline constexpr bool kDiffArg = false;
template <Floating T>
inline constexpr bool kDiffArg<DeviceArray<T>> = true;

/// Whether a parameter is a run-time list of variables: a std::vector of floating DeviceArrays,
/// whose gradient is a std::vector of the same length.
template <class A>
inline constexpr bool kDiffList = false;
template <Floating T>
inline constexpr bool kDiffList<std::vector<DeviceArray<T>>> = true;

/// Whether a parameter is a mesh array of a floating element type: a variable whose shards are
/// placed parts of one global value, its gradient a mesh array placed as it is.
template <class A>
inline constexpr bool kDiffMesh = false;
template <Floating T>
inline constexpr bool kDiffMesh<MeshArray<T>> = true;

/// Whether value_and_grad(f) without positions differentiates a parameter of type A.
template <class A>
inline constexpr bool kVariable = kDiffArg<A> || kDiffList<A> || kDiffMesh<A>;

// Where gradients meet the mesh: declared here, defined in mesh/mesh_gradients.hpp (which
// ferry/mesh.hpp includes), as the ops' rules are declared at the ops (ops/gradient.hpp),
// since this layer comes before the mesh's.

/// Checks mesh array `a`, `what` `position` ("argument 1", "parameter 0") of `op`, as a
/// variable: InvalidArgument naming `op` for an empty or unplaced array or a Partial axis.
template <Floating T>
void check_mesh_variable(std::string_view op, std::string_view what, std::size_t position,
                         const MeshArray<T>& a);

/// The gradient of mesh array `a` from the cotangents of its shards (`grads`, one per shard of
/// `vars`, in order; taken): placed as `a`, a Replicate axis's copies' gradients all-reduced.
template <Floating T>
MeshArray<T> mesh_gradient(const MeshArray<T>& a, std::span<Step* const> vars,
                           std::span<Handle> grads);

/// std::tuple<A> for a differentiated parameter type A (its gradient has A's type),
/// std::tuple<> otherwise.
template <class A>
using GradSlot = std::conditional_t<kVariable<A>, std::tuple<A>, std::tuple<>>;

/// The gradients of a call with arguments `Args`: one per floating array argument and per
/// std::vector of them.
template <class... Args>
using Grads = decltype(std::tuple_cat(std::declval<GradSlot<std::remove_cvref_t<Args>>>()...));

/// The step of each argument `selected` marks, in argument order (every element of a selected
/// std::vector and every shard of a selected mesh array, in its order); InvalidArgument naming
/// `op` for an empty handle, and as check_mesh_variable says for a mesh array.
template <class... Args>
std::vector<Step*> variables_of(std::string_view op, std::span<const bool> selected,
                                const Args&... args) {
  std::vector<Step*> steps;
  std::size_t i = 0;
  auto add = [&](const auto& a) {
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (kDiffArg<A>) {
      if (selected[i]) steps.push_back(&step_of(op, a));
    } else if constexpr (kDiffList<A>) {
      if (selected[i]) {
        for (const auto& e : a) steps.push_back(&step_of(op, e));
      }
    } else if constexpr (kDiffMesh<A>) {
      if (selected[i]) {
        check_mesh_variable(op, "argument", i, a);
        for (const auto& e : a.shards()) steps.push_back(&step_of(op, e));
      }
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

/// The gradients of the differentiated arguments of `args`, typed, from `grads` (one per
/// variable, in the order of variables_of).
template <class... Args>
Grads<Args...> typed_grads(std::vector<Handle>& grads, const std::vector<Step*>& vars,
                           const Args&... args) {
  std::size_t next = 0;
  auto slot = [&](const auto& a) {
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (kDiffArg<A>) {
      const std::size_t k = next++;
      return std::tuple<A>{gradient_for<typename A::value_type>(*vars[k], std::move(grads[k]))};
    } else if constexpr (kDiffList<A>) {
      A list;
      list.reserve(a.size());
      for (std::size_t e = 0; e < a.size(); ++e, ++next) {
        list.push_back(gradient_for<typename A::value_type::value_type>(*vars[next],
                                                                        std::move(grads[next])));
      }
      return std::tuple<A>{std::move(list)};
    } else if constexpr (kDiffMesh<A>) {
      const std::size_t k = next;
      next += a.shards().size();
      return std::tuple<A>{mesh_gradient(a, std::span<Step* const>(vars).subspan(k, next - k),
                                         std::span<Handle>(grads).subspan(k, next - k))};
    } else {
      return std::tuple<>{};
    }
  };
  // Braced initialization evaluates the slots left to right.
  return std::apply([](auto&&... parts) { return std::tuple_cat(std::move(parts)...); },
                    std::tuple<decltype(slot(args))...>{slot(args)...});
}

/// The element type every floating array parameter of a call shares (what a gradient picked by
/// position is). std::vector parameters are not picked by position and do not count.
template <class... Args>
struct CommonGrad {
  using Tuple = decltype(std::tuple_cat(
      std::declval<std::conditional_t<kDiffArg<std::remove_cvref_t<Args>>,
                                      std::tuple<std::remove_cvref_t<Args>>, std::tuple<>>>()...));
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
/// range, given twice, or not a floating DeviceArray (a std::vector of them is not picked).
template <class... Args>
std::array<bool, sizeof...(Args)> pick(std::string_view op, const std::vector<int>& argnums) {
  constexpr std::array<bool, sizeof...(Args)> diff{kDiffArg<std::remove_cvref_t<Args>>...};
  constexpr std::array<bool, sizeof...(Args)> list{kDiffList<std::remove_cvref_t<Args>>...};
  std::array<bool, sizeof...(Args)> picked{};
  for (int i : argnums) {
    if (i < 0 || static_cast<std::size_t>(i) >= sizeof...(Args)) {
      fail<InvalidArgument>(op, "argument position ", i, " of a call with ", sizeof...(Args),
                            " arguments");
    }
    if (list[static_cast<std::size_t>(i)]) {
      fail<InvalidArgument>(op, "argument ", i, " is a std::vector of arrays, which positions do "
                                "not pick: value_and_grad(f) without positions differentiates it");
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

/// The gradients of the arguments `argnums` picked, in the order of `argnums`, from `grads`
/// (one per variable `vars` holds, in argument order: those `picked` marks).
template <class G>
std::vector<G> picked_grads(const std::vector<int>& argnums, std::span<const bool> picked,
                            const std::vector<Step*>& vars, const std::vector<Handle>& grads) {
  std::vector<G> out;
  out.reserve(argnums.size());
  for (int i : argnums) {
    std::size_t k = 0;
    for (int j = 0; j < i; ++j) {
      if (picked[static_cast<std::size_t>(j)]) ++k;
    }
    out.push_back(gradient_for<typename G::value_type>(*vars[k], grads[k]));
  }
  return out;
}

}  // namespace ferry::detail
