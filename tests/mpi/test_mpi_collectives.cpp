// Meshes over MPI processes (ferry::mpi): run by ctest under `mpiexec -n 2` and `-n 4`. Every
// rank runs this same program. Each collective over processes is compared bit for bit with the
// one-process mesh of the same shape running the same program on the same data (built in this
// same process), and so are a function run by spmd and Megatron's tensor-parallel MLP, and the
// gradients through each of them (the backward's transposed collectives cross ranks too); then the
// failures are provoked (a mismatched op, a mismatched shape, a rank stuck in the kernel of the
// shard it sends, a rank that never calls, a rank late to mesh_stats) and each rank checks the
// error's exact type and text; last, a rank ends late, and the others' Worlds must wait for it
// rather than take it for a crashed rank. After each program that works, once its arrays are
// gone, each rank's own devices of the mesh over processes hold the memory they held before
// it, and their schedules are no shorter than their lower bounds. The harness (main, its
// watchdog, the checks) is harness.hpp's.

#include <mpi.h>

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "../support/memory.hpp"
#include "../support/parallel_mlp.hpp"
#include "../support/timeline.hpp"
#include "harness.hpp"
#include "mismatch.hpp"
#include "rounding.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;

using ferry_test::check;
using ferry_test::expect_error;
using ferry_test::same_bits;
using ferry_test::values;

/// Tiny devices joined as `shape` (each axis a ring, or a line where too short for one), on
/// links of round numbers.
ferry::MeshSpec spec_of(ferry::MeshShape shape, std::string name) {
  ferry::MeshSpec m;
  m.name = std::move(name);
  m.shape = shape;
  m.devices.assign(static_cast<std::size_t>(shape.size()), ferry::specs::tiny());
  for (const std::int64_t size : shape.sizes())
    m.topology.push_back(size >= 3 ? ferry::Topology::ring : ferry::Topology::line);
  m.link.bytes_per_second = 1e9;
  m.link.hop_latency = std::chrono::nanoseconds(100);
  return m;
}

/// Shard i of device i: the same values on every rank (and in the one-process mesh).
template <class T>
ferry::MeshArray<T> shards_on(const ferry::Mesh& mesh, const ferry::Shape& shape,
                              std::uint32_t seed) {
  std::vector<ferry::DeviceArray<T>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    shards.push_back(
        ferry::to_device(mesh.device(i), values<T>(shape, seed + static_cast<std::uint32_t>(i))));
  }
  return ferry::MeshArray<T>::from_shards(mesh, std::move(shards));
}

/// Every shard this rank owns of `over` against the same shard of `alone`, bit for bit.
template <class T>
void compare_local(const std::string& what, const ferry::Mesh& over, const ferry::MeshArray<T>& got,
                   const ferry::MeshArray<T>& want, const std::vector<std::int64_t>& mine) {
  (void)over;
  for (std::int64_t m : mine) {
    const ferry::HostArray<T> g = got.shard(m).to_host();
    const ferry::HostArray<T> w = want.shard(m).to_host();
    check(same_bits(g, w), what + ": shard " + std::to_string(m) + " differs from one process");
  }
}

/// {DRAM, L1} bytes in use on each of `devices` of `mesh`.
ferry_test::MemoryInUse memory_of(const ferry::Mesh& mesh,
                                  const std::vector<std::int64_t>& devices) {
  ferry_test::MemoryInUse out;
  for (std::int64_t i : devices) out.push_back(ferry_test::memory_in_use(mesh.device(i)));
  return out;
}

/// Checks that this rank's devices `mine` of `mesh` are back at `before` (memory_of's figures
/// before the program) once the program's arrays are gone, and that no device's schedule is
/// shorter than its lower bound. A send to another rank may still hold its shard when this
/// rank's own results are in, until that rank has taken the bytes, so it waits up to 10 s for
/// the memory to come back.
void expect_memory_back(const std::string& what, const ferry::Mesh& mesh,
                        const std::vector<std::int64_t>& mine,
                        const ferry_test::MemoryInUse& before) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (memory_of(mesh, mine) != before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  const auto after = memory_of(mesh, mine);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const std::string device = mesh.device(mine[k]).name();
    check(after[k] == before[k],
          what + ": " + device + " holds {DRAM, L1} {" + std::to_string(after[k].first) + ", " +
              std::to_string(after[k].second) + "} bytes, {" + std::to_string(before[k].first) +
              ", " + std::to_string(before[k].second) + "} before");
    const ferry::DeviceStats s = mesh.device(mine[k]).stats();
    check(s.lower_bound <= s.makespan, what + ": " + device + "'s lower bound passes its makespan");
  }
}

/// The mesh of `spec` over processes and the same mesh in this process alone, with the devices
/// each owns here and the memory they hold at the start.
struct BothMeshes {
  ferry::Mesh over;
  ferry::Mesh alone;
  std::vector<std::int64_t> mine;   // over's devices on this rank
  std::vector<std::int64_t> every;  // alone's devices: all of them
  ferry_test::MemoryInUse over_before;
  ferry_test::MemoryInUse alone_before;

  BothMeshes(const ferry::mpi::World& world, const ferry::MeshSpec& spec)
      : over(ferry::mpi::mesh_over(world, spec)),
        alone(ferry::Mesh::modeled(spec)),
        mine(ferry::mpi::default_members(over.size(), world.rank(), world.size())),
        every(static_cast<std::size_t>(alone.size())) {
    for (std::size_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::int64_t>(i);
    over_before = memory_of(over, mine);
    alone_before = memory_of(alone, every);
  }

  /// Each mesh's devices are back at the memory they started with.
  void expect_memory_back(const std::string& what) const {
    ::expect_memory_back(what, over, mine, over_before);
    ::expect_memory_back(what + " in one process", alone, every, alone_before);
  }
};

/// Runs `fn(mesh)` on the mesh over processes and on the one-process mesh of `spec`, and
/// compares the local shards of the results bit for bit; then each mesh's local devices are
/// back at the memory they started with.
template <class T, class Fn>
void same_as_one_process(const ferry::mpi::World& world, const ferry::MeshSpec& spec,
                         const std::string& what, Fn fn) {
  const BothMeshes m(world, spec);
  compare_local<T>(what, m.over, fn(m.over), fn(m.alone), m.mine);  // the results die here
  m.expect_memory_back(what);
}

void collectives_match(const ferry::mpi::World& world) {
  const int n = world.size();
  const ferry::MeshSpec line = spec_of(ferry::MeshShape{n}, "line");
  const ferry::Shape shape{4, 6};
  for (const ferry::ReduceOp op : {ferry::ReduceOp::sum, ferry::ReduceOp::mean}) {
    same_as_one_process<float>(world, line, "all_reduce", [&](const ferry::Mesh& m) {
      return ferry::all_reduce(shards_on<float>(m, shape, 1), op);
    });
  }
  same_as_one_process<ferry::bfloat16>(
      world, line, "all_reduce bfloat16", [&](const ferry::Mesh& m) {
        return ferry::all_reduce(shards_on<ferry::bfloat16>(m, shape, 2));
      });
  // Shards whose parts (array_split of the flat shard, one a rank) are uneven or empty: a
  // scalar, an empty shard, fewer elements than ranks, and 2n + 1 rows of 3.
  for (const ferry::Shape& s : {ferry::Shape{}, ferry::Shape{0}, ferry::Shape{1}, ferry::Shape{7},
                                ferry::Shape{2 * n + 1, 3}}) {
    for (const ferry::ReduceOp op : {ferry::ReduceOp::sum, ferry::ReduceOp::min}) {
      same_as_one_process<float>(world, line, "all_reduce " + s.to_string(),
                                 [&](const ferry::Mesh& m) {
                                   return ferry::all_reduce(shards_on<float>(m, s, 14), op);
                                 });
    }
  }
  same_as_one_process<float>(world, line, "all_gather", [&](const ferry::Mesh& m) {
    return ferry::all_gather(shards_on<float>(m, shape, 3), 1);
  });
  same_as_one_process<float>(world, line, "reduce_scatter", [&](const ferry::Mesh& m) {
    return ferry::reduce_scatter(shards_on<float>(m, ferry::Shape{4 * n, 3}, 4), 0);
  });
  same_as_one_process<float>(world, line, "broadcast", [&](const ferry::Mesh& m) {
    return ferry::broadcast(shards_on<float>(m, shape, 5), n - 1);
  });
  // A root whose shard has another shape than the others': every member gets the root's shard,
  // in one process too, where the given operand donates into shards of the root's shape only.
  same_as_one_process<float>(world, line, "broadcast of another shape", [&](const ferry::Mesh& m) {
    std::vector<ferry::DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < m.size(); ++i) {
      const ferry::Shape s = i == 0 ? ferry::Shape{3, 3} : ferry::Shape{2, 2};
      shards.push_back(
          ferry::to_device(m.device(i), values<float>(s, 70 + static_cast<std::uint32_t>(i))));
    }
    return ferry::broadcast(ferry::MeshArray<float>::from_shards(m, std::move(shards)), 0);
  });
  same_as_one_process<float>(world, line, "all_to_all", [&](const ferry::Mesh& m) {
    return ferry::all_to_all(shards_on<float>(m, ferry::Shape{2 * n, 3}, 12), 0, 1);
  });
  std::vector<std::pair<std::int64_t, std::int64_t>> shift;
  for (std::int64_t i = 0; i < n; ++i) shift.emplace_back(i, (i + 1) % n);
  same_as_one_process<float>(world, line, "permute", [&](const ferry::Mesh& m) {
    return ferry::permute(shards_on<float>(m, shape, 13), shift);
  });
  // Two devices a rank, along each axis of a 2-D mesh: groups within a rank and across ranks.
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "grid");
  for (int axis : {0, 1, -1}) {
    same_as_one_process<float>(world, grid, "all_reduce axis " + std::to_string(axis),
                               [&](const ferry::Mesh& m) {
                                 return ferry::all_reduce(shards_on<float>(m, shape, 6),
                                                          ferry::ReduceOp::sum, axis);
                               });
  }
  // A chain: the second collective reads the first's results, remote ones included.
  same_as_one_process<float>(world, grid, "chain", [&](const ferry::Mesh& m) {
    auto a = ferry::all_gather(shards_on<float>(m, shape, 7), 0, 1);
    return ferry::all_reduce(ferry::reduce_scatter(a, 0, ferry::ReduceOp::sum, 0));
  });

  // to_host of a global array: every rank assembles the same value as one process.
  const ferry::HostArray<float> global = values<float>(ferry::Shape{2 * n, 5}, 8);
  const ferry::Mesh over = ferry::mpi::mesh_over(world, grid);
  const ferry::Mesh alone = ferry::Mesh::modeled(grid);
  const auto mine = ferry::mpi::default_members(over.size(), world.rank(), world.size());
  const auto over_before = memory_of(over, mine);
  const ferry::Placements placements{ferry::Shard{0}, ferry::Partial{}};
  check(same_bits(ferry::to_host(ferry::distribute(global, over, placements)),
                  ferry::to_host(ferry::distribute(global, alone, placements))),
        "to_host of a sharded, partial array");
  check(same_bits(
            ferry::to_host(ferry::distribute(global, over, {ferry::Shard{1}, ferry::Replicate{}})),
            global),
        "to_host of a sharded array");
  // to_host gathered on one process: the value there, nothing elsewhere, where no data comes;
  // a process the mesh does not span is refused on every process.
  for (const int root : {0, n - 1}) {
    const std::string what = "to_host on process " + std::to_string(root);
    const ferry::mpi::MeshTraffic before = ferry::mpi::traffic(over);
    const std::optional<ferry::HostArray<float>> got =
        ferry::to_host(ferry::distribute(global, over, placements), root);
    if (world.rank() == root) {
      check(got.has_value() &&
                same_bits(*got, ferry::to_host(ferry::distribute(global, alone, placements))),
            what + ": the value differs from one process");
    } else {
      check(!got.has_value(), what + ": process " + std::to_string(world.rank()) + " has one");
      check(ferry::mpi::traffic(over).messages_received == before.messages_received,
            what + ": process " + std::to_string(world.rank()) + " received data");
    }
  }
  // A block that failed on the last rank reaches process 0's export as its error; the others
  // return at once, the last one having sent the failure.
  {
    const ferry::Placements rows{ferry::Shard{0}, ferry::Replicate{}};
    const auto a = ferry::distribute(global, over, rows);
    std::vector<ferry::DeviceArray<float>> shards = a.shards();
    const std::int64_t last = over.size() - 2;  // the last row's position 0 of axis 1: needed
    shards[static_cast<std::size_t>(last)] = ferry::custom<float>(
        over.device(last), "throws", {}, a.shard(last).shape(),
        [](ferry::KernelArgs<float>) { throw std::runtime_error("a block failed, as asked"); },
        ferry::Cost{});
    const auto b = ferry::MeshArray<float>::from_shards(over, shards, global.shape(), rows);
    const std::string what = "to_host on process 0 of a failed block";
    if (world.rank() == 0) {
      expect_error<ferry::CommunicationError>(
          what, [&] { (void)ferry::to_host(b, 0); },
          {"[to_host] the data of member " + std::to_string(last) + " failed on rank " +
           std::to_string(n - 1) + ": a block failed, as asked"});
    } else {
      check(!ferry::to_host(b, 0).has_value(), what + ": a value off process 0");
    }
  }
  expect_error<ferry::InvalidArgument>(
      "to_host on process " + std::to_string(n),
      [&] { (void)ferry::to_host(ferry::distribute(global, over, placements), n); },
      {"[to_host] process " + std::to_string(n) + " of mesh grid, which spans processes 0 to " +
       std::to_string(n - 1)});
  expect_memory_back("to_host", over, mine, over_before);

  // distribute of an array on a device of the mesh: its owner sends each block to the rank of
  // the device receiving it. From rank 0's first device and from the last rank's last one, to
  // shards, replicas and a partial sum (the zeros made where they are).
  for (const std::int64_t from : {std::int64_t{0}, 2 * std::int64_t{n} - 1}) {
    for (const ferry::Placements& ps :
         {ferry::Placements{ferry::Shard{0}, ferry::Shard{1}},
          ferry::Placements{ferry::Replicate{}, ferry::Shard{0}},
          ferry::Placements{ferry::Partial{}, ferry::Replicate{}}}) {
      const std::string what = "distribute from device " + std::to_string(from) + " " +
                               ferry::detail::placements_text(ps);
      same_as_one_process<float>(world, grid, what, [&](const ferry::Mesh& m) {
        return ferry::distribute(ferry::to_device(m.device(from), global), m, ps);
      });
    }
  }
}

/// spmd (named-axis collectives inside the function) and Megatron's tensor-parallel MLP run over
/// processes as in one process: each local shard bit for bit, the memory given back. Two
/// devices a rank, so each function's collectives meet both within a rank ("tp") and across
/// ranks ("dp").
void spmd_and_tensor_parallel(const ferry::mpi::World& world) {
  const int n = world.size();
  ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "grid");
  grid.axis_names = {"dp", "tp"};
  const auto program = [](const ferry::DeviceArray<float>& x) {
    const auto y = ferry::all_reduce(x * 2.0f, "tp");
    const auto g = ferry::all_gather(y + x, "dp", 1);
    const auto scaled = g * static_cast<float>(ferry::axis_index("dp") + 1);
    return ferry::permute(scaled, "tp", {{0, 1}, {1, 0}});
  };
  same_as_one_process<float>(world, grid, "spmd", [&](const ferry::Mesh& m) {
    return ferry::spmd(m, program)(shards_on<float>(m, ferry::Shape{4, 6}, 20));
  });
  // Megatron's MLP along "tp", the batch cut along "dp": the forward's one all-reduce is
  // within a rank, the devices' parameters and batch rows imported on every rank alike.
  same_as_one_process<float>(world, grid, "tensor-parallel MLP", [&](const ferry::Mesh& m) {
    const ferry::nn::ColumnParallelLinear up(6, 8, m, 1, {.seed = 21});
    const ferry::nn::RowParallelLinear down(8, 6, m, 1, {.seed = 22});
    const auto x = ferry::distribute(values<float>(ferry::Shape{2 * n, 6}, 23), m,
                                     {ferry::Shard{0}, ferry::Replicate{}});
    return down(ferry::relu(up(x)));
  });
}

/// A function's value (on some device) and its gradients, as mesh arrays.
using Differentiated = std::pair<ferry::DeviceArray<float>, std::vector<ferry::MeshArray<float>>>;

/// Runs `fn(mesh)` (a value_and_grad, grad or vjp) on the mesh over processes and on the
/// one-process mesh of `spec`, and compares the value (on the rank that owns its device) and
/// every local shard of every gradient bit for bit; then each mesh's local devices are back at
/// the memory they started with (the tape, its saved values and the backward's collectives
/// keep nothing).
template <class Fn>
void grads_as_one_process(const ferry::mpi::World& world, const ferry::MeshSpec& spec,
                          const std::string& what, Fn fn) {
  const BothMeshes m(world, spec);
  {
    const Differentiated got = fn(m.over);
    const Differentiated want = fn(m.alone);
    check(got.second.size() == want.second.size(), what + ": not as many gradients");
    const std::int64_t at = m.over.index_of(got.first.device());
    if (std::find(m.mine.begin(), m.mine.end(), at) != m.mine.end()) {
      check(same_bits(got.first.to_host(), want.first.to_host()),
            what + ": the value differs from one process");
    }
    for (std::size_t k = 0; k < got.second.size() && k < want.second.size(); ++k) {
      compare_local<float>(what + ", gradient " + std::to_string(k), m.over, got.second[k],
                           want.second[k], m.mine);
    }
  }
  m.expect_memory_back(what);
}

/// A mesh array of `m` holding `a` on device `at` (where `a` lives) and zeros of its shape on
/// every other device.
ferry::MeshArray<float> only_on(const ferry::Mesh& m, std::int64_t at,
                                const ferry::DeviceArray<float>& a) {
  std::vector<ferry::DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < m.size(); ++i)
    shards.push_back(i == at ? a : ferry::zeros<float>(m.device(i), a.shape()));
  return ferry::MeshArray<float>::from_shards(m, std::move(shards));
}

/// `to()` between devices of a mesh over processes: between two ranks the owner sends the
/// bytes (both ways, and between neighbours of the same rank), each value and the memory as in
/// one process; a failed source reaches the receiving rank; the gradient comes back by the copy
/// the other way, through `to()` and through distribute's blocks.
void copies_between_processes(const ferry::mpi::World& world) {
  const int n = world.size();
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "copies");
  const std::int64_t last = 2 * std::int64_t{n} - 1;
  for (const auto& pair : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, last}, {last, 0}, {0, 1}, {1, 2}}) {
    const std::int64_t from = pair.first;  // named: clang 14 captures no structured binding
    const std::int64_t to = pair.second;
    const std::string what =
        "to() from device " + std::to_string(from) + " to device " + std::to_string(to);
    same_as_one_process<float>(world, grid, what, [&](const ferry::Mesh& m) {
      const auto x = ferry::tanh(
          ferry::to_device(m.device(from), values<float>(ferry::Shape{5, 7}, 40)));
      return only_on(m, to, ferry::exp(x.to(m.device(to))));
    });
  }
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, grid);
  // A source that failed on the last rank: device 0 (rank 0) gets its failure.
  const auto bad = ferry::custom<float>(
      mesh.device(last), "throws", {}, ferry::Shape{3},
      [](ferry::KernelArgs<float>) { throw std::runtime_error("a source failed, as asked"); },
      ferry::Cost{});
  const auto got = bad.to(mesh.device(0));
  if (world.rank() == 0) {
    expect_error<ferry::CommunicationError>(
        "to() of a failed source", [&] { (void)got.to_host(); },
        {"[to] the data of member " + std::to_string(last) + " failed on rank " +
         std::to_string(n - 1) + ": a source failed, as asked"});
  }
  // A shard that another process owns is only modeled here: reading it on the host, or
  // copying it there, names its owner and what would bring its values here, on every rank
  // (each reads a member the next rank round owns); and the mesh goes on.
  if (n > 1) {
    const int owner = (world.rank() + 1) % n;
    const std::int64_t theirs = 2 * std::int64_t{owner};
    const auto there = ferry::full<float>(mesh.device(theirs), ferry::Shape{2}, 1.0f);
    const std::string why = "the device is process " + std::to_string(owner) +
                            "'s (ferry::mpi::mesh_over), and this process only models it: read "
                            "it on process " + std::to_string(owner) + ", or bring it here with "
                            "to() onto a device this process owns, or with ferry::to_host of a "
                            "placed mesh array";
    const std::string head = "the array full made on " + mesh.device(theirs).name();
    expect_error<ferry::NoValues>("to_host of another process's shard",
                                  [&] { (void)there.to_host(); },
                                  {"[to_host] " + head + " has no values: " + why});
    expect_error<ferry::NoValues>("to(cpu) of another process's shard",
                                  [&] { (void)there.to(ferry::Device::cpu()); },
                                  {"[to] " + head + " has no values to send to cpu: " + why});
    const auto mine =
        ferry::to_device(mesh.device(2 * world.rank()), values<float>(ferry::Shape{2}, 43));
    const ferry::HostArray<float> copied = mine.to(ferry::Device::cpu()).to_host();
    const ferry::HostArray<float> read = mine.to_host();
    check(std::ranges::equal(copied.data(), read.data()),
          "to(cpu) of this process's own shard after the refusals");
  }
  // The gradient flows back by the copy the other way: rank 0's device gets it, as in one
  // process (the loss read on the last rank's device).
  grads_as_one_process(world, grid, "to() between processes", [&](const ferry::Mesh& m) {
    const auto w = ferry::to_device(m.device(0), values<float>(ferry::Shape{3, 4}, 41));
    const auto loss = [&](const ferry::DeviceArray<float>& v) {
      return ferry::sum(ferry::tanh(v.to(m.device(last))) * 2.0f);
    };
    auto [value, dw] = ferry::value_and_grad(loss)(w);
    return Differentiated{value, {only_on(m, 0, dw)}};
  });
  // distribute's blocks go back the same way: each block's cotangent to the last rank's device,
  // where the distributed array lives (the loss all-reduced and read on device 0).
  grads_as_one_process(world, grid, "distribute from a device", [&](const ferry::Mesh& m) {
    const auto w = ferry::to_device(m.device(last), values<float>(ferry::Shape{2 * n, 4}, 42));
    const auto loss = [&](const ferry::DeviceArray<float>& v) {
      const auto a = ferry::distribute(v, m, {ferry::Shard{0}, ferry::Replicate{}});
      std::vector<ferry::DeviceArray<float>> sums;
      for (std::int64_t i = 0; i < m.size(); ++i)
        sums.push_back(ferry::sum(ferry::tanh(a.shard(i))));
      return ferry::all_reduce(ferry::MeshArray<float>::from_shards(m, std::move(sums))).shard(0);
    };
    auto [value, dw] = ferry::value_and_grad(loss)(w);
    return Differentiated{value, {only_on(m, last, dw)}};
  });
}

/// The value of `collective` (of a mesh array, giving one) at shards of `in` is reduced to a
/// scalar, sum_i sum(y_i * w_i) with other weights on each device, its devices' sums added by an
/// all-reduce and read on device `at`: value_and_grad of that with respect to the shards. The
/// cotangent reaches device `at` alone, so on the ranks that do not own it no local member of
/// the all-reduce's group has one: the backward's collectives must run there all the same.
template <class Collective>
auto loss_through(Collective collective, ferry::Shape in, std::uint32_t seed, std::int64_t at = 0) {
  return [=](const ferry::Mesh& m) -> Differentiated {
    const std::vector<ferry::DeviceArray<float>> xs = shards_on<float>(m, in, seed).shards();
    auto loss = [&](const std::vector<ferry::DeviceArray<float>>& x) {
      const ferry::MeshArray<float> y = collective(ferry::MeshArray<float>::from_shards(m, x));
      std::vector<ferry::DeviceArray<float>> sums;
      for (std::int64_t i = 0; i < m.size(); ++i) {
        const ferry::DeviceArray<float>& yi = y.shard(i);
        const auto wi = ferry::to_device(
            m.device(i), values<float>(yi.shape(), seed + 100 + static_cast<std::uint32_t>(i)));
        sums.push_back(ferry::sum(yi * wi));
      }
      return ferry::all_reduce(ferry::MeshArray<float>::from_shards(m, std::move(sums))).shard(at);
    };
    auto [value, dxs] = ferry::value_and_grad(loss)(xs);
    return {value, {ferry::MeshArray<float>::from_shards(m, std::move(dxs))}};
  };
}

/// Gradients through collectives that cross ranks: each collective goes on the tape as one
/// group, and the backward calls its transpose once over the processes (all_gather ->
/// reduce_scatter, all_reduce -> all_reduce, reduce_scatter -> all_gather, permute -> the
/// inverse pairs, all_to_all -> the all-to-all back; a max or min -> all-reduces of the
/// cotangents and the ties; a ragged all-gather -> an all-reduce), bit for bit as one process.
void gradients_through_collectives(const ferry::mpi::World& world) {
  const int n = world.size();
  const ferry::MeshSpec line = spec_of(ferry::MeshShape{n}, "grad line");
  const ferry::Shape shape{4, 6};
  std::vector<std::pair<std::int64_t, std::int64_t>> shift;
  for (std::int64_t i = 0; i < n; ++i) shift.emplace_back(i, (i + 1) % n);
  using MA = ferry::MeshArray<float>;
  grads_as_one_process(world, line, "grad through all_gather",
                       loss_through([](MA a) { return ferry::all_gather(a, 1); }, shape, 40));
  for (const ferry::ReduceOp op : {ferry::ReduceOp::sum, ferry::ReduceOp::mean}) {
    grads_as_one_process(world, line, "grad through all_reduce",
                         loss_through([op](MA a) { return ferry::all_reduce(a, op); }, shape, 41));
    grads_as_one_process(world, line, "grad through reduce_scatter",
                         loss_through([op](MA a) { return ferry::reduce_scatter(a, 0, op); },
                                      ferry::Shape{2 * n, 3}, 42));
  }
  grads_as_one_process(world, line, "grad through permute",
                       loss_through([&](MA a) { return ferry::permute(a, shift); }, shape, 43));
  grads_as_one_process(world, line, "grad through all_to_all",
                       loss_through([](MA a) { return ferry::all_to_all(a, 0, 1); },
                                    ferry::Shape{2 * n, 3}, 44));
  // The loss read on the last device: rank 0's members get no cotangent of their own.
  grads_as_one_process(world, line, "grad through all_gather, loss on the last device",
                       loss_through([](MA a) { return ferry::all_gather(a, 0); }, shape, 45,
                                    n - 1));
  // Along each axis of an n x 2 mesh (within a rank, across ranks, both), and a chain.
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "grad grid");
  for (int axis : {0, 1, -1}) {
    grads_as_one_process(
        world, grid, "grad through all_gather along axis " + std::to_string(axis),
        loss_through([axis](MA a) { return ferry::all_gather(a, 1, axis); }, shape, 46));
  }
  grads_as_one_process(world, grid, "grad through a chain", loss_through([](MA a) {
    const MA g = ferry::all_gather(a, 0, 1);
    return ferry::all_reduce(ferry::reduce_scatter(g, 0, ferry::ReduceOp::sum, 0));
  }, shape, 47));

  // vjp of one output, the cotangent on the last device alone.
  const auto vjp_case = [&](const ferry::Mesh& m) -> Differentiated {
    const std::vector<ferry::DeviceArray<float>> xs =
        shards_on<float>(m, ferry::Shape{2 * n, 3}, 48).shards();
    const ferry::DeviceArray<float> dy =
        ferry::to_device(m.device(n - 1), values<float>(ferry::Shape{2, 3}, 49));
    auto [y, dxs] = ferry::vjp(
        [&](const std::vector<ferry::DeviceArray<float>>& x) {
          return ferry::reduce_scatter(MA::from_shards(m, x), 0).shard(n - 1);
        },
        xs, dy);
    return {y, {MA::from_shards(m, std::move(dxs))}};
  };
  grads_as_one_process(world, line, "vjp through reduce_scatter", vjp_case);

  // A broadcast goes back as the sum of the members' cotangents into the root.
  grads_as_one_process(world, line, "grad through broadcast",
                       loss_through([](MA a) { return ferry::broadcast(a, 0); }, shape, 50));
  // A max or min (its values have ties: small multiples of 1/4, shared alike on every rank).
  for (const ferry::ReduceOp op : {ferry::ReduceOp::max, ferry::ReduceOp::min}) {
    grads_as_one_process(world, line, "grad through all_reduce(max or min)",
                         loss_through([op](MA a) { return ferry::all_reduce(a, op); }, shape, 51));
    grads_as_one_process(world, grid, "grad through reduce_scatter(max or min) along axis 0",
                         loss_through([op](MA a) { return ferry::reduce_scatter(a, 0, op, 0); },
                                      ferry::Shape{2 * n, 3}, 52));
  }
  // An all-gather of shards of 1 or 2 rows: summed whole, each member keeping its block.
  grads_as_one_process(world, line, "grad through a ragged all_gather", loss_through([](MA a) {
    std::vector<ferry::DeviceArray<float>> cut;
    for (std::int64_t i = 0; i < a.size(); ++i)
      cut.push_back(ferry::slice(a.shard(i), 0, 0, 1 + i % 2));
    return ferry::all_gather(MA::from_shards(a.mesh(), std::move(cut)), 0);
  }, shape, 53));
}

/// spmd with named-axis collectives, and Megatron's MLP, differentiated over processes: on an
/// n x 2 mesh whose "tp" axis is within a rank (axis 1) or across ranks (axis 0).
void gradients_of_spmd_and_tensor_parallel(const ferry::mpi::World& world) {
  const int n = world.size();
  ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "grad grid");
  grid.axis_names = {"dp", "tp"};
  const auto program = [](const ferry::DeviceArray<float>& x) {
    const auto y = ferry::all_reduce(x * 2.0f, "tp");
    const auto g = ferry::all_gather(y * x, "dp", 1);
    const auto scaled = g * static_cast<float>(ferry::axis_index("dp") + 1);
    return ferry::permute(scaled, "tp", {{0, 1}, {1, 0}});
  };
  grads_as_one_process(world, grid, "grad of spmd",
                       loss_through([&](ferry::MeshArray<float> a) {
                         return ferry::spmd(a.mesh(), program)(a);
                       }, ferry::Shape{4, 6}, 60));

  namespace mlp = ferry_test::mlp;
  for (int axis : {1, 0}) {
    grads_as_one_process(
        world, grid, "grad of the tensor-parallel MLP, tp along axis " + std::to_string(axis),
        [&](const ferry::Mesh& m) -> Differentiated {
          const mlp::ParallelMlp tp(m, axis);
          const auto x = ferry::distribute(mlp::data(mlp::kBatch, mlp::kIn, 1), m,
                                           {ferry::Replicate{}, ferry::Replicate{}});
          const auto target = ferry::to_device(m.device(0), mlp::data(mlp::kBatch, mlp::kOut, 2));
          std::vector<ferry::MeshArray<float>> params{x};
          for (auto& p : tp.parameters()) params.push_back(std::move(p));
          auto [loss, grads] = ferry::nn::value_and_grad(
              params, [&](const ferry::MeshArray<float>& in) {
                return ferry::nn::mse_loss(tp(in).shard(0), target);
              })(x);
          return {loss, std::move(grads)};
        });
  }
}

void mismatched_op(const ferry::mpi::World& world) {
  const ferry::Mesh mesh =
      ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{world.size()}, "odd"));
  const auto a = shards_on<float>(mesh, ferry::Shape{4, 4}, 9);
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  const auto out = world.rank() == 1 ? ferry::all_gather(a, 1) : ferry::all_reduce(a);
  const std::vector<std::string> parts = ferry_test::mismatch_parts(world.rank());
  expect_error<ferry::CollectiveMismatch>(
      "mismatched op", [&] { (void)out.shard(mine[0]).to_host(); }, parts);
  // The mesh is broken from then on: the next collective throws at the call.
  expect_error<ferry::CollectiveMismatch>("after a mismatch", [&] { (void)ferry::all_reduce(a); },
                                          {"rank "});
}

/// Rank 1's shards are (4, `wide`) where the others' are (4, 3). The data is posted before the
/// fingerprints are compared, so rank 1's larger message reaches a receive made for the
/// others' shape: with `wide` 5 it fits the receive's room (a failure's 256 bytes), with 100
/// (1,601 bytes) MPI fails the receive (truncated). Either way the error is the mismatch.
void mismatched_shape(const ferry::mpi::World& world) {
  for (const std::int64_t wide : {std::int64_t{5}, std::int64_t{100}}) {
    const ferry::Mesh mesh =
        ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{world.size()}, "shapes"));
    const ferry::Shape shape = world.rank() == 1 ? ferry::Shape{4, wide} : ferry::Shape{4, 3};
    const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
    const auto out = ferry::all_reduce(shards_on<float>(mesh, shape, 10));
    const std::string theirs = "all_reduce(sum) of float32 (4, " + std::to_string(wide) + ")";
    const std::vector<std::string> parts =
        world.rank() == 1 ? std::vector<std::string>{"called all_reduce(sum) of float32 (4, 3)",
                                                     "where rank 1 called " + theirs}
                          : std::vector<std::string>{"rank 1 called " + theirs,
                                                     "called all_reduce(sum) of float32 (4, 3)"};
    expect_error<ferry::CollectiveMismatch>("mismatched shape (4, " + std::to_string(wide) + ")",
                                            [&] { (void)out.shard(mine[0]).to_host(); }, parts);
  }
}

/// MPI counts bytes in int, so a message of 2 GiB or more travels in pieces (messages.hpp).
/// With the pieces lowered to 7 bytes, the messages of these collectives travel as many (a
/// float32 (4, 6) shard and its status byte: 97 bytes, 14 pieces, the last of 6; a bfloat16 one
/// 49 bytes, 7 whole pieces; an int16 (3) one exactly one piece, an int16 (4) one two, the last
/// of 2 bytes), and each result must still be the one-process mesh's bit for bit. Then a shard that
/// failed on its own rank reaches the others as its error, the text cut to fit one piece (5
/// characters and the status byte, short of a whole piece; 6 where the data is one piece of 5
/// bytes, since a failure may take a whole piece, more than the data), both where the message would
/// take many pieces and where it takes one.
/// Shard 0's kernel throws, its shard of `elements` floats travelling bare (failure_bytes or
/// more): the failure sent instead is shorter than the data, so every other rank gets its whole
/// text, and a failure as long as a small shard's room (255 bytes) still fits.
void failed_bare_shard(const ferry::mpi::World& world) {
  const int n = world.size();
  for (const std::int64_t elements : {std::int64_t{64}, std::int64_t{1000}}) {
    const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "bare"));
    const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
    const auto a = shards_on<float>(mesh, ferry::Shape{elements}, 28);
    const std::string cause = elements == 64 ? std::string(300, 'x') : "shard 0 failed, bare";
    std::vector<ferry::DeviceArray<float>> shards;
    shards.push_back(ferry::custom<float>(
        mesh.device(0), "throws", {}, ferry::Shape{elements},
        [cause](ferry::KernelArgs<float>) { throw std::runtime_error(cause); }, ferry::Cost{}));
    for (std::int64_t i = 1; i < mesh.size(); ++i) shards.push_back(a.shard(i));
    const auto out =
        ferry::all_gather(ferry::MeshArray<float>::from_shards(mesh, std::move(shards)), 0);
    const std::string what = "a failed bare shard of " + std::to_string(elements);
    if (world.rank() == 0) {
      expect_error<std::runtime_error>(what, [&] { (void)out.shard(mine[0]).to_host(); },
                                       {cause});
      continue;
    }
    // 256 bytes of data: the failure is at most 255 bytes, its status byte included.
    const std::string head = "[all_gather] the data of member 0 failed on rank 0: ";
    const std::string want = head + (elements == 64 ? cause.substr(0, 254) : cause);
    try {
      (void)out.shard(mine[0]).to_host();
      check(false, what + ": no error");
    } catch (const ferry::CommunicationError& e) {
      const std::string text = e.what();
      check(text == want, what + ": '" + text + "', not '" + want + "'");
    } catch (const std::exception& e) {
      check(false, what + ": the wrong error: " + e.what());
    }
  }
}

void messages_in_pieces(const ferry::mpi::World& world) {
  auto& limit = ferry::detail::mpi_data::piece_limit;
  const std::size_t kept = limit.load();
  limit.store(7);
  struct Restore {
    std::atomic<std::size_t>& limit;
    std::size_t kept;
    ~Restore() { limit.store(kept); }
  } restore{limit, kept};
  const int n = world.size();
  const ferry::MeshSpec line = spec_of(ferry::MeshShape{n}, "pieces");
  const ferry::Shape shape{4, 6};
  same_as_one_process<float>(world, line, "all_reduce in pieces", [&](const ferry::Mesh& m) {
    return ferry::all_reduce(shards_on<float>(m, shape, 21));
  });
  same_as_one_process<ferry::bfloat16>(
      world, line, "all_reduce bfloat16 in pieces", [&](const ferry::Mesh& m) {
        return ferry::all_reduce(shards_on<ferry::bfloat16>(m, shape, 22));
      });
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "pieces grid");
  same_as_one_process<float>(world, grid, "all_gather in pieces", [&](const ferry::Mesh& m) {
    return ferry::all_gather(shards_on<float>(m, shape, 23), 1);
  });
  // 320 bytes a shard: data of failure_bytes or more travels bare (no status byte), from the
  // shard's own buffer, and is told from a failure by its length.
  same_as_one_process<float>(world, line, "bare all_gather in pieces", [&](const ferry::Mesh& m) {
    return ferry::all_gather(shards_on<float>(m, ferry::Shape{8, 10}, 26), 0);
  });
  same_as_one_process<float>(world, line, "bare all_reduce in pieces", [&](const ferry::Mesh& m) {
    return ferry::all_reduce(shards_on<float>(m, ferry::Shape{8 * n, 10}, 27));
  });
  std::vector<std::pair<std::int64_t, std::int64_t>> shift;
  for (std::int64_t i = 0; i < n; ++i) shift.emplace_back(i, (i + 1) % n);
  for (const std::int64_t elements : {std::int64_t{3}, std::int64_t{4}}) {
    same_as_one_process<std::int16_t>(
        world, line, "permute of " + std::to_string(elements) + " in pieces",
        [&](const ferry::Mesh& m) {
          return ferry::permute(shards_on<std::int16_t>(m, ferry::Shape{elements}, 24), shift);
        });
  }

  // Shard 0's kernel throws (it runs on rank 0 alone): its message carries the error's text,
  // cut to less than a piece (and, for the 400 bytes of 100 floats, which travel bare, to less
  // than the data).
  for (const std::int64_t elements : {std::int64_t{24}, std::int64_t{1}, std::int64_t{100}}) {
    const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "failing"));
    const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
    const auto a = shards_on<float>(mesh, ferry::Shape{elements}, 25);
    std::vector<ferry::DeviceArray<float>> shards;
    shards.push_back(ferry::custom<float>(
        mesh.device(0), "throws", {}, ferry::Shape{elements},
        [](ferry::KernelArgs<float>) {
          throw std::runtime_error("shard 0 failed, as the test asks");
        },
        ferry::Cost{}));
    for (std::int64_t i = 1; i < mesh.size(); ++i) shards.push_back(a.shard(i));
    const auto out =
        ferry::all_gather(ferry::MeshArray<float>::from_shards(mesh, std::move(shards)), 0);
    const std::string what = "a failed shard of " + std::to_string(elements) + " in pieces";
    if (world.rank() == 0) {
      expect_error<std::runtime_error>(what, [&] { (void)out.shard(mine[0]).to_host(); },
                                       {"shard 0 failed, as the test asks"});
      continue;
    }
    try {
      (void)out.shard(mine[0]).to_host();
      check(false, what + ": no error");
    } catch (const ferry::CommunicationError& e) {
      const std::string text = e.what();
      const std::string want = "[all_gather] the data of member 0 failed on rank 0: " +
                               std::string(elements == 1 ? "shard " : "shard");
      check(text == want, what + ": '" + text + "', not '" + want + "'");
    } catch (const std::exception& e) {
      check(false, what + ": the wrong error: " + e.what());
    }
  }
}

/// Data that several devices of one rank need crosses to that rank once (ferry::mpi::traffic
/// counts the messages), and each device gets its own copy of the bytes: a broadcast from
/// device 0 of an {n, 2} mesh (two devices a rank) is one message to each other rank, where it
/// was one a device. Small data (a copy with a status byte) and bare data (320 bytes, received
/// in place), each copy made when the data arrives or, with copy_after_arrival, after it (from
/// the bytes kept for the call); and a failed shard 0 reaches both devices of every other rank.
void one_message_a_process(const ferry::mpi::World& world) {
  const int n = world.size();
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "copies");
  std::atomic<bool>& late = ferry::detail::mpi_data::copy_after_arrival;
  struct Restore {
    std::atomic<bool>& late;
    ~Restore() { late.store(false); }
  } restore{late};
  for (const bool after : {false, true}) {
    late.store(after);
    for (const ferry::Shape& shape : {ferry::Shape{4, 6}, ferry::Shape{8, 10}}) {
      const std::string what = "broadcast of " + shape.to_string() +
                               (after ? ", copied after it arrived" : ", copied on arrival");
      const BothMeshes m(world, grid);
      const ferry::mpi::MeshTraffic before = ferry::mpi::traffic(m.over);
      compare_local<float>(what, m.over, ferry::broadcast(shards_on<float>(m.over, shape, 30), 0),
                           ferry::broadcast(shards_on<float>(m.alone, shape, 30), 0), m.mine);
      // Every rank has its results, so rank 0 has posted every send of the broadcast.
      (void)ferry::mpi::mesh_stats(world, m.over);
      const ferry::mpi::MeshTraffic t = ferry::mpi::traffic(m.over);
      const auto bytes = static_cast<std::uint64_t>(shape.numel()) * sizeof(float);
      const std::uint64_t message = bytes >= 256 ? bytes : bytes + 1;  // a status byte below
      const std::uint64_t sent = world.rank() == 0 ? static_cast<std::uint64_t>(n - 1) : 0;
      const std::uint64_t received = world.rank() == 0 ? 0 : 1;
      check(t.messages_sent - before.messages_sent == sent &&
                t.bytes_sent - before.bytes_sent == sent * message,
            what + ": sent " + std::to_string(t.messages_sent - before.messages_sent) +
                " messages, " + std::to_string(t.bytes_sent - before.bytes_sent) +
                " bytes; one of " + std::to_string(message) + " to each other rank expected");
      check(t.messages_received - before.messages_received == received &&
                t.bytes_received - before.bytes_received == received * message,
            what + ": received " +
                std::to_string(t.messages_received - before.messages_received) + " messages, " +
                std::to_string(t.bytes_received - before.bytes_received) + " bytes");
      m.expect_memory_back(what);
    }
    // Shard 0's kernel throws on rank 0: both devices of each other rank get its failure.
    const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n, 2}, "fails"));
    const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
    const auto a = shards_on<float>(mesh, ferry::Shape{24}, 31);
    std::vector<ferry::DeviceArray<float>> shards;
    shards.push_back(ferry::custom<float>(
        mesh.device(0), "throws", {}, ferry::Shape{24},
        [](ferry::KernelArgs<float>) { throw std::runtime_error("shard 0 failed, as asked"); },
        ferry::Cost{}));
    for (std::int64_t i = 1; i < mesh.size(); ++i) shards.push_back(a.shard(i));
    const auto out = ferry::broadcast(ferry::MeshArray<float>::from_shards(mesh, shards), 0);
    for (const std::int64_t d : mine) {
      const std::string what = std::string("a failed broadcast on device ") + std::to_string(d) +
                               (after ? ", copied after it arrived" : "");
      if (world.rank() == 0) {
        expect_error<std::runtime_error>(what, [&] { (void)out.shard(d).to_host(); },
                                         {"shard 0 failed, as asked"});
      } else {
        expect_error<ferry::CommunicationError>(
            what, [&] { (void)out.shard(d).to_host(); },
            {"[broadcast] the data of member 0 failed on rank 0: shard 0 failed, as asked"});
      }
    }
  }
}

/// What reading `shard` throws: a DeviceFault (its op, the op called, step, device and cause),
/// or why not.
struct FaultSeen {
  bool fault = false;
  std::string op, called, device, cause, text;
  std::uint64_t step = 0;
};
template <class T>
FaultSeen fault_of(const ferry::DeviceArray<T>& shard) {
  FaultSeen out;
  try {
    (void)shard.to_host();
    out.text = "no error";
  } catch (const ferry::DeviceFault& e) {
    out = {true, e.op(), e.called(), e.device(), e.cause(), e.what(), e.step()};
  } catch (const std::exception& e) {
    out.text = std::string("not a DeviceFault: ") + e.what();
  }
  return out;
}

/// A modeled fault on rank 0's device (its first step, shard 0's import, is in fail_steps) is
/// a verdict of the model, not an error of the kernel, which still runs: every rank's result
/// of a collective that needs shard 0 must fail as in one process, with a DeviceFault of that
/// step of device 0, and its text that one's (the device's name aside: each mesh numbers its
/// own). Then the devices are back at their memory. With `everywhere` the fault is in every
/// rank's spec (so each stand-in of device 0 fails the step too); without, in rank 0's alone:
/// then only what rank 0 sends can tell the others. With `composite` each shard goes through
/// layer_norm first, and the fault is in its first step (mean): the DeviceFault names
/// layer_norm, the op the program called, on every rank.
void fault_of_rank_0(const ferry::mpi::World& world, bool everywhere, bool composite) {
  const int n = world.size();
  ferry::MeshSpec faulty = spec_of(ferry::MeshShape{n}, "faulty");
  faulty.devices[0].faults.fail_steps = {composite ? 1u : 0u};
  const ferry::MeshSpec spec =
      everywhere || world.rank() == 0 ? faulty : spec_of(ferry::MeshShape{n}, "faulty");
  const std::string where = std::string(everywhere ? " (every rank's spec)"
                                                   : " (rank 0's spec alone)") +
                            (composite ? ", through layer_norm" : "");
  const auto made = [composite](const ferry::Mesh& mesh) {
    ferry::MeshArray<float> a = shards_on<float>(mesh, ferry::Shape{4, 6}, 31);
    if (!composite) return a;
    std::vector<ferry::DeviceArray<float>> normed;
    for (std::int64_t i = 0; i < mesh.size(); ++i) normed.push_back(ferry::layer_norm(a.shard(i)));
    return ferry::MeshArray<float>::from_shards(mesh, std::move(normed));
  };
  using Collective = std::function<ferry::MeshArray<float>(const ferry::MeshArray<float>&)>;
  const std::vector<std::pair<std::string, Collective>> collectives = {
      {"all_reduce", [](const ferry::MeshArray<float>& a) { return ferry::all_reduce(a); }},
      {"all_gather", [](const ferry::MeshArray<float>& a) { return ferry::all_gather(a, 0); }},
  };
  for (const auto& [name, collective] : collectives) {
    const std::string what = "a modeled fault through " + name + where;
    const ferry::Mesh over = ferry::mpi::mesh_over(world, spec);
    const ferry::Mesh alone = ferry::Mesh::modeled(faulty);
    const auto mine = ferry::mpi::default_members(over.size(), world.rank(), world.size());
    const auto before = memory_of(over, mine);
    {
      const auto got = collective(made(over));
      const auto want = collective(made(alone));
      for (const std::int64_t m : mine) {
        const std::string shard = what + ": shard " + std::to_string(m);
        const FaultSeen w = fault_of(want.shard(m));
        check(w.fault, shard + " in one process: " + w.text);
        const FaultSeen g = fault_of(got.shard(m));
        check(g.fault, shard + ": " + g.text);
        if (!w.fault || !g.fault) continue;
        // The one-process text, with this mesh's name for device 0.
        std::string text = w.text;
        text.replace(text.find(w.device), w.device.size(), over.device(0).name());
        check(w.called == (composite ? "layer_norm" : w.op), shard + ": called " + w.called);
        check(g.op == w.op && g.called == w.called && g.step == w.step && g.cause == w.cause &&
                  g.device == over.device(0).name() && g.text == text,
              shard + ": '" + g.text + "', not '" + text + "'");
      }
    }
    expect_memory_back(what, over, mine, before);
  }
}

void modeled_fault_crosses(const ferry::mpi::World& world) {
  for (const bool everywhere : {true, false}) {
    for (const bool composite : {false, true}) fault_of_rank_0(world, everywhere, composite);
  }
}

/// A modeled fault in device 0's own reduction inside a stepped all-reduce (not in its input):
/// every member joins device 0's reduced part, so every rank's result fails with that step's
/// DeviceFault, as in one process (test_all_reduce_parts), though no rank settles device 0's
/// schedule at the call: its model knows the fault as the reduction is submitted, and rank 0
/// sends it with the part. The reduction's submission index is read from the same program on
/// a mesh without faults (its slice with flops). With `everywhere` false, rank 0's spec alone
/// has the fault.
void reduction_fault_of_rank_0(const ferry::mpi::World& world) {
  const int n = world.size();
  std::uint64_t reduction = 0;
  {
    const ferry::Mesh clean = ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "clean"));
    const auto r = ferry::all_reduce(shards_on<float>(clean, ferry::Shape{4, 6}, 31));
    ferry::wait(r);
    for (const ferry_test::Slice& s : ferry_test::named(ferry_test::slices_of(clean.device(0)),
                                                        "all_reduce")) {
      if (s.flops > 0) reduction = s.id;
    }
    check(reduction != 0, "device 0's reduction is in its trace");
  }
  for (const bool everywhere : {true, false}) {
    ferry::MeshSpec spec = spec_of(ferry::MeshShape{n}, "faulty");
    if (everywhere || world.rank() == 0) spec.devices[0].faults.fail_steps = {reduction};
    const std::string what = std::string("a fault in device 0's reduction") +
                             (everywhere ? " (every rank's spec)" : " (rank 0's spec alone)");
    const ferry::Mesh over = ferry::mpi::mesh_over(world, spec);
    const auto mine = ferry::mpi::default_members(over.size(), world.rank(), world.size());
    const auto before = memory_of(over, mine);
    {
      const auto got = ferry::all_reduce(shards_on<float>(over, ferry::Shape{4, 6}, 31));
      for (const std::int64_t m : mine) {
        const FaultSeen g = fault_of(got.shard(m));
        const std::string cause =
            "injected fault: step " + std::to_string(reduction) + " is in fail_steps";
        check(g.fault && g.op == "all_reduce" && g.step == reduction &&
                  g.device == over.device(0).name() && g.cause == cause,
              what + ": shard " + std::to_string(m) + ": " + g.text);
      }
    }
    expect_memory_back(what, over, mine, before);
  }
}

/// Rank 1 makes the call, but the kernel of its shard is stuck for 3 s (the timeout 2 s): the
/// others' all-gather must fail with PeerTimeout for rank 1's data, saying that rank 1 answers
/// (its waiter and progress thread answer a ping while its kernel runs). Rank 1's own result
/// is whole: the others' shards came at the call.
void rank_is_stuck(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  const ferry::MeshSpec spec = spec_of(ferry::MeshShape{world.size()}, "stuck");
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec);
  const ferry::Mesh alone = ferry::Mesh::modeled(spec);
  const ferry::Shape shape{8};
  std::vector<ferry::DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    shards.push_back(
        ferry::to_device(mesh.device(i), values<float>(shape, 12 + static_cast<std::uint32_t>(i))));
  }
  if (world.rank() == 1) {
    shards[1] = ferry::custom<float>(
        mesh.device(1), "stuck", {shards[1]}, shape,
        [](ferry::KernelArgs<float> args) {
          std::this_thread::sleep_for(3s);
          std::copy(args.inputs[0].begin(), args.inputs[0].end(), args.output.begin());
        },
        ferry::Cost::fixed(1us));
  }
  // The call is made inside the timed function: its receives' deadlines count from the call.
  const auto gather = [&] {
    return ferry::all_gather(ferry::MeshArray<float>::from_shards(mesh, shards), 0);
  };
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  if (world.rank() == 1) {
    const auto want = ferry::all_gather(shards_on<float>(alone, shape, 12), 0);
    compare_local("rank 1 is stuck: its own result", mesh, gather(), want, mine);
    return;
  }
  ferry_test::expect_peer_timeout(
      "rank 1 is stuck", 2s, [&] { (void)gather().shard(mine[0]).to_host(); },
      {"[all_gather] all_gather(dim 0) of float32 (8) over the whole mesh",
       "collective 0 of mesh stuck", "rank 1 sent no data of member 1 within 2000 ms",
       "; rank 1 answers (it runs, but has not sent it)"});
}

/// Last: rank 1 never calls, so its mesh's sequence falls behind the others' for good.
void rank_never_calls(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  const ferry::Mesh mesh =
      ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{world.size()}, "late"));
  const auto a = shards_on<float>(mesh, ferry::Shape{8}, 11);
  if (world.rank() == 1) return;
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  ferry_test::expect_peer_timeout(
      "rank never calls", 2s, [&] { (void)ferry::all_reduce(a).shard(mine[0]).to_host(); },
      {"[all_reduce] all_reduce(sum) of float32 (8) over the whole mesh",
       "collective 0 of mesh late", "rank 1 did not arrive within 2000 ms",
       "; rank 1 answers (it runs, but has not made this call)"});
}

/// mesh_over and mesh_stats are collectives on the world's own communicator, which MPI pairs
/// by order and cannot cancel. Rank 1 calls mesh_stats 3 s late (the timeout 2 s): the others'
/// calls fail with PeerTimeout (and under ASan, MPI completing their abandoned gathers as rank 1
/// joins must write into nothing freed), while rank 1's pairs with them and returns. From then
/// on the ranks' calls are out of step: rank 1's next mesh_over waits alone and times out, the
/// others' fails at once, and so does every later call, on every rank, saying why. The mesh
/// made before still works: its collectives have communicators of their own.
void world_calls_out_of_step(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1 left the case before this one early
  const ferry::MeshSpec spec = spec_of(ferry::MeshShape{world.size()}, "figures");
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec);
  const ferry::MeshSpec after = spec_of(ferry::MeshShape{world.size()}, "after");
  const std::string gather =
      "[mpi::mesh_stats] gathering the devices' figures: not every rank joined within 2000 ms";
  const std::string out_of_step =
      "the ranks' collectives outside meshes (mesh_over, mesh_stats) are out of step since one "
      "failed: ";
  if (world.rank() == 1) {
    std::this_thread::sleep_for(3s);
    const ferry::MeshStats s = ferry::mpi::mesh_stats(world, mesh);
    check(s.devices.size() == static_cast<std::size_t>(world.size()), "rank 1's late mesh_stats");
    ferry_test::expect_peer_timeout(
        "a mesh_over no other rank makes", 2s,
        [&] { (void)ferry::mpi::mesh_over(world, after); },
        {"[mesh_over] creating the mesh's communicators: not every rank joined within 2000 ms"});
  } else {
    ferry_test::expect_peer_timeout("a mesh_stats that rank 1 makes late", 2s,
                                    [&] { (void)ferry::mpi::mesh_stats(world, mesh); }, {gather});
    const auto start = std::chrono::steady_clock::now();
    expect_error<ferry::PeerTimeout>(
        "a mesh_over after it", [&] { (void)ferry::mpi::mesh_over(world, after); },
        {"[mesh_over] " + out_of_step + gather});
    check(std::chrono::steady_clock::now() - start < 2s,
          "a mesh_over after it fails at once, without waiting for the timeout");
  }
  expect_error<ferry::PeerTimeout>("a mesh_stats after them",
                                   [&] { (void)ferry::mpi::mesh_stats(world, mesh); },
                                   {"[mpi::mesh_stats] " + out_of_step});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  const ferry::Mesh alone = ferry::Mesh::modeled(spec);
  compare_local("the mesh made before", mesh,
                ferry::all_reduce(shards_on<float>(mesh, ferry::Shape{8}, 13)),
                ferry::all_reduce(shards_on<float>(alone, ferry::Shape{8}, 13)), mine);
}

/// After the last case: rank 1's program ends well after the others' (longer than the
/// patience of their World's departure), while its progress thread answers their pings. Their
/// World must wait for it and finalize MPI, not take it for a crashed rank: under plain mpiexec a
/// process that leaves without MPI_Finalize fails the job.
void rank_ends_late(ferry::mpi::World& world) {
  world.set_collective_timeout(1s);
  MPI_Barrier(MPI_COMM_WORLD);  // the others' departures begin now
  if (world.rank() == 1) std::this_thread::sleep_for(2500ms);
}

}  // namespace

int main(int argc, char** argv) {
  return ferry_test::run_cases(argc, argv,
                               {
                                   {"collectives_match", collectives_match},
                                   {"copies_between_processes", copies_between_processes},
                                   {"spmd_and_tensor_parallel", spmd_and_tensor_parallel},
                                   {"gradients_through_collectives", gradients_through_collectives},
                                   {"gradients_of_spmd_and_tensor_parallel",
                                    gradients_of_spmd_and_tensor_parallel},
                                   {"mismatched_op", mismatched_op},
                                   {"mismatched_shape", mismatched_shape},
                                   {"messages_in_pieces", messages_in_pieces},
                                   {"one_message_a_process", one_message_a_process},
                                   {"failed_bare_shard", failed_bare_shard},
                                   {"modeled_fault_crosses", modeled_fault_crosses},
                                   {"reduction_fault_of_rank_0", reduction_fault_of_rank_0},
                                   {"rank_is_stuck", rank_is_stuck},
                                   {"rank_never_calls", rank_never_calls},
                                   {"world_calls_out_of_step", world_calls_out_of_step},
                                   {"rank_ends_late", rank_ends_late},
                               });
}
