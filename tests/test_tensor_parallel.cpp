// Tensor parallelism (nn/tensor_parallel.hpp) and gradients through collectives: Megatron's MLP
// (ColumnParallelLinear, gelu, RowParallelLinear) against the unsharded nn::Linear, GELU,
// nn::Linear on a ring of 4 and along either axis of a 2 x 2 mesh; its forward's link traffic
// exactly that of one all-reduce; its gradients against the unsharded layers' split the same
// way, and what its backward sends; the vector-Jacobian products of the collectives as their
// transposes (all-gather's a reduce-scatter, a permutation's the inverse, an all-reduce's an
// all-reduce); all_reduce (sum, mean, max), all_gather, broadcast, permute and the
// redistributions to Replicate (and Replicate to Shard) against central finite differences;
// bad input by exact type and message. reduce_scatter and all_to_all are checked by
// test_collective_gradients.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/gradcheck.hpp"
#include "support/mesh_gradcheck.hpp"
#include "support/meshes.hpp"
#include "support/parallel_mlp.hpp"

namespace test_tensor_parallel {

namespace {

using ferry::Device;
using ferry::DeviceArray;
using ferry::HostArray;
using ferry::InvalidArgument;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::PlacementError;
using ferry::Placements;
using ferry::ReduceOp;
using ferry::Replicate;
using ferry::Shape;
using ferry::ShapeError;
using ferry::Shard;
using ferry::Topology;
using ferry_test::check_through;
using ferry_test::D;
using ferry_test::expect_error;
using ferry_test::four;
using ferry_test::hosts;
using ferry_test::quarters;
using ferry_test::redistributed;
using ferry_test::vjp_of;
namespace nn = ferry::nn;

using ferry_test::ring;
using ferry_test::square;
using ferry_test::along;
using ferry_test::expect_blocks;
using ferry_test::link_ops;

/// The meshes and axes the layers are tried on.
struct Case {
  MeshSpec spec;
  int axis;
};
std::vector<Case> cases() { return {{ring(4), 0}, {square(), 0}, {square(), 1}}; }

using namespace ferry_test::mlp;  // kIn, ..., data, transposed, ParallelMlp

// float32 against float32: the row-parallel layer sums each device's partial product over its
// rows and then the partial products, where one device sums all 10 rows at once, so results
// differ by a few roundings of values of order 1 (seen on the ring of 4: 6e-8 forward, the
// gradients equal).
constexpr float kTolerance = 1e-5F;

/// The same MLP on one device (the host CPU device).
nn::Sequential unsharded_mlp() {
  return nn::Sequential(nn::Linear(kIn, kHidden, Device::cpu(), {.seed = kSeed1}), nn::GELU(),
                        nn::Linear(kHidden, kOut, Device::cpu(), {.seed = kSeed2}));
}

TEST(TensorParallel, LayersStartAsTheUnshardedLinearWithTheSameSeed) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    const ParallelMlp tp(mesh, c.axis);
    const nn::Linear one(kIn, kHidden, Device::cpu(), {.seed = kSeed1});
    const nn::Linear two(kHidden, kOut, Device::cpu(), {.seed = kSeed2});
    EXPECT_EQ(tp.fc1.weight().placements(), along(c.spec, c.axis, Shard{1}));
    EXPECT_EQ(tp.fc1.bias().placements(), along(c.spec, c.axis, Shard{0}));
    EXPECT_EQ(tp.fc2.weight().placements(), along(c.spec, c.axis, Shard{0}));
    EXPECT_EQ(tp.fc2.bias().placements(), along(c.spec, c.axis, Replicate{}));
    EXPECT_EQ(tp.fc1.weight().global_shape(), (Shape{kIn, kHidden}));
    EXPECT_EQ(ferry::to_host(tp.fc1.weight()), transposed(one.weight().to_host()));
    EXPECT_EQ(ferry::to_host(tp.fc1.bias()), one.bias().to_host());
    EXPECT_EQ(ferry::to_host(tp.fc2.weight()), transposed(two.weight().to_host()));
    EXPECT_EQ(ferry::to_host(tp.fc2.bias()), two.bias().to_host());
    // Each device holds (in, out/n) of the column-parallel weight: 10 columns cut 3, 3, 2, 2.
    const std::int64_t n = c.spec.shape.sizes()[static_cast<std::size_t>(c.axis)];
    const std::int64_t first = ferry::detail::split_part(kHidden, n, 0).size;
    EXPECT_EQ(tp.fc1.weight().shard(0).shape(), (Shape{kIn, first}));
    EXPECT_EQ(tp.fc2.weight().shard(0).shape(), (Shape{first, kOut}));
    EXPECT_EQ(tp.fc1.parameters().size(), 2U);
    EXPECT_EQ(tp.fc1.in_features(), kIn);
    EXPECT_EQ(tp.fc1.out_features(), kHidden);
    EXPECT_TRUE(tp.fc1.has_bias());
    EXPECT_EQ(tp.fc1.axis(), c.axis);
    EXPECT_TRUE(tp.fc1.mesh() == mesh);
  }
  const Mesh mesh = Mesh::modeled(ring(4));
  const nn::RowParallelLinear plain(4, 3, mesh, 0, {.bias = false, .seed = 5});
  EXPECT_FALSE(plain.has_bias());
  EXPECT_EQ(plain.parameters().size(), 1U);
}

TEST(TensorParallel, MlpEqualsTheUnshardedOne) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const nn::Sequential one = unsharded_mlp();
  const HostArray<float> want = one(ferry::to_device(Device::cpu(), hx)).to_host();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    const ParallelMlp tp(mesh, c.axis);
    const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
    const MeshArray<float> h = tp.fc1(x);
    EXPECT_EQ(h.placements(), along(c.spec, c.axis, Shard{1}));
    const MeshArray<float> y = tp(x);
    EXPECT_EQ(y.placements(), along(c.spec, c.axis, Replicate{}));
    // Every device holds the whole output.
    const float worst = expect_blocks(y, want, kTolerance);
    EXPECT_LE(worst, kTolerance);
  }
}

TEST(TensorParallel, ABatchShardedAlongTheOtherAxisIsDataTimesTensorParallel) {
  // 2 x 2: rows of the batch along axis 0, the layers along axis 1.
  const HostArray<float> hx = data(4, kIn, 3);
  const HostArray<float> want = unsharded_mlp()(ferry::to_device(Device::cpu(), hx)).to_host();
  const Mesh mesh = Mesh::modeled(square());
  const ParallelMlp tp(mesh, 1);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}, Replicate{}});
  const MeshArray<float> y = tp(x);
  EXPECT_EQ(y.placements(), (Placements{Shard{0}, Replicate{}}));
  expect_blocks(y, want, kTolerance);
}

/// Per link name: {bytes, busy ns} of the mesh's window.
std::map<std::string, std::pair<std::int64_t, std::int64_t>> link_traffic(const Mesh& mesh) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& l : mesh.stats().links) out[l.name] = {l.bytes, l.busy.count()};
  return out;
}

TEST(TensorParallel, TheForwardSendsExactlyOneAllReduce) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    Mesh mesh = Mesh::modeled(c.spec);
    const ParallelMlp tp(mesh, c.axis);
    const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
    ferry::wait(x);
    mesh.reset_stats();
    // The column-parallel layer and gelu: no communication at all.
    const MeshArray<float> h = ferry::gelu(tp.fc1(x));
    ferry::wait(h);
    EXPECT_TRUE(mesh.stats().links.empty());
    const MeshArray<float> y = tp.fc2(h);
    ferry::wait(y);
    const auto ops = link_ops(mesh);
    ASSERT_EQ(ops.size(), 1U);
    EXPECT_EQ(ops.begin()->first, "all_reduce");
    // The same links, bytes and busy time as one all-reduce of the (batch, out) output along
    // the axis on a fresh mesh.
    Mesh fresh = Mesh::modeled(c.spec);
    const MeshArray<float> partial = ferry::distribute(HostArray<float>(Shape{kBatch, kOut}), fresh,
                                                       along(c.spec, c.axis, Partial{}));
    ferry::wait(partial);
    fresh.reset_stats();
    ferry::wait(ferry::redistribute(partial, along(c.spec, c.axis, Replicate{})));
    EXPECT_EQ(link_traffic(mesh), link_traffic(fresh));
    EXPECT_EQ(link_ops(mesh), link_ops(fresh));
  }
}

/// mse against targets on device 0, of device 0's copy of the replicated output: the loss one
/// device computes.
DeviceArray<float> loss_on_device_0(const MeshArray<float>& y, const DeviceArray<float>& target) {
  return nn::mse_loss(y.shard(0), target);
}

TEST(TensorParallel, GradientsEqualTheUnshardedLayersSplitTheSameWay) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const HostArray<float> ht = data(kBatch, kOut, 2);
  // The unsharded gradients, of the parameters and of the input.
  nn::Sequential one = unsharded_mlp();
  const DeviceArray<float> cx = ferry::to_device(Device::cpu(), hx);
  const DeviceArray<float> ct = ferry::to_device(Device::cpu(), ht);
  auto [want_loss, want] = nn::value_and_grad(
      one, [&](const DeviceArray<float>& a) { return nn::mse_loss(one(a), ct); })(cx);
  const DeviceArray<float> want_dx = std::get<1>(ferry::value_and_grad(
      [&](const DeviceArray<float>& a) { return nn::mse_loss(one(a), ct); })(cx));
  ASSERT_EQ(want.size(), 4U);  // 0.weight, 0.bias, 2.weight, 2.bias
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    // The tape, its saved activations and the gradients' all-reduces keep nothing. (A block,
    // not expect_balanced_after's lambda: clang 14 cannot capture `want`, a structured binding.)
    const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
    {
      const ParallelMlp tp(mesh, c.axis);
      const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
      const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
      std::vector<MeshArray<float>> params{x};
      for (const auto& p : tp.fc1.parameters()) params.push_back(p);
      for (const auto& p : tp.fc2.parameters()) params.push_back(p);
      auto [loss, grads] = nn::value_and_grad(
          params, [&](const MeshArray<float>& in) { return loss_on_device_0(tp(in), target); })(x);
      EXPECT_NEAR(loss.to_host()(), want_loss.to_host()(), kTolerance);
      ASSERT_EQ(grads.size(), params.size());
      for (std::size_t k = 0; k < grads.size(); ++k) {
        EXPECT_EQ(grads[k].placements(), params[k].placements()) << "parameter " << k;
      }
      // Each device's shard of each gradient: its block of the unsharded gradient (weights
      // transposed: Linear keeps (out, in)); a replicated parameter's, the whole gradient on
      // every device (the replicas' gradients summed).
      expect_blocks(grads[0], want_dx.to_host(), kTolerance);
      expect_blocks(grads[1], transposed(want[0].second.to_host()), kTolerance);
      expect_blocks(grads[2], want[1].second.to_host(), kTolerance);
      expect_blocks(grads[3], transposed(want[2].second.to_host()), kTolerance);
      expect_blocks(grads[4], want[3].second.to_host(), kTolerance);
    }
    ferry_test::expect_books_balanced(mesh, before);
  }
}

TEST(TensorParallel, TheBackwardSendsTheCotangentBackAndSumsTheReplicatedGradients) {
  // On the ring of 4, the loss on device 0. The backward of the forward's all-reduce is one
  // collective (mesh/collective_tape.hpp), not copies member to member: device 0's output
  // cotangent is the only one, so every member's is that one, broadcast from device 0 (not
  // all-reduced with zeros). The column-parallel layer's backward is local. Then
  // value_and_grad all-reduces the gradients of the replicated parameters: the row-parallel
  // bias, and the input when it is a parameter too.
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const HostArray<float> ht = data(kBatch, kOut, 2);
  Mesh mesh = Mesh::modeled(ring(4));
  const ParallelMlp tp(mesh, 0);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
  const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
  ferry::wait(x);
  mesh.reset_stats();
  std::vector<MeshArray<float>> params = tp.fc1.parameters();
  for (const auto& p : tp.fc2.parameters()) params.push_back(p);
  auto [loss, grads] = nn::value_and_grad(
      params, [&](const MeshArray<float>& in) { return loss_on_device_0(tp(in), target); })(x);
  for (const auto& g : grads) ferry::wait(g);
  // The forward's all-reduce of the (batch, out) output, the backward's broadcast of its
  // cotangent and the all-reduce of the row-parallel bias's gradient (out): the messages of
  // those three collectives alone.
  const Mesh fresh = Mesh::modeled(ring(4));
  const auto zeros_of = [&](const Shape& s) {
    return MeshArray<float>::from_shards(
        fresh, {ferry::zeros<float>(fresh.device(0), s), ferry::zeros<float>(fresh.device(1), s),
                ferry::zeros<float>(fresh.device(2), s), ferry::zeros<float>(fresh.device(3), s)});
  };
  ferry::wait(ferry::all_reduce(zeros_of(Shape{kBatch, kOut})));
  ferry::wait(ferry::broadcast(zeros_of(Shape{kBatch, kOut}), 0));
  ferry::wait(ferry::all_reduce(zeros_of(Shape{kOut})));
  EXPECT_EQ(link_ops(mesh), link_ops(fresh));
}

// ---- transposes: the vector-Jacobian products of the collectives ----

TEST(CollectiveGradients, EachCollectivesCotangentIsItsTranspose) {
  const Mesh mesh = Mesh::modeled(ring(4));
  const std::vector<D> xs = quarters(mesh, 1);
  const auto from = [&](const std::vector<D>& v) {
    return MeshArray<double>::from_shards(mesh, v);
  };
  {
    SCOPED_TRACE("all_gather: a reduce-scatter");
    const std::vector<D> cs = [&] {  // (8, 4) cotangents of the (8, 4) gathered arrays
      std::vector<D> g;
      for (const D& a : quarters(mesh, 2)) g.push_back(ferry::concat({a, a * 2.0, a * 3.0, -a}, 0));
      return g;
    }();
    const auto dxs = vjp_of(
        mesh, [](MeshArray<double> a) { return ferry::all_gather(a, 0); }, xs, cs);
    EXPECT_EQ(hosts(dxs), hosts(ferry::reduce_scatter(from(cs), 0).shards()));
  }
  {
    SCOPED_TRACE("all_reduce: an all-reduce");
    const std::vector<D> cs = quarters(mesh, 4);
    const auto dxs = vjp_of(
        mesh, [](MeshArray<double> a) { return ferry::all_reduce(a); }, xs, cs);
    EXPECT_EQ(hosts(dxs), hosts(ferry::all_reduce(from(cs)).shards()));
  }
  {
    SCOPED_TRACE("permute: the inverse permutation");
    const std::vector<std::pair<std::int64_t, std::int64_t>> pairs = {{0, 2}, {2, 3}, {3, 0}};
    const std::vector<std::pair<std::int64_t, std::int64_t>> inverse = {{2, 0}, {3, 2}, {0, 3}};
    const std::vector<D> cs = quarters(mesh, 5);
    const auto dxs = vjp_of(
        mesh, [&](MeshArray<double> a) { return ferry::permute(a, pairs); }, xs, cs);
    // Device 1 sends nothing: its cotangent is zero, as the inverse permutation gives it.
    EXPECT_EQ(hosts(dxs), hosts(ferry::permute(from(cs), inverse).shards()));
  }
}

// ---- finite differences through every collective ----

TEST(CollectiveGradients, AllReduceMatchesFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
    SCOPED_TRACE(ferry::detail::reduce_op_text(op));
    check_through(mesh, four(Shape{2, 3}),
                  [op](MeshArray<double> a) { return ferry::all_reduce(a, op); });
  }
  // Along one axis of a 2 x 2 mesh: two groups of two.
  const Mesh sq = Mesh::modeled(square());
  check_through(sq, four(Shape{3}),
                [](MeshArray<double> a) { return ferry::all_reduce(a, ReduceOp::sum, 1); });
}

TEST(CollectiveGradients, AllGatherMatchesFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  check_through(mesh, four(Shape{2, 2}),
                [](MeshArray<double> a) { return ferry::all_gather(a, 1); });
  // Shards of different sizes along the gathered dim.
  check_through(mesh, {Shape{2, 2}, Shape{1, 2}, Shape{1, 2}, Shape{1, 2}},
                [](MeshArray<double> a) { return ferry::all_gather(a, 0); });
  const Mesh sq = Mesh::modeled(square());
  check_through(sq, four(Shape{2, 3}),
                [](MeshArray<double> a) { return ferry::all_gather(a, 1, 0); });
}

TEST(CollectiveGradients, BroadcastAndPermuteMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  check_through(mesh, four(Shape{2, 3}),
                [](MeshArray<double> a) { return ferry::broadcast(a, 2); });
  check_through(mesh, four(Shape{3}), [](MeshArray<double> a) {
    return ferry::permute(a, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
  });
  // Device 1 sends nothing and device 2 receives nothing (zeros).
  check_through(mesh, four(Shape{3}), [](MeshArray<double> a) {
    return ferry::permute(a, {{0, 3}, {2, 0}, {3, 1}});
  });
}

TEST(CollectiveGradients, RedistributionsMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  {
    SCOPED_TRACE("Partial to Replicate: an all-reduce");
    check_through(mesh, four(Shape{2, 3}), redistributed(Shape{2, 3}, {Partial{}}, {Replicate{}}));
  }
  {
    SCOPED_TRACE("Shard to Replicate: an all-gather of array_split's parts");
    check_through(mesh, {Shape{2, 2}, Shape{1, 2}, Shape{1, 2}, Shape{1, 2}},
                  redistributed(Shape{5, 2}, {Shard{0}}, {Replicate{}}));
  }
  {
    SCOPED_TRACE("Replicate to Shard: a local slice");
    check_through(mesh, four(Shape{4, 2}), redistributed(Shape{4, 2}, {Replicate{}}, {Shard{0}}));
  }
  {
    SCOPED_TRACE("2 x 2: (Shard(0), Partial(sum)) to Replicate");
    const Mesh sq = Mesh::modeled(square());
    check_through(sq, four(Shape{2, 3}),
                  redistributed(Shape{4, 3}, {Shard{0}, Partial{}}, {Replicate{}, Replicate{}}));
  }
}

// ---- bad input ----

TEST(TensorParallel, BadInputIsATypedErrorAtTheCall) {
  const Mesh mesh = Mesh::modeled(ring(4));
  const Mesh other = Mesh::modeled(square());
  expect_error<InvalidArgument>(
      [&] { return nn::ColumnParallelLinear(4, 8, mesh, 1); },
      "[ColumnParallelLinear] axis 1 is not an axis of mesh ring (4) (give 0..0)");
  expect_error<InvalidArgument>(
      [&] { return nn::RowParallelLinear(-1, 8, mesh, 0); },
      "[RowParallelLinear] sizes must not be negative, got in_features -1 and out_features 8");
  const nn::ColumnParallelLinear col(4, 8, mesh, 0, {.seed = 1});
  const nn::RowParallelLinear row(8, 3, mesh, 0, {.seed = 2});
  const HostArray<float> hx = data(2, 4, 0);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
  expect_error<InvalidArgument>([&] { return col(MeshArray<float>()); },
                                "[ColumnParallelLinear] got an empty mesh array");
  // A layer moved from is refused (it read a mesh it no longer had: a null handle); a copy of
  // it is as empty, and one moved back into it works again.
  nn::ColumnParallelLinear given(4, 8, mesh, 0, {.seed = 1});
  nn::ColumnParallelLinear taken = std::move(given);
  const nn::ColumnParallelLinear copy = given;  // NOLINT(bugprone-use-after-move): on purpose
  for (const nn::ColumnParallelLinear* l : {&std::as_const(given), &copy}) {
    expect_error<InvalidArgument>([&] { return (*l)(x); },
                                  "[ColumnParallelLinear] was moved from: call the layer it was "
                                  "moved into");
  }
  given = std::move(taken);
  EXPECT_EQ(given(x).global_shape(), (Shape{2, 8}));
  nn::RowParallelLinear row_given(8, 3, mesh, 0, {.seed = 2});
  const nn::RowParallelLinear row_taken = std::move(row_given);
  expect_error<InvalidArgument>(
      [&] { return row_given(col(x)); },  // NOLINT(bugprone-use-after-move): on purpose
      "[RowParallelLinear] was moved from: call the layer it was moved into");
  EXPECT_EQ(row_taken(col(x)).global_shape(), (Shape{2, 3}));
  expect_error<InvalidArgument>(
      [&] {
        return col(ferry::distribute(hx, other, {Replicate{}, Replicate{}}));
      },
      "[ColumnParallelLinear] the input lives on mesh square (2, 2), the parameters on mesh "
      "ring (4)");
  expect_error<ShapeError>(
      [&] { return col(ferry::distribute(data(2, 5, 0), mesh, {Replicate{}})); },
      "[ColumnParallelLinear] input (2, 5) is not of rank >= 2 ending in in_features 4 "
      "(weight (4, 8))");
  expect_error<PlacementError>(
      [&] { return col(ferry::distribute(hx, mesh, {Shard{1}})); },
      "[ColumnParallelLinear] the input is placed (Shard(1)); along mesh axis 0 it must be "
      "Replicate() (the input of a column-parallel layer): call redistribute(x, (Replicate())) "
      "first");
  expect_error<PlacementError>(
      [&] { return row(ferry::distribute(data(2, 8, 0), mesh, {Replicate{}})); },
      "[RowParallelLinear] the input is placed (Replicate()); along mesh axis 0 it must be "
      "Shard(-1) (the output of a column-parallel layer): call redistribute(x, (Shard(1))) "
      "first");
  expect_error<InvalidArgument>(
      [&] { return nn::RowParallelLinear(4, 3, mesh, 0, {.bias = false}).bias(); },
      "[RowParallelLinear] this layer has no bias");
  const MeshArray<float> partial = ferry::distribute(hx, mesh, {Partial{}});
  expect_error<InvalidArgument>(
      [&] { return nn::value_and_grad({partial}, [&] { return ferry::sum(partial.shard(0)); }); },
      "[nn::value_and_grad(mesh parameters)] parameter 0 is placed (Partial(sum)); a parameter "
      "is Shard or Replicate on each mesh axis, not Partial(sum) (mesh axis 0)");
  expect_error<InvalidArgument>(
      [&] {
        return nn::value_and_grad({MeshArray<float>::from_shards(mesh, x.shards())},
                                  [&] { return ferry::sum(x.shard(0)); });
      },
      "[nn::value_and_grad(mesh parameters)] parameter 0 has no global view (placements); give "
      "it some with MeshArray::from_shards or distribute");
}

}  // namespace

}  // namespace test_tensor_parallel
