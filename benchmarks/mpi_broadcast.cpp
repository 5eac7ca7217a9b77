// Data that several devices of one process need, over MPI processes: ferry::broadcast from
// device 0 of a mesh of 4 devices a rank ({ranks, 4}, ferry::mpi::mesh_over) against what a
// program written on MPI alone does for the same result, in the same run, as a ratio:
// MPI_Bcast of the shard to every rank, then a copy into each of the rank's other 3 devices'
// buffers (on rank 0, the 3 copies alone). ferry sends each other rank the shard once and the
// rank copies it for each of its devices (docs/distributed.md, "How data moves"), so both sides
// move the same bytes between processes; the benchmark prints ferry's data messages per call
// (ferry::mpi::traffic: one to each other rank). Run under `mpiexec -n 2` or `-n 4`.
//
// The devices are modeled ones of specs::host_cpu(), as in mpi_allreduce.cpp: their kernels
// run on this process's CPU and their buffers are host memory. The timing too: every rank
// waits at a barrier, reads the clock, broadcasts and waits until each of its devices has its
// result; the time is the largest of the ranks'; the two sides alternate repetition by
// repetition and each figure is the median. Each size's results are checked once: every
// device's shard equals the root's, bit for bit, on every rank.
#include <mpi.h>

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "mpi_timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using ferry_bench::Clock;
using ferry_bench::max_over_ranks;
using ferry_bench::median;
using ferry_bench::seconds_since;
constexpr std::int64_t kDevicesPerRank = 4;

/// `ranks` x 4 host devices: a line of ranks, each rank's 4 a ring (the model's links only;
/// the wall clock is real).
ferry::MeshSpec spec_of(int ranks) {
  ferry::MeshSpec m;
  m.name = "broadcast";
  m.shape = ferry::MeshShape{ranks, kDevicesPerRank};
  m.devices.assign(static_cast<std::size_t>(ranks * kDevicesPerRank), ferry::specs::host_cpu());
  m.topology = {ferry::Topology::line, ferry::Topology::ring};
  m.link.bytes_per_second = 10e9;
  m.link.hop_latency = std::chrono::microseconds(1);
  return m;
}

struct Row {
  std::int64_t bytes = 0;
  double ferry_s = 0;
  double mpi_s = 0;
  std::uint64_t messages = 0;  // ferry's data messages a call, on rank 0
  bool same = true;
};

Row measure(const ferry::mpi::World& world, const ferry::Mesh& mesh, std::int64_t bytes) {
  const int rank = world.rank();
  const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
  std::vector<float> root(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    root[static_cast<std::size_t>(i)] = static_cast<float>(i % 251);
  // Device 0's shard holds the data on rank 0; the others (stand-ins or not) zeros.
  std::vector<ferry::DeviceArray<float>> shards;
  for (std::int64_t m = 0; m < mesh.size(); ++m) {
    shards.push_back(m == 0 && rank == 0 ? ferry::to_device(mesh.device(m), root, ferry::Shape{n})
                                         : ferry::zeros<float>(mesh.device(m), ferry::Shape{n}));
  }
  const auto a = ferry::MeshArray<float>::from_shards(mesh, std::move(shards));
  const std::int64_t first = rank * kDevicesPerRank;  // this rank's devices: first, first + 1, ...
  for (std::int64_t d = first; d < first + kDevicesPerRank; ++d) ferry::wait(a.shard(d));
  // MPI's side: a buffer per device of this rank, the first one's filled by the broadcast.
  std::vector<std::vector<float>> buffers(kDevicesPerRank,
                                          std::vector<float>(static_cast<std::size_t>(n)));
  if (rank == 0) buffers[0] = root;

  Row row;
  row.bytes = bytes;
  const int reps = bytes <= (std::int64_t{1} << 20) ? 31 : 11;
  std::vector<double> ferry_t;
  std::vector<double> mpi_t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const ferry::mpi::MeshTraffic before = ferry::mpi::traffic(mesh);
    auto start = Clock::now();
    const auto out = ferry::broadcast(a, 0);
    for (std::int64_t d = first; d < first + kDevicesPerRank; ++d) ferry::wait(out.shard(d));
    ferry_t.push_back(max_over_ranks(seconds_since(start)));
    row.messages = ferry::mpi::traffic(mesh).messages_sent - before.messages_sent;
    if (r == 0) {
      for (std::int64_t d = first; d < first + kDevicesPerRank; ++d)
        row.same = row.same && std::ranges::equal(out.shard(d).to_host().data(), root);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    MPI_Bcast(buffers[0].data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (std::size_t k = 1; k < buffers.size(); ++k)
      std::memcpy(buffers[k].data(), buffers[0].data(), static_cast<std::size_t>(bytes));
    mpi_t.push_back(max_over_ranks(seconds_since(start)));
  }
  row.ferry_s = median(ferry_t);
  row.mpi_s = median(mpi_t);
  // Rank 0 sends; every rank's result was checked: one verdict for all.
  int same = row.same ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  row.same = all == 1;
  return row;
}

void print_time(double seconds) {
  if (seconds < 1e-3) {
    std::printf("%.1f us", seconds * 1e6);
  } else {
    std::printf("%.2f ms", seconds * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ferry::mpi::World world(argc, argv);
  const int ranks = world.size();
  // The executor's workers share this machine's cores with the other ranks: one worker per
  // rank's share of the cores, at least one (as mpi_allreduce.cpp).
  const auto workers = std::max<std::size_t>(1, std::thread::hardware_concurrency() /
                                                    static_cast<std::size_t>(ranks));
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(ranks), ferry::Executor(workers));
  if (world.rank() == 0) {
    std::printf("| ranks | size | MPI_Bcast + 3 copies | ferry::broadcast | ferry / MPI | "
                "ferry's messages a call |\n|---|---|---|---|---|---|\n");
  }
  int status = 0;
  for (const std::int64_t kib : {64, 1024, 4096, 16384}) {
    const Row row = measure(world, mesh, kib << 10);
    if (!row.same) status = 1;
    if (world.rank() != 0) continue;
    std::printf("| %d | %lld KiB | ", ranks, static_cast<long long>(kib));
    print_time(row.mpi_s);
    std::printf(" | ");
    print_time(row.ferry_s);
    std::printf(" | %.2fx | %llu%s |\n", row.ferry_s / row.mpi_s,
                static_cast<unsigned long long>(row.messages),
                row.same ? "" : " (WRONG VALUES)");
    std::fflush(stdout);
  }
  return status;
}
