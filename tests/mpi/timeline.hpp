#pragma once
// The programs and comparisons of the modeled-timeline tests (test_mpi_timeline on computing
// meshes, test_mpi_model_only on model-only ones): see test_mpi_timeline.cpp for what they check.

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

#include "../support/files.hpp"
#include "../support/meshes.hpp"
#include "harness.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry_test::timeline {

namespace nn = ferry::nn;
using ferry_test::check;

/// Reads `a` as the programs do at an export: its values (to_host) on a device that computes;
/// on a model-only one, which has none, the wait alone (the host's sync in the model).
inline void read(const ferry::DeviceArray<float>& a) {
  if (a.device().is_model_only()) {
    ferry::wait(a);
  } else {
    (void)a.to_host();
  }
}

/// Floats of `shape` in [-0.5, 0.5) from `seed`, the same on every rank.
inline ferry::HostArray<float> values(const ferry::Shape& shape, std::uint32_t seed) {
  std::vector<float> out(static_cast<std::size_t>(shape.numel()));
  std::uint32_t x = seed * 2654435761u + 1;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<double>(x >> 8) / static_cast<double>(1u << 24) - 0.5);
  }
  return ferry::HostArray<float>(shape, std::move(out));
}

/// A device's timeline as its Chrome trace holds it: every slice's track, name, modeled start
/// and duration, and the flows between them.
inline std::string slices_of(const ferry::Device& d, const std::string& tag) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("ferry_timeline_" + std::to_string(::getpid()) + tag + ".json");
  d.write_trace(path.string());
  const std::string text = ferry_test::read_text(path.string());
  std::filesystem::remove(path);
  // Each slice names its step by its submission number on the device, which a mesh over
  // processes counts otherwise (its plumbing takes numbers too): left out, as not a time.
  return std::regex_replace(text, std::regex("\"step\":[0-9]+,?"), "");
}

/// The first line where `a` and `b` differ, each as it reads there.
inline std::string first_difference(const std::string& a, const std::string& b) {
  std::stringstream x(a), y(b);
  std::string l, r;
  for (int line = 1;; ++line) {
    const bool more_l = static_cast<bool>(std::getline(x, l));
    const bool more_r = static_cast<bool>(std::getline(y, r));
    if (!more_l && !more_r) return "none";
    if (l != r || more_l != more_r)
      return "line " + std::to_string(line) + ": " + l + " over processes, " + r + " in one";
  }
}

/// Compares what the model says of each device this rank owns of `over` with the same device of
/// `alone`, and the two meshes' makespans.
inline void same_timelines(const ferry::mpi::World& world, const std::string& what,
                    const ferry::Mesh& over, const ferry::Mesh& alone,
                    const std::vector<std::int64_t>& mine, bool same_program) {
  const ferry::MeshStats o = over.stats();
  const ferry::MeshStats gathered = ferry::mpi::mesh_stats(world, over);
  const ferry::MeshStats a = alone.stats();
  for (std::int64_t m : mine) {
    const auto k = static_cast<std::size_t>(m);
    const ferry::DeviceStats& g = o.devices[k];
    const ferry::DeviceStats& w = a.devices[k];
    const std::string device = what + ": device " + std::to_string(m);
    check(g.makespan == w.makespan,
          device + "'s makespan is " + std::to_string(g.makespan.count()) + " ns over processes, " +
              std::to_string(w.makespan.count()) + " ns in one");
    check(g.critical_path == w.critical_path, device + "'s critical path differs");
    check(g.steps == w.steps, device + " ran " + std::to_string(g.steps) + " steps, " +
                                  std::to_string(w.steps) + " in one process");
    check(g.bytes_d2d == w.bytes_d2d && g.bytes_h2d == w.bytes_h2d && g.bytes_d2h == w.bytes_d2h,
          device + "'s bytes moved differ");
    check(g.engines.size() == w.engines.size(), device + "'s engines differ");
    for (std::size_t e = 0; e < g.engines.size() && e < w.engines.size(); ++e) {
      check(g.engines[e].name == w.engines[e].name && g.engines[e].busy == w.engines[e].busy,
            device + "'s engine " + g.engines[e].name + " was busy " +
                std::to_string(g.engines[e].busy.count()) + " ns, " +
                std::to_string(w.engines[e].busy.count()) + " ns in one process");
    }
    const std::string gs = slices_of(over.device(m), "over");
    const std::string ws = slices_of(alone.device(m), "alone");
    check(gs == ws,
          device + "'s trace differs from one process, first at " + first_difference(gs, ws));
  }
  // This process's own view of the mesh reads the stand-ins: the one-process figure only when
  // both run the same program (no other rank read anything the stand-ins did not).
  if (same_program) {
    check(o.makespan == a.makespan, what + ": the mesh's makespan is " +
                                        std::to_string(o.makespan.count()) + " ns here, " +
                                        std::to_string(a.makespan.count()) + " ns in one process");
  } else {
    // Each rank read its own devices: mpi::mesh_stats takes each device's figures from its
    // owner, so the mesh's are the one-process program's, which read every device.
    check(gathered.makespan == a.makespan,
          what + ": mpi::mesh_stats' makespan is " + std::to_string(gathered.makespan.count()) +
              " ns, " + std::to_string(a.makespan.count()) + " ns in one process");
    check(gathered.lower_bound == a.lower_bound,
          what + ": mpi::mesh_stats' lower bound is " +
              std::to_string(gathered.lower_bound.count()) + " ns, " +
              std::to_string(a.lower_bound.count()) + " ns in one process");
    for (std::size_t i = 0; i < a.devices.size(); ++i) {
      check(gathered.devices[i].makespan == a.devices[i].makespan &&
                gathered.devices[i].critical_path == a.devices[i].critical_path,
            what + ": mpi::mesh_stats' device " + std::to_string(i) + " makespan is " +
                std::to_string(gathered.devices[i].makespan.count()) + " ns, " +
                std::to_string(a.devices[i].makespan.count()) + " ns in one process");
    }
  }
}

/// Checks, once a program's arrays are gone, that every device of `mesh` (stand-ins too) holds
/// the memory it held `before` (a send to another rank may hold its shard a moment longer, until
/// that rank took the bytes: up to 10 s) and that no device's schedule is shorter than its
/// lower bound.
inline void books_balanced(const std::string& what, const ferry::Mesh& mesh,
                    const ferry_test::MemoryInUse& before) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ferry_test::memory_in_use(mesh) != before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  check(ferry_test::memory_in_use(mesh) == before,
        what + ": the devices' modeled memory is not given back on mesh " + mesh.spec().name);
  const ferry::MeshStats s = mesh.stats();
  check(s.lower_bound <= s.makespan, what + ": the mesh's makespan is under its lower bound");
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    check(s.devices[i].lower_bound <= s.devices[i].makespan,
          what + ": device " + std::to_string(i) + "'s makespan is under its lower bound");
  }
}

/// Compute, an all_reduce, compute, an all_gather along `axis`, each device's result read.
inline void collective_program(const ferry::Mesh& mesh, const std::vector<std::int64_t>& mine,
                               int axis, bool read_between) {
  const ferry::Shape shape{16, 32};
  std::vector<ferry::DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    // Unequal work before the collective: the last device to finish sets everyone's arrival.
    const ferry::DeviceArray<float> x =
        ferry::to_device(mesh.device(i), values(shape, 7 + static_cast<std::uint32_t>(i)));
    const ferry::DeviceArray<float> w =
        ferry::to_device(mesh.device(i), values(ferry::Shape{32, 32}, 3));
    ferry::DeviceArray<float> y = ferry::tanh(x);
    for (std::int64_t k = 0; k < i % 3; ++k) y = ferry::matmul(y, w) * 0.1f;
    shards.push_back(std::move(y));
  }
  const auto a = ferry::MeshArray<float>::from_shards(mesh, std::move(shards));
  const auto reduced = ferry::all_reduce(a, ferry::ReduceOp::sum, axis);
  if (read_between) {
    for (std::int64_t m : mine) read(reduced.shard(m));
  }
  std::vector<ferry::DeviceArray<float>> next;
  for (const auto& s : reduced.shards()) next.push_back(ferry::exp(s * 0.5f));
  const auto gathered =
      ferry::all_gather(ferry::MeshArray<float>::from_shards(mesh, std::move(next)), 0, axis);
  for (std::int64_t m : mine) read(gathered.shard(m));
}

/// Every member of a mesh of `n` devices.
inline std::vector<std::int64_t> every(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
  return out;
}

/// Which devices the one-process run reads: the same as this rank reads over processes, or
/// every device (the one-process program that the ranks' programs are parts of).
enum class Reads { mine, every };

/// With `model_only`, both meshes are model-only (mesh_over(..., model_only) against
/// Mesh::modeled(spec, model_only)).
inline void collectives_timeline(const ferry::mpi::World& world, Reads reads,
                                 bool read_between = false, bool model_only = false) {
  const std::int64_t n = world.size();
  const ferry::MeshSpec line = ferry_test::line_of(n, ferry::Topology::line, "line");
  {
    const ferry::Mesh over = model_only ? ferry::mpi::mesh_over(world, line, ferry::model_only)
                                        : ferry::mpi::mesh_over(world, line);
    const ferry::Mesh alone =
        model_only ? ferry::Mesh::modeled(line, ferry::model_only) : ferry::Mesh::modeled(line);
    const auto mine = ferry::mpi::default_members(n, world.rank(), world.size());
    const auto over_before = ferry_test::memory_in_use(over);
    const auto alone_before = ferry_test::memory_in_use(alone);
    collective_program(over, mine, -1, read_between);
    collective_program(alone, reads == Reads::mine ? mine : every(n), -1, read_between);
    books_balanced("line", over, over_before);
    books_balanced("line", alone, alone_before);
    same_timelines(world, "line", over, alone, mine, reads == Reads::mine);
  }
  const ferry::MeshSpec grid = ferry_test::grid(n, 2, "grid");
  for (int axis : {0, 1}) {
    const ferry::Mesh over = model_only ? ferry::mpi::mesh_over(world, grid, ferry::model_only)
                                        : ferry::mpi::mesh_over(world, grid);
    const ferry::Mesh alone =
        model_only ? ferry::Mesh::modeled(grid, ferry::model_only) : ferry::Mesh::modeled(grid);
    const auto mine = ferry::mpi::default_members(2 * n, world.rank(), world.size());
    const auto over_before = ferry_test::memory_in_use(over);
    const auto alone_before = ferry_test::memory_in_use(alone);
    collective_program(over, mine, axis, read_between);
    collective_program(alone, reads == Reads::mine ? mine : every(2 * n), axis, read_between);
    books_balanced("grid", over, over_before);
    books_balanced("grid", alone, alone_before);
    same_timelines(world, "grid axis " + std::to_string(axis), over, alone, mine,
                   reads == Reads::mine);
  }
}

inline constexpr std::int64_t kIn = 2, kHidden = 16, kClasses = 3, kRows = 8;

inline nn::Sequential mlp(const ferry::Device& d) {
  return nn::Sequential(nn::Linear(kIn, kHidden, d, {.seed = 3}), nn::Tanh(),
                        nn::Linear(kHidden, kClasses, d, {.seed = 5}));
}

inline ferry::DeviceArray<float> loss_of(const nn::Module& m, const ferry::DeviceArray<float>& x,
                                  const ferry::DeviceArray<float>& y) {
  return nn::cross_entropy(m(x), y.astype<std::int64_t>());
}

/// `steps` data-parallel Adam steps of the MLP on `mesh`: a replica on each device (made alike
/// from the same seeds, so that both meshes run the same program: nn::DataParallel broadcasts
/// its parameters over processes but copies them in one process), each step its own batch,
/// the gradients averaged by an all_reduce each, each replica's loss read on its rank.
inline void train(const ferry::Mesh& mesh, const std::vector<std::int64_t>& mine, int steps) {
  const auto n = static_cast<std::size_t>(mesh.size());
  std::vector<nn::Sequential> replicas;
  std::vector<ferry::optim::Adam> adams;
  for (std::size_t i = 0; i < n; ++i) {
    replicas.push_back(mlp(mesh.devices()[i]));
    adams.emplace_back(ferry::optim::AdamOptions{.lr = 0.05});
  }
  for (int s = 0; s < steps; ++s) {
    std::vector<ferry::DeviceArray<float>> losses;
    std::vector<nn::NamedParameters> grads;
    for (std::size_t i = 0; i < n; ++i) {
      const ferry::Device& d = mesh.devices()[i];
      const auto seed = static_cast<std::uint32_t>(100 + s * 10) + static_cast<std::uint32_t>(i);
      const auto x = ferry::to_device(d, values(ferry::Shape{kRows, kIn}, seed));
      std::vector<float> classes;
      for (std::int64_t r = 0; r < kRows; ++r)
        classes.push_back(
            static_cast<float>((r * 7 + s + static_cast<std::int64_t>(i)) % kClasses));
      const auto y =
          ferry::to_device(d, ferry::HostArray<float>(ferry::Shape{kRows}, std::move(classes)));
      const nn::Module& model = replicas[i];
      auto [loss, g] = nn::value_and_grad(
          replicas[i], [&](const ferry::DeviceArray<float>& a, const ferry::DeviceArray<float>& b) {
            return loss_of(model, a, b);
          })(x, y);
      losses.push_back(std::move(loss));
      grads.push_back(std::move(g));
    }
    for (std::size_t k = 0; k < grads[0].size(); ++k) {
      std::vector<ferry::DeviceArray<float>> parts;
      for (std::size_t i = 0; i < n; ++i) parts.push_back(grads[i][k].second);
      const auto mean = ferry::all_reduce(
          ferry::MeshArray<float>::from_shards(mesh, std::move(parts)), ferry::ReduceOp::mean);
      for (std::size_t i = 0; i < n; ++i)
        grads[i][k].second = mean.shard(static_cast<std::int64_t>(i));
    }
    for (std::size_t i = 0; i < n; ++i) adams[i].step(replicas[i], grads[i]);
    for (std::int64_t r : mine) read(losses[static_cast<std::size_t>(r)]);
  }
  for (std::int64_t r : mine) {
    for (const auto& named : replicas[static_cast<std::size_t>(r)].named_parameters())
      read(named.second);
  }
}

/// With `model_only`, as collectives_timeline.
inline void training_timeline(const ferry::mpi::World& world, Reads reads,
                              bool model_only = false) {
  const std::int64_t n = world.size();
  const ferry::MeshSpec spec =
      ferry_test::line_of(n, n >= 3 ? ferry::Topology::ring : ferry::Topology::line, "dp");
  const ferry::Mesh over = model_only ? ferry::mpi::mesh_over(world, spec, ferry::model_only)
                                      : ferry::mpi::mesh_over(world, spec);
  const ferry::Mesh alone =
      model_only ? ferry::Mesh::modeled(spec, ferry::model_only) : ferry::Mesh::modeled(spec);
  const auto mine = ferry::mpi::default_members(n, world.rank(), world.size());
  const auto over_before = ferry_test::memory_in_use(over);
  const auto alone_before = ferry_test::memory_in_use(alone);
  train(over, mine, 3);
  train(alone, reads == Reads::mine ? mine : every(n), 3);
  books_balanced("training", over, over_before);
  books_balanced("training", alone, alone_before);
  same_timelines(world, "training", over, alone, mine, reads == Reads::mine);
  if (world.rank() == 0) {
    std::printf("training%s: mesh makespan %lld ns over processes, %lld ns in one\n",
                model_only ? " (model-only)" : "",
                static_cast<long long>(over.stats().makespan.count()),
                static_cast<long long>(alone.stats().makespan.count()));
  }
}

/// distribute of an array computed on device `from` of `mesh`, and its copy (`to()`) to the
/// device at the mesh's other end, then compute on each, each device's results read: the
/// blocks and the copy cross from `from`'s rank to each receiving device's.
inline void distribute_program(const ferry::Mesh& mesh, const std::vector<std::int64_t>& mine,
                               std::int64_t from) {
  const ferry::DeviceArray<float> x =
      ferry::tanh(ferry::to_device(mesh.device(from), values(ferry::Shape{24, 16}, 11)));
  const auto a = ferry::distribute(x, mesh, {ferry::Shard{0}, ferry::Shard{1}});
  const std::int64_t far = mesh.size() - 1 - from;
  const ferry::DeviceArray<float> y = x.to(mesh.device(far));
  for (std::int64_t m : mine) {
    read(ferry::exp(a.shard(m)));
    if (m == far) read(y * 2.0f);
  }
}

/// distribute and a copy from a device of rank 0 and from one of the last rank, on a grid of
/// two devices a rank: each owned device's timeline is the one-process mesh's.
inline void distribute_timeline(const ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  const ferry::MeshSpec grid = ferry_test::grid(n, 2, "grid");
  for (const std::int64_t from : {std::int64_t{0}, 2 * n - 1}) {
    const ferry::Mesh over = ferry::mpi::mesh_over(world, grid);
    const ferry::Mesh alone = ferry::Mesh::modeled(grid);
    const auto mine = ferry::mpi::default_members(2 * n, world.rank(), world.size());
    const auto over_before = ferry_test::memory_in_use(over);
    const auto alone_before = ferry_test::memory_in_use(alone);
    distribute_program(over, mine, from);
    distribute_program(alone, mine, from);
    const std::string what = "distribute from device " + std::to_string(from);
    books_balanced(what, over, over_before);
    books_balanced(what, alone, alone_before);
    same_timelines(world, what, over, alone, mine, true);
  }
}

}  // namespace ferry_test::timeline
