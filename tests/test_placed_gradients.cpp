// Gradients through the ops on placed mesh arrays (mesh/mesh_ops.hpp) against central finite
// differences (support/mesh_gradcheck.hpp, a relative 1e-6): elementwise ops with Shard and
// Partial operands, broadcasting against a fixed operand and as the broadcast operand, astype,
// reductions over a sharded dim (a Partial result) and over a whole one, softmax and layer_norm,
// matmul as Megatron's column- and row-parallel products (through either operand), and reshape
// and transpose splitting a sharded dim into heads. Each shard is its own input: the scalar
// weighs every element of every result shard differently, so a gradient landing on the wrong
// device or the wrong element fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/gradcheck.hpp"
#include "support/mesh_gradcheck.hpp"
#include "support/meshes.hpp"

namespace test_placed_gradients {

namespace {

using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Partial;
using ferry::Placements;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry_test::check_through;
using ferry_test::expect_balanced_after;
using ferry_test::four;
using ferry_test::ring;
using ferry_test::square;

/// `op` of the shards placed as an array of shape `global` by `ps`.
template <class Op>
auto placed(Shape global, Placements ps, Op op) {
  return [=](const MeshArray<double>& a) {
    return op(MeshArray<double>::from_shards(a.mesh(), a.shards(), global, ps));
  };
}

/// A fixed array of smooth values, not an input: what the inputs combine with.
HostArray<double> fixed(const Shape& shape, int salt) {
  HostArray<double> h(shape);
  for (std::int64_t k = 0; k < shape.numel(); ++k) {
    h.data()[static_cast<std::size_t>(k)] = 0.5 + 0.25 * static_cast<double>((k * 5 + salt) % 7);
  }
  return h;
}

TEST(PlacedGradients, ElementwiseOpsOfShardsAndPartials) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    // (6, 3) cut 2, 2, 1, 1 along dim 0.
    const std::vector<Shape> rows = {Shape{2, 3}, Shape{2, 3}, Shape{1, 3}, Shape{1, 3}};
    check_through(mesh, rows, placed(Shape{6, 3}, {Shard{0}}, [](const MeshArray<double>& a) {
                    return ferry::tanh(a * a) - 2.0 * a + ferry::exp(a) / 3.0;
                  }));
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{2, 12}, {Shard{1}}, [](const MeshArray<double>& a) {
                    return ferry::maximum(ferry::gelu(a), ferry::relu(-a) * 0.5);
                  }));
    // Partial(sum) through the linear ops: each part's cotangent is the sum's.
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{2, 3}, {Partial{}},
                         [](const MeshArray<double>& a) { return a * 3.0 + (-a) - a / 4.0; }));
  });
}

TEST(PlacedGradients, APartialTimesAReplicate) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    // Through the Partial operand: each part's cotangent is the sum's times the replicated
    // value (divided by it), on its own device.
    const MeshArray<double> r = ferry::distribute(fixed(Shape{2, 3}, 1), mesh, {Replicate{}});
    const MeshArray<double> v = ferry::distribute(fixed(Shape{3}, 2), mesh, {Replicate{}});
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{2, 3}, {Partial{}}, [&](const MeshArray<double>& p) {
                    return p * r + v * p - p / (r * r) + (p * v) / v;
                  }));
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{2, 3}, {Partial{ferry::ReduceOp::mean}},
                         [&](const MeshArray<double>& p) { return (r * p) / v; }));
    // Through the Replicate operand: each copy's cotangent is that of its device's product
    // with the fixed part there.
    std::vector<ferry::DeviceArray<double>> parts;
    for (std::int64_t i = 0; i < mesh.size(); ++i) {
      parts.push_back(
          ferry::to_device(mesh.device(i), fixed(Shape{2, 3}, 3 + static_cast<int>(i))));
    }
    const MeshArray<double> p =
        MeshArray<double>::from_shards(mesh, std::move(parts), Shape{2, 3}, {Partial{}});
    check_through(mesh, four(Shape{3}),
                  placed(Shape{3}, {Replicate{}}, [&](const MeshArray<double>& b) {
                    return p * ferry::tanh(b) + p / (b * b + 1.0);
                  }));
  });
}

TEST(PlacedGradients, BroadcastingAndAstype) {
  const Mesh mesh = Mesh::modeled(square());
  expect_balanced_after(mesh, [&] {
    // (4, 6) cut along both axes; times a fixed (6) vector cut along axis 1, plus one Replicate.
    const MeshArray<double> v =
        ferry::distribute(fixed(Shape{6}, 1), mesh, {Replicate{}, Shard{0}});
    const MeshArray<double> c =
        ferry::distribute(fixed(Shape{4, 1}, 2), mesh, {Shard{0}, Replicate{}});
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{4, 6}, {Shard{0}, Shard{1}},
                         [&](const MeshArray<double>& a) { return a * v + c; }));
    // The input is the broadcast operand: a bias (6) Replicate along axis 0, cut along axis 1,
    // added to fixed (4, 6) activations: each copy's gradient sums over the rows it met.
    const MeshArray<double> x =
        ferry::distribute(fixed(Shape{4, 6}, 3), mesh, {Shard{0}, Shard{1}});
    check_through(mesh, four(Shape{3}),
                  placed(Shape{6}, {Replicate{}, Shard{0}},
                         [&](const MeshArray<double>& b) { return ferry::maximum(x - b, x * b); }));
    // astype keeps each shard's cotangent on its device (to double, so finite differences stay
    // exact enough; a float round trip would round the inputs past the tolerance).
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{4, 6}, {Shard{0}, Shard{1}},
                         [](const MeshArray<double>& a) { return ferry::astype<double>(a) * a; }));
  });
}

TEST(PlacedGradients, ReductionsSoftmaxAndNorms) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    // A sum over the sharded dim is Partial(sum); a mean over the other keeps the Shard.
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [](const MeshArray<double>& a) { return ferry::sum(a * a, {0}); }));
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [](const MeshArray<double>& a) { return ferry::mean(a, {1}, true) * a; }));
    // Partial(max): each device's maximum, the gradient to its arg-max.
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [](const MeshArray<double>& a) { return ferry::max(a, {0}); }));
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [](const MeshArray<double>& a) { return ferry::softmax(a, 1); }));
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [](const MeshArray<double>& a) { return ferry::layer_norm(a); }));
  });
}

TEST(PlacedGradients, MatmulAsMegatronsProducts) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    // Column-parallel: x Replicate times w (3, 8) Shard(1), through x and through w.
    const MeshArray<double> w_cols = ferry::distribute(fixed(Shape{3, 8}, 4), mesh, {Shard{1}});
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{2, 3}, {Replicate{}},
                         [&](const MeshArray<double>& x) { return ferry::matmul(x, w_cols); }));
    const MeshArray<double> x_rep = ferry::distribute(fixed(Shape{2, 3}, 5), mesh, {Replicate{}});
    check_through(mesh, four(Shape{3, 2}),
                  placed(Shape{3, 8}, {Shard{1}},
                         [&](const MeshArray<double>& w) { return ferry::matmul(x_rep, w); }));
    // Row-parallel: x (2, 8) Shard(-1) times w (8, 3) Shard(0) is Partial(sum), then summed.
    const MeshArray<double> w_rows = ferry::distribute(fixed(Shape{8, 3}, 6), mesh, {Shard{0}});
    check_through(mesh, four(Shape{2, 2}),
                  placed(Shape{2, 8}, {Shard{1}}, [&](const MeshArray<double>& x) {
                    return ferry::redistribute(ferry::matmul(x, w_rows), {Replicate{}});
                  }));
    const MeshArray<double> x_cols = ferry::distribute(fixed(Shape{2, 8}, 7), mesh, {Shard{1}});
    check_through(mesh, four(Shape{2, 3}),
                  placed(Shape{8, 3}, {Shard{0}},
                         [&](const MeshArray<double>& w) { return ferry::matmul(x_cols, w); }));
  });
}

TEST(PlacedGradients, ReshapeAndTransposeIntoHeads) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    // (2, 3, 8) Shard(2) into (2, 3, 4, 2) heads, one a device, then (2, 4, 3, 2) Shard(1).
    auto heads = [](const MeshArray<double>& a) {
      const MeshArray<double> h =
          ferry::transpose(ferry::reshape(a, Shape{2, 3, 4, 2}), {0, 2, 1, 3});
      return ferry::softmax(h, 3) * h;
    };
    check_through(mesh, four(Shape{2, 3, 2}), placed(Shape{2, 3, 8}, {Shard{2}}, heads));
    // And merged back.
    auto merged = [](const MeshArray<double>& a) {
      return ferry::reshape(ferry::transpose(a, {0, 2, 1, 3}), Shape{2, 3, 8}) * 2.0;
    };
    check_through(mesh, four(Shape{2, 1, 3, 2}), placed(Shape{2, 4, 3, 2}, {Shard{1}}, merged));
  });
}

}  // namespace

}  // namespace test_placed_gradients
