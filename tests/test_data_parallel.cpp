// nn::DataParallel: SGD and Adam steps of an MLP on 4 replicas against the same steps on one
// device on the whole batch; the replicas identical after every step and bit-identical across
// thread counts; DDP bucketing on the modeled timeline (bucket 0's all-reduce on the links
// before the first layer's backward ends, more communication hidden with small buckets than
// with one); the buckets' grouping; bad input by exact type and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/nn/data_parallel.hpp>

#include "support/arrays.hpp"
#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_data_parallel {

namespace {

using ferry_test::values_of;

using ferry::Device;
using ferry::DeviceArray;
using ferry::Duration;
using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Shape;
using ferry_test::expect_error;
using ferry_test::ring;
namespace nn = ferry::nn;
namespace optim = ferry::optim;

nn::Sequential mlp(std::int64_t in, std::int64_t hidden, std::int64_t out, const Device& d) {
  return nn::Sequential(nn::Linear(in, hidden, d, {.seed = 11}), nn::ReLU(),
                        nn::Linear(hidden, out, d, {.seed = 12}));
}

/// A rows x cols array of smooth values, different for each `salt`.
HostArray<float> data(std::int64_t rows, std::int64_t cols, int salt) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + salt));
  }
  return HostArray<float>(Shape{rows, cols}, std::move(v));
}

DeviceArray<float> mse(const nn::Module& m, const DeviceArray<float>& x,
                       const DeviceArray<float>& y) {
  return nn::mse_loss(m(x), y);
}

constexpr std::int64_t kIn = 6, kHidden = 16, kOut = 3, kBatch = 16, kReplicas = 4, kSteps = 5;

/// Parameters after kSteps of `make_opt`'s optimizer on one device on the whole batch.
template <class MakeOpt>
std::vector<std::vector<float>> single_device(MakeOpt make_opt) {
  nn::Sequential model = mlp(kIn, kHidden, kOut, Device::cpu());
  auto opt = make_opt();
  const DeviceArray<float> x = ferry::to_device(Device::cpu(), data(kBatch, kIn, 1));
  const DeviceArray<float> y = ferry::to_device(Device::cpu(), data(kBatch, kOut, 2));
  auto step = nn::value_and_grad(
      model,
      [&](const DeviceArray<float>& a, const DeviceArray<float>& b) { return mse(model, a, b); });
  for (int s = 0; s < kSteps; ++s) {
    auto [loss, grads] = step(x, y);
    opt.step(model, grads);
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : model.parameters()) out.push_back(values_of(p.to_host()));
  return out;
}

/// Every replica's parameters after kSteps data-parallel on `threads` worker threads.
template <class MakeOpt>
std::vector<std::vector<std::vector<float>>> data_parallel(MakeOpt make_opt, std::size_t threads,
                                                           std::int64_t bucket_bytes) {
  const Mesh mesh = Mesh::modeled(ring(kReplicas), ferry::Executor(threads));
  std::vector<std::vector<std::vector<float>>> out;
  // The replicas, the optimizer's state, the buckets and the steps' gradients: all given back.
  ferry_test::expect_balanced_after(mesh, [&] {
    nn::DataParallel dp(mlp(kIn, kHidden, kOut, mesh.device(0)), mesh, -1,
                        {.bucket_bytes = bucket_bytes});
    auto opt = make_opt();
    const MeshArray<float> x = ferry::distribute(data(kBatch, kIn, 1), mesh, {ferry::Shard{0}});
    const MeshArray<float> y = ferry::distribute(data(kBatch, kOut, 2), mesh, {ferry::Shard{0}});
    auto step = nn::value_and_grad(dp, mse);
    for (int s = 0; s < kSteps; ++s) {
      auto [losses, grads] = step(x, y);
      EXPECT_EQ(losses.size(), kReplicas);
      opt.step(dp.parameters(), grads);
    }
    for (std::int64_t r = 0; r < dp.replicas(); ++r) {
      out.emplace_back();
      for (const auto& [name, p] : dp.named_parameters(r))
        out.back().push_back(values_of(p.to_host()));
    }
  });
  return out;
}

float max_difference(const std::vector<std::vector<float>>& a,
                     const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].size(), b[k].size());
    for (std::size_t i = 0; i < a[k].size(); ++i)
      worst = std::max(worst, std::fabs(a[k][i] - b[k][i]));
  }
  return worst;
}

// The tolerance: the replicas sum their local rows and the all-reduce averages four partial
// means, where one device sums all 16 rows at once; float32 rounding of a few additions of
// values of order 1, carried through 5 steps.
constexpr float kTolerance = 1e-6f;  // seen: 3e-8, parameters of order 0.3

template <class MakeOpt>
void expect_matches_single_device(MakeOpt make_opt) {
  const auto want = single_device(make_opt);
  const auto got = data_parallel(make_opt, 2, 256);
  for (std::int64_t r = 0; r < kReplicas; ++r) {
    const auto& replica = got[static_cast<std::size_t>(r)];
    const float difference = max_difference(replica, want);
    EXPECT_LE(difference, kTolerance) << "replica " << r;
    if (r == 0)
      std::printf("largest difference from one device: %g\n", static_cast<double>(difference));
    EXPECT_EQ(replica, got[0]) << "replica " << r << " differs from replica 0";
  }
  // The steps moved the parameters (so the comparison says something).
  const auto untrained = single_device([] { return optim::SGD({.lr = 0.0}); });
  EXPECT_GT(max_difference(want, untrained), 1e-3f);
  // Bit-identical on another thread count and another bucket size.
  EXPECT_EQ(data_parallel(make_opt, 1, 256), got);
  EXPECT_EQ(data_parallel(make_opt, 4, std::int64_t{1} << 30), got);
}

TEST(DataParallel, SgdStepsMatchOneDeviceOnTheWholeBatch) {
  expect_matches_single_device([] { return optim::SGD({.lr = 0.1, .momentum = 0.9}); });
}

TEST(DataParallel, AdamStepsMatchOneDeviceOnTheWholeBatch) {
  expect_matches_single_device([] { return optim::Adam({.lr = 0.01}); });
}

TEST(DataParallel, ForwardAppliesEachReplicaToItsShard) {
  const Mesh mesh = Mesh::modeled(ring(kReplicas));
  nn::Sequential reference = mlp(kIn, kHidden, kOut, Device::cpu());
  nn::DataParallel dp(mlp(kIn, kHidden, kOut, mesh.device(2)), mesh);
  EXPECT_EQ(dp.parameters().size(), 4u * kReplicas);
  const HostArray<float> x = data(kBatch, kIn, 3);
  const MeshArray<float> out = dp(ferry::distribute(x, mesh, {ferry::Shard{0}}));
  const std::vector<float> want =
      values_of(reference(ferry::to_device(Device::cpu(), x)).to_host());
  std::vector<float> got;
  for (const HostArray<float>& shard : out.to_host()) {
    EXPECT_EQ(shard.shape(), (Shape{kBatch / kReplicas, kOut}));
    const std::vector<float> v = values_of(shard);
    got.insert(got.end(), v.begin(), v.end());
  }
  EXPECT_EQ(got, want);  // the same kernels on the same rows
}

TEST(DataParallel, BucketsTakeParametersLastFirstUpToTheCap) {
  using Buckets = std::vector<std::vector<std::size_t>>;
  EXPECT_EQ(nn::detail::gradient_buckets({64, 256, 64, 16}, 100), (Buckets{{3, 2}, {1}, {0}}));
  EXPECT_EQ(nn::detail::gradient_buckets({64, 256, 64, 16}, 1), (Buckets{{3}, {2}, {1}, {0}}));
  EXPECT_EQ(nn::detail::gradient_buckets({64, 256, 64, 16}, 1000), (Buckets{{3, 2, 1, 0}}));
}

struct Timing {
  Duration first_all_reduce_start{};  // on any link
  Duration last_matmul_end{};         // on any device: the backward of the first layer
  Duration overlap{};
  Duration communication{};
};

/// One data-parallel value_and_grad of a wider MLP on a fresh mesh, with every input in place
/// before the window starts: where its all-reduces and its matmuls fall.
Timing one_backward(std::int64_t bucket_bytes) {
  Mesh mesh = Mesh::modeled(ring(kReplicas));
  Timing t;
  // In a window that starts halfway through the program, too: its bound is the window's.
  ferry_test::expect_balanced_after(mesh, [&] {
    nn::DataParallel dp(mlp(64, 64, 16, mesh.device(0)), mesh, 0, {.bucket_bytes = bucket_bytes});
    const MeshArray<float> x = ferry::distribute(data(32, 64, 4), mesh, {ferry::Shard{0}});
    const MeshArray<float> y = ferry::distribute(data(32, 16, 5), mesh, {ferry::Shard{0}});
    for (const DeviceArray<float>& p : dp.parameters()) ferry::wait(p);
    ferry::wait(x);
    ferry::wait(y);
    mesh.reset_stats();
    auto [losses, grads] = nn::value_and_grad(dp, mse)(x, y);
    ferry::wait(grads);
    const ferry::MeshStats stats = mesh.stats();
    t.overlap = stats.communication_overlap;
    t.communication = stats.communication_time;
    {
      auto& net = *ferry::detail::MeshAccess::state(mesh).net;
      std::lock_guard lock(net.mutex);
      bool any = false;
      for (const auto& use : net.links.uses()) {
        if (use.op != "all_reduce") continue;
        if (!any || use.start < t.first_all_reduce_start) t.first_all_reduce_start = use.start;
        any = true;
      }
      EXPECT_TRUE(any);
    }
    for (const Device& d : mesh.devices()) {
      ferry::detail::MeshState::with_simulator(d, [&](ferry::detail::Simulator& sim) {
        for (const auto& slice : sim.slices()) {
          if (slice.name == "matmul") t.last_matmul_end = std::max(t.last_matmul_end, slice.end);
        }
      });
    }
  });
  return t;
}

TEST(DataParallel, BucketAllReducesOverlapTheBackward) {
  const Timing small = one_backward(8 << 10);  // {b1, W1, b0}, then {W0}
  const Timing one = one_backward(std::int64_t{1} << 30);
  // Bucket 0 is on the links before the first layer's backward (its weight's gradient, the
  // last matmul) ends; one bucket waits for every gradient.
  EXPECT_LT(small.first_all_reduce_start, small.last_matmul_end);
  EXPECT_GE(one.first_all_reduce_start, one.last_matmul_end);
  EXPECT_GT(small.overlap, Duration::zero());
  EXPECT_LT(one.overlap, small.overlap);
  std::printf(
      "modeled communication hidden by compute: buckets of 8 KiB %lld of %lld ns, one bucket "
      "%lld of %lld ns\n",
      static_cast<long long>(small.overlap.count()),
      static_cast<long long>(small.communication.count()),
      static_cast<long long>(one.overlap.count()),
      static_cast<long long>(one.communication.count()));
  // Deterministic: the same program gives the same timeline.
  const Timing again = one_backward(8 << 10);
  EXPECT_EQ(again.overlap, small.overlap);
  EXPECT_EQ(again.first_all_reduce_start, small.first_all_reduce_start);
}

/// The donations each device's model counted during one data-parallel value_and_grad with
/// buckets of at most `bucket_bytes`.
std::vector<std::uint64_t> donations_of_one_step(std::int64_t bucket_bytes) {
  Mesh mesh = Mesh::modeled(ring(kReplicas));
  std::vector<std::uint64_t> donations;
  ferry_test::expect_balanced_after(mesh, [&] {
    nn::DataParallel dp(mlp(64, 64, 16, mesh.device(0)), mesh, 0, {.bucket_bytes = bucket_bytes});
    const MeshArray<float> x = ferry::distribute(data(32, 64, 4), mesh, {ferry::Shard{0}});
    const MeshArray<float> y = ferry::distribute(data(32, 16, 5), mesh, {ferry::Shard{0}});
    ferry::wait(x);
    ferry::wait(y);
    mesh.reset_stats();
    auto [losses, grads] = nn::value_and_grad(dp, mse)(x, y);
    ferry::wait(grads);
    for (const Device& d : mesh.devices()) donations.push_back(d.stats().donations);
  });
  return donations;
}

TEST(DataParallel, ABucketOfOneParameterIsAveragedInItsOwnBuffer) {
  // Four parameters (W0, b0, W1, b1): four buckets of one, against one bucket of four whose
  // concatenated buffer the all-reduce writes into (one donation). Of the four buckets of one,
  // the biases' gradients are buffers of their own and are written into (two donations); the
  // weights' are transposed views of a matmul's result (Linear multiplies by
  // transpose(weight)), which no op takes over. Every other step is the same in both, so each
  // device counts one donation more. A bucket of one parameter that was a flattened view (a
  // view is never donated) counted two fewer: one less than the single bucket.
  const std::vector<std::uint64_t> each = donations_of_one_step(1);
  const std::vector<std::uint64_t> one = donations_of_one_step(std::int64_t{1} << 30);
  ASSERT_EQ(each.size(), one.size());
  for (std::size_t d = 0; d < each.size(); ++d) EXPECT_EQ(each[d], one[d] + 1) << "device " << d;
}

TEST(DataParallel, DataParallelAlongOneAxisOfATwoDimensionalMesh) {
  const Mesh mesh = Mesh::modeled(ferry_test::square());
  nn::DataParallel dp(mlp(kIn, kHidden, kOut, mesh.device(0)), mesh, 1);
  optim::SGD opt({.lr = 0.1});
  // Row 0 and row 1 see different data; within a row the replicas stay equal.
  std::vector<DeviceArray<float>> xs, ys;
  for (std::int64_t r = 0; r < 4; ++r) {
    xs.push_back(ferry::to_device(mesh.device(r), data(4, kIn, r < 2 ? 1 : 7)));
    ys.push_back(ferry::to_device(mesh.device(r), data(4, kOut, static_cast<int>(r))));
  }
  const auto x = MeshArray<float>::from_shards(mesh, xs);
  const auto y = MeshArray<float>::from_shards(mesh, ys);
  auto [losses, grads] = nn::value_and_grad(dp, mse)(x, y);
  opt.step(dp.parameters(), grads);
  auto replica_values = [&](std::int64_t r) {
    std::vector<std::vector<float>> out;
    for (const auto& [name, p] : dp.named_parameters(r)) out.push_back(values_of(p.to_host()));
    return out;
  };
  EXPECT_EQ(replica_values(0), replica_values(1));
  EXPECT_EQ(replica_values(2), replica_values(3));
  EXPECT_NE(replica_values(0), replica_values(2));
}

TEST(DataParallel, AnAxisMayBeGivenByName) {
  const Mesh mesh = Mesh::modeled(ferry_test::with_axes(ferry_test::square(), {"dp", "tp"}));
  EXPECT_EQ(nn::DataParallel(mlp(kIn, kHidden, kOut, mesh.device(0)), mesh, "dp").axis(), 0);
  nn::DataParallel dp(mlp(kIn, kHidden, kOut, mesh.device(0)), mesh, "tp");
  EXPECT_EQ(dp.axis(), 1);
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::DataParallel(mlp(2, 2, 2, mesh.device(0)), mesh, "pp"); },
      "[DataParallel] mesh square has no axis named 'pp'");
}

TEST(DataParallel, BadInput) {
  const Mesh mesh = Mesh::modeled(ring(kReplicas));
  const Mesh other = Mesh::modeled(ring(3));
  const std::string name = mesh.device(0).name();
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::DataParallel(mlp(2, 2, 2, Device::cpu()), mesh); },
      "[DataParallel] the Sequential lives on " + Device::cpu().name() +
          ", which is not a device of mesh ring (4)");
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::DataParallel(mlp(2, 2, 2, other.device(1)), mesh); },
      "[DataParallel] the Sequential lives on " + other.device(1).name() +
          ", which is not a device of mesh ring (4)");
  expect_error<ferry::InvalidArgument>([&] { return nn::DataParallel(nn::ReLU(), mesh); },
                                       "[DataParallel] the ReLU has no parameters to replicate");
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::DataParallel(mlp(2, 2, 2, mesh.device(0)), mesh, -1, {.bucket_bytes = 0}); },
      "[DataParallel] bucket_bytes must be positive, got 0");
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::DataParallel(mlp(2, 2, 2, mesh.device(0)), mesh, 1); },
      ferry_test::message_of<ferry::InvalidArgument>(
          [&] { return ferry::detail::mesh_groups(mesh.spec(), 1, "DataParallel"); }));

  nn::DataParallel dp(mlp(2, 2, 2, mesh.device(1)), mesh);
  const MeshArray<float> wrong = ferry::distribute(data(3, 2, 1), other, {ferry::Shard{0}});
  expect_error<ferry::InvalidArgument>(
      [&] { return dp(wrong); },
      "[DataParallel] the input lives on mesh ring (3), the replicas on mesh ring (4)");
  expect_error<ferry::InvalidArgument>([&] { return dp(MeshArray<float>()); },
                                       "[DataParallel] got an empty mesh array");
  const MeshArray<float> right = ferry::distribute(data(4, 2, 1), mesh, {ferry::Shard{0}});
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::value_and_grad(dp, mse)(right, wrong); },
      "[nn::value_and_grad(DataParallel)] the input lives on mesh ring (3), the replicas on mesh "
      "ring (4)");
  expect_error<ferry::InvalidArgument>(
      [&] { return dp.named_parameters(4); },
      "[DataParallel::named_parameters] replica 4 is outside the 4 replicas");
  // A shard the module cannot take: the module's own error, and the parameters are taken back.
  const MeshArray<float> wide = ferry::distribute(data(4, 3, 1), mesh, {ferry::Shard{0}});
  EXPECT_THROW(dp(wide), ferry::ShapeError);
  EXPECT_EQ(dp(right).size(), kReplicas);
}

}  // namespace

}  // namespace test_data_parallel
