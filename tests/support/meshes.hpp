#pragma once
// Small meshes the mesh tests share: tiny devices on links whose timings are round numbers, so
// a test can work its link times out by hand; the check of the model's bookkeeping after a
// mesh program; exact test values and the check of a mesh array's shards against the global
// value.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "memory.hpp"

namespace ferry_test {

/// Links of round numbers: 1 byte a nanosecond, 100 ns a hop, no library costs.
inline ferry::LinkSpec round_link() {
  ferry::LinkSpec l;
  l.bytes_per_second = 1e9;
  l.hop_latency = std::chrono::nanoseconds(100);
  return l;
}

/// `n` tiny devices along one axis joined as `topology`, on `link`. The name shows in error
/// messages, which tests compare whole.
inline ferry::MeshSpec line_of(std::int64_t n, ferry::Topology topology = ferry::Topology::line,
                               std::string name = "row", ferry::LinkSpec link = round_link()) {
  ferry::MeshSpec m;
  m.name = std::move(name);
  m.devices.assign(static_cast<std::size_t>(n), ferry::specs::tiny());
  m.shape = ferry::MeshShape{n};
  m.topology = {topology};
  m.link = link;
  return m;
}

/// `rows` x `cols` tiny devices, each axis a line, on `link`.
inline ferry::MeshSpec grid(std::int64_t rows, std::int64_t cols, std::string name = "grid",
                            ferry::LinkSpec link = round_link()) {
  ferry::MeshSpec m = line_of(rows * cols, ferry::Topology::line, std::move(name), link);
  m.shape = ferry::MeshShape{rows, cols};
  m.topology = {ferry::Topology::line, ferry::Topology::line};
  return m;
}

/// `spec` with its axes named `names`.
inline ferry::MeshSpec with_axes(ferry::MeshSpec spec, std::vector<std::string> names) {
  spec.axis_names = std::move(names);
  return spec;
}

/// `n` tiny devices on a ring of round links.
inline ferry::MeshSpec ring(std::int64_t n) { return line_of(n, ferry::Topology::ring, "ring"); }

/// Four tiny devices as 2 x 2, each axis a line, on round links.
inline ferry::MeshSpec square() { return grid(2, 2, "square"); }

/// The mesh's MemoryInUse now: take it before a program and hand it to expect_books_balanced
/// once the program's arrays are gone.
inline MemoryInUse memory_in_use(const ferry::Mesh& mesh) {
  MemoryInUse out;
  for (const ferry::Device& d : mesh.devices()) out.push_back(memory_in_use(d));
  return out;
}

/// The model's bookkeeping after a program whose arrays are all gone: every device's memory
/// back to `before` (memory_in_use's figures before the program), and no schedule shorter than
/// its lower bound, on the mesh as a whole and on each device.
inline void expect_books_balanced(const ferry::Mesh& mesh, const MemoryInUse& before) {
  EXPECT_EQ(memory_in_use(mesh), before) << "{DRAM, L1} bytes in use on each device";
  const ferry::MeshStats s = mesh.stats();
  EXPECT_LE(s.lower_bound, s.makespan) << "mesh " << mesh.spec().name;
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    EXPECT_LE(s.devices[i].lower_bound, s.devices[i].makespan) << mesh.devices()[i].name();
  }
}

/// Runs `program` on `mesh` and checks the bookkeeping once its arrays (its locals) are gone.
template <class Program>
void expect_balanced_after(const ferry::Mesh& mesh, Program&& program) {
  const auto before = memory_in_use(mesh);
  program();
  expect_books_balanced(mesh, before);
}

/// `p` along mesh axis `axis`, Replicate along the mesh's other axes.
inline ferry::Placements along(const ferry::MeshSpec& spec, int axis, ferry::Placement p) {
  ferry::Placements ps(spec.shape.rank(), ferry::Replicate{});
  ps[static_cast<std::size_t>(axis)] = p;
  return ps;
}

/// Per op: how many messages it put on the links, and their bytes.
using LinkOps = std::map<std::string, std::pair<std::int64_t, std::int64_t>>;

/// How many messages each op put on the links in the mesh's window, and their bytes.
inline LinkOps link_ops(const ferry::Mesh& mesh) {
  auto& state = ferry::detail::MeshAccess::state(mesh);
  std::lock_guard lock(state.net->mutex);
  LinkOps out;
  for (const auto& u : state.net->links.uses()) {
    auto& [count, bytes] = out[std::string(u.op)];
    ++count;
    bytes += u.bytes;
  }
  return out;
}

/// Small multiples of 1/4 (exact sums and products), some negative, some zero: values whose
/// every order of additions gives the same float, so a sharded op equals the unsharded one.
inline ferry::HostArray<float> values(const ferry::Shape& shape, std::int64_t salt = 0) {
  ferry::HostArray<float> h(shape);
  for (std::int64_t k = 0; k < shape.numel(); ++k) {
    h.data()[static_cast<std::size_t>(k)] = static_cast<float>(((k + salt) * 7) % 23 - 11) * 0.25F;
  }
  return h;
}

/// Expects every shard of `got` to be its block of `want` (placed by got's placements: a Shard
/// axis's part, a Replicate axis's whole) within `tol`; returns the largest difference.
inline float expect_blocks(const ferry::MeshArray<float>& got, const ferry::HostArray<float>& want,
                           float tol) {
  EXPECT_EQ(got.global_shape(), want.shape());
  const ferry::Mesh mesh = got.mesh();
  float worst = 0;
  for (std::int64_t i = 0; i < got.size(); ++i) {
    const auto block = ferry::detail::block_of(want.shape(), got.placements(), mesh.shape(),
                                               mesh.shape().coordinate_of(i));
    ferry::HostArray<float> part(block.shape());
    ferry::detail::copy_block<float>(want.data(), want.shape(), block, part.data());
    const ferry::HostArray<float> shard = got.shard(i).to_host();
    EXPECT_EQ(shard.shape(), part.shape()) << "shard " << i;
    if (shard.shape() != part.shape()) continue;
    for (std::size_t e = 0; e < part.data().size(); ++e) {
      EXPECT_NEAR(shard.data()[e], part.data()[e], tol) << "shard " << i << ", element " << e;
      worst = std::max(worst, std::fabs(shard.data()[e] - part.data()[e]));
    }
  }
  return worst;
}

}  // namespace ferry_test
