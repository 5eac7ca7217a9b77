#pragma once
// distribute and to_host of mesh arrays: the import of a global array onto a mesh by its
// placements, each device receiving only its own block, and the export of a mesh array's
// global value, assembled on the host.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/host_array.hpp"
#include "ferry/mesh/collective_receive.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/ops/stack.hpp"
#include "ferry/transfer.hpp"

namespace ferry {


namespace detail {

/// Whether the device at `at` holds the value itself under Partial placements: a Partial(sum)
/// keeps it at position 0 of its axis and zeros elsewhere (so the sum is the value, exactly);
/// max, min and mean keep it everywhere (zeros would change a max or a min; the mean of n
/// copies is the value, up to the rounding of n-fold sums of doubles).
inline bool holds_value(const Placements& ps, const MeshCoordinate& at) {
  for (std::size_t a = 0; a < ps.size(); ++a) {
    const auto* p = std::get_if<Partial>(&ps[a]);
    if (p != nullptr && p->op == ReduceOp::sum && at.indices()[a] != 0) return false;
  }
  return true;
}

/// Copies block `b` of `from` (row-major, of shape `global`) into `to` (row-major, b's shape),
/// a row of the last dim at a time.
template <class T>
void copy_block(std::span<const T> from, const Shape& global, const Block& b, std::span<T> to) {
  const std::size_t rank = global.rank();
  if (to.empty()) return;
  if (rank == 0) {
    to[0] = from[0];
    return;
  }
  std::vector<std::int64_t> stride(rank, 1);
  for (std::size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * global.dims()[d + 1];
  const std::int64_t row = b.sizes[rank - 1];
  std::vector<std::int64_t> at(rank, 0);  // the row's index in the block; at[rank - 1] stays 0
  std::size_t out = 0;
  for (;;) {
    std::int64_t src = 0;
    for (std::size_t d = 0; d < rank; ++d) src += (b.begin[d] + at[d]) * stride[d];
    std::copy_n(from.begin() + src, row, to.begin() + static_cast<std::ptrdiff_t>(out));
    out += static_cast<std::size_t>(row);
    for (std::size_t d = rank - 1;;) {  // the next row: an odometer over the other dims
      if (d == 0) return;
      --d;
      if (++at[d] < b.sizes[d]) break;
      at[d] = 0;
    }
  }
}

/// The reduction by `op` of `parts` (one device's) over a new leading axis: all_reduce's own
/// (reduce_members), so the two agree bit for bit. Throws InvalidArgument, as `name`, for an
/// element type `op` cannot reduce (any op of bool, mean of integers) or an op that is none.
template <Element T>
DeviceArray<T> reduce_parts(std::string_view name, const std::vector<DeviceArray<T>>& parts,
                            ReduceOp op) {
  if constexpr (Numeric<T>) {
    // The collectives' test, in to_host's own words below.
    if (reducible<T>(op)) return reduce_members(name, parts, op);
  }
  fail<InvalidArgument>(name, "cannot reduce ", name_of(dtype_of<T>), " by ", reduce_op_text(op));
}

/// The shards of an array of shape `global` placed on `mesh` by `placements`: zeros made on
/// the device where a Partial(sum) leaves no value (holds_value), else `block_on(device,
/// block)`, the device's own block of the value. Throws as distribute does for placements
/// that do not fit or that the element type cannot hold.
template <Element T, class BlockOn>
MeshArray<T> place_blocks(const Mesh& mesh, const Shape& global, Placements placements,
                          BlockOn&& block_on) {
  constexpr std::string_view op = "distribute";
  const Placements ps = normalized_placements(op, mesh.spec(), global, std::move(placements));
  check_partials<T>(op, ps);
  std::vector<DeviceArray<T>> shards;
  shards.reserve(static_cast<std::size_t>(mesh.size()));
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    const Device& device = mesh.devices()[static_cast<std::size_t>(i)];
    const MeshCoordinate at = mesh.shape().coordinate_of(i);
    const Block block = block_of(global, ps, mesh.shape(), at);
    shards.push_back(holds_value(ps, at) ? block_on(device, block)
                                         : ferry::zeros<T>(device, block.shape()));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards), global, ps);
}

}  // namespace detail

/// Import of `values` onto `mesh`, placed by `placements` (one per mesh axis): each device
/// receives only its own block, by an import over its own host link (bytes_h2d of that device
/// alone); a device Replicate gives the whole array imports all of it. Partial(sum) gives the
/// value to position 0 of its axis and zeros (made on the device, no import) to the others;
/// Partial(max, min, mean) gives every position the value. Throws InvalidArgument, as
/// distribute, for placements that do not fit the mesh or the rank (one per mesh axis, each
/// Shard's dim in range, a dim sharded along one mesh axis at most), and for a Partial the
/// element type cannot hold (any of bool, mean of integers).
template <Element T>
MeshArray<T> distribute(const HostArray<T>& values, const Mesh& mesh, Placements placements) {
  const detail::CalledOp called("distribute");  // a device's failed step names it
  const Shape& global = values.shape();
  return detail::place_blocks<T>(
      mesh, global, std::move(placements),
      [&](const Device& device, const detail::Block& block) -> DeviceArray<T> {
        if (block.shape() == global) return to_device(device, values);
        HostArray<T> part(block.shape());
        detail::copy_block<T>(values.data(), global, block, part.data());
        return to_device(device, part);
      });
}

/// `values`, on one device, placed on `mesh` by `placements`: each device's block is cut from
/// `values` on its device (a slice: a view when it is one contiguous range) and copied to the
/// device, over the mesh's links (hop by hop, as `to()` between them) when `values` lives on a
/// device of the mesh, with `to()` (as an import when it lives on Device::cpu()) otherwise; a
/// device already holding `values` keeps its block without a copy. Over processes
/// (mpi::mesh_over), from a device of the mesh, it is a call every process makes: the process
/// that owns `values` sends each block to the process of the device that receives it. Partial
/// as for the host overload. Throws like it, and InvalidArgument for an empty handle.
template <Element T>
MeshArray<T> distribute(const DeviceArray<T>& values, const Mesh& mesh, Placements placements) {
  constexpr std::string_view op = "distribute";
  const detail::CalledOp called(op);
  // An empty handle is named before the placements are looked at.
  detail::Step& source = detail::step_of(op, values);
  const Shape global = source.shape();
  detail::MeshState& state = detail::MeshAccess::state(mesh);
  const std::int64_t from = state.member_of(source.device().get());
  const std::string text = detail::placements_text(placements);
  // Begun at the first block, once the placements are known to fit (every process alike).
  std::optional<detail::RemoteCollective> remote;
  return detail::place_blocks<T>(
      mesh, global, std::move(placements), [&](const Device& device, const detail::Block& block) {
        DeviceArray<T> part = values;
        for (std::size_t d = 0; d < global.rank(); ++d) {
          if (block.sizes[d] != global.dims()[d]) {
            part = ferry::slice(part, static_cast<int>(d), block.begin[d],
                                block.begin[d] + block.sizes[d]);
          }
        }
        if (from < 0) return part.to(device);
        if (!remote) {
          remote.emplace(state, op, [&] {
            return std::string(op) + "(" + text + ") of " + std::string(name_of(dtype_of<T>)) +
                   " " + global.to_string() + " from member " + std::to_string(from);
          });
        }
        detail::Step& s = detail::step_of(op, part);
        const detail::DeviceState* to = detail::DeviceAccess::state(device).get();
        if (to == s.device().get()) return part;
        const detail::Arrival a = detail::carried(state, s, from, state.member_of(to), op);
        return detail::receive(op, part, device, a.at, &a);
      });
}

namespace detail {

/// to_host(a) on the host of process `process` only (-1: of every process), which it returns
/// there; nothing on the other processes, which send it the blocks they own (see to_host).
template <Element T>
std::optional<HostArray<T>> gather_on_host(const MeshArray<T>& a, int process) {
  constexpr std::string_view op = "to_host";
  if (!a.valid()) fail<InvalidArgument>(op, "empty mesh array");
  if (!a.placed()) {
    fail<InvalidArgument>(
        op,
        "the mesh array has no global view (a collective's result, or from_shards without "
        "placements): a.to_host() gives each shard's values, or give it placements with "
        "MeshArray::from_shards(mesh, shards, global_shape, placements)");
  }
  const Mesh mesh = a.mesh();
  const MeshShape& shape = mesh.shape();
  const Placements& ps = a.placements();
  MeshState& state = MeshAccess::state(mesh);
  const int processes = state.remote == nullptr ? 1 : state.remote->processes();
  if (process >= processes) {
    fail<InvalidArgument>(op, "process ", process, " of mesh ", mesh.spec().name, ", which ",
                          processes == 1 ? "lives in one process (0)"
                                         : "spans processes 0 to " + std::to_string(processes - 1));
  }
  const int here = state.remote == nullptr ? 0 : state.remote->process();
  // Over processes every process assembles the global value, or the one named: each block
  // crosses from the process that owns it to each that assembles (see detail::receive).
  const RemoteCollective remote(
      state, op,
      [&] {
        return std::string(op) + "(" + placements_text(ps) + ") of " +
               std::string(name_of(dtype_of<T>)) + " " + a.global_shape().to_string() +
               (process < 0 ? std::string(" on every process")
                            : " on process " + std::to_string(process));
      },
      process);
  const Device host = Device::cpu();
  // held[i]: on the host, the part of the global array that device i's coordinate stands for,
  // for the devices at position 0 of every axis collapsed so far (and of every Replicate axis).
  std::vector<DeviceArray<T>> held(static_cast<std::size_t>(a.size()));
  std::vector<MeshCoordinate> at;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    at.push_back(shape.coordinate_of(i));
    bool needed = true;
    for (std::size_t x = 0; x < ps.size(); ++x) {
      needed = needed && !(std::holds_alternative<Replicate>(ps[x]) && at.back().indices()[x] != 0);
    }
    if (!needed) continue;
    if (state.remote == nullptr) {
      // Refused here, by the export's name: to() would name itself.
      const Step& s = step_of(op, a.shard(i));
      if (!s.has_values()) {
        fail<NoValues>(op, "the array ", s.info().name, " made on ", s.device()->name(),
                       " has no values: ", s.device()->no_values_reason());
      }
      held[static_cast<std::size_t>(i)] = a.shard(i).to(host);
    } else if (process < 0 || process == here) {
      held[static_cast<std::size_t>(i)] = receive(op, a.shard(i), host, Duration{});
    } else if (state.remote->local(i)) {  // to the one that assembles; nothing to wait for
      Step& s = step_of(op, a.shard(i));
      state.remote->send_to_process(*remote.call(), i, process, s, s.device()->settle(s).failure);
    }
  }
  if (process >= 0 && process != here) return std::nullopt;
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (std::holds_alternative<Replicate>(ps[x])) continue;
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (!held[i].valid() || at[i].indices()[x] != 0) continue;
      std::vector<DeviceArray<T>> parts;
      std::vector<std::int64_t> c = at[i].indices();
      for (std::int64_t k = 0; k < shape.sizes()[x]; ++k) {
        c[x] = k;
        const auto j = static_cast<std::size_t>(shape.index_of(MeshCoordinate(c)));
        parts.push_back(std::move(held[j]));
        held[j] = DeviceArray<T>();
      }
      if (const auto* sh = std::get_if<Shard>(&ps[x])) {
        held[i] = ferry::concat(parts, sh->dim);
      } else {
        held[i] = reduce_parts(op, parts, std::get<Partial>(ps[x]).op);
      }
    }
  }
  return held[0].to_host();
}

}  // namespace detail

/// Export: the global value of `a`, assembled on the host. Each block it needs is copied to
/// the host over its device's own link (one copy of a Replicate axis: position 0's); the host
/// then joins them mesh axis by mesh axis, axis 0 first: a Shard axis's blocks concatenated in
/// the order of their coordinate, a Partial axis's reduced over a new leading axis in that order,
/// as all_reduce would reduce them (the same accumulation, rounded once per axis, bit for bit).
/// Blocks until the values are there. Over processes (mpi::mesh_over) every process makes the
/// call and assembles the value: each block crosses from its owner to every other process.
/// Throws InvalidArgument for an empty handle or an array without a global view
/// (MeshArray::placed()); rethrows the error of a failed step it needs. `a.to_host()` gives
/// each shard's values instead.
template <Element T>
HostArray<T> to_host(const MeshArray<T>& a) {
  return *detail::gather_on_host(a, -1);
}

/// Export: to_host(a), assembled on process `process` alone (its MPI rank, for a mesh over
/// processes: mpi::mesh_over; 0 for a mesh of one process), as MPI_Gather gathers on its root.
/// Returns the value there, blocking until it is; on every other process, which makes the same
/// call and sends the blocks it owns to that one, returns std::nullopt at once. Throws as
/// to_host(a) (on the process that assembles: the error of a failed block, wherever it was),
/// and InvalidArgument for a process the mesh does not span.
template <Element T>
std::optional<HostArray<T>> to_host(const MeshArray<T>& a, int process) {
  if (process < 0) {
    detail::fail<InvalidArgument>("to_host", "process ", process, ": processes count from 0");
  }
  return detail::gather_on_host(a, process);
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(MeshArray<float> distribute<float>(const HostArray<float>&, const Mesh&,
                                                         Placements))

}  // namespace ferry
