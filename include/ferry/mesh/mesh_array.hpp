#pragma once
// ferry::MeshArray<T>: one DeviceArray<T> per device of a mesh, each on its own device, the
// operand and result of the collectives (mesh/collectives.hpp).

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/host_array.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/transfer.hpp"

namespace ferry {

template <Element T>
class MeshArray {
 public:
  using value_type = T;

  /// An empty handle: every accessor but valid() throws InvalidArgument.
  MeshArray() = default;

  /// `shards[i]` is device i's (row-major). Throws InvalidArgument when the count is not the
  /// mesh's size, a shard is an empty handle, or shard i lives on another device than device i.
  static MeshArray from_shards(const Mesh& mesh, std::vector<DeviceArray<T>> shards) {
    constexpr std::string_view op = "MeshArray::from_shards";
    if (static_cast<std::int64_t>(shards.size()) != mesh.size()) {
      detail::fail<InvalidArgument>(op, "mesh ", mesh.spec().name, " ", mesh.shape().to_string(),
                                    " has ", mesh.size(), " devices, got ", shards.size(),
                                    " shards");
    }
    for (std::size_t i = 0; i < shards.size(); ++i) {
      if (!shards[i].valid()) detail::fail<InvalidArgument>(op, "shard ", i, " is an empty handle");
      const Device on = shards[i].device();
      if (!(on == mesh.devices()[i])) {
        const std::int64_t at = mesh.index_of(on);
        detail::fail<InvalidArgument>(
            op, "shard ", i, " lives on ", on.name(),
            at < 0 ? std::string(", not a device of mesh ") + mesh.spec().name
                   : ", device " + std::to_string(at) + " of the mesh",
            "; it must be on device ", i, " (", mesh.devices()[i].name(), ")");
      }
    }
    MeshArray a;
    a.mesh_ = detail::MeshAccess::handle(mesh);
    a.shards_ = std::move(shards);
    return a;
  }

  bool valid() const noexcept { return mesh_ != nullptr; }
  /// The mesh the shards live on.
  Mesh mesh() const { return detail::MeshAccess::wrap(state("mesh")); }
  /// The number of shards: the mesh's size.
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(shards_.size()); }

  /// Device i's shard (row-major); InvalidArgument outside [0, size()).
  const DeviceArray<T>& shard(std::int64_t i) const {
    state("shard");
    if (i < 0 || i >= size()) {
      detail::fail<InvalidArgument>("MeshArray::shard", "index ", i, " is outside the ", size(),
                                    " shards");
    }
    return shards_[static_cast<std::size_t>(i)];
  }
  /// The shard of the device at `c`; InvalidArgument when `c` is not in the mesh's shape.
  const DeviceArray<T>& shard(const MeshCoordinate& c) const {
    return shard(mesh().shape().index_of(c));
  }

  /// Every shard, row-major.
  const std::vector<DeviceArray<T>>& shards() const& { return shards_; }
  /// Every shard, given away (a collective may then reuse their buffers).
  std::vector<DeviceArray<T>> shards() && { return std::move(shards_); }

  /// Every shard's values, row-major: one export of each (see DeviceArray::to_host).
  std::vector<HostArray<T>> to_host() const {
    std::vector<HostArray<T>> out;
    out.reserve(shards_.size());
    for (const DeviceArray<T>& s : shards_) out.push_back(s.to_host());
    return out;
  }

 private:
  const std::shared_ptr<detail::MeshState>& state(std::string_view what) const {
    if (mesh_ == nullptr)
      detail::fail<InvalidArgument>(std::string("MeshArray::") + std::string(what), "empty handle");
    return mesh_;
  }

  std::shared_ptr<detail::MeshState> mesh_;
  std::vector<DeviceArray<T>> shards_;
};

/// Blocks until every shard of `a` is computed: one batched export (see ferry::wait).
template <Element T>
void wait(const MeshArray<T>& a) {
  wait(a.shards());
}

}  // namespace ferry
