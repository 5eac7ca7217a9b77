// Optimizers stepping mesh-array parameters (optim::Optimizer's mesh step): Megatron's MLP
// (ColumnParallelLinear, gelu, RowParallelLinear) trained with SGD (momentum, weight decay),
// Adam and AdamW on a ring of 4 and along either axis of a 2 x 2 mesh equals the same MLP of
// nn::Linear trained on one device, step by step, and the copies along Replicate axes stay equal
// bit for bit; each shard and its state keep their buffers from step to step, the state is
// placed as its parameter, the devices' peak memory stays flat and the books balance; a
// state_dict of mesh state is refused, and bad input is a typed error naming the optimizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/errors.hpp"
#include "support/meshes.hpp"
#include "support/parallel_mlp.hpp"

namespace test_mesh_optim {

namespace {

using ferry_test::buffer_of;

using ferry::Device;
using ferry::DeviceArray;
using ferry::HostArray;
using ferry::InvalidArgument;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::PlacementError;
using ferry::Replicate;
using ferry::Shape;
using ferry::ShapeError;
using ferry::Shard;
using ferry_test::along;
using ferry_test::expect_error;
using ferry_test::ring;
using ferry_test::square;
namespace nn = ferry::nn;
namespace optim = ferry::optim;

using namespace ferry_test::mlp;  // kIn, ..., data, transposed, ParallelMlp
constexpr int kSteps = 5;

// float32 against float32, after kSteps steps. The row-parallel layer sums each device's
// partial product and then the partial products (the forward's all-reduce), where one device
// sums all 10 rows at once: the losses and gradients differ by a few roundings of values of
// order 1, which the updates carry on. Seen on these meshes after 5 steps: at most 3e-8 in
// any parameter, for every optimizer.
constexpr float kTolerance = 1e-6F;

/// One step of `opt` on the parallel MLP: mse on device 0's copy of the replicated output, the
/// gradients from nn::value_and_grad over the layers' parameters. Returns the loss.
DeviceArray<float> parallel_step(ParallelMlp& mlp, optim::Optimizer& opt, const MeshArray<float>& x,
                                 const DeviceArray<float>& target) {
  auto [loss, grads] = nn::value_and_grad(mlp.parameters(), [&](const MeshArray<float>& in) {
    return nn::mse_loss(mlp(in).shard(0), target);
  })(x);
  opt.step(mlp.parameter_slots(), grads);
  return loss;
}

/// The optimizers tried, each made anew for either side.
struct OptimizerCase {
  std::string name;
  std::function<std::unique_ptr<optim::Optimizer>()> make;
};
std::vector<OptimizerCase> optimizers() {
  return {
      {"SGD with momentum",
       [] { return std::make_unique<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9}); }},
      {"SGD nesterov, weight decay",
       [] {
         return std::make_unique<optim::SGD>(optim::SGDOptions{
             .lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true});
       }},
      {"Adam", [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.lr = 0.01}); }},
      {"AdamW",
       [] {
         return std::make_unique<optim::AdamW>(
             optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
  };
}

/// Expects every two shards of `a` that hold the same block (copies along a Replicate axis) to
/// be equal bit for bit.
void expect_copies_identical(const MeshArray<float>& a, const std::string& what) {
  const Mesh mesh = a.mesh();
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const auto bi = ferry::detail::block_of(a.global_shape(), a.placements(), mesh.shape(),
                                            mesh.shape().coordinate_of(i));
    for (std::int64_t j = i + 1; j < a.size(); ++j) {
      const auto bj = ferry::detail::block_of(a.global_shape(), a.placements(), mesh.shape(),
                                              mesh.shape().coordinate_of(j));
      if (bi.begin != bj.begin || bi.sizes != bj.sizes) continue;
      const HostArray<float> hi = a.shard(i).to_host();
      const HostArray<float> hj = a.shard(j).to_host();
      ASSERT_EQ(hi.data().size(), hj.data().size());
      EXPECT_EQ(std::memcmp(hi.data().data(), hj.data().data(), hi.data().size() * sizeof(float)),
                0)
          << what << ": the copies on devices " << i << " and " << j << " differ";
    }
  }
}

struct Case {
  MeshSpec spec;
  int axis;
};
std::vector<Case> cases() { return {{ring(4), 0}, {square(), 0}, {square(), 1}}; }

TEST(MeshOptim, TrainingTheParallelMlpEqualsTrainingTheUnshardedOne) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const HostArray<float> ht = data(kBatch, kOut, 2);
  for (const OptimizerCase& oc : optimizers()) {
    // The unsharded MLP on one device, stepped through the module.
    nn::Sequential one(nn::Linear(kIn, kHidden, Device::cpu(), {.seed = kSeed1}), nn::GELU(),
                       nn::Linear(kHidden, kOut, Device::cpu(), {.seed = kSeed2}));
    const DeviceArray<float> cx = ferry::to_device(Device::cpu(), hx);
    const DeviceArray<float> ct = ferry::to_device(Device::cpu(), ht);
    std::unique_ptr<optim::Optimizer> want_opt = oc.make();
    std::vector<float> want_losses;
    for (int s = 0; s < kSteps; ++s) {
      auto [loss, grads] = nn::value_and_grad(
          one, [&](const DeviceArray<float>& a) { return nn::mse_loss(one(a), ct); })(cx);
      want_opt->step(one, grads);
      want_losses.push_back(loss.to_host()());
    }
    const nn::NamedParameters want = one.named_parameters();  // 0.weight, 0.bias, 2.weight, 2.bias
    ASSERT_EQ(want.size(), 4U);
    for (const Case& c : cases()) {
      SCOPED_TRACE(oc.name + " on " + c.spec.name + " axis " + std::to_string(c.axis));
      const Mesh mesh = Mesh::modeled(c.spec);
      const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
      {
        ParallelMlp tp(mesh, c.axis);
        const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
        const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
        std::unique_ptr<optim::Optimizer> opt = oc.make();
        for (int s = 0; s < kSteps; ++s) {
          const DeviceArray<float> loss = parallel_step(tp, *opt, x, target);
          EXPECT_NEAR(loss.to_host()(), want_losses[static_cast<std::size_t>(s)], kTolerance)
              << "step " << s;
        }
        EXPECT_EQ(opt->steps(), kSteps);
        ferry_test::expect_blocks(tp.fc1.weight(), transposed(want[0].second.to_host()),
                                  kTolerance);
        ferry_test::expect_blocks(tp.fc1.bias(), want[1].second.to_host(), kTolerance);
        ferry_test::expect_blocks(tp.fc2.weight(), transposed(want[2].second.to_host()),
                                  kTolerance);
        ferry_test::expect_blocks(tp.fc2.bias(), want[3].second.to_host(), kTolerance);
        const std::vector<MeshArray<float>> params = tp.parameters();
        for (std::size_t k = 0; k < params.size(); ++k) {
          expect_copies_identical(params[k], "parameter " + std::to_string(k));
        }
        for (const auto& [name, s] : opt->mesh_state()) expect_copies_identical(s, "state " + name);
      }
      ferry_test::expect_books_balanced(mesh, before);
    }
  }
}

/// Every shard's buffer of the MLP's parameters, then of the optimizer's state.
std::vector<const std::byte*> buffers(ParallelMlp& mlp, const optim::Optimizer& opt) {
  std::vector<const std::byte*> out;
  for (const MeshArray<float>& p : mlp.parameters()) {
    for (const DeviceArray<float>& s : p.shards()) out.push_back(buffer_of(s));
  }
  for (const auto& [name, st] : opt.mesh_state()) {
    for (const DeviceArray<float>& s : st.shards()) out.push_back(buffer_of(s));
  }
  return out;
}

TEST(MeshOptim, EachShardIsUpdatedInPlaceWithItsStateBesideItAndMemoryStaysFlat) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const HostArray<float> ht = data(kBatch, kOut, 2);
  for (const OptimizerCase& oc : optimizers()) {
    SCOPED_TRACE(oc.name);
    // The same buffers at every step, each state shard on its parameter shard's device.
    {
      const MeshSpec spec = square();
      const Mesh mesh = Mesh::modeled(spec);
      ParallelMlp tp(mesh, 1);
      const MeshArray<float> x = ferry::distribute(hx, mesh, along(spec, 1, Replicate{}));
      const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
      std::unique_ptr<optim::Optimizer> opt = oc.make();
      std::vector<const std::byte*> first;
      for (int s = 0; s < kSteps; ++s) {
        parallel_step(tp, *opt, x, target);
        const std::vector<const std::byte*> now = buffers(tp, *opt);
        if (s == 0) {
          first = now;
        } else {
          EXPECT_EQ(now, first) << "step " << s;
        }
      }
      const std::vector<MeshArray<float>> params = tp.parameters();
      const auto state = opt->mesh_state();
      const std::size_t keys = oc.name.rfind("SGD", 0) == 0 ? 1 : 2;
      ASSERT_EQ(state.size(), params.size() * keys);
      for (std::size_t e = 0; e < state.size(); ++e) {
        const MeshArray<float>& p = params[e / keys];
        const MeshArray<float>& st = state[e].second;
        EXPECT_EQ(state[e].first.substr(0, 2), std::to_string(e / keys) + ".");
        EXPECT_EQ(st.global_shape(), p.global_shape()) << state[e].first;
        EXPECT_EQ(st.placements(), p.placements()) << state[e].first;
        for (std::int64_t i = 0; i < p.size(); ++i) {
          EXPECT_EQ(st.shard(i).device(), p.shard(i).device()) << state[e].first << " shard " << i;
          EXPECT_EQ(st.shard(i).shape(), p.shard(i).shape()) << state[e].first << " shard " << i;
        }
      }
    }
    // No export between steps: once the state exists, a step takes no more memory than the
    // one before, on any device; and the program leaves the memory as it found it.
    const Mesh mesh = Mesh::modeled(ring(4));
    ferry_test::expect_balanced_after(mesh, [&] {
      ParallelMlp tp(mesh, 0);
      const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
      const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
      std::unique_ptr<optim::Optimizer> opt = oc.make();
      std::vector<std::uint64_t> peak_after_two;
      std::vector<std::uint64_t> donations_after_two;
      for (int s = 1; s <= 8; ++s) {
        parallel_step(tp, *opt, x, target);
        if (s == 2) {
          for (const Device& d : mesh.devices()) {
            peak_after_two.push_back(d.stats().peak_dram_bytes);
            donations_after_two.push_back(d.stats().donations);
          }
        }
      }
      for (const MeshArray<float>& p : tp.parameters()) ferry::wait(p);
      for (std::size_t i = 0; i < mesh.devices().size(); ++i) {
        const ferry::DeviceStats st = mesh.devices()[i].stats();
        EXPECT_EQ(st.peak_dram_bytes, peak_after_two[i]) << "device " << i;
        // Six steps, each overwriting at least the device's four parameter shards.
        EXPECT_GE(st.donations, donations_after_two[i] + 6 * 4) << "device " << i;
      }
    });
  }
}

TEST(MeshOptim, MeshStateHasNoStateDictAndBadInputIsATypedErrorNamingTheOptimizer) {
  const HostArray<float> hx = data(kBatch, kIn, 1);
  const HostArray<float> ht = data(kBatch, kOut, 2);
  const Mesh mesh = Mesh::modeled(ring(4));
  ParallelMlp tp(mesh, 0);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
  const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
  // Not a structured binding: clang 14 cannot capture one in the lambdas below.
  const std::vector<MeshArray<float>> grads =
      nn::value_and_grad(tp.parameters(), [&](const MeshArray<float>& in) {
        return nn::mse_loss(tp(in).shard(0), target);
      })(x).second;
  optim::SGD sgd({.lr = 0.1, .momentum = 0.9});
  const std::vector<MeshArray<float>*> slots = tp.parameter_slots();

  // Before the first step: the checks of each pair.
  expect_error<InvalidArgument>(
      [&] { sgd.step(slots, std::vector<MeshArray<float>>(grads.begin(), grads.end() - 1)); },
      "[SGD] 4 mesh parameters but 3 gradients were given");
  MeshArray<float> empty;
  expect_error<InvalidArgument>(
      [&] {
        sgd.step(std::vector<MeshArray<float>*>{&empty}, std::vector<MeshArray<float>>{grads[0]});
      },
      "[SGD] mesh parameter 0 is an empty mesh array");
  std::vector<MeshArray<float>> swapped = grads;
  std::swap(swapped[0], swapped[1]);
  expect_error<ShapeError>([&] { sgd.step(slots, swapped); },
                           "[SGD] mesh parameter 0 has global shape (6, 10), its gradient (10)");
  std::vector<MeshArray<float>> replicated = grads;
  replicated[0] = ferry::redistribute(grads[0], {Replicate{}});
  expect_error<PlacementError>(
      [&] { sgd.step(slots, replicated); },
      "[SGD] mesh parameter 0 is placed (Shard(1)), its gradient (Replicate()): redistribute "
      "the gradient to its parameter's placements");
  const Mesh other = Mesh::modeled(ring(4));
  std::vector<MeshArray<float>> elsewhere = grads;
  elsewhere[3] = ferry::distribute(HostArray<float>(Shape{kOut}), other, {Replicate{}});
  expect_error<InvalidArgument>([&] { sgd.step(slots, elsewhere); },
                                "[SGD] mesh parameter 3 lives on mesh ring (4), its gradient on "
                                "mesh ring (4)");
  EXPECT_EQ(sgd.steps(), 0);
  EXPECT_TRUE(sgd.mesh_state().empty());

  // After a step, the state is for these parameters, one array per device.
  sgd.step(slots, grads);
  EXPECT_EQ(sgd.steps(), 1);
  const std::string layouts =
      "4 mesh parameters: (6, 10) placed (Shard(1)) on ring (4), (10) placed (Shard(0)) on ring "
      "(4), (10, 5) placed (Shard(0)) on ring (4), (5) placed (Replicate()) on ring (4)";
  expect_error<InvalidArgument>([&] { return sgd.state_dict(); },
                                "[SGD::state_dict] the state is of " + layouts +
                                    ", one array per device, which this does not hold: see "
                                    "mesh_state()");
  expect_error<InvalidArgument>([&] { return sgd.state(); },
                                "[SGD::state] the state is of " + layouts +
                                    ", one array per device, which this does not hold: see "
                                    "mesh_state()");
  expect_error<InvalidArgument>([&] { sgd.load_state_dict({}); },
                                "[SGD::load_state_dict] the state is of " + layouts +
                                    ", one array per device, which this does not hold: load "
                                    "state only into an optimizer of DeviceArray parameters");
  const std::vector<MeshArray<float>*> fewer(slots.begin(), slots.begin() + 2);
  expect_error<InvalidArgument>(
      [&] { sgd.step(fewer, std::vector<MeshArray<float>>(grads.begin(), grads.begin() + 2)); },
      "[SGD] its state is for " + layouts +
          "; got 2 mesh parameters: (6, 10) placed (Shard(1)) on ring (4), (10) placed "
          "(Shard(0)) on ring (4): step the same parameters every time");
  DeviceArray<float> w = ferry::zeros<float>(Device::cpu(), Shape{2});
  const DeviceArray<float> g = ferry::zeros<float>(Device::cpu(), Shape{2});
  expect_error<InvalidArgument>(
      [&] {
        sgd.step(std::span<DeviceArray<float>>(&w, 1), std::span<const DeviceArray<float>>(&g, 1));
      },
      "[SGD] its state is for " + layouts +
          ": step them, or give DeviceArray parameters to an optimizer of their own");
  EXPECT_EQ(sgd.steps(), 1);

  // An optimizer of DeviceArray parameters does not step mesh ones, nor gives mesh state.
  optim::Adam adam;
  adam.step(std::span<DeviceArray<float>>(&w, 1), std::span<const DeviceArray<float>>(&g, 1));
  expect_error<InvalidArgument>([&] { adam.step(slots, grads); },
                                "[Adam] its state is for DeviceArray parameters (stepped or "
                                "loaded): step mesh parameters with an optimizer of their own");
  expect_error<InvalidArgument>([&] { return adam.mesh_state(); },
                                "[Adam::mesh_state] the state is for DeviceArray parameters: see "
                                "state()");
}

}  // namespace

}  // namespace test_mesh_optim
