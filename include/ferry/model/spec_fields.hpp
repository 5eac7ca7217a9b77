#pragma once
// Every field of the spec structs (DeviceSpec and the structs it holds, LinkSpec, MeshSpec) by
// name and as text, for the checks that two specs describe the same thing and for the errors
// that name the field where they differ (ferry::mpi::mesh_over compares the ranks' specs and the
// devices a program gives it this way). C++20 has no reflection, so each struct's fields are
// listed below; what keeps a list from falling behind its struct is a compile-time check of the
// list's length against the number of fields the struct has (field_count): a field added to a
// struct and not listed here breaks the build instead of being compared by nothing.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/model/faults.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

/// Converts to any type, so that `T{AnyField{}, ...}` initializes one field of the aggregate T
/// per AnyField (a whole struct field too: a conversion is preferred to brace elision) and
/// fails to compile with more of them than T has fields. Only named in unevaluated operands.
struct AnyField {
  template <class U>
  operator U() const;  // declared only: never called
};

template <std::size_t>
using any_field = AnyField;

template <class T, std::size_t... I>
constexpr bool brace_initializable(std::index_sequence<I...>) {
  return requires { T{any_field<I>{}...}; };
}

/// The number of fields of the aggregate T (counted up to 64).
template <class T, std::size_t N = 0>
constexpr std::size_t field_count() {
  if constexpr (N < 64 && brace_initializable<T>(std::make_index_sequence<N + 1>{})) {
    return field_count<T, N + 1>();
  } else {
    return N;
  }
}

/// One listed field: its name and member pointer.
template <class S, class M>
struct NamedField {
  const char* name;
  M S::*member;
};

template <class S, class M>
constexpr NamedField<S, M> named(const char* name, M S::*member) {
  return {name, member};
}

// The lists, one overload per struct, each followed by the check that it has every field.

constexpr auto fields_of(std::type_identity<UnitRates>) {
  return std::tuple{named("bfloat16", &UnitRates::bfloat16), named("float32", &UnitRates::float32),
                    named("float64", &UnitRates::float64), named("integer", &UnitRates::integer)};
}

constexpr auto fields_of(std::type_identity<KernelClassRates>) {
  using K = KernelClassRates;
  return std::tuple{named("compute_efficiency", &K::compute_efficiency),
                    named("unit_bytes_per_second", &K::unit_bytes_per_second),
                    named("tile_overhead", &K::tile_overhead)};
}

constexpr auto fields_of(std::type_identity<KernelRates>) {
  return std::tuple{named("elementwise", &KernelRates::elementwise),
                    named("reduction", &KernelRates::reduction),
                    named("layout", &KernelRates::layout), named("matmul", &KernelRates::matmul)};
}

constexpr auto fields_of(std::type_identity<FaultPlan>) {
  return std::tuple{named("seed", &FaultPlan::seed),
                    named("h2d_failure_rate", &FaultPlan::h2d_failure_rate),
                    named("d2h_failure_rate", &FaultPlan::d2h_failure_rate),
                    named("kernel_failure_rate", &FaultPlan::kernel_failure_rate),
                    named("fail_steps", &FaultPlan::fail_steps)};
}

constexpr auto fields_of(std::type_identity<DeviceSpec>) {
  using D = DeviceSpec;
  return std::tuple{
      named("name", &D::name),
      named("compute_units", &D::compute_units),
      named("unit_flops_per_second", &D::unit_flops_per_second),
      named("kernel_rates", &D::kernel_rates),
      named("tile_bytes", &D::tile_bytes),
      named("matmul_tile", &D::matmul_tile),
      named("matmul_tile_half_area", &D::matmul_tile_half_area),
      named("matmul_tile_slack", &D::matmul_tile_slack),
      named("dram_bytes", &D::dram_bytes),
      named("dram_bytes_per_second", &D::dram_bytes_per_second),
      named("dram_efficiency", &D::dram_efficiency),
      named("l2_bytes", &D::l2_bytes),
      named("l2_bytes_per_second", &D::l2_bytes_per_second),
      named("l1_bytes", &D::l1_bytes),
      named("l1_bytes_per_second", &D::l1_bytes_per_second),
      named("h2d_bytes_per_second", &D::h2d_bytes_per_second),
      named("h2d_latency", &D::h2d_latency),
      named("h2d_min_duration", &D::h2d_min_duration),
      named("d2h_bytes_per_second", &D::d2h_bytes_per_second),
      named("d2h_latency", &D::d2h_latency),
      named("d2h_min_duration", &D::d2h_min_duration),
      named("d2d_bytes_per_second", &D::d2d_bytes_per_second),
      named("d2d_latency", &D::d2d_latency),
      named("kernel_latency", &D::kernel_latency),
      named("launch_overhead", &D::launch_overhead),
      named("policy", &D::policy),
      named("trace_steps", &D::trace_steps),
      named("faults", &D::faults),
      named("fallback", &D::fallback),
  };
}

constexpr auto fields_of(std::type_identity<LinkSpec>) {
  using L = LinkSpec;
  return std::tuple{named("bytes_per_second", &L::bytes_per_second),
                    named("hop_latency", &L::hop_latency),
                    named("links_per_pair", &L::links_per_pair),
                    named("call_overhead", &L::call_overhead),
                    named("step_overhead", &L::step_overhead),
                    named("efficiency", &L::efficiency),
                    named("one_shot_bytes", &L::one_shot_bytes),
                    named("pair_rate_factor", &L::pair_rate_factor),
                    named("composite_all_reduce", &L::composite_all_reduce)};
}

constexpr auto fields_of(std::type_identity<MeshSpec>) {
  return std::tuple{named("name", &MeshSpec::name), named("devices", &MeshSpec::devices),
                    named("shape", &MeshSpec::shape), named("topology", &MeshSpec::topology),
                    named("axis_names", &MeshSpec::axis_names), named("link", &MeshSpec::link)};
}

/// Whether T's fields are listed above.
template <class T>
concept ListedFields = requires { fields_of(std::type_identity<T>{}); };

/// Whether the list of T names as many fields as T has.
template <ListedFields T>
constexpr bool lists_every_field() {
  return std::tuple_size_v<decltype(fields_of(std::type_identity<T>{}))> == field_count<T>();
}

static_assert(lists_every_field<UnitRates>(), "UnitRates: list its new field in spec_fields.hpp");
static_assert(lists_every_field<KernelClassRates>(),
              "KernelClassRates: list its new field in spec_fields.hpp");
static_assert(lists_every_field<KernelRates>(),
              "KernelRates: list its new field in spec_fields.hpp");
static_assert(lists_every_field<FaultPlan>(), "FaultPlan: list its new field in spec_fields.hpp");
static_assert(lists_every_field<DeviceSpec>(), "DeviceSpec: list its new field in spec_fields.hpp");
static_assert(lists_every_field<LinkSpec>(), "LinkSpec: list its new field in spec_fields.hpp");
static_assert(lists_every_field<MeshSpec>(), "MeshSpec: list its new field in spec_fields.hpp");

/// One leaf field as text, such that two values whose texts agree model alike: a double in
/// hexadecimal (to the last bit), a time in nanoseconds, a name quoted, an enum by its name_of
/// where it has one, else as its number.
template <class V>
std::string field_text(const V& v) {
  if constexpr (std::is_same_v<V, std::string>) {
    return "'" + v + "'";
  } else if constexpr (std::is_same_v<V, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<V> && requires { name_of(v); }) {
    return std::string(name_of(v));
  } else if constexpr (std::is_enum_v<V>) {
    return std::to_string(static_cast<std::int64_t>(v));
  } else if constexpr (std::is_integral_v<V>) {
    return std::to_string(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    char text[64];
    std::snprintf(text, sizeof text, "%a", static_cast<double>(v));
    return text;
  } else if constexpr (std::is_same_v<V, Duration>) {
    return std::to_string(v.count()) + " ns";
  } else if constexpr (std::is_same_v<V, MeshShape>) {
    return v.to_string();
  } else {
    static_assert(requires { v.size(); v[0]; }, "a field of a type spec_fields.hpp cannot print");
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : ", ") + field_text(v[i]);
    return out + "]";
  }
}

template <ListedFields T, class F>
void for_each_field(const T& s, const std::string& prefix, F& visit);

/// Visits field `name` of value `v`: a struct field by its own fields ("kernel_rates.matmul.
/// compute_efficiency"), a list of structs element by element ("devices[2].name"), else as one.
template <class V, class F>
void visit_field(const std::string& name, const V& v, F& visit) {
  if constexpr (ListedFields<V>) {
    for_each_field(v, name + ".", visit);
  } else if constexpr (requires { typename V::value_type; } && !std::is_same_v<V, std::string>) {
    if constexpr (ListedFields<typename V::value_type>) {
      for (std::size_t i = 0; i < v.size(); ++i)
        for_each_field(v[i], name + "[" + std::to_string(i) + "].", visit);
    } else {
      visit(name, field_text(v));
    }
  } else {
    visit(name, field_text(v));
  }
}

/// Calls visit(name, text) for every leaf field of `s`, in declaration order, each name after
/// `prefix`.
template <ListedFields T, class F>
void for_each_field(const T& s, const std::string& prefix, F& visit) {
  std::apply(
      [&](const auto&... field) {
        (visit_field(prefix + field.name, s.*field.member, visit), ...);
      },
      fields_of(std::type_identity<T>{}));
}

/// Every leaf field of `s` as (name, text), in declaration order: "kernel_rates.matmul.
/// compute_efficiency" = "0x1p+0".
template <ListedFields T>
std::vector<std::pair<std::string, std::string>> field_texts(const T& s) {
  std::vector<std::pair<std::string, std::string>> out;
  auto visit = [&](const std::string& name, std::string text) {
    out.emplace_back(name, std::move(text));
  };
  for_each_field(s, "", visit);
  return out;
}

/// The fields of `s` that describe the device a model times: all but its fault plan, which is
/// the owner's alone (a fault injected in one rank's device reaches the others as the failure
/// of what that rank sends), so it is cleared before comparing.
inline std::vector<std::pair<std::string, std::string>> modeled_fields(DeviceSpec s) {
  s.faults = FaultPlan{};
  return field_texts(s);
}

}  // namespace ferry::detail
