#pragma once
// The MPI part of ferry (CMake target ferry::mpi): a mesh whose devices live in several
// processes. Not included by ferry/ferry.hpp: only programs that link ferry::mpi include it.

#include "ferry/distributed/mesh_over.hpp"
#include "ferry/distributed/mesh_stats.hpp"
#include "ferry/distributed/mesh_traffic.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/progress.hpp"
#include "ferry/distributed/transport.hpp"
#include "ferry/distributed/world.hpp"
