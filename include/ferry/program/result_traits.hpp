#pragma once
// ResultTraits: how a jit program's result (a DeviceArray, a std::vector of them, or a
// std::tuple / std::pair of those) is taken apart into the steps a trace records, and rebuilt
// from the handles a replay gives back.

#include <array>
#include <cstddef>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/runtime/array_access.hpp"
#include "ferry/runtime/handle.hpp"

namespace ferry::detail {

/// How a program's result is taken apart into arrays and rebuilt from replayed ones. kFixed:
/// the handles it always takes; kVectors: the std::vectors in it, whose length each trace
/// decides. rebuild takes the handles from h[at] on, leaving `after` of them to the results
/// that follow it (a vector takes all but those).
template <class R>
struct ResultTraits {
  static_assert(kIsArray<R>, "ferry::jit: a program returns a DeviceArray, a std::vector of "
                             "them, or a std::tuple / std::pair of DeviceArrays");
  static constexpr std::size_t kFixed = 1;
  static constexpr std::size_t kVectors = 0;
  static void flatten(const R& r, std::vector<Step*>& out) { out.push_back(ArrayAccess::step(r)); }
  static R rebuild(std::span<Handle> h, std::size_t& at, std::size_t /*after*/ = 0) {
    return ArrayAccess::wrap<typename R::value_type>(std::move(h[at++]));
  }
};
template <Element T>
struct ResultTraits<std::vector<DeviceArray<T>>> {
  static constexpr std::size_t kFixed = 0;
  static constexpr std::size_t kVectors = 1;
  static void flatten(const std::vector<DeviceArray<T>>& r, std::vector<Step*>& out) {
    for (const DeviceArray<T>& a : r) out.push_back(ArrayAccess::step(a));
  }
  static std::vector<DeviceArray<T>> rebuild(std::span<Handle> h, std::size_t& at,
                                             std::size_t after = 0) {
    std::vector<DeviceArray<T>> r;
    while (at + after < h.size()) r.push_back(ArrayAccess::wrap<T>(std::move(h[at++])));
    return r;
  }
};
template <template <class...> class Tuple, class... Ts>
requires(std::is_same_v<Tuple<Ts...>, std::tuple<Ts...>> ||
         std::is_same_v<Tuple<Ts...>, std::pair<Ts...>>) struct ResultTraits<Tuple<Ts...>> {
  static constexpr std::size_t kFixed = (std::size_t{0} + ... + ResultTraits<Ts>::kFixed);
  static constexpr std::size_t kVectors = (std::size_t{0} + ... + ResultTraits<Ts>::kVectors);
  // Two vectors' lengths could not be told apart from the handles a replay gives back.
  static_assert(kVectors <= 1, "ferry::jit: a tuple or pair result holds at most one "
                               "std::vector of DeviceArrays (its length is what the others "
                               "leave)");
  static void flatten(const Tuple<Ts...>& r, std::vector<Step*>& out) {
    std::apply([&](const auto&... a) { (ResultTraits<Ts>::flatten(a, out), ...); }, r);
  }
  static Tuple<Ts...> rebuild(std::span<Handle> h, std::size_t& at, std::size_t after = 0) {
    // The handles each element leaves to the elements after it.
    constexpr std::array<std::size_t, sizeof...(Ts)> fixed{ResultTraits<Ts>::kFixed...};
    constexpr auto behind = [fixed](std::size_t i) {
      std::size_t n = 0;
      for (std::size_t j = i + 1; j < fixed.size(); ++j) n += fixed[j];
      return n;
    };
    // Braced: the elements are rebuilt in order, each taking its handles from `at` on.
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return Tuple<Ts...>{ResultTraits<Ts>::rebuild(h, at, after + behind(I))...};
    }(std::index_sequence_for<Ts...>{});
  }
};

}  // namespace ferry::detail
