#pragma once
#pragma once
// Ops on placed mesh arrays: each runs once per device on that device's shard and gives the
// placement of the result (PyTorch DTensor's propagation rules, kept to the cases that need no
// communication). A combination that would need a collective is a PlacementError naming both
// placements and the redistribute that makes it work: nothing here gathers behind the caller's
// back. Operands of two meshes are InvalidArgument; of two global shapes, they broadcast as
// NumPy's do (a Shard of the lower-rank operand shifts with its dim), or are a ShapeError.
//
// One file per family: mesh_elementwise.hpp, mesh_broadcast.hpp (the placement rules of
// broadcasting, and astype), mesh_reduce.hpp (with softmax and the norms), mesh_shape_ops.hpp
// and mesh_matmul.hpp, on mesh_op_support.hpp.

#include "ferry/mesh/mesh_broadcast.hpp"
#include "ferry/mesh/mesh_elementwise.hpp"
#include "ferry/mesh/mesh_matmul.hpp"
#include "ferry/mesh/mesh_reduce.hpp"
#include "ferry/mesh/mesh_shape_ops.hpp"
