#pragma once
// ferry::MeshArray<T>: one DeviceArray<T> per device of a mesh, each on its own device, the
// operand and result of the collectives (mesh/collectives.hpp). An array may also carry a global
// view: the shape of the array its shards are parts of, and one placement per mesh axis
// (mesh/placement.hpp). The collectives work on shards alone and return arrays without one;
// distribute and redistribute (mesh/distribute.hpp, mesh/redistribute.hpp) give it.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/host_array.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/transfer.hpp"

namespace ferry {

namespace detail {
struct MeshArrayShards;  // below
}

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

  /// `shards[i]` is device i's block of an array of shape `global_shape` placed on the mesh by
  /// `placements`, one per mesh axis (a Shard's dim may count from the end; placements() gives
  /// it from the start). Throws like from_shards(mesh, shards); InvalidArgument for placements
  /// that do not fit the mesh or the rank (one per axis, Shard dims in range, a dim sharded
  /// along one mesh axis at most) or the element type (a Partial of bool, Partial(mean) of
  /// integers: nothing could reduce it); ShapeError for a shard whose shape is not the one its
  /// placements give it (array_split sizes along each Shard's dim).
  static MeshArray from_shards(const Mesh& mesh, std::vector<DeviceArray<T>> shards,
                               Shape global_shape, Placements placements) {
    constexpr std::string_view op = "MeshArray::from_shards";
    MeshArray a = from_shards(mesh, std::move(shards));
    a.placements_ =
        detail::normalized_placements(op, mesh.spec(), global_shape, std::move(placements));
    detail::check_partials<T>(op, a.placements_);
    for (std::size_t i = 0; i < a.shards_.size(); ++i) {
      const MeshCoordinate at = mesh.shape().coordinate_of(static_cast<std::int64_t>(i));
      const Shape want = detail::block_of(global_shape, a.placements_, mesh.shape(), at).shape();
      const Shape& got = a.shards_[i].shape();
      if (!(got == want)) {
        detail::fail<ShapeError>(op, "shard ", i, " has shape ", got, "; placements ",
                                 detail::placements_text(a.placements_), " of global shape ",
                                 global_shape, " give device ", i, " ", at, " the shape ", want);
      }
    }
    a.global_shape_ = global_shape;
    a.placed_ = true;
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
    return shard(mesh().shape().index_of(c, "MeshArray::shard"));
  }

  /// Every shard, row-major.
  const std::vector<DeviceArray<T>>& shards() const& { return shards_; }
  /// Every shard, given away (a collective may then reuse their buffers): the array is left an
  /// empty handle, as a moved-from one.
  std::vector<DeviceArray<T>> shards() && {
    std::vector<DeviceArray<T>> out = std::move(shards_);
    *this = MeshArray();
    return out;
  }

  /// Whether the array has a global view: made by distribute, redistribute or from_shards with
  /// placements (not by a collective or from_shards without them).
  bool placed() const noexcept { return placed_; }
  /// The shape of the global array the shards are parts of. Throws InvalidArgument for an
  /// empty handle or an array without a global view (see placed()).
  const Shape& global_shape() const {
    view("global_shape");
    return global_shape_;
  }
  /// One placement per mesh axis, axis 0 first, each Shard's dim counted from the start.
  /// Throws like global_shape().
  const Placements& placements() const {
    view("placements");
    return placements_;
  }

  /// Every shard's values, row-major: one export of each (see DeviceArray::to_host). The global
  /// array, assembled, is ferry::to_host(a) (mesh/distribute.hpp).
  std::vector<HostArray<T>> to_host() const {
    state("to_host");
    std::vector<HostArray<T>> out;
    out.reserve(shards_.size());
    for (const DeviceArray<T>& s : shards_) out.push_back(s.to_host());
    return out;
  }

 private:
  const std::shared_ptr<detail::MeshState>& state(std::string_view what) const {
    if (mesh_ == nullptr) refuse_empty(what);
    return mesh_;
  }

  // Out of line: GCC 12 at -O1 and above, inlining a string concatenation into every caller,
  // warns of a memcpy out of bounds that cannot happen (-Warray-bounds), and examples build
  // with -Werror.
  [[noreturn, gnu::noinline]] static void refuse_empty(std::string_view what) {
    detail::fail<InvalidArgument>("MeshArray::" + std::string(what), "empty handle");
  }

  void view(std::string_view what) const {
    state(what);
    if (!placed_) {
      detail::fail<InvalidArgument>(
          std::string("MeshArray::") + std::string(what),
          "the array has no global view (a collective's result, or from_shards without "
          "placements): give one with MeshArray::from_shards(mesh, shards, global_shape, "
          "placements), or make the array with distribute");
    }
  }

  friend struct detail::MeshArrayShards;

  std::shared_ptr<detail::MeshState> mesh_;
  std::vector<DeviceArray<T>> shards_;
  // The global view: meaningful only when placed_.
  Shape global_shape_;
  Placements placements_;
  bool placed_ = false;
};

namespace detail {

/// A mesh array's own shards, to overwrite: an optimizer replaces each shard of a parameter with
/// its update (the same shape on the same device, reusing its buffer when nothing else holds
/// it), and the array keeps its mesh and global view. Not public: a caller could otherwise give
/// a shard another shape or device behind the array's checks.
struct MeshArrayShards {
  template <Element T>
  static std::vector<DeviceArray<T>>& of(MeshArray<T>& a) noexcept {
    return a.shards_;
  }
};

}  // namespace detail

/// Blocks until every shard of `a` is computed: one batched export (see ferry::wait).
template <Element T>
void wait(const MeshArray<T>& a) {
  wait(a.shards());
}

}  // namespace ferry
