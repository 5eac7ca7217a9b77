// Broadcasting between placed mesh arrays of different shapes and ranks, mesh arrays with
// scalars, and astype of mesh arrays (mesh/mesh_broadcast.hpp): the placements of each result
// (a Shard of the lower-rank operand counted in the result's dims, a Shard against a
// Replicate that broadcasts along its dim, Partial through the ops that pass it) and its global
// value against the same op on the global arrays on one device; every refusal by exact type and
// message, and each redistribute a message names made to prove it lines the operands up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_placed_broadcasting {

namespace {

using ferry::Device;
using ferry::DeviceArray;
using ferry::HostArray;
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
using ferry_test::expect_balanced_after;
using ferry_test::expect_error;
using ferry_test::ring;
using ferry_test::square;

/// Two tiny devices on a line (a ring needs three).
MeshSpec two() { return ferry_test::line_of(2); }

using MeshFn = std::function<MeshArray<float>(const MeshArray<float>&, const MeshArray<float>&)>;
using DevFn =
    std::function<DeviceArray<float>(const DeviceArray<float>&, const DeviceArray<float>&)>;
using ferry_test::values;

struct Op {
  std::string name;
  MeshFn mesh;
  DevFn one;
};
std::vector<Op> ops() {
  return {
      {"add", [](auto& a, auto& b) { return a + b; }, [](auto& a, auto& b) { return a + b; }},
      {"subtract", [](auto& a, auto& b) { return a - b; }, [](auto& a, auto& b) { return a - b; }},
      {"multiply", [](auto& a, auto& b) { return a * b; }, [](auto& a, auto& b) { return a * b; }},
      {"maximum", [](auto& a, auto& b) { return ferry::maximum(a, b); },
       [](auto& a, auto& b) { return ferry::maximum(a, b); }}};
}

/// The op of `ha` placed `pa` and `hb` placed `pb` on `spec`: placed `want`, and the global
/// value of the op on the global arrays on one device (exact: each element is one operation on
/// the same two floats).
void expect_broadcast(const MeshSpec& spec, const HostArray<float>& ha, const Placements& pa,
                      const HostArray<float>& hb, const Placements& pb, const Placements& want) {
  const Mesh mesh = Mesh::modeled(spec);
  expect_balanced_after(mesh, [&] {
    const MeshArray<float> a = ferry::distribute(ha, mesh, pa);
    const MeshArray<float> b = ferry::distribute(hb, mesh, pb);
    const Device one = Device::cpu();
    for (const Op& op : ops()) {
      SCOPED_TRACE(op.name + " of " + ha.shape().to_string() + " " +
                   ferry::detail::placements_text(pa) + " and " + hb.shape().to_string() + " " +
                   ferry::detail::placements_text(pb));
      const MeshArray<float> got = op.mesh(a, b);
      EXPECT_EQ(got.placements(), want);
      EXPECT_EQ(ferry::to_host(got),
                op.one(ferry::to_device(one, ha), ferry::to_device(one, hb)).to_host());
    }
  });
}

TEST(PlacedBroadcasting, ALowerRankOperandsShardCountsInTheResultsDims) {
  // The column-parallel bias: activations cut along their last dim, the bias along its only one.
  expect_broadcast(ring(4), values(Shape{2, 3, 8}), {Shard{2}}, values(Shape{8}, 3), {Shard{0}},
                   {Shard{2}});
  // The lower-rank operand first.
  expect_broadcast(ring(4), values(Shape{8}, 3), {Shard{-1}}, values(Shape{2, 3, 8}), {Shard{2}},
                   {Shard{2}});
  // On a 2 x 2 mesh: rows along axis 0, columns along axis 1; the vector cut along axis 1.
  expect_broadcast(square(), values(Shape{4, 6}), {Shard{0}, Shard{1}}, values(Shape{6}, 1),
                   {Replicate{}, Shard{0}}, {Shard{0}, Shard{1}});
  // Shard(1) of a rank-2 operand is Shard(2) of a rank-3 result.
  expect_broadcast(two(), values(Shape{3, 4, 6}), {Shard{2}}, values(Shape{4, 6}, 2),
                   {Shard{1}}, {Shard{2}});
}

TEST(PlacedBroadcasting, AReplicateThatBroadcastsAlongTheShardedDimFitsEveryShard) {
  // A bias added to activations cut along the batch: every device adds the whole bias.
  expect_broadcast(ring(4), values(Shape{5, 3, 4}), {Shard{0}}, values(Shape{4}, 1),
                   {Replicate{}}, {Shard{0}});
  // A column of size 1 along the sharded dim, the other operand cut along it.
  expect_broadcast(ring(4), values(Shape{4, 1}, 2), {Replicate{}}, values(Shape{4, 6}),
                   {Shard{1}}, {Shard{1}});
  // Both cut along dim 0, one a column (its size-1 dim stretched on each device).
  expect_broadcast(two(), values(Shape{4, 6}), {Shard{0}}, values(Shape{4, 1}, 5), {Shard{0}},
                   {Shard{0}});
  // A rank-0 mesh array, Replicate: a scalar on every device.
  expect_broadcast(square(), values(Shape{4, 6}), {Shard{1}, Shard{0}}, values(Shape{}, 9),
                   {Replicate{}, Replicate{}}, {Shard{1}, Shard{0}});
}

/// A Partial(op) array of shape `shape` on `mesh`, each device a different part, and its global
/// value (the parts reduced on the host).
std::pair<MeshArray<float>, HostArray<float>> partial(const Mesh& mesh, const Shape& shape,
                                                      ReduceOp op, int salt) {
  std::vector<DeviceArray<float>> parts;
  HostArray<float> total(shape);
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    const HostArray<float> h = values(shape, salt + 3 * i);
    parts.push_back(ferry::to_device(mesh.device(i), h));
    for (std::size_t e = 0; e < h.data().size(); ++e) {
      float& t = total.data()[e];
      t = i == 0 ? h.data()[e] : op == ReduceOp::sum ? t + h.data()[e] : std::max(t, h.data()[e]);
    }
  }
  return {MeshArray<float>::from_shards(mesh, std::move(parts), shape, {Partial{op}}), total};
}

TEST(PlacedBroadcasting, APartialPassesWhereTheOpCommutesWithItsReduction) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // A block, not expect_balanced_after's lambda: clang 14 cannot capture structured bindings.
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    const Device one = Device::cpu();
    const auto [a, ha] = partial(mesh, Shape{3, 4}, ReduceOp::sum, 0);
    const auto [b, hb] = partial(mesh, Shape{4}, ReduceOp::sum, 1);
    const MeshArray<float> sum = a + b;
    EXPECT_EQ(sum.placements(), (Placements{Partial{}}));
    EXPECT_EQ(ferry::to_host(sum),
              (ferry::to_device(one, ha) + ferry::to_device(one, hb)).to_host());
    const MeshArray<float> diff = b - a;
    EXPECT_EQ(diff.placements(), (Placements{Partial{}}));
    EXPECT_EQ(ferry::to_host(diff),
              (ferry::to_device(one, hb) - ferry::to_device(one, ha)).to_host());
    const auto [m, hm] = partial(mesh, Shape{3, 4}, ReduceOp::max, 2);
    const auto [n, hn] = partial(mesh, Shape{3, 1}, ReduceOp::max, 3);
    const MeshArray<float> big = ferry::maximum(m, n);
    EXPECT_EQ(big.placements(), (Placements{Partial{ReduceOp::max}}));
    EXPECT_EQ(ferry::to_host(big),
              ferry::maximum(ferry::to_device(one, hm), ferry::to_device(one, hn)).to_host());
  }
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(PlacedBroadcasting, APartialTimesABroadcastReplicateStaysPartial) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // A block, not expect_balanced_after's lambda: clang 14 cannot capture structured bindings.
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  {
    const Device one = Device::cpu();
    const auto [p, hp] = partial(mesh, Shape{3, 4}, ReduceOp::sum, 0);
    const auto [q, hq] = partial(mesh, Shape{4}, ReduceOp::sum, 1);
    const HostArray<float> hr = values(Shape{4}, 2);
    const HostArray<float> hs = values(Shape{2, 3, 4}, 3);
    const MeshArray<float> r = ferry::distribute(hr, mesh, {Replicate{}});
    const MeshArray<float> s = ferry::distribute(hs, mesh, {Replicate{}});
    const DeviceArray<float> dp = ferry::to_device(one, hp);
    const DeviceArray<float> dq = ferry::to_device(one, hq);
    const DeviceArray<float> dr = ferry::to_device(one, hr);
    const DeviceArray<float> ds = ferry::to_device(one, hs);
    // The Replicate operand broadcast over the Partial one, and the other way round.
    const MeshArray<float> pr = p * r;
    EXPECT_EQ(pr.placements(), (Placements{Partial{}}));
    EXPECT_EQ(ferry::to_host(pr), (dp * dr).to_host());
    const MeshArray<float> sq = s * q;
    EXPECT_EQ(sq.placements(), (Placements{Partial{}}));
    EXPECT_EQ(sq.global_shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(ferry::to_host(sq), (ds * dq).to_host());
    const MeshArray<float> qs = q / (s * s + 1.0F);
    EXPECT_EQ(qs.placements(), (Placements{Partial{}}));
    const HostArray<float> want = (dq / (ds * ds + 1.0F)).to_host();
    const HostArray<float> got = ferry::to_host(qs);
    ASSERT_EQ(got.shape(), want.shape());
    for (std::size_t e = 0; e < got.data().size(); ++e) {
      EXPECT_NEAR(got.data()[e], want.data()[e], 1e-6F) << e;  // four quotients summed
    }
  }
  ferry_test::expect_books_balanced(mesh, before);
}

TEST(PlacedBroadcasting, AMeshArrayAndAScalar) {
  const Mesh mesh = Mesh::modeled(square());
  const Mesh four = Mesh::modeled(ring(4));
  // Blocks, not expect_balanced_after's lambda: clang 14 cannot capture structured bindings.
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  const ferry_test::MemoryInUse before_four = ferry_test::memory_in_use(four);
  {
    const Device one = Device::cpu();
    const HostArray<float> h = values(Shape{4, 6});
    const MeshArray<float> a = ferry::distribute(h, mesh, {Shard{0}, Shard{1}});
    const DeviceArray<float> d = ferry::to_device(one, h);
    EXPECT_EQ(ferry::to_host(2 * a + 1), (2.0F * d + 1.0F).to_host());
    EXPECT_EQ((2 * a + 1).placements(), a.placements());
    EXPECT_EQ(ferry::to_host(1.5F - a / 4), (1.5F - d / 4.0F).to_host());
    const auto [p, hp] = partial(four, Shape{3, 4}, ReduceOp::sum, 4);
    const MeshArray<float> scaled = p * 0.5F;
    EXPECT_EQ(scaled.placements(), (Placements{Partial{}}));
    EXPECT_EQ(ferry::to_host(scaled), (ferry::to_device(one, hp) * 0.5F).to_host());
  }
  ferry_test::expect_books_balanced(mesh, before);
  ferry_test::expect_books_balanced(four, before_four);
}

TEST(PlacedBroadcasting, AstypeKeepsThePlacements) {
  const Mesh mesh = Mesh::modeled(square());
  const Mesh four = Mesh::modeled(ring(4));
  // Blocks, not expect_balanced_after's lambda: clang 14 cannot capture structured bindings.
  const ferry_test::MemoryInUse before = ferry_test::memory_in_use(mesh);
  const ferry_test::MemoryInUse before_four = ferry_test::memory_in_use(four);
  {
    const Device one = Device::cpu();
    const HostArray<float> h = values(Shape{5, 6});
    const MeshArray<float> a = ferry::distribute(h, mesh, {Shard{0}, Replicate{}});
    const MeshArray<double> d = ferry::astype<double>(a);
    EXPECT_EQ(d.placements(), a.placements());
    EXPECT_EQ(d.global_shape(), a.global_shape());
    EXPECT_EQ(ferry::to_host(d), ferry::to_device(one, h).astype<double>().to_host());
    const MeshArray<std::int32_t> i =
        ferry::astype<std::int32_t>(ferry::distribute(h, mesh, {Shard{1}, Shard{0}}));
    EXPECT_EQ(i.placements(), (Placements{Shard{1}, Shard{0}}));
    EXPECT_EQ(ferry::to_host(i), ferry::to_device(one, h).astype<std::int32_t>().to_host());
    // A Partial(sum) to a floating type: its parts convert and still sum to the value.
    const auto [p, hp] = partial(four, Shape{3, 4}, ReduceOp::sum, 5);
    const MeshArray<double> pd = ferry::astype<double>(p);
    EXPECT_EQ(pd.placements(), (Placements{Partial{}}));
    EXPECT_EQ(ferry::to_host(pd), ferry::to_device(one, hp).astype<double>().to_host());
    // A Partial(max) to an integer type: the conversion keeps the order.
    const auto [m, hm] = partial(four, Shape{3, 4}, ReduceOp::max, 6);
    const MeshArray<std::int32_t> mi = ferry::astype<std::int32_t>(m);
    EXPECT_EQ(mi.placements(), (Placements{Partial{ReduceOp::max}}));
    EXPECT_EQ(ferry::to_host(mi), ferry::to_device(one, hm).astype<std::int32_t>().to_host());
  }
  ferry_test::expect_books_balanced(mesh, before);
  ferry_test::expect_books_balanced(four, before_four);
}

/// Expects `op` of `a` placed `pa` and `b` placed `pb` to throw PlacementError `message`, and
/// the op of the operands redistributed to `fa` and `fb` (what the message names) to equal the
/// op on one device.
void expect_refused(const MeshSpec& spec, const Op& op, const HostArray<float>& ha,
                    const Placements& pa, const HostArray<float>& hb, const Placements& pb,
                    const Placements& fa, const Placements& fb, const std::string& message) {
  const Mesh mesh = Mesh::modeled(spec);
  expect_balanced_after(mesh, [&] {
    const MeshArray<float> a = ferry::distribute(ha, mesh, pa);
    const MeshArray<float> b = ferry::distribute(hb, mesh, pb);
    expect_error<PlacementError>([&] { return op.mesh(a, b); }, message);
    const MeshArray<float> fixed = op.mesh(ferry::redistribute(a, fa), ferry::redistribute(b, fb));
    const Device one = Device::cpu();
    EXPECT_EQ(ferry::to_host(fixed),
              op.one(ferry::to_device(one, ha), ferry::to_device(one, hb)).to_host());
  });
}

TEST(PlacedBroadcastingBadInput, PlacementsThatDoNotLineUpNameTheRedistribute) {
  const std::vector<Op> all = ops();
  const Op& add = all[0];
  const Op& multiply = all[2];
  // A whole vector against a cut last dim: b must be cut alike.
  expect_refused(ring(4), add, values(Shape{4, 6}), {Shard{1}}, values(Shape{6}, 1),
                 {Replicate{}}, {Shard{1}}, {Shard{0}},
                 "[add] on mesh axis 0 a is Shard(1) and b Replicate(), which do not line up in "
                 "the broadcast (4, 6) (a (4, 6) (Shard(1)), b (6) (Replicate())); call "
                 "redistribute(b, (Shard(0))) first");
  // The other way round: a must be cut as b.
  expect_refused(ring(4), add, values(Shape{3, 8}), {Replicate{}}, values(Shape{8}, 1),
                 {Shard{0}}, {Shard{1}}, {Shard{0}},
                 "[add] on mesh axis 0 a is Replicate() and b Shard(0) (the result's Shard(1)), "
                 "which do not line up in the broadcast (3, 8) (a (3, 8) (Replicate()), b (8) "
                 "(Shard(0))); call redistribute(a, (Shard(1))) first");
  // Two cuts of different dims of the result.
  expect_refused(two(), multiply, values(Shape{2, 4, 6}), {Shard{1}}, values(Shape{4, 6}, 1),
                 {Shard{1}}, {Shard{1}}, {Shard{0}},
                 "[multiply] on mesh axis 0 a is Shard(1) and b Shard(1) (the result's "
                 "Shard(2)), which do not line up in the broadcast (2, 4, 6) (a (2, 4, 6) "
                 "(Shard(1)), b (4, 6) (Shard(1))); call redistribute(b, (Shard(0))) first");
  // Along both axes of the square: b sliced to a's cut on one, a to b's on the other.
  expect_refused(square(), add, values(Shape{2, 4, 6}), {Shard{2}, Replicate{}},
                 values(Shape{4, 6}, 2), {Replicate{}, Shard{0}}, {Shard{2}, Shard{1}},
                 {Shard{1}, Shard{0}},
                 "[add] on mesh axis 0 a is Shard(2) and b Replicate(), which do not line up in "
                 "the broadcast (2, 4, 6) (a (2, 4, 6) (Shard(2), Replicate()), b (4, 6) "
                 "(Replicate(), Shard(0))); call redistribute(a, (Shard(2), Shard(1))) and "
                 "redistribute(b, (Shard(1), Shard(0))) first");
  // Slicing a to b's cut would cut a's dim 0 along both axes: b follows a instead.
  expect_refused(square(), add, values(Shape{4, 6}), {Shard{0}, Replicate{}},
                 values(Shape{4, 1}, 2), {Replicate{}, Shard{0}}, {Shard{0}, Replicate{}},
                 {Shard{0}, Replicate{}},
                 "[add] on mesh axis 0 a is Shard(0) and b Replicate(), which do not line up in "
                 "the broadcast (4, 6) (a (4, 6) (Shard(0), Replicate()), b (4, 1) (Replicate(), "
                 "Shard(0))); call redistribute(b, (Shard(0), Replicate())) first");
  // A Partial(sum) plus a Replicate would add the Replicate once per part.
  expect_refused(ring(4), add, values(Shape{3, 4}), {Partial{}}, values(Shape{4}, 1),
                 {Replicate{}}, {Replicate{}}, {Replicate{}},
                 "[add] on mesh axis 0 a is Partial(sum) and b Replicate(), which do not line up "
                 "in the broadcast (3, 4) (a (3, 4) (Partial(sum)), b (4) (Replicate())); call "
                 "redistribute(a, (Replicate())) first");
  // Dividing by a sum is not dividing by its parts: the Partial must be the dividend.
  const Op divide{"divide", [](auto& a, auto& b) { return a / b; },
                  [](auto& a, auto& b) { return a / b; }};
  expect_refused(ring(4), divide, values(Shape{3, 4}, 5), {Replicate{}},
                 ferry::HostArray<float>(Shape{4}, std::vector<float>{1, 2, 4, 8}), {Partial{}},
                 {Replicate{}}, {Replicate{}},
                 "[divide] on mesh axis 0 a is Replicate() and b Partial(sum), which do not line "
                 "up in the broadcast (3, 4) (a (3, 4) (Replicate()), b (4) (Partial(sum))); call "
                 "redistribute(b, (Replicate())) first");
  // A Partial(max) times a value is no max of the products.
  expect_refused(ring(4), multiply, values(Shape{3, 4}), {Partial{ReduceOp::max}},
                 values(Shape{4}, 1), {Replicate{}}, {Replicate{}}, {Replicate{}},
                 "[multiply] on mesh axis 0 a is Partial(max) and b Replicate(), which do not line "
                 "up in the broadcast (3, 4) (a (3, 4) (Partial(max)), b (4) (Replicate())); call "
                 "redistribute(a, (Replicate())) first");
  // Products of two sums are not the sum of the products of the parts.
  expect_refused(ring(4), multiply, values(Shape{3, 4}), {Partial{}}, values(Shape{4}, 1),
                 {Partial{}}, {Replicate{}}, {Replicate{}},
                 "[multiply] both operands are Partial(sum) on mesh axis 0, and multiply of the "
                 "parts is not the parts of multiply (a (3, 4) (Partial(sum)), b (4) "
                 "(Partial(sum))); call redistribute(a, (Replicate())) and redistribute(b, "
                 "(Replicate())) first");
  // A Shard of a size-1 dim the other operand stretches: the devices past the first hold none.
  expect_refused(two(), add, values(Shape{1, 6}), {Shard{0}}, values(Shape{4, 6}, 1),
                 {Replicate{}}, {Replicate{}}, {Replicate{}},
                 "[add] a (1, 6) is Shard(0) on mesh axis 0, a dim of size 1 that broadcasts to "
                 "4 (placements a (Shard(0)), b (Replicate())); call redistribute(a, "
                 "(Replicate())) first");
}

TEST(PlacedBroadcastingBadInput, ShapesThatDoNotBroadcastAndAstypeOfASum) {
  const Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    const MeshArray<float> a = ferry::distribute(values(Shape{4, 4}), mesh, {Shard{0}});
    expect_error<ShapeError>(
        [&] {
          return a * ferry::distribute(values(Shape{4, 2}), mesh, {Shard{0}});
        },
        "[multiply] global shapes (4, 4) and (4, 2) do not broadcast");
    expect_error<ShapeError>(
        [&] { return ferry::distribute(values(Shape{3}), mesh, {Replicate{}}) - a; },
        "[subtract] global shapes (3) and (4, 4) do not broadcast");
    const MeshArray<float> p = partial(mesh, Shape{3, 4}, ReduceOp::sum, 0).first;
    expect_error<PlacementError>(
        [&] { return ferry::astype<std::int32_t>(p); },
        "[astype] the array is Partial(sum) on mesh axis 0 (placements (Partial(sum))), and "
        "converting float32 parts to int32 is not converting their sum; call redistribute(a, "
        "(Replicate())) first");
    expect_error<ferry::InvalidArgument>([&] { return ferry::astype<double>(MeshArray<float>()); },
                                         "[astype] the array is an empty mesh array");
  });
}

}  // namespace

}  // namespace test_placed_broadcasting
