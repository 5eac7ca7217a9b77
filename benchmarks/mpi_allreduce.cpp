// A gradient all-reduce over MPI processes: ferry::all_reduce(sum) on a mesh spanning the ranks
// (ferry::mpi::mesh_over, one device per rank) against MPI_Allreduce called directly on a
// buffer of the same size, in the same run, as a ratio; then the overlap of a large all-reduce
// with compute that does not depend on it. Run under `mpiexec -n 2` and `-n 4`;
// benchmarks/mpi_allreduce.sh runs both and prints one table.
//
// The device: each rank owns one modeled device of specs::host_cpu(), the spec Device::cpu()
// uses. Its kernels run on this process's CPU, where MPI_Allreduce reduces too, and its
// buffers are host memory, which MPI reads and writes in place: so the two sides do the same
// work on the same memory, and the difference is ferry's own path (fingerprints, the graph's
// steps, the progress thread, the copies in and out of MPI's messages, the reduction as
// ferry ops). An accelerator model would add modeled transfers that no wall clock sees.
//
// The timing, for both sides: every rank waits at a barrier, reads the host clock, issues the
// all-reduce and waits until its own result is computed (ferry::wait of its shard: the value
// is then available on that rank, with no copy to a host array, since MPI_Allreduce's result
// needs none either); the all-reduce's time is the largest of the ranks' times (the value is
// available on every rank). The two sides alternate, repetition by repetition, so that the
// machine's noise falls on both alike; each figure is the median of the repetitions.
//
// Beside it, the call alone: the time all_reduce takes to return (building the graph's steps,
// fingerprinting, placing the collective on the model's links), before anything is waited
// for; the largest of the ranks', the median of the repetitions. Where the call alone takes
// longer than MPI_Allreduce's whole time, no progress path can bring the ratio under it: the
// ratio there is the graph's cost per call, which is dispatch's (benchmarks/dispatch), not the
// collective's.
//
// Correctness is checked once per size: the data are small integers, so every order of the
// sum is exact, and ferry's result must equal MPI's bit for bit on every rank.
#include <mpi.h>

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "mpi_timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using ferry_bench::Clock;
using ferry_bench::max_over_ranks;
using ferry_bench::median;
using ferry_bench::seconds_since;

std::string size_text(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

std::string time_text(double s) {
  char buf[32];
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  }
  return buf;
}

/// One device of specs::host_cpu() per rank, on a ring (a line of two).
ferry::MeshSpec spec_of(int ranks) {
  ferry::MeshSpec m;
  m.name = "allreduce";
  m.shape = ferry::MeshShape{ranks};
  m.devices.assign(static_cast<std::size_t>(ranks), ferry::specs::host_cpu());
  m.topology = {ranks >= 3 ? ferry::Topology::ring : ferry::Topology::line};
  // Only the model reads these (shared memory's order of magnitude); the wall clock is real.
  m.link.bytes_per_second = 10e9;
  m.link.hop_latency = std::chrono::microseconds(1);
  // The plan, and so all_reduce's data path, is one-shot below 1 MiB: one round of whole
  // shards, where a reduce-scatter and an all-gather pay the fixed cost of a round of messages
  // twice and join the parts; a reduce-scatter and an all-gather above, where one-shot's
  // (n - 1) x the shard in, against 2 (n - 1) / n x, costs more than the round. Measured here
  // at 256 KiB (docs/distributed.md): one-shot 0.53x to 0.69x the stepped path's time over 2
  // ranks (the same bytes received: the peer's whole shard or both halves of it), 0.90x to
  // 0.94x over 4. specs::dgx_h100() says 256 KiB, where NVLink's round costs less against its
  // bytes than a round through shared memory and Open MPI's progress does here.
  m.link.one_shot_bytes = std::int64_t{1} << 20;
  return m;
}

/// Rank r's gradient: small integers, so that a sum in any order is exact.
std::vector<float> gradient(std::int64_t n, int rank) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<float>((i + rank) % 17);
  return out;
}

/// This rank's input as a mesh array: its own shard holds `values`; the others' shards are
/// stand-ins here (their owners hold the values).
ferry::MeshArray<float> mesh_input(const ferry::Mesh& mesh, int rank,
                                   const std::vector<float>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  std::vector<ferry::DeviceArray<float>> shards;
  for (std::int64_t m = 0; m < mesh.size(); ++m) {
    shards.push_back(m == rank ? ferry::to_device(mesh.device(m), values, ferry::Shape{n})
                               : ferry::zeros<float>(mesh.device(m), ferry::Shape{n}));
  }
  auto a = ferry::MeshArray<float>::from_shards(mesh, std::move(shards));
  ferry::wait(a.shard(rank));
  return a;
}

/// Repetitions at `bytes`: enough for a median at small sizes, a few at the largest, so that
/// the whole sweep takes seconds.
int repetitions(std::int64_t bytes) {
  if (bytes <= (std::int64_t{256} << 10)) return 41;
  if (bytes <= (std::int64_t{4} << 20)) return 15;
  if (bytes <= (std::int64_t{64} << 20)) return 5;
  return 3;
}

struct Row {
  std::int64_t bytes = 0;
  double ferry_s = 0;
  double call_s = 0;  // all_reduce's return alone
  double mpi_s = 0;
  bool same = true;
};

Row measure(const ferry::Mesh& mesh, int rank, std::int64_t bytes) {
  const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
  const std::vector<float> values = gradient(n, rank);
  std::vector<float> reduced(values.size());
  const ferry::MeshArray<float> a = mesh_input(mesh, rank, values);
  Row row;
  row.bytes = bytes;
  std::vector<double> ferry_times;
  std::vector<double> mpi_times;
  std::vector<double> call_times;
  const int reps = repetitions(bytes);
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: a warm-up, not counted
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    MPI_Allreduce(values.data(), reduced.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double mpi_s = max_over_ranks(seconds_since(t0));

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    const ferry::MeshArray<float> r = ferry::all_reduce(a, ferry::ReduceOp::sum);
    const double call_s = seconds_since(t0);
    ferry::wait(r.shard(rank));
    const double ferry_s = max_over_ranks(seconds_since(t0));
    const double call_max = max_over_ranks(call_s);

    if (rep == -1) {
      const ferry::HostArray<float> got = r.shard(rank).to_host();
      int same =
          std::memcmp(got.data().data(), reduced.data(), reduced.size() * sizeof(float)) == 0;
      int all = 0;
      MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      row.same = all != 0;
      continue;
    }
    mpi_times.push_back(mpi_s);
    ferry_times.push_back(ferry_s);
    call_times.push_back(call_max);
  }
  row.ferry_s = median(ferry_times);
  row.mpi_s = median(mpi_times);
  row.call_s = median(call_times);
  return row;
}

/// The overlap of a large all-reduce with compute on each rank's device that does not depend
/// on it, all on the host clock:
///
/// - alone: the all-reduce by itself (median of 3), then the compute by itself, sized to take
///   about as long (a batch of independent 256 x 256 matmuls, each rank on its own device);
/// - together: each rank issues the all-reduce at t0, then the compute at once (both calls
///   return at once: ferry records work, it does not run it on the caller), then polls both
///   results (ready(), never blocking) and notes when each became available. The all-reduce's
///   interval is [t0, its end], the compute's [its issue, its end]; the share is the length
///   of their intersection over the all-reduce's interval. The compute's start is taken as its
///   issue, a few microseconds after t0: its inputs are ready, so nothing but the executor's
///   queue stands between the issue and its first kernel.
///
/// A share near 1 says that compute ran for as long as the all-reduce was in flight; the
/// together time against alone + alone says how much of it was actually hidden.
struct Overlap {
  std::int64_t bytes = 0;
  double allreduce_alone = 0;
  double compute_alone = 0;
  double together = 0;
  double share = 0;
};

Overlap measure_overlap(const ferry::Mesh& mesh, int rank, std::int64_t bytes) {
  const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
  const ferry::MeshArray<float> a = mesh_input(mesh, rank, gradient(n, rank));
  const ferry::Device dev = mesh.device(rank);
  constexpr std::int64_t side = 256;
  std::vector<float> ones(static_cast<std::size_t>(side * side), 1.0f / side);
  const auto x = ferry::to_device(dev, ones, ferry::Shape{side, side});
  ferry::wait(x);

  Overlap o;
  o.bytes = bytes;
  auto compute = [&](int count) {
    std::vector<ferry::DeviceArray<float>> out;
    for (int i = 0; i < count; ++i) out.push_back(ferry::matmul(x, x));
    return out;
  };
  // Every interval here ends as the one measured together does: this thread polls ready()
  // every 50 us (not ferry::wait, which blocks), so that alone and together compare.
  auto poll = [&](const std::vector<ferry::DeviceArray<float>>& arrays, Clock::time_point t0) {
    while (!std::all_of(arrays.begin(), arrays.end(), [](const auto& d) { return d.ready(); }))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    return seconds_since(t0);
  };
  std::vector<double> alone;
  for (int rep = -1; rep < 3; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    const double s = max_over_ranks(poll({ferry::all_reduce(a).shard(rank)}, t0));
    if (rep >= 0) alone.push_back(s);
  }
  o.allreduce_alone = median(alone);

  // One matmul's time, then as many as take about as long as the all-reduce (every rank the
  // same count: the largest rank's estimate).
  ferry::wait(compute(4));
  auto t0 = Clock::now();
  const double one = max_over_ranks(poll(compute(16), t0) / 16);
  const int count = std::max(1, static_cast<int>(o.allreduce_alone / one));
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = Clock::now();
  o.compute_alone = max_over_ranks(poll(compute(count), t0));

  MPI_Barrier(MPI_COMM_WORLD);
  t0 = Clock::now();
  const ferry::MeshArray<float> r = ferry::all_reduce(a);
  const double compute_start = seconds_since(t0);
  const std::vector<ferry::DeviceArray<float>> c = compute(count);
  double reduce_end = -1;
  double compute_end = -1;
  while (reduce_end < 0 || compute_end < 0) {
    if (reduce_end < 0 && r.shard(rank).ready()) reduce_end = seconds_since(t0);
    if (compute_end < 0 && std::all_of(c.begin(), c.end(), [](const auto& d) { return d.ready(); }))
      compute_end = seconds_since(t0);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  ferry::wait(r.shard(rank));
  ferry::wait(c);
  const double beside = std::max(0.0, std::min(reduce_end, compute_end) - compute_start);
  // Each rank's share, then the smallest: the all-reduce is hidden only as far as on every rank.
  double share = beside / reduce_end;
  MPI_Allreduce(MPI_IN_PLACE, &share, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  o.share = share;
  o.together = max_over_ranks(std::max(reduce_end, compute_end));
  return o;
}

/// The two calls that benchmarks/mpi_allreduce_count.sh counts the instructions of, kept out of
/// line so that callgrind sees each as a function: ferry's all-reduce as it returns (nothing
/// waited for) and MPI's own non-blocking all-reduce as it returns (MPI_Iallreduce: a schedule
/// of messages started, nothing waited for either).
[[gnu::noinline]] ferry::MeshArray<float> ferry_call(const ferry::MeshArray<float>& a) {
  return ferry::all_reduce(a, ferry::ReduceOp::sum);
}

[[gnu::noinline]] MPI_Request mpi_call(const std::vector<float>& in, std::vector<float>& out) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM,
                 MPI_COMM_WORLD, &request);
  return request;
}

/// `calls` of each at 1 KiB, alternating, each waited for before the next (the script divides
/// each function's instructions by `calls`).
void count_calls(const ferry::Mesh& mesh, int rank, int calls) {
  const std::vector<float> values = gradient(256, rank);
  std::vector<float> reduced(values.size());
  const ferry::MeshArray<float> a = mesh_input(mesh, rank, values);
  ferry::wait(ferry::all_reduce(a).shard(rank));  // the first call's one-time costs: not counted
  for (int i = 0; i < calls; ++i) {
    ferry::wait(ferry_call(a).shard(rank));
    MPI_Request request = mpi_call(values, reduced);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ferry::mpi::World world(argc, argv);
  const int rank = world.rank();
  const int ranks = world.size();
  bool header = true;
  // --only=KIB: that size's row alone, no overlap (for a profiler: one size, few calls).
  std::int64_t only_kib = 0;
  // --count=N: N calls of each side at 1 KiB and nothing else (mpi_allreduce_count.sh).
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    header = header && std::strcmp(argv[i], "--rows-only") != 0;
    if (std::strncmp(argv[i], "--only=", 7) == 0) only_kib = std::atoll(argv[i] + 7);
    if (std::strncmp(argv[i], "--count=", 8) == 0) count = std::atoi(argv[i] + 8);
  }
  // The executor's workers share this machine's cores with the other ranks (and MPI's own
  // polling): one worker per rank's share of the cores, at least one.
  const auto workers = std::max<std::size_t>(1, std::thread::hardware_concurrency() /
                                                    static_cast<std::size_t>(ranks));
  const ferry::Mesh mesh = ferry::mpi::mesh_over(world, spec_of(ranks), ferry::Executor(workers));
  if (count > 0) {
    count_calls(mesh, rank, count);
    return 0;
  }

  if (rank == 0 && header) {
    std::printf("| ranks | size | MPI_Allreduce | ferry::all_reduce | ferry / MPI "
                "| the call alone | call / MPI |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
  }
  // Each row as soon as it is measured: a run cut short (the largest sizes take gigabytes on
  // 4 ranks, which a shared machine may not have) keeps the rows it measured.
  bool ok = true;
  for (const std::int64_t kib : {1, 16, 256, 4 << 10, 64 << 10, 256 << 10}) {
    if (only_kib != 0 && kib != only_kib) continue;
    const Row r = measure(mesh, rank, kib << 10);
    ok = ok && r.same;
    if (rank != 0) continue;
    std::printf("| %d | %s | %s | %s | %.2fx%s | %s | %.2fx |\n", ranks,
                size_text(r.bytes).c_str(), time_text(r.mpi_s).c_str(),
                time_text(r.ferry_s).c_str(), r.ferry_s / r.mpi_s,
                r.same ? "" : " (VALUES DIFFER)", time_text(r.call_s).c_str(),
                r.call_s / r.mpi_s);
    std::fflush(stdout);
  }
  if (only_kib != 0) return ok ? 0 : 1;
  const Overlap o = measure_overlap(mesh, rank, std::int64_t{64} << 20);

  if (rank == 0) {
    std::printf(
        "overlap, %d ranks, %s all-reduce: compute ran beside it %.0f%% of its time "
        "(all-reduce alone %s, compute alone %s, both issued together %s)\n",
        ranks, size_text(o.bytes).c_str(), 100 * o.share, time_text(o.allreduce_alone).c_str(),
        time_text(o.compute_alone).c_str(), time_text(o.together).c_str());
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}
