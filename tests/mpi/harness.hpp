#pragma once
// The harness of the MPI tests (tests/mpi/): each is a program that every rank of an `mpiexec`
// job runs, with its own main rather than GoogleTest's, since every rank must run every case in
// the same order and the job's verdict is every rank's (mpiexec fails when any rank exits
// non-zero). run_cases starts the World, runs the cases in order on it and prints each one's
// verdict; check records a failure; a watchdog ends the job if anything hangs, so a hang is a
// failure, never a stuck ctest.

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry_test {

inline int g_rank = 0;      // this process's rank, for the messages
inline int g_failures = 0;  // the checks failed so far, on this rank

/// Records a failure (and prints it, with the rank) unless `ok`.
inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

/// Calls `fn`, which must throw E whose text holds every one of `parts`.
template <class E>
void expect_error(const std::string& what, const std::function<void()>& fn,
                  const std::vector<std::string>& parts) {
  try {
    fn();
    check(false, what + ": no error");
  } catch (const E& e) {
    for (const std::string& p : parts) {
      check(std::string(e.what()).find(p) != std::string::npos,
            what + ": '" + e.what() + "' lacks '" + p + "'");
    }
  } catch (const std::exception& e) {
    check(false, what + ": the wrong error: " + e.what());
  }
}

/// Calls `fn`, which must throw PeerTimeout whose text holds every one of `parts`, once the
/// world's collective timeout `timeout` has passed and well before ten times it (neither early
/// nor a wait that only the watchdog ends).
inline void expect_peer_timeout(const std::string& what, std::chrono::nanoseconds timeout,
                                const std::function<void()>& fn,
                                const std::vector<std::string>& parts) {
  const auto start = std::chrono::steady_clock::now();
  expect_error<ferry::PeerTimeout>(what, fn, parts);
  const auto waited = std::chrono::steady_clock::now() - start;
  check(waited >= timeout && waited < 10 * timeout,
        what + ": the timeout took " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
            " ms");
}

/// A case: its name and what it runs on every rank.
using MpiCase = std::pair<const char*, std::function<void(ferry::mpi::World&)>>;

/// The test's main: a watchdog that ends the job after `watchdog` (ctest's TIMEOUT is the
/// backstop of this), then, on a World of 2 ranks or more, every case in order, each one's
/// verdict printed. Returns main's status: 0 when every check passed on this rank.
inline int run_cases(int argc, char** argv, const std::vector<MpiCase>& cases,
                     std::chrono::seconds watchdog = std::chrono::seconds(90)) {
  std::thread([watchdog] {
    std::this_thread::sleep_for(watchdog);
    std::fprintf(stderr, "rank %d: watchdog: the test hung; aborting the job\n", g_rank);
    std::fflush(stderr);
    std::_Exit(3);
  }).detach();
  ferry::mpi::World world(argc, argv);
  g_rank = world.rank();
  if (world.size() < 2) {
    std::fprintf(stderr, "run me with mpiexec -n 2 or more\n");
    return 2;
  }
  for (const auto& [name, run] : cases) {
    const int before = g_failures;
    const auto start = std::chrono::steady_clock::now();
    try {
      run(world);
    } catch (const std::exception& e) {
      check(false, std::string(name) + " threw " + e.what());
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("rank %d/%d: %s %s (%lld ms)\n", world.rank(), world.size(), name,
                g_failures == before ? "passed" : "FAILED", static_cast<long long>(ms));
    std::fflush(stdout);
  }
  return g_failures == 0 ? 0 : 1;
}

}  // namespace ferry_test
