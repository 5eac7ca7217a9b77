// A mesh over MPI processes whose local members are devices the program made itself
// (ferry::mpi::mesh_over(world, spec, [members,] devices)): run by ctest under `mpiexec -n 2`
// and `-n 4`. Arrays made on those devices before the mesh exists take part in its
// collectives, whose results are compared bit for bit with the one-process mesh of the same
// spec; the devices' memory comes back once the arrays are gone. Then every refusal, each
// rank checking the exact error type and text (every rank makes the same bad call, which is
// refused before any MPI call, so no rank waits for another), and ranks whose mesh specs
// differ: in a device's field, or in the mesh's own (name, shape, topology, axis names, link).
// Last, Worlds that adopt the MPI another initialized, one after another.

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "../support/memory.hpp"
#include "harness.hpp"
#include "rounding.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

/// `shape` of devices `device` (each axis a line), on links of round numbers.
ferry::MeshSpec spec_of(ferry::MeshShape shape, std::string name,
                        const ferry::DeviceSpec& device = ferry::specs::tiny()) {
  ferry::MeshSpec m;
  m.name = std::move(name);
  m.shape = shape;
  m.devices.assign(static_cast<std::size_t>(shape.size()), device);
  for (std::size_t a = 0; a < shape.rank(); ++a) m.topology.push_back(ferry::Topology::line);
  m.link.bytes_per_second = 1e9;
  m.link.hop_latency = std::chrono::nanoseconds(100);
  return m;
}

/// Shard i of member i: `given[i]` where this rank gave an array for it, else the values of
/// seed + i on the mesh's device (a stand-in's shard is modeled only).
ferry::MeshArray<float> shards(
    const ferry::Mesh& mesh, const ferry::Shape& shape, std::uint32_t seed,
    const std::vector<std::pair<std::int64_t, ferry::DeviceArray<float>>>& given) {
  std::vector<ferry::DeviceArray<float>> out;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    bool found = false;
    for (const auto& g : given) {
      if (g.first != i) continue;
      out.push_back(g.second);
      found = true;
    }
    if (!found) {
      out.push_back(ferry::to_device(mesh.device(i),
                                     values<float>(shape, seed + static_cast<std::uint32_t>(i))));
    }
  }
  return ferry::MeshArray<float>::from_shards(mesh, std::move(out));
}

ferry_test::MemoryInUse memory_of(const std::vector<ferry::Device>& devices) {
  ferry_test::MemoryInUse out;
  for (const ferry::Device& d : devices) out.push_back(ferry_test::memory_in_use(d));
  return out;
}

/// The program's devices `devices` are back at `before` (waiting up to 10 s: a send to another
/// rank may hold its shard until that rank has the bytes), their schedules no shorter than
/// their lower bounds.
void expect_memory_back(const std::string& what, const std::vector<ferry::Device>& devices,
                        const ferry_test::MemoryInUse& before) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (memory_of(devices) != before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  const auto after = memory_of(devices);
  for (std::size_t k = 0; k < devices.size(); ++k) {
    check(after[k] == before[k], what + ": " + devices[k].name() + " holds " +
                                     std::to_string(after[k].first) + " DRAM bytes, " +
                                     std::to_string(before[k].first) + " before");
    const ferry::DeviceStats s = devices[k].stats();
    check(s.lower_bound <= s.makespan,
          what + ": " + devices[k].name() + "'s lower bound passes its makespan");
  }
}

/// Runs an all_reduce over the whole mesh and an all_gather along the last axis on the mesh
/// over processes whose members `members` are the program's `devices`, each shard of those
/// made on its device before the mesh exists, and on the one-process mesh of `spec`, and
/// compares this rank's shards bit for bit.
void adopted_like_one_process(const ferry::mpi::World& world, const ferry::MeshSpec& spec,
                              const std::vector<std::int64_t>& members,
                              const std::vector<ferry::Device>& devices, bool default_split,
                              const std::string& what) {
  const ferry::Shape shape{4, 6};
  const ferry_test::MemoryInUse before = memory_of(devices);
  {
    std::vector<std::pair<std::int64_t, ferry::DeviceArray<float>>> early;
    for (std::size_t k = 0; k < members.size(); ++k) {
      early.emplace_back(
          members[k],
          ferry::to_device(devices[k],
                           values<float>(shape, 10 + static_cast<std::uint32_t>(members[k]))));
    }
    const ferry::Mesh over = default_split ? ferry::mpi::mesh_over(world, spec, devices)
                                           : ferry::mpi::mesh_over(world, spec, members, devices);
    const ferry::Mesh alone = ferry::Mesh::modeled(spec);
    for (std::size_t k = 0; k < members.size(); ++k) {
      check(over.device(members[k]) == devices[k],
            what + ": member " + std::to_string(members[k]) + " is not the device given");
    }
    const int last = static_cast<int>(spec.shape.rank()) - 1;
    const auto sum_over = ferry::all_reduce(shards(over, shape, 10, early));
    const auto sum_alone = ferry::all_reduce(shards(alone, shape, 10, {}));
    const auto gather_over = ferry::all_gather(shards(over, shape, 10, early), 1, last);
    const auto gather_alone = ferry::all_gather(shards(alone, shape, 10, {}), 1, last);
    for (std::size_t k = 0; k < members.size(); ++k) {
      const std::int64_t m = members[k];
      const std::string member = " of member " + std::to_string(m);
      check(sum_over.shard(m).device() == devices[k],
            what + ": the all_reduce" + member + " is not on the device given");
      check(same_bits(sum_over.shard(m).to_host(), sum_alone.shard(m).to_host()),
            what + ": the all_reduce" + member + " differs from one process");
      check(same_bits(gather_over.shard(m).to_host(), gather_alone.shard(m).to_host()),
            what + ": the all_gather" + member + " differs from one process");
      check(same_bits(early[k].second.to_host(),
                      values<float>(shape, 10 + static_cast<std::uint32_t>(m))),
            what + ": the array made before the mesh" + member + " changed");
    }
  }
  expect_memory_back(what, devices, before);
}

/// Each rank gives one new modeled device for the member of the default split.
void adopted_default_split(ferry::mpi::World& world) {
  const ferry::MeshSpec line = spec_of(ferry::MeshShape{world.size()}, "given");
  const std::vector<ferry::Device> devices{ferry::Device::modeled(ferry::specs::tiny())};
  adopted_like_one_process(world, line, {world.rank()}, devices, true, "default split");
}

/// Each rank owns a row of an n x 2 mesh and gives its members in reverse order.
void adopted_explicit_members(ferry::mpi::World& world) {
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{world.size(), 2}, "rows");
  const std::int64_t r = world.rank();
  const std::vector<ferry::Device> devices{ferry::Device::modeled(ferry::specs::tiny()),
                                           ferry::Device::modeled(ferry::specs::tiny())};
  adopted_like_one_process(world, grid, {2 * r + 1, 2 * r}, devices, false, "explicit members");
}

/// Each rank gives the host CPU itself, Device::cpu(), for its member of a mesh of host CPUs.
void adopted_cpu(ferry::mpi::World& world) {
  const ferry::MeshSpec line =
      spec_of(ferry::MeshShape{world.size()}, "hosts", ferry::specs::host_cpu());
  adopted_like_one_process(world, line, {world.rank()}, {ferry::Device::cpu()}, true,
                           "Device::cpu()");
  // The host is now a member of the mesh: a shard another rank owns comes to it by to(), over
  // the mesh's links, where on a mesh without it to(Device::cpu()) throws NoValues. Every rank
  // makes every copy (the owner sends, the receiver's host gets it, the rest model it); member
  // r's copy comes from member r + 1, so each rank both sends and receives.
  const int n = world.size();
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, line, {ferry::Device::cpu()});
  const ferry_test::MemoryInUse before = memory_of({ferry::Device::cpu()});
  {
    std::vector<ferry::DeviceArray<float>> copies;
    const auto values_of = [](int r) {
      return values<float>(ferry::Shape{3, 5}, static_cast<std::uint32_t>(60 + r));
    };
    for (int r = 0; r < n; ++r) {
      const auto from = ferry::to_device(mesh.device((r + 1) % n), values_of(r));
      const ferry::Device to = r == world.rank() ? ferry::Device::cpu() : mesh.device(r);
      copies.push_back(ferry::exp(from).to(to));
    }
    const int r = world.rank();
    const std::string what =
        "to(Device::cpu()) of member " + std::to_string((r + 1) % n) + "'s shard";
    const ferry::DeviceArray<float>& mine = copies[static_cast<std::size_t>(r)];
    check(mine.device() == ferry::Device::cpu(), what + ": not on cpu");
    check(same_bits(mine.to_host(),
                    ferry::exp(ferry::to_device(ferry::Device::cpu(), values_of(r))).to_host()),
          what + " differs from exp of its values");
  }
  expect_memory_back("to(Device::cpu()) between processes", {ferry::Device::cpu()}, before);
}

/// Every refusal, with its exact type and text, on every rank; then a valid call still works.
void refusals(ferry::mpi::World& world) {
  const int n = world.size();
  const std::string rank = std::to_string(world.rank());
  const std::string r0 = std::to_string(2 * world.rank());
  const std::string r1 = std::to_string(2 * world.rank() + 1);
  const ferry::MeshSpec grid = spec_of(ferry::MeshShape{n, 2}, "bad");
  const std::vector<std::int64_t> members{2 * world.rank(), 2 * world.rank() + 1};
  const ferry::Device a = ferry::Device::modeled(ferry::specs::tiny());
  const ferry::Device b = ferry::Device::modeled(ferry::specs::tiny());
  const auto refused = [&](const std::string& what, const std::vector<std::int64_t>& ms,
                           const std::vector<ferry::Device>& ds, const std::string& text) {
    expect_error<ferry::InvalidArgument>(
        what, [&] { (void)ferry::mpi::mesh_over(world, grid, ms, ds); }, {text});
  };
  refused("too few devices", members, {a},
          "[mesh_over] rank " + rank + " gives 1 devices for the 2 members it owns of mesh bad");
  expect_error<ferry::InvalidArgument>(
      "default split, too many devices",
      [&] {
        (void)ferry::mpi::mesh_over(world, grid, {a, b, a});
      },
      {"[mesh_over] rank " + rank + " gives 3 devices for the 2 members it owns of mesh bad"});
  refused("member out of range", {2 * n, members[1]}, {a, b},
          "[mesh_over] member " + std::to_string(2 * n) + " is outside mesh bad of " +
              std::to_string(2 * n) + " devices");
  refused("member twice", {members[0], members[0]}, {a, b},
          "[mesh_over] member " + r0 + " of mesh bad is given twice");
  refused("device twice", members, {a, a},
          "[mesh_over] device " + a.name() + " is given twice, for members " + r0 + " and " + r1 +
              " of mesh bad");
  {
    const ferry::Mesh other = ferry::Mesh::modeled(spec_of(ferry::MeshShape{2}, "other"));
    refused("in another mesh", members, {other.device(1), b},
            "[mesh_over] device " + other.device(1).name() + " for member " + r0 +
                " of mesh bad is already a member of another mesh");
  }
  ferry::DeviceSpec bigger = ferry::specs::tiny();
  bigger.dram_bytes *= 2;
  const ferry::Device big = ferry::Device::modeled(bigger);
  refused("another spec", members, {a, big},
          "[mesh_over] device " + big.name() + " for member " + r1 +
              " of mesh bad has dram_bytes 2097152 where the mesh spec has 1048576: every rank "
              "models member " + r1 + " from the mesh spec");
  ferry::DeviceSpec renamed = ferry::specs::tiny();
  renamed.name = "tinier";
  const ferry::Device other_name = ferry::Device::modeled(renamed);
  refused("another spec name", members, {other_name, b},
          "[mesh_over] device " + other_name.name() + " for member " + r0 +
              " of mesh bad has name 'tinier' where the mesh spec has 'tiny': every rank models "
              "member " + r0 + " from the mesh spec");
  ferry::DeviceSpec slower = ferry::specs::tiny();
  slower.kernel_rates.matmul.compute_efficiency = 0.5;
  const ferry::Device slow = ferry::Device::modeled(slower);
  refused("another spec rate", members, {slow, b},
          "[mesh_over] device " + slow.name() + " for member " + r0 +
              " of mesh bad has kernel_rates.matmul.compute_efficiency 0x1p-1 where the mesh spec "
              "has 0x1p+0: every rank models member " + r0 + " from the mesh spec");
  // An impossible spec, refused by the call the program made (not Mesh::modeled, which
  // mesh_over does not call), on every rank, in each of mesh_over's forms.
  ferry::MeshSpec slow_link = grid;
  slow_link.link.bytes_per_second = 0;
  const std::string no_rate = "[mesh_over] mesh spec 'bad': link.bytes_per_second must be "
                              "positive, got 0";
  expect_error<ferry::InvalidArgument>(
      "a link without a rate, adopted devices",
      [&] { (void)ferry::mpi::mesh_over(world, slow_link, members, {a, b}); }, {no_rate});
  expect_error<ferry::InvalidArgument>(
      "a link without a rate, default split",
      [&] { (void)ferry::mpi::mesh_over(world, slow_link); }, {no_rate});
  expect_error<ferry::InvalidArgument>(
      "a link without a rate, model-only",
      [&] { (void)ferry::mpi::mesh_over(world, slow_link, ferry::model_only); }, {no_rate});
  // Nothing above reached MPI: the devices refused are still free for a mesh now.
  const ferry::Mesh good = ferry::mpi::mesh_over(world, grid, members, {a, b});
  check(good.device(members[0]) == a && good.device(members[1]) == b,
        "the valid call after the refusals");
  // A device of a mesh that is gone is free again.
  const ferry::Device freed = [] {
    const ferry::Mesh gone = ferry::Mesh::modeled(spec_of(ferry::MeshShape{2}, "gone"));
    return gone.device(0);
  }();
  const ferry::Mesh again =
      ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "again"), {freed});
  check(again.device(world.rank()) == freed, "a device of a mesh that is gone joins another");
  // The fault plan is the owner's alone: a device whose plan differs from its entry's joins.
  ferry::DeviceSpec seeded = ferry::specs::tiny();
  seeded.faults.seed = 7;
  const ferry::Device own_faults = ferry::Device::modeled(seeded);
  const ferry::Mesh faulty =
      ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "own faults"), {own_faults});
  check(faulty.device(world.rank()) == own_faults,
        "a device whose fault plan differs from its entry's joins");
}

/// `v` as the errors print a double: hexadecimal, to the last bit.
std::string hex(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", v);
  return text;
}

/// Ranks whose mesh specs describe a device otherwise: CollectiveMismatch on every rank, naming
/// the device and the field with this rank's value, since each rank models every device from
/// its own spec. A field of a nested struct is named by its path.
void device_specs_differ(ferry::mpi::World& world) {
  const int other = world.rank() == 1 ? 0 : 1;
  const std::string me = std::to_string(world.rank());
  const std::string head = "[mesh_over] rank " + std::to_string(other) + " describes device ";
  {
    ferry::MeshSpec line = spec_of(ferry::MeshShape{world.size()}, "differ");
    if (world.rank() == 1) line.devices[0].l1_bytes_per_second *= 2;
    expect_error<ferry::CollectiveMismatch>(
        "device specs differ", [&] { (void)ferry::mpi::mesh_over(world, line); },
        {head + "0 of mesh differ otherwise than rank " + me +
         " (tiny): l1_bytes_per_second (rank " + me + "'s: " +
         hex(line.devices[0].l1_bytes_per_second) + "): the ranks would model different devices"});
  }
  {
    ferry::MeshSpec line = spec_of(ferry::MeshShape{world.size()}, "nested");
    if (world.rank() == 1)
      line.devices[1].kernel_rates.layout.tile_overhead = std::chrono::nanoseconds(7);
    expect_error<ferry::CollectiveMismatch>(
        "a nested device field differs", [&] { (void)ferry::mpi::mesh_over(world, line); },
        {head + "1 of mesh nested otherwise than rank " + me +
         " (tiny): kernel_rates.layout.tile_overhead (rank " + me + "'s: " +
         (world.rank() == 1 ? "7" : "0") + " ns): the ranks would model different devices"});
  }
}

/// Ranks whose mesh specs differ outside the devices (name, shape, topology, axis names, a
/// link field): CollectiveMismatch on every rank naming the rank, the fields and this rank's
/// values; then the ranks agree again and make a mesh.
void mesh_specs_differ(ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  const bool odd = world.rank() == 1;
  const int other = odd ? 0 : 1;
  const std::string me = std::to_string(world.rank());
  const auto differs = [&](const std::string& what, const ferry::MeshSpec& spec,
                           const std::string& fields) {
    expect_error<ferry::CollectiveMismatch>(
        what, [&] { (void)ferry::mpi::mesh_over(world, spec); },
        {"[mesh_over] rank " + std::to_string(other) + " describes mesh " + spec.name +
         " otherwise than rank " + me + ": " + fields +
         ": the ranks would model different meshes"});
  };
  const auto mine = [&](const std::string& text) { return " (rank " + me + "'s: " + text + ")"; };
  differs("name", spec_of(ferry::MeshShape{n}, odd ? "renamed" : "named"),
          "name" + mine(odd ? "'renamed'" : "'named'"));
  const ferry::MeshShape flat{2 * n}, rows{n, 2};
  differs("shape", spec_of(odd ? flat : rows, "shaped"),
          "shape" + mine((odd ? flat : rows).to_string()) + ", topology" +
              mine(odd ? "[line]" : "[line, line]"));
  ferry::MeshSpec joined = spec_of(ferry::MeshShape{n}, "joined");
  if (odd) joined.topology = {ferry::Topology::fully_connected};
  differs("topology", joined, "topology" + mine(odd ? "[fully_connected]" : "[line]"));
  ferry::MeshSpec axes = spec_of(ferry::MeshShape{n}, "axes");
  axes.axis_names = {odd ? "x" : "dp"};
  differs("axis names", axes, "axis_names" + mine(odd ? "['x']" : "['dp']"));
  ferry::MeshSpec slow = spec_of(ferry::MeshShape{n}, "links");
  if (odd) {
    slow.link.hop_latency = std::chrono::nanoseconds(200);
    slow.link.composite_all_reduce = true;
  }
  differs("link fields", slow,
          "link.hop_latency" + mine(odd ? "200 ns" : "100 ns") + ", link.composite_all_reduce" +
              mine(odd ? "true" : "false"));
  // Every rank failed at the same exchange: the next mesh pairs up.
  const ferry::MeshSpec agreed = spec_of(ferry::MeshShape{n}, "agreed");
  const ferry::Mesh good = ferry::mpi::mesh_over(world, agreed);
  const ferry::Mesh alone = ferry::Mesh::modeled(agreed);
  const auto sum = ferry::all_reduce(shards(good, ferry::Shape{3}, 1, {}));
  const auto want = ferry::all_reduce(shards(alone, ferry::Shape{3}, 1, {}));
  check(same_bits(sum.shard(world.rank()).to_host(), want.shard(world.rank()).to_host()),
        "the all_reduce on the mesh made after the mismatches differs from one process");
}

/// Worlds that adopt MPI (the harness's World initialized it), one after another, each with a
/// mesh and an all_reduce, then the program's own MPI_Allreduce on MPI_COMM_WORLD. Each adopted
/// World waits for its peers' leaving notes before it frees its communicator: one that did not
/// left a note in flight that reached the next World's communicator, which took the freed one's
/// number, and the program's MPI_Allreduce then hung in some runs of 4 ranks (the watchdog).
void adopted_worlds_in_turn(ferry::mpi::World& world) {
  const int n = world.size();
  for (int round = 0; round < 3; ++round) {
    ferry::mpi::World adopted;
    check(!adopted.owns_mpi(), "a World made while MPI is initialized owns it");
    check(adopted.rank() == world.rank() && adopted.size() == n,
          "an adopted World's rank or size differs from the harness's");
    const ferry::Mesh mesh =
        ferry::mpi::mesh_over(adopted, spec_of(ferry::MeshShape{n}, "adopted"));
    std::vector<ferry::DeviceArray<float>> parts;
    for (std::int64_t i = 0; i < mesh.size(); ++i)
      parts.push_back(ferry::full<float>(mesh.device(i), ferry::Shape{64}, float(i + 1)));
    const auto sum = ferry::all_reduce(ferry::MeshArray<float>::from_shards(mesh, parts));
    const ferry::HostArray<float> mine = sum.shard(world.rank()).to_host();
    check(mine.data()[0] == float(n * (n + 1) / 2) && mine.data()[63] == float(n * (n + 1) / 2),
          "round " + std::to_string(round) + ": the all_reduce over an adopted World");
  }
  int one = 1;
  int total = 0;
  check(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS &&
            total == n,
        "the program's MPI_Allreduce after the adopted Worlds");
}

}  // namespace

int main(int argc, char** argv) {
  return ferry_test::run_cases(argc, argv,
                               {{"adopted devices, the default split", adopted_default_split},
                                {"adopted devices, explicit members", adopted_explicit_members},
                                {"Device::cpu() adopted", adopted_cpu},
                                {"refusals", refusals},
                                {"device specs that differ across ranks", device_specs_differ},
                                {"mesh specs that differ across ranks", mesh_specs_differ},
                                {"Worlds that adopt MPI, in turn", adopted_worlds_in_turn}});
}
