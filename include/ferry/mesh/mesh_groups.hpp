#pragma once
// The groups a collective runs over: the devices along a mesh axis, or the whole mesh, in the
// order of their values, and the path along the mesh's links that the collective's plan takes
// through them (a cycle of a grid's links where row-major order would step between devices no
// link joins).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry::detail {

/// One group of a collective: the devices (row-major indices) along a mesh axis that share
/// every other coordinate, in the order of their coordinate on that axis; or the whole mesh.
/// `members` is the order of the values (a reduction stacks the shards in it; position p of
/// reduce_scatter keeps the p-th part); `path`, when not empty, is the order in which the plan
/// runs through the same devices, each the links' neighbour of the next (the whole of a mesh
/// of two axes or more, whose row-major order is not a path of its links).
struct MeshGroup {
  std::vector<std::int64_t> members;
  Topology topology = Topology::line;
  std::vector<std::int64_t> path;
  /// on_path[p]: where the device at value position p stands on `path` (set with `path`), so
  /// that the placement of each member looks it up instead of searching the path.
  std::vector<std::int64_t> on_path;

  /// Where the device at value position `p` stands on the plan's path.
  std::int64_t path_position(std::int64_t p) const {
    return path.empty() ? p : on_path[static_cast<std::size_t>(p)];
  }
};

/// The row-major offsets of the coordinates of the axes `axes` of a mesh of `sizes` (the other
/// axes at 0) in boustrophedon order: the last axis runs forward, then back, each change of
/// the one before it between; consecutive entries differ by one place along one axis.
inline std::vector<std::int64_t> snake_offsets(const std::vector<std::int64_t>& sizes,
                                               const std::vector<std::size_t>& axes) {
  std::vector<std::int64_t> stride(sizes.size(), 1);
  for (std::size_t a = sizes.size(); a-- > 1;) stride[a - 1] = stride[a] * sizes[a];
  std::int64_t count = 1;
  for (std::size_t a : axes) count *= sizes[a];
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t t = 0; t < count; ++t) {
    // t's digits in the sizes of `axes`, each reflected when the count of the ones before it
    // is odd (the reflected mixed-radix Gray code).
    std::int64_t offset = 0;
    std::int64_t below = count;
    for (std::size_t a : axes) {
      const std::int64_t before = t / below;
      below /= sizes[a];
      const std::int64_t digit = (t / below) % sizes[a];
      offset += (before % 2 == 0 ? digit : sizes[a] - 1 - digit) * stride[a];
    }
    out.push_back(offset);
  }
  return out;
}

/// A cycle through every device of a mesh of `sizes` whose axes are lines or rings, each step to
/// a neighbour on a link. The first axis of even size is the rows; the others, in
/// boustrophedon order, the columns (for two axes, the other axis): row 0 left to right, rows
/// 1.. back and forth over columns C-1..1, then column 0 upwards (the perimeter of a 2 x C
/// mesh, as a T3000's 2 x 4 chips form their ring). With every size odd no such cycle exists
/// on a grid: every axis in boustrophedon order, a line. Returns the row-major indices in order
/// and whether they close a ring (not for fewer than two axes of size above 1: a line).
inline std::pair<std::vector<std::int64_t>, bool> grid_cycle(
    const std::vector<std::int64_t>& sizes) {
  std::vector<std::size_t> all(sizes.size());
  for (std::size_t a = 0; a < sizes.size(); ++a) all[a] = a;
  std::size_t rows = 0;
  while (rows < sizes.size() && sizes[rows] % 2 != 0) ++rows;
  if (rows == sizes.size()) return {snake_offsets(sizes, all), false};
  std::vector<std::size_t> others;
  for (std::size_t a : all) {
    if (a != rows) others.push_back(a);
  }
  const std::vector<std::int64_t> cols = snake_offsets(sizes, others);
  const auto c_n = static_cast<std::int64_t>(cols.size());
  if (c_n == 1) return {snake_offsets(sizes, all), false};
  std::int64_t row_stride = 1;
  for (std::size_t a = rows + 1; a < sizes.size(); ++a) row_stride *= sizes[a];
  const auto at = [&](std::int64_t r, std::int64_t c) {
    return r * row_stride + cols[static_cast<std::size_t>(c)];
  };
  std::vector<std::int64_t> order;
  for (std::int64_t c = 0; c < c_n; ++c) order.push_back(at(0, c));
  for (std::int64_t r = 1; r < sizes[rows]; ++r) {
    for (std::int64_t k = 1; k < c_n; ++k) order.push_back(at(r, r % 2 == 1 ? c_n - k : k));
  }
  for (std::int64_t r = sizes[rows] - 1; r >= 1; --r) order.push_back(at(r, 0));
  return {order, true};
}

/// The groups of `axis` (-1: the whole mesh as one group, its values in row-major order). The
/// whole mesh of a mesh with one axis of size above 1 is that axis; of a mesh whose axes are
/// rings or lines, the plan runs along grid_cycle's path over its links (a ring; a line when
/// every size is odd, and for two devices); a switch when an axis is one. Throws
/// InvalidArgument, as `op`, for an axis the mesh does not have.
inline std::vector<MeshGroup> mesh_groups(const MeshSpec& spec, int axis, std::string_view op) {
  const MeshShape& shape = spec.shape;
  const auto n = shape.size();
  if (axis < -1 || axis >= static_cast<int>(shape.rank())) {
    fail<InvalidArgument>(op, "axis ", axis, " is not an axis of mesh ", spec.name, " ",
                          shape.to_string(), " (give 0..", shape.rank() - 1,
                          ", or -1 for the whole mesh)");
  }
  if (axis == -1) {
    MeshGroup g;
    for (std::int64_t i = 0; i < n; ++i) g.members.push_back(i);
    if (shape.rank() == 1) {
      g.topology = spec.topology[0];
    } else {
      bool switched = false;
      for (Topology t : spec.topology) switched = switched || t == Topology::fully_connected;
      g.topology =
          switched ? Topology::fully_connected : (n >= 3 ? Topology::ring : Topology::line);
      const auto& sizes = shape.sizes();
      std::size_t wide = 0;  // the axes of size above 1, and the last of them
      std::size_t last_wide = 0;
      for (std::size_t a = 0; a < sizes.size(); ++a) {
        if (sizes[a] > 1) {
          ++wide;
          last_wide = a;
        }
      }
      if (!switched && wide <= 1) {
        g.topology = spec.topology[last_wide];  // one axis: row-major is its order
      } else if (!switched && n >= 3) {
        auto [cycle, closed] = grid_cycle(sizes);
        if (!closed) g.topology = Topology::line;
        g.path = std::move(cycle);
        g.on_path.assign(g.path.size(), 0);  // members are 0..n-1: a device is its position
        for (std::size_t k = 0; k < g.path.size(); ++k)
          g.on_path[static_cast<std::size_t>(g.path[k])] = static_cast<std::int64_t>(k);
      }
    }
    return {g};
  }
  const auto a = static_cast<std::size_t>(axis);
  std::vector<MeshGroup> groups;
  for (std::int64_t i = 0; i < n; ++i) {
    const MeshCoordinate c = shape.coordinate_of(i);
    if (c.indices()[a] != 0) continue;  // the first member of each group starts it
    MeshGroup g;
    g.topology = spec.topology[a];
    std::vector<std::int64_t> at = c.indices();
    for (std::int64_t k = 0; k < shape.sizes()[a]; ++k) {
      at[a] = k;
      g.members.push_back(shape.index_of(MeshCoordinate(at)));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace ferry::detail
