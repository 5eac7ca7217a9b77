#pragma once
// What the ranks of a mesh over processes tell each other when ferry::mpi::mesh_over makes it,
// and the checks that they agree (mesh_over.hpp does the exchanges). Every rank models every
// device and every link of the mesh from its own MeshSpec, so the ranks' specs must agree field
// by field (model/spec_fields.hpp lists the fields, checked against the structs at compile
// time); every device must have one owner; and the owners must all compute or all be model-only.
// Each check reads what every rank said, so every rank reaches the same verdict and throws
// alike: no rank goes on to wait for the others.
//
// Two exchanges, since the second's size depends on what the first checks (the shape):
// 1. the summary, of a size the program fixes: a hash of each mesh-level field's text (name,
//    shape, topology, axis names, every link field) and, for each field of a device spec, a
//    hash of that field's texts over all devices;
// 2. per device, a hash of its spec's fields and what this rank is to it (not its owner; its
//    owner, computing; its owner, model-only).
// A hash names the field that differs without sending its text; the error gives this rank's
// value of it (the other rank's error gives that rank's).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/distributed/fingerprint.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/spec_fields.hpp"

namespace ferry::detail {

using FieldTexts = std::vector<std::pair<std::string, std::string>>;

/// What this rank says of its MeshSpec, as texts.
struct MeshTexts {
  std::string name;
  FieldTexts mesh;                   // every field but the devices
  std::vector<FieldTexts> devices;   // modeled_fields of each device (no fault plan)
  std::vector<std::string> device_names;

  explicit MeshTexts(const MeshSpec& spec) : name(spec.name) {
    MeshSpec outer = spec;
    outer.devices.clear();
    mesh = field_texts(outer);
    for (const DeviceSpec& d : spec.devices) {
      devices.push_back(modeled_fields(d));
      device_names.push_back(d.name);
    }
  }
};

/// What a rank is to a device, in exchange 2.
enum class DeviceRole : unsigned char { other = 0, computes = 1, model_only = 2 };

inline void put_word(std::vector<unsigned char>& out, std::uint64_t w) {
  for (std::size_t b = 0; b < 8; ++b) out.push_back(static_cast<unsigned char>(w >> (8 * b)));
}

inline std::uint64_t word_at(const unsigned char* p) {
  std::uint64_t w = 0;
  for (std::size_t b = 0; b < 8; ++b) w |= static_cast<std::uint64_t>(p[b]) << (8 * b);
  return w;
}

/// Exchange 1: a word per mesh-level field, then a word per device field over all devices.
inline std::vector<unsigned char> mesh_summary(const MeshTexts& t) {
  std::vector<unsigned char> out;
  for (const auto& field : t.mesh) put_word(out, fingerprint_hash(field.second));
  for (std::size_t f = 0; f < t.devices.front().size(); ++f) {
    std::string across;
    for (const FieldTexts& d : t.devices) across += d[f].second + '\n';
    put_word(out, fingerprint_hash(across));
  }
  return out;
}

/// "shape (rank 0's: (2)), link.hop_latency (rank 0's: 100 ns)": the fields `f` of `fields`
/// where `theirs` (words at `first`) and `mine` differ, with this rank's values.
inline std::string differing_fields(const FieldTexts& fields, std::size_t first,
                                    const unsigned char* theirs, const unsigned char* mine,
                                    int rank) {
  std::string out;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const std::size_t at = 8 * (first + f);
    if (word_at(theirs + at) == word_at(mine + at)) continue;
    out += (out.empty() ? "" : ", ") + fields[f].first + " (rank " + std::to_string(rank) +
           "'s: " + fields[f].second + ")";
  }
  return out;
}

/// Checks exchange 1 (`all`: every rank's summary, in rank order): CollectiveMismatch, as `op`,
/// naming the first rank whose mesh-level fields differ from this rank's, and those fields.
inline void check_summaries(std::string_view op, const MeshTexts& t,
                            const std::vector<unsigned char>& all, int rank, int ranks) {
  const std::size_t size = all.size() / static_cast<std::size_t>(ranks);
  const unsigned char* mine = all.data() + size * static_cast<std::size_t>(rank);
  for (int p = 0; p < ranks; ++p) {
    const std::string differ =
        differing_fields(t.mesh, 0, all.data() + size * static_cast<std::size_t>(p), mine, rank);
    if (differ.empty()) continue;
    fail<CollectiveMismatch>(op, "rank ", p, " describes mesh ", t.name, " otherwise than rank ",
                             rank, ": ", differ, ": the ranks would model different meshes");
  }
}

/// Exchange 2: per device, the hash of its fields and `roles[m]` (this rank's).
inline std::vector<unsigned char> device_words(const MeshTexts& t,
                                               const std::vector<DeviceRole>& roles) {
  std::vector<unsigned char> out;
  for (std::size_t m = 0; m < t.devices.size(); ++m) {
    std::string text;
    for (const auto& field : t.devices[m]) text += field.first + "=" + field.second + ";";
    put_word(out, fingerprint_hash(text));
    out.push_back(static_cast<unsigned char>(roles[m]));
  }
  return out;
}

/// What exchange 2 decided: each device's owner, and whether the owners' devices are
/// model-only (all of them, or none).
struct MeshOwners {
  std::vector<int> owner;
  bool model_only = false;
};

/// "rank 0 (devices 0, 1), rank 2 (device 4)": the devices `role` holds, by rank.
inline std::string devices_by_rank(const std::vector<DeviceRole>& role,
                                   const std::vector<int>& owner, DeviceRole which) {
  std::string out;
  int rank = -1;
  std::vector<std::size_t> list;
  const auto flush = [&] {
    if (list.empty()) return;
    out += (out.empty() ? "rank " : ", rank ") + std::to_string(rank) +
           (list.size() == 1 ? " (device " : " (devices ");
    for (std::size_t k = 0; k < list.size(); ++k)
      out += (k == 0 ? "" : ", ") + std::to_string(list[k]);
    out += ")";
    list.clear();
  };
  for (int p = 0; p <= *std::max_element(owner.begin(), owner.end()); ++p) {
    flush();
    rank = p;
    for (std::size_t m = 0; m < owner.size(); ++m) {
      if (owner[m] == p && role[m] == which) list.push_back(m);
    }
  }
  flush();
  return out;
}

/// Checks exchange 2 (`all`: every rank's device_words, in rank order; `summaries`: exchange 1's)
/// and returns the owners. Throws, as `op`: CollectiveMismatch naming the first rank and device
/// whose spec differs from this rank's entry, with the device fields whose texts differ between
/// the two ranks on some device (those of this device when it is the only one that differs);
/// InvalidArgument naming a device that no rank or two ranks own; InvalidArgument naming the
/// ranks and devices when some owners compute and others are model-only.
inline MeshOwners check_devices(std::string_view op, const MeshTexts& t,
                                const std::vector<unsigned char>& summaries,
                                const std::vector<unsigned char>& all, int rank, int ranks) {
  const std::size_t n = t.devices.size();
  const std::size_t size = all.size() / static_cast<std::size_t>(ranks);
  const std::size_t summary = summaries.size() / static_cast<std::size_t>(ranks);
  const unsigned char* mine = all.data() + size * static_cast<std::size_t>(rank);
  MeshOwners out;
  out.owner.assign(n, -1);
  std::vector<DeviceRole> role(n, DeviceRole::other);
  std::string problem;
  for (int p = 0; p < ranks; ++p) {
    const unsigned char* theirs = all.data() + size * static_cast<std::size_t>(p);
    for (std::size_t m = 0; m < n; ++m) {
      if (word_at(theirs + 9 * m) == word_at(mine + 9 * m)) continue;
      const std::string fields = differing_fields(
          t.devices[m], t.mesh.size(), summaries.data() + summary * static_cast<std::size_t>(p),
          summaries.data() + summary * static_cast<std::size_t>(rank), rank);
      fail<CollectiveMismatch>(op, "rank ", p, " describes device ", m, " of mesh ", t.name,
                               " otherwise than rank ", rank, " (", t.device_names[m],
                               "): ", fields, ": the ranks would model different devices");
    }
    for (std::size_t m = 0; m < n && problem.empty(); ++m) {
      const auto said = static_cast<DeviceRole>(theirs[9 * m + 8]);
      if (said == DeviceRole::other) continue;
      int& o = out.owner[m];
      if (o >= 0) {
        problem = "device " + std::to_string(m) + " is owned by ranks " + std::to_string(o) +
                  " and " + std::to_string(p);
      }
      o = p;
      role[m] = said;
    }
  }
  for (std::size_t m = 0; m < n && problem.empty(); ++m) {
    if (out.owner[m] < 0) problem = "no rank owns device " + std::to_string(m);
  }
  if (!problem.empty()) fail<InvalidArgument>(op, "mesh ", t.name, ": ", problem);
  const bool some_compute = std::find(role.begin(), role.end(), DeviceRole::computes) != role.end();
  out.model_only = std::find(role.begin(), role.end(), DeviceRole::model_only) != role.end();
  if (some_compute && out.model_only) {
    // A computing device needs the values of what it receives, which a model-only one has not.
    fail<InvalidArgument>(
        op, "mesh ", t.name, " mixes model-only and computing devices: ",
        devices_by_rank(role, out.owner, DeviceRole::model_only), " model-only, ",
        devices_by_rank(role, out.owner, DeviceRole::computes),
        " computing; a mesh over processes is model-only on every rank or on none");
  }
  return out;
}

}  // namespace ferry::detail
