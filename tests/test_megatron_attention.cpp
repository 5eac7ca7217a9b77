// Megatron's tensor-parallel attention block (nn::ParallelSelfAttention in
// nn/parallel_attention.hpp) against nn::MultiheadAttention on one device, started from the same
// seed: its parameters, its output (plain and causal, on a ring of 4 with one head a device and
// along either axis of a 2 x 2 mesh with two, and data x tensor parallel with the batch cut
// along the other axis), its forward's link traffic exactly that of one all-reduce, its
// gradients against the unsharded layer's split the same way; the tensor-parallel linear layers
// made from given parameters; bad input by exact type and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

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
using ferry::Replicate;
using ferry::Shape;
using ferry::ShapeError;
using ferry::Shard;
using ferry_test::along;
using ferry_test::expect_balanced_after;
using ferry_test::expect_blocks;
using ferry_test::expect_error;
using ferry_test::link_ops;
using ferry_test::ring;
using ferry_test::square;
namespace nn = ferry::nn;

/// The meshes and axes the block is tried on: one head a device on the ring, two along an axis
/// of the square.
struct Case {
  MeshSpec spec;
  int axis;
};
std::vector<Case> cases() { return {{ring(4), 0}, {square(), 0}, {square(), 1}}; }

constexpr std::int64_t kBatch = 2, kLength = 5, kEmbed = 8, kHeads = 4;
constexpr std::uint64_t kSeed = 31;

// float32 against float32. The sharded block computes each projection's columns with the same
// dot products as the unsharded one, and each head's attention alike; only the output
// projection sums in another order (each device its heads' rows, then the all-reduce across
// devices, where one device sums all 8 rows at once). Values are of order 1, so results differ
// by a few roundings: seen 3e-8 forward and 7e-9 in the gradients (the tests print the largest
// difference), so 1e-6 leaves a margin of thirty for other compilers' orders of additions.
constexpr float kTolerance = 1e-6F;

/// A (n, l, e) array of smooth values of order 1, different for each `salt`.
HostArray<float> data(Shape shape, int salt) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + salt));
  }
  return HostArray<float>(shape, v);
}

/// Rows [first, first + count) of a 2-D host array, transposed.
HostArray<float> rows_transposed(const HostArray<float>& a, std::int64_t first, std::int64_t count) {
  const std::int64_t c = a.shape().dims()[1];
  HostArray<float> t(Shape{c, count});
  for (std::int64_t i = 0; i < count; ++i) {
    for (std::int64_t j = 0; j < c; ++j) {
      t.data()[static_cast<std::size_t>(j * count + i)] =
          a.data()[static_cast<std::size_t>((first + i) * c + j)];
    }
  }
  return t;
}

/// Elements [first, first + count) of a 1-D host array.
HostArray<float> part(const HostArray<float>& a, std::int64_t first, std::int64_t count) {
  const auto b = a.data().begin() + first;
  return HostArray<float>(Shape{count}, std::vector<float>(b, b + count));
}

nn::MultiheadAttention unsharded() {
  return nn::MultiheadAttention(kEmbed, kHeads, Device::cpu(), {.seed = kSeed});
}

TEST(MegatronAttention, StartsAsMultiheadAttentionWithTheSameSeed) {
  const nn::MultiheadAttention one = unsharded();
  const HostArray<float> in_w = one.in_proj_weight().to_host();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
      EXPECT_EQ(tp.embed_dim(), kEmbed);
      EXPECT_EQ(tp.num_heads(), kHeads);
      EXPECT_EQ(tp.head_dim(), kEmbed / kHeads);
      EXPECT_EQ(tp.axis(), c.axis);
      EXPECT_TRUE(tp.mesh() == mesh);
      const nn::ColumnParallelLinear* qkv[] = {&tp.q_proj(), &tp.k_proj(), &tp.v_proj()};
      for (std::int64_t p = 0; p < 3; ++p) {
        const auto& l = *qkv[p];
        EXPECT_EQ(l.weight().placements(), along(c.spec, c.axis, Shard{1}));
        EXPECT_EQ(l.bias().placements(), along(c.spec, c.axis, Shard{0}));
        EXPECT_EQ(ferry::to_host(l.weight()), rows_transposed(in_w, p * kEmbed, kEmbed)) << p;
        EXPECT_EQ(ferry::to_host(l.bias()), part(one.in_proj_bias().to_host(), p * kEmbed, kEmbed));
      }
      EXPECT_EQ(tp.out_proj().weight().placements(), along(c.spec, c.axis, Shard{0}));
      EXPECT_EQ(tp.out_proj().bias().placements(), along(c.spec, c.axis, Replicate{}));
      EXPECT_EQ(ferry::to_host(tp.out_proj().weight()),
                rows_transposed(one.out_proj().weight().to_host(), 0, kEmbed));
      EXPECT_EQ(ferry::to_host(tp.out_proj().bias()), one.out_proj().bias().to_host());
      // Each device holds the columns of its heads: 8 / n of the 8.
      const std::int64_t n = c.spec.shape.sizes()[static_cast<std::size_t>(c.axis)];
      EXPECT_EQ(tp.q_proj().weight().shard(0).shape(), (Shape{kEmbed, kEmbed / n}));
      EXPECT_EQ(tp.parameters().size(), 8U);
    });
  }
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    const nn::ParallelSelfAttention plain(kEmbed, kHeads, mesh, 0, {.bias = false, .seed = 1});
    EXPECT_EQ(plain.parameters().size(), 4U);
    EXPECT_FALSE(plain.q_proj().has_bias());
    EXPECT_FALSE(plain.out_proj().has_bias());
  });
}

TEST(MegatronAttention, OutputEqualsTheUnshardedAttention) {
  const HostArray<float> hx = data(Shape{kBatch, kLength, kEmbed}, 1);
  const nn::MultiheadAttention one = unsharded();
  const DeviceArray<float> cx = ferry::to_device(Device::cpu(), hx);
  const HostArray<float> want = one(cx).to_host();
  const HostArray<float> want_causal = one(cx, {.causal = true}).to_host();
  const HostArray<float> want_scaled = one(cx, {.scale = 0.25}).to_host();
  ASSERT_NE(want, want_causal);  // the causal case checks something of its own
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
      const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
      const MeshArray<float> y = tp(x);
      EXPECT_EQ(y.placements(), along(c.spec, c.axis, Replicate{}));
      const float worst = expect_blocks(y, want, kTolerance);
      std::printf("[ forward ] %s axis %d: largest difference %.3g\n", c.spec.name.c_str(), c.axis,
                  static_cast<double>(worst));
      expect_blocks(tp(x, {.causal = true}), want_causal, kTolerance);
      expect_blocks(tp(x, {.scale = 0.25}), want_scaled, kTolerance);
    });
  }
}

TEST(MegatronAttention, ABatchCutAlongTheOtherAxisIsDataTimesTensorParallel) {
  // 2 x 2: the batch of 3 cut 2 and 1 along axis 0, the heads along axis 1.
  const HostArray<float> hx = data(Shape{3, kLength, kEmbed}, 3);
  const HostArray<float> want = unsharded()(ferry::to_device(Device::cpu(), hx)).to_host();
  const Mesh mesh = Mesh::modeled(square());
  expect_balanced_after(mesh, [&] {
    const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, 1, {.seed = kSeed});
    const MeshArray<float> y = tp(ferry::distribute(hx, mesh, {Shard{0}, Replicate{}}));
    EXPECT_EQ(y.placements(), (Placements{Shard{0}, Replicate{}}));
    expect_blocks(y, want, kTolerance);
  });
}

TEST(MegatronAttention, TheForwardSendsExactlyOneAllReduce) {
  const HostArray<float> hx = data(Shape{kBatch, kLength, kEmbed}, 1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    Mesh mesh = Mesh::modeled(c.spec);
    Mesh fresh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      expect_balanced_after(fresh, [&] {
        const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
        const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
        ferry::wait(x);
        mesh.reset_stats();
        ferry::wait(tp(x));
        const auto ops = link_ops(mesh);
        ASSERT_EQ(ops.size(), 1U);
        EXPECT_EQ(ops.begin()->first, "all_reduce");
        // The messages of one all-reduce of the (N, L, E) output along the axis, on a fresh mesh.
        const MeshArray<float> partial =
            ferry::distribute(HostArray<float>(Shape{kBatch, kLength, kEmbed}), fresh,
                              along(c.spec, c.axis, Partial{}));
        ferry::wait(partial);
        fresh.reset_stats();
        ferry::wait(ferry::redistribute(partial, along(c.spec, c.axis, Replicate{})));
        EXPECT_EQ(ops, link_ops(fresh));
      });
    });
  }
}

TEST(MegatronAttention, GradientsEqualTheUnshardedAttentionsSplitTheSameWay) {
  const HostArray<float> hx = data(Shape{kBatch, kLength, kEmbed}, 1);
  const HostArray<float> ht = data(Shape{kBatch, kLength, kEmbed}, 2);
  nn::MultiheadAttention one = unsharded();
  const DeviceArray<float> cx = ferry::to_device(Device::cpu(), hx);
  const DeviceArray<float> ct = ferry::to_device(Device::cpu(), ht);
  auto loss_one = [&](const DeviceArray<float>& a) {
    return nn::mse_loss(one(a, {.causal = true}), ct);
  };
  auto [want_loss, want] = nn::value_and_grad(one, loss_one)(cx);
  const HostArray<float> want_dx = std::get<1>(ferry::value_and_grad(loss_one)(cx)).to_host();
  ASSERT_EQ(want.size(), 4U);
  ASSERT_EQ(want[0].first, "in_proj_weight");
  ASSERT_EQ(want[1].first, "in_proj_bias");
  ASSERT_EQ(want[2].first, "out_proj.weight");
  ASSERT_EQ(want[3].first, "out_proj.bias");
  const HostArray<float> d_in_w = want[0].second.to_host();
  const HostArray<float> d_in_b = want[1].second.to_host();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    // The tape, its saved activations and the gradients' all-reduces keep nothing. (A block,
    // not expect_balanced_after's lambda: clang 14 cannot capture `want_loss` and `want`,
    // structured bindings.)
    const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
    {
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
      const MeshArray<float> x = ferry::distribute(hx, mesh, along(c.spec, c.axis, Replicate{}));
      const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
      std::vector<MeshArray<float>> params{x};
      for (const auto& p : tp.parameters()) params.push_back(p);
      // The loss one device computes: of device 0's copy of the replicated output.
      auto [loss, grads] = nn::value_and_grad(params, [&](const MeshArray<float>& in) {
        return nn::mse_loss(tp(in, {.causal = true}).shard(0), target);
      })(x);
      EXPECT_NEAR(loss.to_host()(), want_loss.to_host()(), kTolerance);
      ASSERT_EQ(grads.size(), 9U);
      for (std::size_t k = 0; k < grads.size(); ++k) {
        EXPECT_EQ(grads[k].placements(), params[k].placements()) << "parameter " << k;
      }
      float worst = expect_blocks(grads[0], want_dx, kTolerance);
      for (std::int64_t p = 0; p < 3; ++p) {  // q, k, v: their rows of the stacked projection
        SCOPED_TRACE("projection " + std::to_string(p));
        const auto k = static_cast<std::size_t>(1 + 2 * p);
        worst = std::max(worst, expect_blocks(grads[k], rows_transposed(d_in_w, p * kEmbed, kEmbed),
                                              kTolerance));
        worst = std::max(worst,
                         expect_blocks(grads[k + 1], part(d_in_b, p * kEmbed, kEmbed), kTolerance));
      }
      worst = std::max(worst,
                       expect_blocks(grads[7], rows_transposed(want[2].second.to_host(), 0, kEmbed),
                                     kTolerance));
      worst = std::max(worst, expect_blocks(grads[8], want[3].second.to_host(), kTolerance));
      std::printf("[ gradients ] %s axis %d: largest difference %.3g\n", c.spec.name.c_str(),
                  c.axis, static_cast<double>(worst));
    }
    ferry_test::expect_books_balanced(mesh, before);
  }
}

TEST(MegatronAttention, ParallelLinearLayersTakeGivenParameters) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    const nn::Linear one(6, 8, Device::cpu(), {.seed = 4});
    const HostArray<float> w = rows_transposed(one.weight().to_host(), 0, 8);
    const HostArray<float> b = one.bias().to_host();
    const nn::ColumnParallelLinear col(w, b, mesh);
    EXPECT_EQ(col.in_features(), 6);
    EXPECT_EQ(col.out_features(), 8);
    EXPECT_EQ(col.weight().placements(), (Placements{Shard{1}}));
    EXPECT_EQ(ferry::to_host(col.weight()), w);
    const HostArray<float> hx = data(Shape{3, 6}, 5);
    const HostArray<float> want = one(ferry::to_device(Device::cpu(), hx)).to_host();
    expect_blocks(col(ferry::distribute(hx, mesh, {Replicate{}})), want, kTolerance);
    const nn::RowParallelLinear row(w, std::nullopt, mesh);
    EXPECT_FALSE(row.has_bias());
    EXPECT_EQ(row.weight().placements(), (Placements{Shard{0}}));
    EXPECT_EQ(ferry::to_host(row.weight()), w);
    expect_error<ShapeError>(
        [&] { return nn::ColumnParallelLinear(b, b, mesh); },
        "[ColumnParallelLinear] weight (8) is not (in_features, out_features)");
    expect_error<ShapeError>([&] { return nn::RowParallelLinear(w, part(b, 0, 7), mesh); },
                             "[RowParallelLinear] bias (7) is not (out_features) of weight (6, 8)");
    expect_error<InvalidArgument>([&] { return nn::RowParallelLinear(w, b, mesh, 2); },
                                  "[RowParallelLinear] axis 2 is not an axis of mesh ring (4) "
                                  "(give 0..0)");
  });
}

TEST(MegatronAttention, BadInputIsATypedErrorAtTheCall) {
  const Mesh mesh = Mesh::modeled(ring(4));
  const Mesh other = Mesh::modeled(square());
  // A refused call leaves nothing behind on either mesh.
  expect_balanced_after(mesh, [&] {
    expect_balanced_after(other, [&] {
      expect_error<InvalidArgument>(
          [&] { return nn::ParallelSelfAttention(8, 3, mesh); },
          "[ParallelSelfAttention] needs embed_dim >= 1 divisible by num_heads >= 1, got 8 and 3");
      expect_error<InvalidArgument>(
          [&] { return nn::ParallelSelfAttention(8, 2, mesh); },
          "[ParallelSelfAttention] num_heads 2 does not divide by the 4 devices of mesh axis 0 of "
          "mesh ring (4); each device computes whole heads");
      expect_error<InvalidArgument>(
          [&] { return nn::ParallelSelfAttention(8, 4, mesh, 1); },
          "[ParallelSelfAttention] axis 1 is not an axis of mesh ring (4) (give 0..0)");
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, 0, {.seed = kSeed});
      const HostArray<float> hx = data(Shape{kBatch, kLength, kEmbed}, 1);
      const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
      expect_error<InvalidArgument>([&] { return tp(MeshArray<float>()); },
                                    "[ParallelSelfAttention] got an empty mesh array");
      expect_error<InvalidArgument>(
          [&] { return tp(MeshArray<float>::from_shards(mesh, x.shards())); },
          "[ParallelSelfAttention] the input has no global view (a collective's result, or "
          "from_shards without placements): give it placements with MeshArray::from_shards(mesh, "
          "shards, global_shape, placements)");
      expect_error<InvalidArgument>(
          [&] {
            return tp(ferry::distribute(hx, other, {Replicate{}, Replicate{}}));
          },
          "[ParallelSelfAttention] the input lives on mesh square (2, 2), the parameters on mesh "
          "ring (4)");
      expect_error<InvalidArgument>(
          [&] {
            return tp(x, {.mask = ferry::zeros<float>(mesh.device(0), Shape{kLength, kLength})});
          },
          "[ParallelSelfAttention] takes no mask: it would live on one device, the heads on 4; use "
          "options.causal, or nn::MultiheadAttention on one device");
      expect_error<ShapeError>(
          [&] {
            return tp(ferry::distribute(data(Shape{kLength, kEmbed}, 0), mesh, {Replicate{}}));
          },
          "[ParallelSelfAttention] input (5, 8) is not (N, L, embed_dim 8)");
      expect_error<ShapeError>(
          [&] {
            return tp(ferry::distribute(data(Shape{2, kLength, 6}, 0), mesh, {Replicate{}}));
          },
          "[ParallelSelfAttention] input (2, 5, 6) is not (N, L, embed_dim 8)");
      expect_error<PlacementError>(
          [&] { return tp(ferry::distribute(hx, mesh, {Shard{2}})); },
          "[ParallelSelfAttention] the input is placed (Shard(2)); it must be Replicate along the "
          "layer's mesh axis 0 and Replicate or Shard(0) (the batch) along the others, so each "
          "device holds whole sequences of every feature: call redistribute(x, (Replicate())) "
          "first");
      // On the square, the sequence cut along the other axis: attention needs all of it.
      const nn::ParallelSelfAttention sq(kEmbed, kHeads, other, 1, {.seed = kSeed});
      expect_error<PlacementError>(
          [&] {
            return sq(ferry::distribute(hx, other, {Shard{1}, Shard{0}}));
          },
          "[ParallelSelfAttention] the input is placed (Shard(1), Shard(0)); it must be Replicate "
          "along the layer's mesh axis 1 and Replicate or Shard(0) (the batch) along the others, "
          "so "
          "each device holds whole sequences of every feature: call redistribute(x, (Replicate(), "
          "Replicate())) first");
      expect_error<PlacementError>(
          [&] {
            return sq(ferry::distribute(hx, other, {Partial{}, Replicate{}}));
          },
          "[ParallelSelfAttention] the input is placed (Partial(sum), Replicate()); it must be "
          "Replicate along the layer's mesh axis 1 and Replicate or Shard(0) (the batch) along the "
          "others, so each device holds whole sequences of every feature: call redistribute(x, "
          "(Replicate(), Replicate())) first");
    });
  });
}

}  // namespace
