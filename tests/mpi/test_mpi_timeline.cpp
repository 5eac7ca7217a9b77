// The modeled timelines of a mesh over MPI processes (issue 31): run by ctest under `mpiexec -n 2`
// and `-n 4`. Every rank runs a program on a mesh over processes and, in this same process, on
// the one-process mesh of the same spec, and compares, for each device it owns, what the model
// says of it: its stats (makespan, critical path, steps, bytes, each engine's busy time) and its
// trace, slice by slice (each step's name, track, modeled start and duration, and the flows);
// and the mesh's makespan, the step time a program prints. The programs: compute, an
// all_reduce, compute, an all_gather (one device a rank on a line, and two a rank on a 2-D mesh
// along each axis, so that groups run within a rank and across ranks), with each rank's results
// read at the end or also in between; and data-parallel Adam steps of a small MLP, a loss read
// each step; and a distribute and a copy (`to()`) of an array computed on one device. A rank's
// devices receive data computed on other ranks, so their times are right only if the modeled
// arrival of that data is the one the one-process mesh computes.
//
// Two comparisons: with the one-process mesh running this rank's program (it reads what this
// rank reads), where this rank's own Mesh::stats() must equal it too; and with the one-process
// mesh running the program the ranks run together (it reads every device), where
// mpi::mesh_stats (each device's figures from its owner) must give its makespan and each
// device's. docs/distributed.md says where the second does not hold (a read in between).

#include <ferry/distributed/mpi.hpp>
#include <ferry/ferry.hpp>

#include "harness.hpp"
#include "timeline.hpp"

int main(int argc, char** argv) {
  using ferry::mpi::World;
  using namespace ferry_test::timeline;
  return ferry_test::run_cases(
      argc, argv,
      {
          {"collectives_timeline", [](World& w) { collectives_timeline(w, Reads::mine); }},
          {"collectives_timeline read between",
           [](World& w) { collectives_timeline(w, Reads::mine, true); }},
          {"training_timeline", [](World& w) { training_timeline(w, Reads::mine); }},
          {"collectives_timeline every read",
           [](World& w) { collectives_timeline(w, Reads::every); }},
          {"training_timeline every read", [](World& w) { training_timeline(w, Reads::every); }},
          {"distribute_timeline", [](World& w) { distribute_timeline(w); }},
      });
}
