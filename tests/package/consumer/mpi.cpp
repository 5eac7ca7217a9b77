// A downstream program of the MPI component (find_package(ferry COMPONENTS mpi)): built and
// linked by the packaging test, not run (that takes mpiexec; tests/mpi/ runs the real thing).
#include <ferry/distributed/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  ferry::mpi::World world(argc, argv);
  std::printf("consumer_mpi: rank %d of %d\n", world.rank(), world.size());
  return 0;
}
