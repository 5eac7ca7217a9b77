// Megatron's tensor-parallel attention block (nn::ParallelSelfAttention in
// nn/parallel_attention.hpp) against nn::MultiheadAttention on one device, started from the same
// seed: its parameters, its output (plain and causal, on a ring of 4 with one head a device and
// along either axis of a 2 x 2 mesh with two, and data x tensor parallel with the batch cut
// along the other axis), its forward's link traffic exactly that of one all-reduce, its
// gradients against the unsharded layer's split the same way; the same with masks placed on the
// mesh (causal + key padding, per head) and cross-attention with L != S, the mask's and the
// inputs' gradients too; the tensor-parallel linear layers made from given parameters; bad input
// by exact type and message.
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

namespace test_megatron_attention {

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
// by a few roundings: seen 3e-8 forward (6e-8 masked) and 7e-9 in the gradients (the tests print
// the largest difference), so 1e-6 leaves a margin of sixteen for other compilers' orders of
// additions.
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
HostArray<float> rows_transposed(const HostArray<float>& a, std::int64_t first,
                                 std::int64_t count) {
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

/// A key padding mask (N, 1, 1, S): 0 for the first lengths[n] keys of sequence n, -inf for
/// the rest (PyTorch's key_padding_mask as an additive mask).
HostArray<float> padding(std::int64_t keys, const std::vector<std::int64_t>& lengths) {
  const auto n = static_cast<std::int64_t>(lengths.size());
  HostArray<float> m(Shape{n, 1, 1, keys});
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t j = lengths[static_cast<std::size_t>(b)]; j < keys; ++j) {
      m.data()[static_cast<std::size_t>(b * keys + j)] = -INFINITY;
    }
  }
  return m;
}

/// The meshes masks and cross-attention are tried on: the ring, one head a device, the input
/// replicated; and the square, data x tensor parallel: the batch cut along axis 0, the heads
/// along axis 1.
struct Parallel {
  MeshSpec spec;
  int axis;
  Placements x;  // the inputs' placements
  /// The placements of a mask whose block on each device is `tp` along the layer's axis and
  /// `batch` along the axis that cuts the batch (Replicate where none does).
  Placements mask(ferry::Placement tp, ferry::Placement batch) const {
    Placements ps = x;
    for (std::size_t a = 0; a < ps.size(); ++a) {
      ps[a] = a == static_cast<std::size_t>(axis) ? tp
              : ps[a] == ferry::Placement{Shard{0}} ? batch
                                                    : ferry::Placement{Replicate{}};
    }
    return ps;
  }
};
std::vector<Parallel> parallels() {
  return {{ring(4), 0, {Replicate{}}}, {square(), 1, {Shard{0}, Replicate{}}}};
}

/// The batch, and the lengths of the keys of cross-attention (L != S).
constexpr std::int64_t kRows = 3, kKeys = 7;

/// Expects grads[first, first + 8) (q_proj, k_proj, v_proj, out_proj: weight, bias each) to be
/// the unsharded layer's gradients `want` (in_proj_weight, in_proj_bias, out_proj.weight,
/// out_proj.bias) split as the layer splits its parameters; returns the largest difference.
template <class Named>
float expect_layer_grads(const std::vector<MeshArray<float>>& grads, std::size_t first,
                         const Named& want) {
  EXPECT_EQ(want.size(), 4U);
  const HostArray<float> d_in_w = want[0].second.to_host();
  const HostArray<float> d_in_b = want[1].second.to_host();
  float worst = 0;
  for (std::int64_t p = 0; p < 3; ++p) {
    SCOPED_TRACE("projection " + std::to_string(p));
    const std::size_t k = first + static_cast<std::size_t>(2 * p);
    worst = std::max(worst, expect_blocks(grads[k], rows_transposed(d_in_w, p * kEmbed, kEmbed),
                                          kTolerance));
    worst =
        std::max(worst, expect_blocks(grads[k + 1], part(d_in_b, p * kEmbed, kEmbed), kTolerance));
  }
  worst = std::max(worst, expect_blocks(grads[first + 6],
                                        rows_transposed(want[2].second.to_host(), 0, kEmbed),
                                        kTolerance));
  return std::max(worst, expect_blocks(grads[first + 7], want[3].second.to_host(), kTolerance));
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

TEST(MegatronAttention, MasksAndCrossAttentionEqualTheUnshardedAttention) {
  const nn::MultiheadAttention one = unsharded();
  const Device cpu = Device::cpu();
  const HostArray<float> hx = data(Shape{kRows, kLength, kEmbed}, 4);
  const HostArray<float> hk = data(Shape{kRows, kKeys, kEmbed}, 5);
  const HostArray<float> hv = data(Shape{kRows, kKeys, kEmbed}, 6);
  // Masks of every kind the scores (N, H, L, S) take: a key padding mask, per head and batch
  // row, per head only, and one (L, S) for all.
  const HostArray<float> self_pad = padding(kLength, {5, 3, 4});
  const HostArray<float> cross_pad = padding(kKeys, {7, 2, 5});
  const HostArray<float> per_head = data(Shape{kRows, kHeads, kLength, kLength}, 7);
  const HostArray<float> heads_only = data(Shape{kHeads, kLength, kKeys}, 8);
  const HostArray<float> all_rows = data(Shape{kLength, kKeys}, 9);
  auto dev = [&](const HostArray<float>& h) { return ferry::to_device(cpu, h); };
  const DeviceArray<float> cx = dev(hx);
  const DeviceArray<float> ck = dev(hk);
  const DeviceArray<float> cv = dev(hv);
  const HostArray<float> want_pad = one(cx, {.mask = dev(self_pad), .causal = true}).to_host();
  const HostArray<float> want_heads = one(cx, {.mask = dev(per_head)}).to_host();
  const HostArray<float> want_cross =
      one(cx, ck, cv, {.mask = dev(cross_pad), .causal = true}).to_host();
  const HostArray<float> want_cross_heads = one(cx, ck, cv, {.mask = dev(heads_only)}).to_host();
  const HostArray<float> want_cross_all =
      one(cx, ck, cv, {.mask = dev(all_rows), .scale = 0.5}).to_host();
  // Each mask changes the output: none of these checks is the unmasked one again.
  const HostArray<float> plain = one(cx).to_host();
  ASSERT_NE(want_pad, one(cx, {.causal = true}).to_host());
  ASSERT_NE(want_heads, plain);
  ASSERT_NE(want_cross, one(cx, ck, cv, {.causal = true}).to_host());
  for (const Parallel& c : parallels()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
      const MeshArray<float> x = ferry::distribute(hx, mesh, c.x);
      const MeshArray<float> k = ferry::distribute(hk, mesh, c.x);
      const MeshArray<float> v = ferry::distribute(hv, mesh, c.x);
      auto placed = [&](const HostArray<float>& h, ferry::Placement along_tp,
                        ferry::Placement batch) {
        return ferry::distribute(h, mesh, c.mask(along_tp, batch));
      };
      const MeshArray<float> y =
          tp(x, {.mask = placed(self_pad, Replicate{}, Shard{0}), .causal = true});
      EXPECT_EQ(y.placements(), c.x);
      float worst = expect_blocks(y, want_pad, kTolerance);
      worst = std::max(worst, expect_blocks(tp(x, {.mask = placed(per_head, Shard{1}, Shard{0})}),
                                            want_heads, kTolerance));
      const MeshArray<float> z =
          tp(x, k, v, {.mask = placed(cross_pad, Replicate{}, Shard{0}), .causal = true});
      EXPECT_EQ(z.placements(), c.x);
      EXPECT_EQ(z.global_shape(), (Shape{kRows, kLength, kEmbed}));
      worst = std::max(worst, expect_blocks(z, want_cross, kTolerance));
      worst = std::max(
          worst, expect_blocks(tp(x, k, v, {.mask = placed(heads_only, Shard{0}, Replicate{})}),
                               want_cross_heads, kTolerance));
      worst = std::max(
          worst, expect_blocks(tp(x, k, v, {.mask = placed(all_rows, Replicate{}, Replicate{}),
                                            .scale = 0.5}),
                               want_cross_all, kTolerance));
      std::printf("[ masked, cross ] %s axis %d: largest difference %.3g\n", c.spec.name.c_str(),
                  c.axis, static_cast<double>(worst));
    });
  }
}

TEST(MegatronAttention, AMaskedOrCrossForwardStillSendsExactlyOneAllReduce) {
  const HostArray<float> hx = data(Shape{kRows, kLength, kEmbed}, 4);
  const HostArray<float> hk = data(Shape{kRows, kKeys, kEmbed}, 5);
  for (const Parallel& c : parallels()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    Mesh mesh = Mesh::modeled(c.spec);
    Mesh fresh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      expect_balanced_after(fresh, [&] {
        const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
        const MeshArray<float> x = ferry::distribute(hx, mesh, c.x);
        const MeshArray<float> k = ferry::distribute(hk, mesh, c.x);
        const MeshArray<float> pad =
            ferry::distribute(padding(kKeys, {7, 2, 5}), mesh, c.mask(Replicate{}, Shard{0}));
        const MeshArray<float> heads = ferry::distribute(
            data(Shape{kRows, kHeads, kLength, kKeys}, 8), mesh, c.mask(Shard{1}, Shard{0}));
        for (const MeshArray<float>* a : {&x, &k, &pad, &heads}) ferry::wait(*a);
        // The messages of one all-reduce of the (N, L, E) output along the axis, on a fresh mesh.
        Placements partial_ps = c.x;
        partial_ps[static_cast<std::size_t>(c.axis)] = Partial{};
        const MeshArray<float> partial =
            ferry::distribute(HostArray<float>(Shape{kRows, kLength, kEmbed}), fresh, partial_ps);
        ferry::wait(partial);
        fresh.reset_stats();
        ferry::wait(ferry::redistribute(partial, c.x));
        const auto all_reduce = link_ops(fresh);
        ASSERT_EQ(all_reduce.size(), 1U);
        for (const auto& opts : {nn::ParallelAttentionOptions{.mask = pad, .causal = true},
                                 nn::ParallelAttentionOptions{.mask = heads}}) {
          mesh.reset_stats();
          ferry::wait(tp(x, k, k, opts));
          EXPECT_EQ(link_ops(mesh), all_reduce);
        }
      });
    });
  }
}

TEST(MegatronAttention, MaskedAndCrossGradientsEqualTheUnshardedAttentions) {
  // Every gradient: the inputs', the mask's and the parameters', on the ring and data x
  // tensor parallel; self-attention with a per-head mask, cross-attention with causal and
  // padding (L != S).
  const HostArray<float> hx = data(Shape{kRows, kLength, kEmbed}, 1);
  const HostArray<float> hk = data(Shape{kRows, kKeys, kEmbed}, 2);
  const HostArray<float> hv = data(Shape{kRows, kKeys, kEmbed}, 3);
  const HostArray<float> ht = data(Shape{kRows, kLength, kEmbed}, 4);
  const HostArray<float> heads = data(Shape{kRows, kHeads, kLength, kLength}, 5);
  const HostArray<float> pad = padding(kKeys, {7, 2, 5});
  const Device cpu = Device::cpu();
  nn::MultiheadAttention one = unsharded();
  const DeviceArray<float> cx = ferry::to_device(cpu, hx);
  const DeviceArray<float> ck = ferry::to_device(cpu, hk);
  const DeviceArray<float> cv = ferry::to_device(cpu, hv);
  const DeviceArray<float> ct = ferry::to_device(cpu, ht);
  const DeviceArray<float> c_heads = ferry::to_device(cpu, heads);
  const DeviceArray<float> c_pad = ferry::to_device(cpu, pad);
  auto self_one = [&](const DeviceArray<float>& a, const DeviceArray<float>& m) {
    return nn::mse_loss(one(a, {.mask = m}), ct);
  };
  auto cross_one = [&](const DeviceArray<float>& q, const DeviceArray<float>& k,
                       const DeviceArray<float>& v, const DeviceArray<float>& m) {
    return nn::mse_loss(one(q, k, v, {.mask = m, .causal = true}), ct);
  };
  const auto self_params = nn::value_and_grad(one, self_one)(cx, c_heads);
  const auto self_inputs = ferry::value_and_grad(self_one)(cx, c_heads);
  const auto cross_params = nn::value_and_grad(one, cross_one)(cx, ck, cv, c_pad);
  const auto cross_inputs = ferry::value_and_grad(cross_one)(cx, ck, cv, c_pad);
  for (const Parallel& c : parallels()) {
    SCOPED_TRACE(c.spec.name + " axis " + std::to_string(c.axis));
    const Mesh mesh = Mesh::modeled(c.spec);
    expect_balanced_after(mesh, [&] {
      const nn::ParallelSelfAttention tp(kEmbed, kHeads, mesh, c.axis, {.seed = kSeed});
      const DeviceArray<float> target = ferry::to_device(mesh.device(0), ht);
      const Placements whole(c.x.size(), Replicate{});
      // The loss one device computes: of device 0's copy of the whole output (gathered along
      // the batch's axis where it is cut).
      auto loss_of = [&](const MeshArray<float>& y) {
        return nn::mse_loss(ferry::redistribute(y, whole).shard(0), target);
      };
      const MeshArray<float> x = ferry::distribute(hx, mesh, c.x);
      float worst = 0;
      {
        const MeshArray<float> m = ferry::distribute(heads, mesh, c.mask(Shard{1}, Shard{0}));
        std::vector<MeshArray<float>> params{x, m};
        for (const auto& p : tp.parameters()) params.push_back(p);
        const auto [loss, grads] = nn::value_and_grad(params, [&](const MeshArray<float>& in) {
          return loss_of(tp(in, {.mask = m}));
        })(x);
        EXPECT_NEAR(loss.to_host()(), self_params.first.to_host()(), kTolerance);
        ASSERT_EQ(grads.size(), 10U);
        for (std::size_t i = 0; i < grads.size(); ++i) {
          EXPECT_EQ(grads[i].placements(), params[i].placements()) << "parameter " << i;
        }
        worst = std::max(worst,
                         expect_blocks(grads[0], std::get<1>(self_inputs).to_host(), kTolerance));
        worst = std::max(worst,
                         expect_blocks(grads[1], std::get<2>(self_inputs).to_host(), kTolerance));
        worst = std::max(worst, expect_layer_grads(grads, 2, self_params.second));
      }
      {
        const MeshArray<float> k = ferry::distribute(hk, mesh, c.x);
        const MeshArray<float> v = ferry::distribute(hv, mesh, c.x);
        const MeshArray<float> m = ferry::distribute(pad, mesh, c.mask(Replicate{}, Shard{0}));
        std::vector<MeshArray<float>> params{x, k, v, m};
        for (const auto& p : tp.parameters()) params.push_back(p);
        const auto [loss, grads] = nn::value_and_grad(params, [&] {
          return loss_of(tp(x, k, v, {.mask = m, .causal = true}));
        })();
        EXPECT_NEAR(loss.to_host()(), cross_params.first.to_host()(), kTolerance);
        ASSERT_EQ(grads.size(), 12U);
        for (std::size_t i = 0; i < 4; ++i) {
          SCOPED_TRACE("input " + std::to_string(i));
          EXPECT_EQ(grads[i].placements(), params[i].placements());
        }
        worst = std::max(worst,
                         expect_blocks(grads[0], std::get<1>(cross_inputs).to_host(), kTolerance));
        worst = std::max(worst,
                         expect_blocks(grads[1], std::get<2>(cross_inputs).to_host(), kTolerance));
        worst = std::max(worst,
                         expect_blocks(grads[2], std::get<3>(cross_inputs).to_host(), kTolerance));
        worst = std::max(worst,
                         expect_blocks(grads[3], std::get<4>(cross_inputs).to_host(), kTolerance));
        worst = std::max(worst, expect_layer_grads(grads, 4, cross_params.second));
      }
      std::printf("[ masked, cross gradients ] %s axis %d: largest difference %.3g\n",
                  c.spec.name.c_str(), c.axis, static_cast<double>(worst));
    });
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
                                    "[ParallelSelfAttention] the input is an empty mesh array");
      // A block moved from is refused (it read a mesh it no longer had: a null handle).
      nn::ParallelSelfAttention given(kEmbed, kHeads, mesh, 0, {.seed = kSeed});
      const nn::ParallelSelfAttention taken = std::move(given);
      expect_error<InvalidArgument>(
          [&] { return given(x); },  // NOLINT(bugprone-use-after-move): on purpose
          "[ParallelSelfAttention] was moved from: call the block it was moved into");
      EXPECT_EQ(taken(x).global_shape(), x.global_shape());
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
      // Masks: of a shape the scores (N, H, L, S) do not take, unplaced, of another mesh,
      // placed otherwise than the heads and the batch are.
      expect_error<ShapeError>(
          [&] {
            return tp(x,
                      {.mask = ferry::distribute(data(Shape{3, kLength}, 0), mesh, {Replicate{}})});
          },
          "[ParallelSelfAttention] the mask's (3, 5) does not broadcast to the scores' (N, "
          "num_heads, L, S) (2, 4, 5, 5)");
      expect_error<ShapeError>(
          [&] {
            return tp(
                x, {.mask = ferry::distribute(data(Shape{1, 2, 1, 5, 5}, 0), mesh, {Replicate{}})});
          },
          "[ParallelSelfAttention] the mask's (1, 2, 1, 5, 5) does not broadcast to the scores' "
          "(N, num_heads, L, S) (2, 4, 5, 5)");
      const MeshArray<float> per_head =
          ferry::distribute(data(Shape{kBatch, kHeads, kLength, kLength}, 0), mesh, {Replicate{}});
      expect_error<InvalidArgument>(
          [&] { return tp(x, {.mask = MeshArray<float>::from_shards(mesh, per_head.shards())}); },
          "[ParallelSelfAttention] the mask has no global view (a collective's result, or "
          "from_shards without placements): give it placements with MeshArray::from_shards(mesh, "
          "shards, global_shape, placements)");
      expect_error<InvalidArgument>(
          [&] {
            return tp(x, {.mask = ferry::distribute(data(Shape{kLength, kLength}, 0), other,
                                                    {Replicate{}, Replicate{}})});
          },
          "[ParallelSelfAttention] the mask lives on mesh square (2, 2), the parameters on mesh "
          "ring (4)");
      expect_error<PlacementError>(
          [&] { return tp(x, {.mask = per_head}); },
          "[ParallelSelfAttention] the mask (2, 4, 5, 5) is placed (Replicate()); with the query "
          "placed (Replicate()) it must be placed (Shard(1)) (Shard of its head dim along the "
          "layer's mesh axis 0 when it has one, Shard(0) along an axis that cuts the batch when it "
          "has one, Replicate elsewhere): call redistribute(mask, (Shard(1))) first");
      expect_error<PlacementError>(
          [&] {
            return tp(x, {.mask = ferry::distribute(data(Shape{kLength, kLength}, 0), mesh,
                                                    {Partial{}})});
          },
          "[ParallelSelfAttention] the mask (5, 5) is placed (Partial(sum)); with the query "
          "placed (Replicate()) it must be placed (Replicate()) (Shard of its head dim along the "
          "layer's mesh axis 0 when it has one, Shard(0) along an axis that cuts the batch when it "
          "has one, Replicate elsewhere): call redistribute(mask, (Replicate())) first");
      // Cross-attention: the key and value with the query.
      const MeshArray<float> k =
          ferry::distribute(data(Shape{kBatch, 7, kEmbed}, 2), mesh, {Replicate{}});
      expect_error<InvalidArgument>(
          [&] { return tp(x, ferry::distribute(data(Shape{kBatch, 7, kEmbed}, 2), other,
                                               {Replicate{}, Replicate{}}), k); },
          "[ParallelSelfAttention] the key lives on mesh square (2, 2), the parameters on mesh "
          "ring (4)");
      expect_error<InvalidArgument>([&] { return tp(x, k, MeshArray<float>()); },
                                    "[ParallelSelfAttention] the value is an empty mesh array");
      expect_error<ShapeError>(
          [&] {
            return tp(x, ferry::distribute(data(Shape{kBatch, 7, 6}, 2), mesh, {Replicate{}}), k);
          },
          "[ParallelSelfAttention] key (2, 7, 6) is not (N, S, embed_dim 8)");
      expect_error<ShapeError>(
          [&] {
            return tp(x, k,
                      ferry::distribute(data(Shape{kBatch, 6, kEmbed}, 2), mesh, {Replicate{}}));
          },
          "[ParallelSelfAttention] needs a key and value of one length and the query's batch: "
          "query (2, 5, 8), key (2, 7, 8), value (2, 6, 8)");
      expect_error<ShapeError>(
          [&] {
            const MeshArray<float> three =
                ferry::distribute(data(Shape{3, 7, kEmbed}, 2), mesh, {Replicate{}});
            return tp(x, three, three);
          },
          "[ParallelSelfAttention] needs a key and value of one length and the query's batch: "
          "query (2, 5, 8), key (3, 7, 8), value (3, 7, 8)");
      expect_error<PlacementError>(
          [&] {
            return tp(x, k, ferry::distribute(data(Shape{kBatch, 7, kEmbed}, 3), mesh, {Shard{2}}));
          },
          "[ParallelSelfAttention] the value is placed (Shard(2)); it must be Replicate along the "
          "layer's mesh axis 0 and Replicate or Shard(0) (the batch) along the others, so each "
          "device holds whole sequences of every feature: call redistribute(value, (Replicate())) "
          "first");
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
      {
        const MeshArray<float> q = ferry::distribute(hx, other, {Shard{0}, Replicate{}});
        const MeshArray<float> kv = ferry::distribute(hx, other, {Replicate{}, Replicate{}});
        expect_error<PlacementError>(
            [&] { return sq(q, kv, q); },
            "[ParallelSelfAttention] the key is placed (Replicate(), Replicate()) and the query "
            "(Shard(0), Replicate()); key and value must be placed as the query, so each device "
            "holds the keys of its queries' batch: call redistribute(key, (Shard(0), Replicate())) "
            "first");
        expect_error<PlacementError>(
            [&] {
              return sq(q, {.mask = ferry::distribute(padding(kLength, {5, 2}), other,
                                                      {Replicate{}, Replicate{}})});
            },
            "[ParallelSelfAttention] the mask (2, 1, 1, 5) is placed (Replicate(), Replicate()); "
            "with the query placed (Shard(0), Replicate()) it must be placed (Shard(0), "
            "Replicate()) (Shard of its head dim along the layer's mesh axis 1 when it has one, "
            "Shard(0) along an axis that cuts the batch when it has one, Replicate elsewhere): "
            "call redistribute(mask, (Shard(0), Replicate())) first");
      }
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

}  // namespace test_megatron_attention
