// 12 · Data parallel over processes: one modeled H100 per MPI rank.
//
// Run it with `mpirun -n 4 build/dev/examples/12_mpi` (as root in a container, with
// OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; more ranks than cores with
// --oversubscribe). The MLP of 07_training learns the same three classes of points, but
// data-parallel: `ferry::mpi::mesh_over` makes a mesh of four H100s of which each rank owns one,
// nn::DataParallel replicates the model on each (every rank builds it on H100 0, which only rank 0
// computes, and it is broadcast from there), every rank trains on its own quarter of the points,
// and the gradients are averaged by all-reduces that cross processes. Every rank runs this same
// program: the GPUs of the other ranks are stand-ins here, which time their work and hold no
// values. The loss is computed on each replica's GPU (a stand-in has no values to send to the host)
// and read as one number, the mean over the replicas, gathered over the processes.
//
// Each rank then runs the same training on a one-process mesh of four H100s and checks that
// the loss curve and the weights of its own GPU are the same bit for bit: the bytes cross
// processes unchanged, and every GPU reduces its peers' gradients in the order one process does.
#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace nn = ferry::nn;

int g_rank = 0;

void check(bool ok, const char* claim) {
  if (g_rank == 0) std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, claim);
    std::exit(1);  // mpirun then ends the other ranks
  }
}

constexpr std::int64_t kPoints = 256;
constexpr std::int64_t kClasses = 3;
constexpr int kSteps = 150;

/// 07's points: on rings around the origin, labelled by which third of the circle they fall in.
/// The labels are floats, so that DataParallel hands each replica its rows of them too.
std::pair<ferry::HostArray<float>, ferry::HostArray<float>> spiral_thirds() {
  std::vector<float> x;
  std::vector<float> y;
  for (std::int64_t i = 0; i < kPoints; ++i) {
    const double angle = 2 * 3.141592653589793 * static_cast<double>((i * 97) % kPoints) / kPoints;
    const double radius = 0.3 + 0.7 * static_cast<double>(i % 7) / 7;
    x.push_back(static_cast<float>(radius * std::cos(angle)));
    x.push_back(static_cast<float>(radius * std::sin(angle)));
    y.push_back(static_cast<float>(static_cast<std::int64_t>(angle / (2 * 3.141592653589793 / 3)) %
                                   kClasses));
  }
  return {ferry::HostArray<float>(ferry::Shape{kPoints, 2}, std::move(x)),
          ferry::HostArray<float>(ferry::Shape{kPoints}, std::move(y))};
}

/// 07's MLP, built on `gpu`.
nn::Sequential make_model(const ferry::Device& gpu) {
  return nn::Sequential(nn::Linear(2, 32, gpu, {.seed = 1}), nn::Tanh(),
                        nn::Linear(32, 32, gpu, {.seed = 2}), nn::Tanh(),
                        nn::Linear(32, kClasses, gpu, {.seed = 3}));
}

/// Four H100s on NVSwitch: the first half of a DGX H100.
ferry::MeshSpec four_h100s() {
  ferry::MeshSpec m = ferry::specs::dgx_h100();
  m.name = "h100x4";
  m.devices.assign(4, ferry::specs::h100_sxm());
  m.shape = ferry::MeshShape{4};
  return m;
}

struct Run {
  std::vector<float> losses;                  // the global loss every 30 steps and at the last
  std::vector<ferry::HostArray<float>> mine;  // the parameters of this rank's replicas
};

/// kSteps Adam steps of the MLP, data-parallel over `mesh`; `mine` are the replicas to read.
Run train(const ferry::Mesh& mesh, const std::vector<std::int64_t>& mine) {
  nn::DataParallel dp(make_model(mesh.device(0)), mesh);
  ferry::optim::Adam adam({.lr = 0.02});
  // Each replica's loss is the mean over its own points: the all-reduce's mean of the
  // gradients is then the gradient of the mean over all of them.
  auto step = nn::value_and_grad(dp, [](const nn::Module& m, const ferry::DeviceArray<float>& x,
                                        const ferry::DeviceArray<float>& y) {
    return nn::cross_entropy(m(x), y.astype<std::int64_t>());
  });
  const auto [x, y] = spiral_thirds();
  const auto xs = ferry::distribute(x, mesh, {ferry::Shard{0}});  // each GPU gets its quarter
  const auto ys = ferry::distribute(y, mesh, {ferry::Shard{0}});
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    auto [losses, grads] = step(xs, ys);
    adam.step(dp.parameters(), grads);  // every replica's weights, in place
    if (s % 30 == 0 || s == kSteps - 1) {
      // The replicas' losses as the Partial(mean) of one scalar: its export gathers them from
      // every process, on every process (a collective: every rank reads it at the same steps).
      const auto loss = ferry::MeshArray<float>::from_shards(
          mesh, losses.shards(), ferry::Shape{}, {ferry::Partial{ferry::ReduceOp::mean}});
      run.losses.push_back(ferry::to_host(loss).data()[0]);
    }
  }
  for (std::int64_t r : mine) {
    for (const auto& [name, p] : dp.named_parameters(r)) run.mine.push_back(p.to_host());
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::mpi::World world(argc, argv);
  g_rank = world.rank();
  if (world.size() != 4) {
    if (g_rank == 0) std::fprintf(stderr, "run me with mpirun -n 4 (got %d ranks)\n", world.size());
    return 2;
  }
  const ferry::MeshSpec spec = four_h100s();
  const ferry::Mesh over = ferry::mpi::mesh_over(world, spec);  // rank r owns H100 r
  const auto mine = ferry::mpi::default_members(over.size(), world.rank(), world.size());
  if (g_rank == 0) {
    std::printf("07's MLP data-parallel on %d ranks, one modeled H100 each, %lld points a rank\n",
                world.size(), static_cast<long long>(kPoints / over.size()));
  }
  const Run processes = train(over, mine);
  const Run one = train(ferry::Mesh::modeled(spec), mine);

  if (g_rank == 0) std::printf("  step   4 processes   1 process\n");
  bool same_losses = processes.losses.size() == one.losses.size();
  for (std::size_t i = 0; i < processes.losses.size() && same_losses; ++i) {
    const int s = i + 1 == processes.losses.size() ? kSteps - 1 : static_cast<int>(30 * i);
    if (g_rank == 0) {
      std::printf("  %4d   %11.6f   %9.6f\n", s, static_cast<double>(processes.losses[i]),
                  static_cast<double>(one.losses[i]));
    }
    same_losses = std::memcmp(&processes.losses[i], &one.losses[i], sizeof(float)) == 0;
  }
  bool same_weights = processes.mine.size() == one.mine.size() && !one.mine.empty();
  for (std::size_t i = 0; i < processes.mine.size() && same_weights; ++i) {
    const auto a = processes.mine[i].data();
    const auto b = one.mine[i].data();
    same_weights =
        a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  check(same_losses, "the loss curve over 4 processes is the one-process mesh's, bit for bit");
  check(same_weights,
        "every rank's H100 ends with the weights its H100 has in one process, bit for bit");
  check(processes.losses.back() < processes.losses.front() / 5,
        "the loss fell to under a fifth of where it started");
  return 0;
}
