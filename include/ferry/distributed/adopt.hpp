#pragma once
// The checks of the devices a program gives ferry::mpi::mesh_over (its own, made before the
// mesh): every other rank models each of them with a stand-in made from the MeshSpec's entry
// for its member, so a given device must be one that such a stand-in models exactly.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/spec_fields.hpp"

namespace ferry::detail {

/// Checks the devices a rank gives mesh_over (`devices[k]` for member `members[k]` of `spec`,
/// which is valid) and returns them paired with their members. Throws InvalidArgument, as `op`,
/// naming the values: a count other than the members', a member out of range or given twice, a
/// device given twice, a device that is a member of a mesh still alive (joining a second would
/// reroute the first's copies), and a device whose spec differs from `spec`'s entry for its
/// member in any field except the fault plan (the other ranks' stand-ins would model another
/// device), naming the first such field (spec_fields.hpp lists them all). A model-only device is
/// checked with the other ranks' (mesh_over: a mesh is model-only on every rank or on none).
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
      fail<InvalidArgument>(op, "member ", m, " is outside mesh ", spec.name, " of ", n,
                            " devices");
    }
    for (const auto& [other, given] : out) {
      if (other == m)
        fail<InvalidArgument>(op, "member ", m, " of mesh ", spec.name, " is given twice");
      if (given == d) {
        fail<InvalidArgument>(op, "device ", d.name(), " is given twice, for members ", other,
                              " and ", m, " of mesh ", spec.name);
      }
    }
    if (DeviceAccess::state(d)->in_mesh()) {
      fail<InvalidArgument>(op, "device ", d.name(), " for member ", m, " of mesh ", spec.name,
                            " is already a member of another mesh");
    }
    const auto want = modeled_fields(spec.devices[static_cast<std::size_t>(m)]);
    const auto got = modeled_fields(d.spec());
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
