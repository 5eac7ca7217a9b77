#pragma once
// The checks of the devices a program gives ferry::mpi::mesh_over (its own, made before the
// mesh): every other rank models each of them with a stand-in made from the MeshSpec's entry
// for its member, so a given device must be one that such a stand-in models exactly.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

/// Every field of `s` the model reads except its fault plan, as (name, text): doubles in
/// hexadecimal, so two specs whose texts agree model alike to the last bit. The fault plan is
/// left out: a fault a rank injects in its own device's spec is that rank's alone, and reaches
/// the others as the failure of what it sends (docs/distributed.md).
inline std::vector<std::pair<std::string, std::string>> spec_fields(const DeviceSpec& s) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto real = [&](std::string name, double v) {
    char text[64];
    std::snprintf(text, sizeof text, "%a", v);
    out.emplace_back(std::move(name), text);
  };
  const auto integer = [&](std::string name, std::int64_t v) {
    out.emplace_back(std::move(name), std::to_string(v));
  };
  const auto time = [&](std::string name, Duration d) {
    out.emplace_back(std::move(name), std::to_string(d.count()) + " ns");
  };
  out.emplace_back("name", "'" + s.name + "'");
  integer("compute_units", s.compute_units);
  real("unit_flops_per_second.bfloat16", s.unit_flops_per_second.bfloat16);
  real("unit_flops_per_second.float32", s.unit_flops_per_second.float32);
  real("unit_flops_per_second.float64", s.unit_flops_per_second.float64);
  real("unit_flops_per_second.integer", s.unit_flops_per_second.integer);
  const std::pair<const char*, const KernelClassRates*> classes[] = {
      {"elementwise", &s.kernel_rates.elementwise},
      {"reduction", &s.kernel_rates.reduction},
      {"layout", &s.kernel_rates.layout},
      {"matmul", &s.kernel_rates.matmul}};
  for (const auto& [name, rates] : classes) {
    const std::string prefix = std::string("kernel_rates.") + name + ".";
    real(prefix + "compute_efficiency", rates->compute_efficiency);
    real(prefix + "unit_bytes_per_second", rates->unit_bytes_per_second);
    time(prefix + "tile_overhead", rates->tile_overhead);
  }
  integer("tile_bytes", s.tile_bytes);
  integer("matmul_tile", s.matmul_tile);
  real("matmul_tile_half_area", s.matmul_tile_half_area);
  real("matmul_tile_slack", s.matmul_tile_slack);
  integer("dram_bytes", s.dram_bytes);
  real("dram_bytes_per_second", s.dram_bytes_per_second);
  real("dram_efficiency", s.dram_efficiency);
  integer("l2_bytes", s.l2_bytes);
  real("l2_bytes_per_second", s.l2_bytes_per_second);
  integer("l1_bytes", s.l1_bytes);
  real("l1_bytes_per_second", s.l1_bytes_per_second);
  real("h2d_bytes_per_second", s.h2d_bytes_per_second);
  time("h2d_latency", s.h2d_latency);
  time("h2d_min_duration", s.h2d_min_duration);
  real("d2h_bytes_per_second", s.d2h_bytes_per_second);
  time("d2h_latency", s.d2h_latency);
  time("d2h_min_duration", s.d2h_min_duration);
  real("d2d_bytes_per_second", s.d2d_bytes_per_second);
  time("d2d_latency", s.d2d_latency);
  time("kernel_latency", s.kernel_latency);
  time("launch_overhead", s.launch_overhead);
  integer("policy", static_cast<std::int64_t>(s.policy));
  integer("trace_steps", s.trace_steps);
  integer("fallback", static_cast<std::int64_t>(s.fallback));
  return out;
}

/// Checks the devices a rank gives mesh_over (`devices[k]` for member `members[k]` of `spec`,
/// which is valid) and returns them paired with their members. Throws InvalidArgument, as `op`,
/// naming the values: a count other than the members', a member out of range or given twice, a
/// device given twice, a model-only device (the other ranks' receives need its values), a
/// device that is a member of a mesh still alive (joining a second would reroute the first's
/// copies), and a device whose spec differs from `spec`'s entry for its member in any field
/// except the fault plan (the other ranks' stand-ins would model another device).
inline std::vector<std::pair<std::int64_t, Device>> check_adopted(
    std::string_view op, int rank, const MeshSpec& spec, const std::vector<std::int64_t>& members,
    const std::vector<Device>& devices) {
  const std::int64_t n = static_cast<std::int64_t>(spec.devices.size());
  if (devices.size() != members.size()) {
    fail<InvalidArgument>(op, "rank ", rank, " gives ", devices.size(), " devices for the ",
                          members.size(), " members it owns of mesh ", spec.name);
  }
  std::vector<std::pair<std::int64_t, Device>> out;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const std::int64_t m = members[k];
    const Device& d = devices[k];
    if (m < 0 || m >= n) {
      fail<InvalidArgument>(op, "member ", m, " is outside mesh ", spec.name, " of ", n, " devices");
    }
    for (const auto& [other, given] : out) {
      if (other == m) fail<InvalidArgument>(op, "member ", m, " of mesh ", spec.name, " is given twice");
      if (given == d) {
        fail<InvalidArgument>(op, "device ", d.name(), " is given twice, for members ", other,
                              " and ", m, " of mesh ", spec.name);
      }
    }
    if (d.is_model_only()) {
      fail<InvalidArgument>(op, "device ", d.name(), " for member ", m, " of mesh ", spec.name,
                            " is model-only: the other ranks need the values of its shards");
    }
    if (DeviceAccess::state(d)->in_mesh()) {
      fail<InvalidArgument>(op, "device ", d.name(), " for member ", m, " of mesh ", spec.name,
                            " is already a member of another mesh");
    }
    const auto want = spec_fields(spec.devices[static_cast<std::size_t>(m)]);
    const auto got = spec_fields(d.spec());
    for (std::size_t f = 0; f < want.size(); ++f) {
      if (want[f].second == got[f].second) continue;
      fail<InvalidArgument>(op, "device ", d.name(), " for member ", m, " of mesh ", spec.name,
                            " has ", got[f].first, " ", got[f].second, " where the mesh spec has ",
                            want[f].second, ": every rank models member ", m,
                            " from the mesh spec");
    }
    out.emplace_back(m, d);
  }
  return out;
}

}  // namespace ferry::detail
