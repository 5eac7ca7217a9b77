// Data-parallel training over MPI processes (nn::DataParallel on ferry::mpi::mesh_over): run by
// ctest under `mpiexec -n 2` and `-n 4`, one device a rank. Every rank runs the same program: Adam
// steps of an MLP on a mesh over processes and, in this same process, on the one-process mesh of
// the same spec; each step's losses and, at the end, every parameter of the replicas this rank owns
// must be bit-identical to the one-process mesh's, and the global loss (to_host of the replicas'
// losses, gathered over processes) too, and every device's modeled memory (the stand-ins' too) is
// given back afterwards. Then a rank returns early, in the middle of training: every other rank's
// next step must fail with PeerTimeout, no hang. The harness (its main, its watchdog, its
// checks) is harness.hpp's.

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

#include "../support/meshes.hpp"
#include "harness.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace nn = ferry::nn;

using ferry_test::check;

/// `n` tiny devices in a line (a ring from 3 on), one a rank.
ferry::MeshSpec spec_of(std::int64_t n, std::string name) {
  return ferry_test::line_of(n, n >= 3 ? ferry::Topology::ring : ferry::Topology::line,
                             std::move(name));
}

constexpr std::int64_t kIn = 2, kHidden = 16, kClasses = 3, kRowsPerReplica = 8;

nn::Sequential mlp(const ferry::Device& d) {
  return nn::Sequential(nn::Linear(kIn, kHidden, d, {.seed = 3}), nn::Tanh(),
                        nn::Linear(kHidden, kHidden, d, {.seed = 4}), nn::Tanh(),
                        nn::Linear(kHidden, kClasses, d, {.seed = 5}));
}

/// Points and their classes (as floats: DataParallel hands each replica its rows of a
/// MeshArray<float>), `rows` of them, the same on every rank.
std::pair<ferry::HostArray<float>, ferry::HostArray<float>> batch(std::int64_t rows, int salt) {
  std::vector<float> x;
  std::vector<float> y;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double angle = 0.7 * static_cast<double>(i * 13 + salt);
    const double radius = 0.3 + 0.1 * static_cast<double>(i % 7);
    x.push_back(static_cast<float>(radius * std::cos(angle)));
    x.push_back(static_cast<float>(radius * std::sin(angle)));
    y.push_back(static_cast<float>(
        static_cast<std::int64_t>(std::fmod(angle, 6.283185307179586) / 2.0943951023931953) %
        kClasses));
  }
  return {ferry::HostArray<float>(ferry::Shape{rows, kIn}, std::move(x)),
          ferry::HostArray<float>(ferry::Shape{rows}, std::move(y))};
}

ferry::DeviceArray<float> loss_of(const nn::Module& m, const ferry::DeviceArray<float>& x,
                                  const ferry::DeviceArray<float>& y) {
  return nn::cross_entropy(m(x), y.astype<std::int64_t>());
}

bool same_bits(const ferry::HostArray<float>& a, const ferry::HostArray<float>& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data().data(), b.data().data(), a.data().size() * sizeof(float)) == 0;
}

/// `v` with every digit a float needs.
std::string exact(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
  return text;
}

/// What a rank sees of a run: each step's loss of every replica it owns and the global loss,
/// then its replicas' parameters.
struct Run {
  std::vector<ferry::HostArray<float>> losses;  // [step * owned + k]
  std::vector<float> global_losses;             // each step's mean over the replicas
  std::vector<ferry::HostArray<float>> params;  // [owned replica k * parameters + p]
};

/// `steps` Adam steps of the MLP data-parallel on `mesh`, read on the replicas `mine`.
Run train(const ferry::Mesh& mesh, const std::vector<std::int64_t>& mine, int steps) {
  nn::DataParallel dp(mlp(mesh.device(0)), mesh, -1, {.bucket_bytes = 256});  // a few buckets
  ferry::optim::Adam adam({.lr = 0.05});
  auto step = nn::value_and_grad(dp, loss_of);
  const std::int64_t rows = kRowsPerReplica * mesh.size();
  Run run;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(rows, s);
    const auto xs = ferry::distribute(x, mesh, {ferry::Shard{0}});
    const auto ys = ferry::distribute(y, mesh, {ferry::Shard{0}});
    auto [losses, grads] = step(xs, ys);
    adam.step(dp.parameters(), grads);
    for (std::int64_t r : mine) run.losses.push_back(losses.shard(r).to_host());
    // The replicas' batches are equal in size: the global loss is the mean of their means.
    const auto global = ferry::MeshArray<float>::from_shards(
        mesh, losses.shards(), ferry::Shape{}, {ferry::Partial{ferry::ReduceOp::mean}});
    run.global_losses.push_back(ferry::to_host(global).data()[0]);
  }
  for (std::int64_t r : mine) {
    for (const auto& named : dp.named_parameters(r)) run.params.push_back(named.second.to_host());
  }
  return run;
}

/// The model's bookkeeping once a program's arrays are gone: every device's memory (the
/// stand-ins' too) back to `before`, and no schedule shorter than its lower bound, the mesh's
/// and each device's.
void books_balanced(const ferry::Mesh& mesh, const ferry_test::MemoryInUse& before) {
  check(ferry_test::memory_in_use(mesh) == before, "the devices' modeled memory is not given back");
  const ferry::MeshStats s = mesh.stats();
  check(s.lower_bound <= s.makespan, "the mesh's makespan is under its lower bound");
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    check(s.devices[i].lower_bound <= s.devices[i].makespan,
          "device " + std::to_string(i) + "'s makespan " +
              std::to_string(s.devices[i].makespan.count()) + " ns is under its lower bound " +
              std::to_string(s.devices[i].lower_bound.count()) + " ns on mesh " + mesh.spec().name);
  }
}

void training_matches(const ferry::mpi::World& world) {
  const ferry::MeshSpec spec = spec_of(world.size(), "dp");
  const auto mine = ferry::mpi::default_members(world.size(), world.rank(), world.size());
  constexpr int kSteps = 6;
  const ferry::Mesh over_mesh = ferry::mpi::mesh_over(world, spec);
  const auto before = ferry_test::memory_in_use(over_mesh);
  const Run over = train(over_mesh, mine, kSteps);
  books_balanced(over_mesh, before);
  const ferry::Mesh alone_mesh = ferry::Mesh::modeled(spec);
  const auto alone_before = ferry_test::memory_in_use(alone_mesh);
  const Run alone = train(alone_mesh, mine, kSteps);
  books_balanced(alone_mesh, alone_before);
  check(over.losses.size() == alone.losses.size() && over.params.size() == alone.params.size() &&
            !over.params.empty(),
        "the runs read as many arrays");
  for (std::size_t i = 0; i < over.losses.size() && i < alone.losses.size(); ++i) {
    check(same_bits(over.losses[i], alone.losses[i]),
          "loss " + std::to_string(i) + " differs from one process");
  }
  for (std::size_t i = 0; i < over.global_losses.size(); ++i) {
    check(std::memcmp(&over.global_losses[i], &alone.global_losses[i], sizeof(float)) == 0,
          "global loss of step " + std::to_string(i) + ": " + exact(over.global_losses[i]) +
              " over processes, " + exact(alone.global_losses[i]) + " in one");
  }
  for (std::size_t i = 0; i < over.params.size() && i < alone.params.size(); ++i) {
    check(same_bits(over.params[i], alone.params[i]),
          "parameter " + std::to_string(i) + " differs from one process");
  }
  // The steps trained something (so the comparison says something).
  check(over.global_losses.back() < over.global_losses.front(), "the loss falls");
  if (world.rank() == 0) {
    std::printf("global loss over processes:");
    for (float l : over.global_losses) std::printf(" %.6f", static_cast<double>(l));
    std::printf("\n");
  }
}

/// Last: rank 1 stops after two steps, so its mesh's sequence falls behind the others' for good.
void rank_returns_early(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(world.size(), "early"));
  const auto mine = ferry::mpi::default_members(world.size(), world.rank(), world.size());
  nn::DataParallel dp(mlp(mesh.device(0)), mesh, -1);
  ferry::optim::Adam adam({.lr = 0.05});
  auto step = nn::value_and_grad(dp, loss_of);
  auto [x, y] = batch(kRowsPerReplica * mesh.size(), 0);
  const auto xs = ferry::distribute(x, mesh, {ferry::Shard{0}});
  const auto ys = ferry::distribute(y, mesh, {ferry::Shard{0}});
  for (int s = 0; s < 2; ++s) {
    auto [losses, grads] = step(xs, ys);
    adam.step(dp.parameters(), grads);
  }
  for (const auto& p : dp.parameters()) ferry::wait(p);  // every rank got this far
  if (world.rank() == 1) return;
  ferry_test::expect_peer_timeout(
      "rank returns early", 2s,
      [&] {
        auto [losses, grads] = step(xs, ys);
        adam.step(dp.parameters(), grads);
        (void)dp.named_parameters(mine[0])[0].second.to_host();
      },
      {"[all_reduce] all_reduce(mean)", "of mesh early", "rank 1 did not arrive within 2000 ms"});
}

}  // namespace

int main(int argc, char** argv) {
  return ferry_test::run_cases(argc, argv,
                               {
                                   {"training_matches", training_matches},
                                   {"rank_returns_early", rank_returns_early},
                               });
}
