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
#include <variant>
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
/// the variable's layout (order and memory) either way.
template <Floating T>
DeviceArray<T> gradient_for(const Step& v, Handle g) {
  DeviceArray<T> grad = g ? ArrayAccess::wrap<T>(std::move(g))
                          : zeros<T>(DeviceAccess::wrap(v.device()), user_shape(v));
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

/// Whether value_and_grad(f, argnums) may pick a parameter of type A: a floating DeviceArray
/// or MeshArray (a std::vector of them is a run-time list, which positions do not pick).
template <class A>
inline constexpr bool kPickable = kDiffArg<A> || kDiffMesh<A>;

/// The type of a gradient picked by position (value_and_grad(f, argnums)): the type of the
/// floating array parameters when they are all of one (DeviceArray<T> or MeshArray<T>), and
/// std::variant<DeviceArray<T>, MeshArray<T>> when f takes both, since which ones argnums picks
/// is known only at run time. They share one element type T.
template <class... Args>
struct CommonGrad {
  using Tuple = decltype(std::tuple_cat(
      std::declval<std::conditional_t<kPickable<std::remove_cvref_t<Args>>,
                                      std::tuple<std::remove_cvref_t<Args>>, std::tuple<>>>()...));
  static_assert(std::tuple_size_v<Tuple> != 0, "ferry::grad: the function takes no "
                                               "floating-point DeviceArray or MeshArray to "
                                               "differentiate");
  using First = std::tuple_element_t<0, Tuple>;
  using V = typename First::value_type;
  static_assert([]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::is_same_v<typename std::tuple_element_t<I, Tuple>::value_type, V> && ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{}),
                "ferry::grad: picking arguments by position needs floating arrays of one element "
                "type; use value_and_grad(f) without positions, or convert with astype");
  static constexpr bool kMixed = (kDiffArg<std::remove_cvref_t<Args>> || ...) &&
                                 (kDiffMesh<std::remove_cvref_t<Args>> || ...);
  using type = std::conditional_t<kMixed, std::variant<DeviceArray<V>, MeshArray<V>>, First>;
};

/// Marks the arguments `argnums` picks; InvalidArgument naming `op` for a position out of
/// range, given twice, or not a floating DeviceArray or MeshArray (a std::vector of them is not
/// picked).
template <class... Args>
std::array<bool, sizeof...(Args)> pick(std::string_view op, const std::vector<int>& argnums) {
  constexpr std::array<bool, sizeof...(Args)> diff{kPickable<std::remove_cvref_t<Args>>...};
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
      fail<InvalidArgument>(op, "argument ", i,
                            " is not a floating-point DeviceArray or MeshArray");
    }
    if (picked[static_cast<std::size_t>(i)]) {
      fail<InvalidArgument>(op, "argument position ", i, " is given twice");
    }
    picked[static_cast<std::size_t>(i)] = true;
  }
  return picked;
}

/// The gradients of the arguments `argnums` picked, as G, in the order of `argnums`, from
/// `grads` (one per variable `vars` holds, in argument order: those `picked` marks, a mesh
/// array's one per shard; taken).
template <class G, class... Args>
std::vector<G> picked_grads(const std::vector<int>& argnums, std::span<const bool> picked,
                            const std::vector<Step*>& vars, std::vector<Handle>& grads,
                            const Args&... args) {
  // How many variables each argument gave: where each picked one's cotangents start.
  std::array<std::size_t, sizeof...(Args)> count{};
  std::size_t i = 0;
  auto variables = [&](const auto& a) -> std::size_t {
    using A = std::remove_cvref_t<decltype(a)>;
    if (!picked[i]) return 0;
    if constexpr (kDiffMesh<A>) {
      return a.shards().size();
    } else {
      return 1;
    }
  };
  ((count[i] = variables(args), ++i), ...);
  std::vector<G> out;
  out.reserve(argnums.size());
  for (const int k : argnums) {
    std::size_t at = 0;
    for (int j = 0; j < k; ++j) at += count[static_cast<std::size_t>(j)];
    auto take = [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      if constexpr (kDiffArg<A>) {
        out.push_back(G(gradient_for<typename A::value_type>(*vars[at], std::move(grads[at]))));
      } else if constexpr (kDiffMesh<A>) {
        const std::size_t n = count[static_cast<std::size_t>(k)];
        out.push_back(G(mesh_gradient(a, std::span<Step* const>(vars).subspan(at, n),
                                      std::span<Handle>(grads).subspan(at, n))));
      }
    };
    i = 0;
    ((i++ == static_cast<std::size_t>(k) ? take(args) : void()), ...);
  }
  return out;
}

}  // namespace ferry::detail
