#pragma once
// ferry's meshes: many devices on one interconnect. Mesh (devices with one modeled clock and a
// model of their links), MeshArray (one array per device), the collectives on it (all_reduce,
// all_gather, reduce_scatter, all_to_all, broadcast, permute), MeshSpec and its presets
// (specs::t3000(), galaxy(), dgx_h100()), the plan of each collective with its closed-form
// time, and placements (Shard, Replicate, Partial) with distribute, redistribute and the
// assembling to_host; the ops on placed mesh arrays (mesh_ops.hpp); spmd, one function run per
// device with collectives along named mesh axes (spmd.hpp); and the gradients of mesh arrays
// (mesh_gradients.hpp: ferry::value_and_grad, grad and vjp of them).

#include "ferry/arrays.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/distribute.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_gradients.hpp"
#include "ferry/mesh/mesh_ops.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/mesh/spmd.hpp"
#include "ferry/mesh/spmd_jit.hpp"
#include "ferry/model/collective_calibration.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/model/link_model.hpp"
#include "ferry/model/mesh_spec.hpp"
