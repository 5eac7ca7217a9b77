// Meshes over MPI processes whose devices are model-only on every rank (issue 31): run by ctest
// under `mpiexec -n 2` and `-n 4`. Each rank's modeled timeline (stats and trace of the devices
// it owns) must equal the one-process model-only mesh's, for the collective and training
// programs of test_mpi_timeline (mesh_over(world, spec, model_only)) and for model-only devices
// the program gives mesh_over; exports throw NoValues on every rank; the fingerprints still
// catch ranks that disagree (CollectiveMismatch), a modeled fault still reaches the other ranks
// (it travels as the status byte a message is made of here), and a rank that never calls still
// makes the others time out (PeerTimeout). A mesh that mixes model-only and computing devices
// is refused on every rank with InvalidArgument naming the ranks and devices.

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "harness.hpp"
#include "mismatch.hpp"
#include "timeline.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace ferry_test::timeline;
using ferry_test::check;
using ferry_test::expect_error;

/// `shape` of tiny devices, each axis a line, on links of round numbers.
ferry::MeshSpec spec_of(const ferry::MeshShape& shape, std::string name) {
  ferry::MeshSpec m = ferry_test::line_of(shape.size(), ferry::Topology::line, std::move(name));
  m.shape = shape;
  m.topology.assign(shape.rank(), ferry::Topology::line);
  return m;
}

/// A mesh array of `shape` shards of seed + i on every member of `mesh` (imports: on a
/// model-only device, nothing is copied).
ferry::MeshArray<float> shards(const ferry::Mesh& mesh, const ferry::Shape& shape,
                               std::uint32_t seed) {
  std::vector<ferry::DeviceArray<float>> out;
  for (std::int64_t i = 0; i < mesh.size(); ++i)
    out.push_back(
        ferry::to_device(mesh.device(i), values(shape, seed + static_cast<std::uint32_t>(i))));
  return ferry::MeshArray<float>::from_shards(mesh, std::move(out));
}

/// Each rank gives model-only devices of its own (one for the default split of a line; two for
/// its row of an n x 2 mesh, in reverse order): an all_reduce and an all_gather along the last
/// axis, each owned device's timeline equal to the one-process model-only mesh's.
void adopted_model_only(ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  const std::int64_t r = world.rank();
  struct Case {
    ferry::MeshSpec spec;
    std::vector<std::int64_t> members;
  };
  const std::vector<Case> cases{
      {spec_of(ferry::MeshShape{n}, "given line"), {r}},
      {spec_of(ferry::MeshShape{n, 2}, "given rows"), {2 * r + 1, 2 * r}}};
  for (const Case& c : cases) {
    std::vector<ferry::Device> devices;
    for (std::size_t k = 0; k < c.members.size(); ++k)
      devices.push_back(ferry::Device::modeled(ferry::specs::tiny(), ferry::model_only));
    const ferry::Mesh over = ferry::mpi::mesh_over(world, c.spec, c.members, devices);
    const ferry::Mesh alone = ferry::Mesh::modeled(c.spec, ferry::model_only);
    const auto over_before = ferry_test::memory_in_use(over);
    for (std::size_t k = 0; k < c.members.size(); ++k) {
      check(over.device(c.members[k]) == devices[k],
            c.spec.name + ": member " + std::to_string(c.members[k]) + " is not the device given");
    }
    const int last = static_cast<int>(c.spec.shape.rank()) - 1;
    for (const ferry::Mesh* mesh : {&over, &alone}) {
      const auto sum = ferry::all_reduce(shards(*mesh, ferry::Shape{4, 6}, 10));
      const auto gathered = ferry::all_gather(shards(*mesh, ferry::Shape{4, 6}, 20), 1, last);
      for (std::int64_t m : c.members) {
        read(sum.shard(m));
        read(gathered.shard(m));
      }
    }
    books_balanced(c.spec.name, over, over_before);
    same_timelines(world, c.spec.name, over, alone, c.members, true);
  }
}

/// Exports of a model-only mesh over processes: NoValues on every rank, for a global array (whose
/// to_host would gather the shards on every rank) and for a local shard; the mesh still works
/// after them.
void exports_throw_no_values(ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  const ferry::Mesh mesh =
      ferry::mpi::mesh_over(world, spec_of(ferry::MeshShape{n}, "nothing"), ferry::model_only);
  const ferry::Mesh alone =
      ferry::Mesh::modeled(spec_of(ferry::MeshShape{n}, "nothing"), ferry::model_only);
  const auto mine = ferry::mpi::default_members(n, world.rank(), world.size());
  const ferry::HostArray<float> x = values(ferry::Shape{2 * n, 3}, 5);
  const auto a = ferry::distribute(x, mesh, {ferry::Shard{0}});
  const auto b = ferry::distribute(x, alone, {ferry::Shard{0}});
  // In one process, to_host refuses at the first shard, by its own name.
  expect_error<ferry::NoValues>("to_host of a global array, one process",
                                [&] { (void)ferry::to_host(b); },
                                {"[to_host] the array ", " made on " + alone.device(0).name(),
                                 " has no values: the device is model-only"});
  // Over processes, so does every rank's, at the first shard, whoever owns it.
  expect_error<ferry::NoValues>(
      "to_host of a global array", [&] { (void)ferry::to_host(a); },
      {"[to_host] the array ", " made on " + mesh.device(0).name(),
       " has no values to send to cpu: mesh nothing is model-only on every "
       "process"});
  expect_error<ferry::NoValues>("to_host of a shard", [&] { (void)a.shard(mine[0]).to_host(); },
                                {"[to_host] the array ", " made on " + mesh.device(mine[0]).name(),
                                 " has no values: the device is model-only"});
  // The refusal came before any message: the next collective pairs up as usual.
  const auto sum = ferry::all_reduce(a);
  ferry::wait(sum.shard(mine[0]));
  check(sum.shard(mine[0]).device().is_model_only(), "the all_reduce's shard is not model-only");
}

/// Ranks that call different collectives on a model-only mesh: CollectiveMismatch on every rank,
/// naming both calls, as on a computing mesh.
void mismatched_op(ferry::mpi::World& world) {
  const ferry::Mesh mesh = ferry::mpi::mesh_over(
      world, spec_of(ferry::MeshShape{world.size()}, "odd"), ferry::model_only);
  const auto a = shards(mesh, ferry::Shape{4, 4}, 9);
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  const auto out = world.rank() == 1 ? ferry::all_gather(a, 1) : ferry::all_reduce(a);
  const std::vector<std::string> parts = ferry_test::mismatch_parts(world.rank());
  expect_error<ferry::CollectiveMismatch>(
      "mismatched op", [&] { ferry::wait(out.shard(mine[0])); }, parts);
}

/// A modeled fault injected on rank 0's device alone (its spec's fault plan; the others model
/// device 0 without it): every rank's result of an all_reduce fails with that DeviceFault, as in
/// the one-process model-only mesh, although no values travel (the failure is the message).
void fault_crosses(ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  ferry::MeshSpec faulty = spec_of(ferry::MeshShape{n}, "faulty");
  faulty.devices[0].faults.fail_steps = {0};
  const ferry::MeshSpec spec = world.rank() == 0 ? faulty : spec_of(ferry::MeshShape{n}, "faulty");
  const ferry::Mesh over = ferry::mpi::mesh_over(world, spec, ferry::model_only);
  const ferry::Mesh alone = ferry::Mesh::modeled(faulty, ferry::model_only);
  const auto mine = ferry::mpi::default_members(n, world.rank(), world.size());
  const auto got = ferry::all_reduce(shards(over, ferry::Shape{4, 6}, 31));
  const auto want = ferry::all_reduce(shards(alone, ferry::Shape{4, 6}, 31));
  for (std::int64_t m : mine) {
    const std::string what = "a modeled fault of rank 0, shard " + std::to_string(m);
    std::string w, g;
    try {
      ferry::wait(want.shard(m));
      w = "no error";
    } catch (const ferry::DeviceFault& e) {
      w = e.what();
      w.replace(w.find(e.device()), e.device().size(), over.device(0).name());
    }
    try {
      ferry::wait(got.shard(m));
      g = "no error";
    } catch (const ferry::DeviceFault& e) {
      g = e.what();
    } catch (const std::exception& e) {
      g = std::string("not a DeviceFault: ") + e.what();
    }
    check(w != "no error" && g == w, what + ": '" + g + "', not '" + w + "'");
  }
}

/// A mesh whose owners' devices are model-only on some ranks and compute on others, or on one
/// rank both: InvalidArgument on every rank, naming the ranks and devices of each kind.
void mixed_refused(ferry::mpi::World& world) {
  const std::int64_t n = world.size();
  const int r = world.rank();
  std::string computing;
  for (int p = 1; p < n; ++p)
    computing +=
        (p == 1 ? "rank " : ", rank ") + std::to_string(p) + " (device " + std::to_string(p) + ")";
  const ferry::MeshSpec line = spec_of(ferry::MeshShape{n}, "mixed");
  expect_error<ferry::InvalidArgument>(
      "rank 0 model-only, the others computing",
      [&] {
        (void)(r == 0 ? ferry::mpi::mesh_over(world, line, ferry::model_only)
                      : ferry::mpi::mesh_over(world, line));
      },
      {"[mesh_over] mesh mixed mixes model-only and computing devices: rank 0 (device 0) "
       "model-only, " +
       computing + " computing; a mesh over processes is model-only on every rank or on none"});
  // Each rank gives a model-only device and a computing one for its row of an n x 2 mesh.
  const ferry::MeshSpec rows = spec_of(ferry::MeshShape{n, 2}, "halves");
  std::string model_only_list, computing_list;
  for (int p = 0; p < n; ++p) {
    model_only_list += (p == 0 ? "rank " : ", rank ") + std::to_string(p) + " (device " +
                       std::to_string(2 * p) + ")";
    computing_list += (p == 0 ? "rank " : ", rank ") + std::to_string(p) + " (device " +
                      std::to_string(2 * p + 1) + ")";
  }
  const std::vector<ferry::Device> given{
      ferry::Device::modeled(ferry::specs::tiny(), ferry::model_only),
      ferry::Device::modeled(ferry::specs::tiny())};
  expect_error<ferry::InvalidArgument>(
      "each rank mixes",
      [&] {
        (void)ferry::mpi::mesh_over(world, rows, {2 * r, 2 * r + 1}, given);
      },
      {"[mesh_over] mesh halves mixes model-only and computing devices: " + model_only_list +
       " model-only, " + computing_list +
       " computing; a mesh over processes is model-only on every rank or on none"});
  // Refused on every rank alike: the devices are free, and the world takes the next mesh.
  const ferry::Mesh good = ferry::mpi::mesh_over(
      world, rows, {2 * r, 2 * r + 1},
      {ferry::Device::modeled(ferry::specs::tiny(), ferry::model_only), given[0]});
  check(good.device(2 * r + 1) == given[0],
        "the model-only device refused before joins a model-only mesh");
}

/// Last: rank 1 never calls, so the others' collective times out on a model-only mesh too.
void rank_never_calls(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  const ferry::Mesh mesh = ferry::mpi::mesh_over(
      world, spec_of(ferry::MeshShape{world.size()}, "late"), ferry::model_only);
  const auto a = shards(mesh, ferry::Shape{8}, 11);
  if (world.rank() == 1) return;
  const auto mine = ferry::mpi::default_members(mesh.size(), world.rank(), world.size());
  ferry_test::expect_peer_timeout(
      "rank never calls", 2s, [&] { ferry::wait(ferry::all_reduce(a).shard(mine[0])); },
      {"[all_reduce] all_reduce(sum) of float32 (8) over the whole mesh",
       "collective 0 of mesh late", "rank 1 did not arrive within 2000 ms"});
}

}  // namespace

int main(int argc, char** argv) {
  using ferry::mpi::World;
  return ferry_test::run_cases(
      argc, argv,
      {
          {"collectives timeline, model-only",
           [](World& w) { collectives_timeline(w, Reads::mine, false, true); }},
          {"collectives timeline every read, model-only",
           [](World& w) { collectives_timeline(w, Reads::every, false, true); }},
          {"training timeline, model-only",
           [](World& w) { training_timeline(w, Reads::mine, true); }},
          {"adopted model-only devices", adopted_model_only},
          {"exports throw NoValues", exports_throw_no_values},
          {"mismatched op, model-only", mismatched_op},
          {"a modeled fault crosses, model-only", fault_crosses},
          {"model-only and computing mixed", mixed_refused},
          {"rank never calls, model-only", rank_never_calls},
      });
}
