#pragma once
// ferry's meshes: many devices on one interconnect. For now the vocabulary and the model of a
// collective: MeshSpec and its presets (specs::t3000(), galaxy(), dgx_h100()), and the plan
// of each collective with its closed-form time. The mesh simulator and the collectives on
// arrays come next, behind this same header.

#include "ferry/model/collective_plan.hpp"
#include "ferry/model/mesh_spec.hpp"
