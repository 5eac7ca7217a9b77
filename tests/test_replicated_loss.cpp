// A loss replicated along mesh axes (nn::value_and_grad of a loss_fn returning a placed mesh
// scalar, or ferry::value_and_grad and ferry::grad of a function returning one): its cotangent
// is seeded on every device that holds a copy, and the transpose of the all-reduce that made
// the copies sends nothing (autodiff/backward.hpp's CopyWalk, mesh/collective_transposes.hpp).
// Checked: the gradients are those of the same program with its loss read on device 0 (bit for
// bit, through each transform) and of the unsharded MLP; the backward's messages are the old
// ones less the broadcasts of the cotangent; a loss that is not replicated (Partial, or one
// shard) goes back as before; bad losses are typed errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"
#include "support/parallel_mlp.hpp"

namespace test_replicated_loss {

namespace {

using ferry::Device;
using ferry::DeviceArray;
using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::Placements;
using ferry::ReduceOp;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry_test::along;
using ferry_test::link_ops;
using ferry_test::LinkOps;
using ferry_test::ring;
using ferry_test::square;
namespace nn = ferry::nn;
using namespace ferry_test::mlp;  // kIn, ..., data, transposed, ParallelMlp

constexpr float kTolerance = 1e-5F;  // against one device: see test_tensor_parallel.cpp

/// How the loss leaves loss_fn.
enum class Loss {
  replicated,  // the mesh scalar, Replicate along every axis (all-reduced along a batch axis)
  partial,     // the mesh scalar, Partial(sum) along the batch axis, Replicate along the other
  shard0,      // device 0's copy, a DeviceArray: as before this change
};

/// mean((y - t)^2) over the global batch as a mesh scalar, placed as `how` asks.
MeshArray<float> mse(const MeshArray<float>& y, const MeshArray<float>& t, Loss how) {
  const MeshArray<float> d = y - t;
  MeshArray<float> l = ferry::mean(d * d);  // Partial along an axis that cuts the batch
  if (how == Loss::partial) return l;
  Placements all(l.placements().size(), Replicate{});
  return l.placements() == all ? l : ferry::redistribute(l, all);
}

/// Which transform takes the gradient: nn::value_and_grad over the parameters (the input
/// among them), or ferry::value_and_grad or ferry::grad of a function taking them as
/// arguments (mesh/mesh_gradients.hpp), the same program either way.
enum class Via { nn, value_and_grad, grad };

struct Outcome {
  float loss = 0;
  std::vector<std::vector<HostArray<float>>> grads;  // per parameter, per device
  LinkOps sent;                                       // the step's messages, forward and back
};

/// Each shard of `a`, on the host.
std::vector<HostArray<float>> shards_of(const MeshArray<float>& a) {
  std::vector<HostArray<float>> out;
  for (const DeviceArray<float>& s : a.shards()) out.push_back(s.to_host());
  return out;
}

/// Zeros of `shape` on every device of `mesh`, without a global view.
MeshArray<float> zeros_on(const Mesh& mesh, const Shape& shape) {
  std::vector<DeviceArray<float>> z;
  for (const Device& d : mesh.devices()) z.push_back(ferry::zeros<float>(d, shape));
  return MeshArray<float>::from_shards(mesh, std::move(z));
}

/// The loss's global value: a DeviceArray's, or a mesh scalar's (Partial along the 2 x 2's dp
/// axis: the sum of (0,0)'s and (1,0)'s).
float loss_value(const DeviceArray<float>& loss) { return loss.to_host()(); }
float loss_value(const MeshArray<float>& loss) {
  float v = loss.shard(0).to_host()();
  if (loss.placements()[0] != ferry::Placement(Replicate{})) v += loss.shard(2).to_host()();
  return v;
}

/// The loss and gradients of `loss_fn` (of the input) with respect to `params` (the input,
/// then the MLP's four parameters, which loss_fn uses), taken `via` a transform.
template <class LossFn>
void take_gradients(Outcome& r, Via via, const std::vector<MeshArray<float>>& params,
                   const LossFn& loss_fn) {
  const MeshArray<float>& x = params[0];
  if (via == Via::nn) {
    auto [loss, grads] = nn::value_and_grad(params, loss_fn)(x);
    r.loss = loss_value(loss);
    for (const auto& g : grads) r.grads.push_back(shards_of(g));
    return;
  }
  // The parameters as arguments: the function uses the arrays they are, as loss_fn does.
  using M = const MeshArray<float>&;
  auto f = [&](M in, M, M, M, M) { return loss_fn(in); };
  auto keep = [&](const auto&... g) { (r.grads.push_back(shards_of(g)), ...); };
  if (via == Via::grad) {
    std::apply(keep, ferry::grad(f)(x, params[1], params[2], params[3], params[4]));
    r.loss = loss_value(loss_fn(x));
    return;
  }
  auto all = ferry::value_and_grad(f)(x, params[1], params[2], params[3], params[4]);
  r.loss = loss_value(std::get<0>(all));
  std::apply([&](const auto&, const auto&... g) { keep(g...); }, all);
}

/// One gradient of the MLP along `axis` of `spec`, its input placed `xp`, with the loss
/// returned as `how` says, taken `via` a transform.
Outcome run(const MeshSpec& spec, int axis, const Placements& xp, Loss how,
            Via via = Via::nn) {
  Mesh mesh = Mesh::modeled(spec);
  const ParallelMlp tp(mesh, axis);
  const MeshArray<float> x = ferry::distribute(data(kBatch, kIn, 1), mesh, xp);
  const MeshArray<float> t = ferry::distribute(data(kBatch, kOut, 2), mesh, xp);
  ferry::wait(x);
  ferry::wait(t);
  for (const auto& p : tp.parameters()) ferry::wait(p);
  mesh.reset_stats();
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  std::vector<MeshArray<float>> params{x};
  for (const auto& p : tp.parameters()) params.push_back(p);
  Outcome r;
  if (how == Loss::shard0) {
    take_gradients(r, via, params, [&](const MeshArray<float>& in) {
      return mse(tp(in), t, Loss::replicated).shard(0);
    });
  } else {
    take_gradients(r, via, params,
                  [&](const MeshArray<float>& in) { return mse(tp(in), t, how); });
  }
  // The seeds' copies dropped on the way back hold no memory: every device back where it was.
  ferry_test::expect_books_balanced(mesh, before);
  r.sent = link_ops(mesh);
  return r;
}

/// The unsharded MLP's loss and gradients (input, fc1 weight, bias, fc2 weight, bias), laid
/// out as the parameters of the sharded one are: the weights (in, out).
std::pair<float, std::vector<HostArray<float>>> unsharded() {
  nn::Sequential one(nn::Linear(kIn, kHidden, Device::cpu(), {.seed = kSeed1}), nn::GELU(),
                     nn::Linear(kHidden, kOut, Device::cpu(), {.seed = kSeed2}));
  const DeviceArray<float> x = ferry::to_device(Device::cpu(), data(kBatch, kIn, 1));
  const DeviceArray<float> t = ferry::to_device(Device::cpu(), data(kBatch, kOut, 2));
  auto [loss, grads] = nn::value_and_grad(
      one, [&](const DeviceArray<float>& a) { return nn::mse_loss(one(a), t); })(x);
  const DeviceArray<float> dx = std::get<1>(ferry::value_and_grad(
      [&](const DeviceArray<float>& a) { return nn::mse_loss(one(a), t); })(x));
  return {loss.to_host()(),
          {dx.to_host(), transposed(grads[0].second.to_host()), grads[1].second.to_host(),
           transposed(grads[2].second.to_host()), grads[3].second.to_host()}};
}

/// The MLP's cases: a ring of 4 (one axis, the batch whole) and a 2 x 2 with the batch cut
/// along axis 0 and the layers along axis 1 (data x tensor parallel, as tutorial 11).
struct Case {
  std::string name;
  MeshSpec spec;
  int axis;
  Placements x;
};
std::vector<Case> cases() {
  return {{"ring of 4", ring(4), 0, {Replicate{}}},
          {"2 x 2, dp x tp", square(), 1, {Shard{0}, Replicate{}}}};
}

TEST(ReplicatedLoss, GradientsAreThoseOfTheLossOnOneDevice) {
  const auto [want_loss, want] = unsharded();
  for (const Case& c : cases()) {
    for (const Loss how : {Loss::replicated, Loss::partial}) {
      SCOPED_TRACE(c.name + (how == Loss::partial ? ", Partial along dp" : ", Replicate"));
      const Outcome before = run(c.spec, c.axis, c.x, Loss::shard0);
      const Outcome now = run(c.spec, c.axis, c.x, how);
      EXPECT_NEAR(now.loss, want_loss, kTolerance);
      EXPECT_EQ(now.loss, before.loss);
      ASSERT_EQ(now.grads.size(), want.size());
      // Each copy computes what device 0 computed and sent before: the same floats, on the
      // ring and, with the loss all-reduced along dp, on the 2 x 2 (with the loss's summands
      // seeded on their own devices it is the same sums too).
      EXPECT_EQ(now.grads, before.grads);
      // ferry::value_and_grad and ferry::grad of the same program: the same floats, with the
      // loss a mesh scalar or its .shard(0), and the same messages.
      for (const Via via : {Via::value_and_grad, Via::grad}) {
        SCOPED_TRACE(via == Via::grad ? "ferry::grad" : "ferry::value_and_grad");
        const Outcome plain = run(c.spec, c.axis, c.x, how, via);
        EXPECT_EQ(plain.loss, now.loss);
        EXPECT_EQ(plain.grads, now.grads);
        EXPECT_EQ(run(c.spec, c.axis, c.x, Loss::shard0, via).grads, before.grads);
        if (via == Via::value_and_grad) {
          EXPECT_EQ(plain.sent, now.sent);
        }
      }
      // And the unsharded gradients, each device's block of them.
      const Mesh mesh = Mesh::modeled(c.spec);
      const ParallelMlp tp(mesh, c.axis);
      std::vector<Placements> placed{c.x};
      for (const auto& p : tp.parameters()) placed.push_back(p.placements());
      for (std::size_t k = 0; k < want.size(); ++k) {
        SCOPED_TRACE("parameter " + std::to_string(k));
        const Shape global = want[k].shape();
        std::vector<DeviceArray<float>> shards;
        for (std::size_t d = 0; d < now.grads[k].size(); ++d)
          shards.push_back(ferry::to_device(mesh.device(static_cast<std::int64_t>(d)),
                                            now.grads[k][d]));
        const auto g = MeshArray<float>::from_shards(mesh, std::move(shards), global, placed[k]);
        ferry_test::expect_blocks(g, want[k], kTolerance);
      }
    }
  }
}

/// `ops` without the op `name`.
LinkOps without(LinkOps ops, const std::string& name) {
  ops.erase(name);
  return ops;
}

TEST(ReplicatedLoss, TheBackwardOfTheLastAllReduceSendsNothing) {
  {
    SCOPED_TRACE("ring of 4: before, device 0's (3, 5) cotangent (60 bytes) was broadcast "
                 "to the other three, half each way round the ring: 3 hops of 30 bytes each "
                 "way, 6 messages, 180 bytes; now nothing");
    const Case c = cases()[0];
    const Outcome before = run(c.spec, c.axis, c.x, Loss::shard0);
    const Outcome now = run(c.spec, c.axis, c.x, Loss::replicated);
    ASSERT_TRUE(before.sent.contains("broadcast"));
    EXPECT_EQ(before.sent.at("broadcast"), (std::pair<std::int64_t, std::int64_t>{6, 6 * 30}));
    EXPECT_EQ(now.sent, without(before.sent, "broadcast"));
    // What is left: the forward's all-reduce of the (3, 5) output and the all-reduce of the
    // replicated fc2 bias's and input's gradients (5 and 3 x 6 floats), as called directly.
    Mesh fresh = Mesh::modeled(c.spec);
    ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kBatch, kOut})));
    ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kBatch, kIn})));
    ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kOut})));
    EXPECT_EQ(now.sent, link_ops(fresh));
  }
  {
    SCOPED_TRACE("2 x 2: before, the loss's cotangent went from (0,0) to (1,0) along dp "
                 "(one 4-byte message in each dp group) and then along tp from each dp rank's "
                 "first chip to its second, (2, 5) and (1, 5) floats; now nothing");
    const Case c = cases()[1];
    const Outcome before = run(c.spec, c.axis, c.x, Loss::shard0);
    const Outcome now = run(c.spec, c.axis, c.x, Loss::replicated);
    ASSERT_TRUE(before.sent.contains("broadcast"));
    EXPECT_EQ(before.sent.at("broadcast"),
              (std::pair<std::int64_t, std::int64_t>{4, 2 * 4 + 2 * 5 * 4 + 1 * 5 * 4}));
    EXPECT_EQ(now.sent, without(before.sent, "broadcast"));
    const Outcome partial = run(c.spec, c.axis, c.x, Loss::partial);
    // Partial along dp needs no all-reduce of the loss: the forward's all-reduce of the
    // scalar along dp is gone too, the rest is the same.
    Mesh fresh = Mesh::modeled(c.spec);
    ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{}), ReduceOp::sum, 0));
    const auto [messages, bytes] = link_ops(fresh).at("all_reduce");
    LinkOps less = now.sent;
    less["all_reduce"].first -= messages;
    less["all_reduce"].second -= bytes;
    EXPECT_EQ(partial.sent, less);
  }
}

TEST(ReplicatedLoss, ALossThatIsNotReplicatedGoesBackAsBefore) {
  const Case c = cases()[0];
  {
    SCOPED_TRACE("one shard (a DeviceArray): its cotangent is broadcast (test_tensor_parallel)");
    EXPECT_TRUE(run(c.spec, c.axis, c.x, Loss::shard0).sent.contains("broadcast"));
  }
  SCOPED_TRACE("Partial(sum) over the ring: each device's quarter of the loss, its own seed; "
               "the four cotangents are summands, so the all-reduce's transpose sums them");
  const auto [want_loss, want] = unsharded();
  Mesh mesh = Mesh::modeled(c.spec);
  const ParallelMlp tp(mesh, c.axis);
  const MeshArray<float> x = ferry::distribute(data(kBatch, kIn, 1), mesh, c.x);
  const MeshArray<float> t = ferry::distribute(data(kBatch, kOut, 2), mesh, c.x);
  ferry::wait(x);
  ferry::wait(t);
  mesh.reset_stats();
  auto [loss, grads] = nn::value_and_grad(tp.parameters(), [&](const MeshArray<float>& in) {
    const MeshArray<float> l = mse(tp(in), t, Loss::replicated) * 0.25;
    return MeshArray<float>::from_shards(mesh, l.shards(), Shape{}, {Partial{}});
  })(x);
  float sum = 0;
  for (const auto& s : loss.shards()) sum += s.to_host()();
  EXPECT_NEAR(sum, want_loss, kTolerance);
  ferry_test::expect_blocks(grads[0], want[1], kTolerance);
  ferry_test::expect_blocks(grads[3], want[4], kTolerance);
  // The forward's all-reduce, the backward's all-reduce of the output's four cotangents, and
  // fc2 bias's gradient's: the messages of those three called directly.
  Mesh fresh = Mesh::modeled(c.spec);
  ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kBatch, kOut})));
  ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kBatch, kOut})));
  ferry::wait(ferry::all_reduce(zeros_on(fresh, Shape{kOut})));
  EXPECT_EQ(link_ops(mesh), link_ops(fresh));
}

TEST(ReplicatedLoss, ALossThatIsNoScalarOrPlacedByMaxIsATypedError) {
  const Mesh mesh = Mesh::modeled(ring(4));
  const ParallelMlp tp(mesh, 0);
  const MeshArray<float> x = ferry::distribute(data(kBatch, kIn, 1), mesh, {Replicate{}});
  ferry_test::expect_error<ferry::InvalidArgument>(
      [&] { nn::value_and_grad(tp.parameters(), [&](const MeshArray<float>& in) {
              return tp(in);
            })(x); },
      "[nn::value_and_grad(mesh parameters)] the loss is a mesh array of global shape (3, 5); "
      "it must be a placed scalar (global shape ())");
  ferry_test::expect_error<ferry::InvalidArgument>(
      [&] { nn::value_and_grad(tp.parameters(), [&](const MeshArray<float>& in) {
              const MeshArray<float> l = ferry::sum(tp(in));
              return MeshArray<float>::from_shards(mesh, l.shards(), Shape{},
                                                   {Partial{ReduceOp::max}});
            })(x); },
      "[nn::value_and_grad(mesh parameters)] the loss is placed (Partial(max)); a loss is "
      "Replicate, Partial(sum) or Partial(mean) on each mesh axis, not Partial(max) (mesh "
      "axis 0)");
}

}  // namespace

}  // namespace test_replicated_loss
