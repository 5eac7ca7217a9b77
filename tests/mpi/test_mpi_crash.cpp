// A rank that crashes. Open MPI ends the whole job when a process dies, unless mpiexec runs
// with --enable-recovery: then the others go on, and ferry must neither hang them nor leave
// them unable to end. ctest runs this under `mpiexec --enable-recovery` with 2 and 4 ranks,
// through crash_check.cmake. Every rank all-reduces twice (checked against the sum of the
// shards); then rank 1 kills itself (SIGKILL: nothing of its own runs after it). Every other
// rank's next all-reduce must fail with PeerTimeout naming rank 1, after the collective timeout
// and well before ten times it, and its World must end: its departure finds rank 1 silent, says
// so on stderr and skips MPI_Finalize, where Open MPI's would wait for the dead rank (it hung
// in one run of three in a plain MPI program). With --enable-recovery mpiexec returns 0 whatever
// the survivors return, so crash_check.cmake reads their verdicts from the job's output: each
// survivor's case verdict, the World's line, and a last line printed once its World is gone.

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

void rank_crashes(ferry::mpi::World& world) {
  world.set_collective_timeout(2s);
  const std::int64_t n = world.size();
  const ferry::Mesh mesh = ferry::mpi::mesh_over(
      world, ferry_test::line_of(n, n >= 3 ? ferry::Topology::ring : ferry::Topology::line,
                                 "crash"));
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
  if (world.rank() == 1) std::raise(SIGKILL);
  const auto a = ferry::distribute(global(n, 7.0f), mesh, {ferry::Shard{0}});
  ferry_test::expect_peer_timeout(
      "after rank 1 crashed", 2s, [&] { (void)ferry::all_reduce(a).shard(mine[0]).to_host(); },
      {"[all_reduce] all_reduce(sum) of float32 (4) over the whole mesh",
       "collective 2 of mesh crash", "rank 1 did not arrive within 2000 ms"});
}

}  // namespace

int main(int argc, char** argv) {
  const int status = ferry_test::run_cases(argc, argv, {{"rank_crashes", rank_crashes}}, 60s);
  // run_cases's World is gone: its departure ended.
  std::printf("rank %d: its World ended, status %d\n", ferry_test::g_rank, status);
  std::fflush(stdout);
  return status;
}
