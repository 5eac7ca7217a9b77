#pragma once
// The mismatched-op case that test_mpi_collectives and test_mpi_model_only both provoke: on
// mesh "odd", rank 1 calls all_gather(a, 1) where every other rank calls all_reduce(a), as the
// first collective of the mesh, with float32 (4, 4) shards. Every rank hears of it (rank 1 from
// anyone, the others from rank 1), and the error names both ranks and both calls.

#include <string>
#include <vector>

namespace ferry_test {

/// The parts of the CollectiveMismatch that rank `rank` gets in that case.
inline std::vector<std::string> mismatch_parts(int rank) {
  if (rank == 1) {
    return {"[all_gather] rank ", " called all_reduce(sum) of float32 (4, 4)",
            "where rank 1 called all_gather(dim 1) of float32 (4, 4)", "collective 0 of mesh odd"};
  }
  return {"[all_reduce] rank 1 called all_gather(dim 1) of float32 (4, 4)",
          "where rank " + std::to_string(rank) + " called all_reduce(sum) of float32 (4, 4)",
          "collective 0 of mesh odd"};
}

}  // namespace ferry_test
