// A rank that leaves: its process exits early, or crashes. Every rank all-reduces twice (checked
// against the sum of the shards); then rank 1 leaves, and every other rank's next all-reduce must
// fail with PeerTimeout naming rank 1, after the collective timeout and well before ten times
// it, and its World must end. Run as `test_mpi_departure exit` or `... crash`.
// - exit (ctest test_mpi_exit.np2, .np4, plain mpiexec): rank 1's program ends, and its World
//   with it; the World said it was leaving, so the others' PeerTimeout says that the World of
//   rank 1 has ended, and every World finalizes MPI together once the others end.
// - crash (test_mpi_crash.np2, .np4, under `mpiexec --enable-recovery`, where Open MPI goes on
//   when a process dies; through crash_check.cmake): rank 1 kills itself (SIGKILL: nothing of
//   its own runs after it). The others' PeerTimeout says it has not answered the ping sent
//   halfway to the timeout (it cannot say that it ended); their World's departure finds rank 1
//   silent, says so on stderr and skips MPI_Finalize, where Open MPI's would wait for the dead
//   rank (in a plain MPI program of 2 ranks it hung in 7 runs of 15). With
//   --enable-recovery mpiexec returns 0 whatever the survivors return, so crash_check.cmake
//   reads their verdicts from the job's output: each survivor's case verdict, the World's line,
//   and a last line printed once its World is gone.

#include <mpi.h>

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "../support/meshes.hpp"
#include "harness.hpp"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry_test::check;

constexpr std::int64_t kPerRank = 4;

/// The global array: rank r's shard holds r*kPerRank ... (r+1)*kPerRank-1, plus `salt`.
ferry::HostArray<float> global(std::int64_t ranks, float salt) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < ranks * kPerRank; ++i) v.push_back(static_cast<float>(i) + salt);
  return ferry::HostArray<float>(ferry::Shape{ranks * kPerRank}, std::move(v));
}

/// Rank 1 leaves after two all-reduces: its case returns, so its World ends (`crash`: it kills
/// itself).
void rank_leaves(ferry::mpi::World& world, bool crash) {
  world.set_collective_timeout(2s);
  const std::int64_t n = world.size();
  const ferry::Mesh mesh = ferry::mpi::mesh_over(
      world, ferry_test::line_of(n, n >= 3 ? ferry::Topology::ring : ferry::Topology::line,
                                 "departure"));
  const auto mine = ferry::mpi::default_members(n, world.rank(), world.size());
  for (int round = 0; round < 2; ++round) {
    const float salt = static_cast<float>(round) * 100.0f;
    const auto a = ferry::distribute(global(n, salt), mesh, {ferry::Shard{0}});
    const auto got = ferry::all_reduce(a).shard(mine[0]).to_host();
    for (std::int64_t j = 0; j < kPerRank; ++j) {
      float want = 0.0f;
      for (std::int64_t r = 0; r < n; ++r) want += static_cast<float>(r * kPerRank + j) + salt;
      check(got.data()[j] == want, "round " + std::to_string(round) + ": element " +
                                       std::to_string(j) + " is " + std::to_string(got.data()[j]) +
                                       ", not " + std::to_string(want));
    }
  }
  // Every rank has every message of both rounds: whatever rank 1 still had to send, it sent.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world.rank() == 1) {
    if (crash) std::raise(SIGKILL);
    return;
  }
  const auto a = ferry::distribute(global(n, 7.0f), mesh, {ferry::Shard{0}});
  const std::string what = crash ? "after rank 1 crashed" : "after rank 1 exited";
  std::string text;
  ferry_test::expect_peer_timeout(
      what, 2s,
      [&] {
        try {
          (void)ferry::all_reduce(a).shard(mine[0]).to_host();
        } catch (const ferry::PeerTimeout& e) {
          text = e.what();
          throw;
        }
      },
      {"[all_reduce] all_reduce(sum) of float32 (4) over the whole mesh",
       "collective 2 of mesh departure", "rank 1 did not arrive within 2000 ms"});
  // A rank that exited said so as it left; a crashed one could not, nor answer the ping sent
  // halfway to the timeout.
  const std::string says =
      crash ? "; rank 1 has not answered for " : "; the World of rank 1 has ended";
  check(text.find(says) != std::string::npos, what + ": '" + text + "' lacks '" + says + "'");
  if (crash) {
    check(text.find("(has its process died?)") != std::string::npos, what + ": '" + text + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool crash = argc > 1 && std::string(argv[1]) == "crash";
  const int status = ferry_test::run_cases(
      argc, argv,
      {{crash ? "rank_crashes" : "rank_exits",
        [crash](ferry::mpi::World& world) { rank_leaves(world, crash); }}},
      60s);
  // run_cases's World is gone: its departure ended.
  std::printf("rank %d: its World ended, status %d\n", ferry_test::g_rank, status);
  std::fflush(stdout);
  return status;
}
