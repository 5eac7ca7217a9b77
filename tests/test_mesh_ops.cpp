// Ops on placed mesh arrays (mesh/mesh_ops.hpp): every placement rule of the elementwise ops,
// reductions, softmax and norms, shape ops and matmul, the result's placements and its global
// value against the same op on the global array on one device, on a 1-D ring of 4 and a 2 x 2
// mesh, with sizes that divide and sizes that do not; the Megatron MLP (column-parallel, then
// row-parallel, then Partial to Replicate) against the unsharded one; every error by exact type
// and message.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_mesh_ops {

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
using ferry::Shard;
using ferry::Topology;
using ferry_test::expect_balanced_after;
using ferry_test::expect_error;

using ferry_test::ring;
using ferry_test::square;
using ferry_test::values;

/// The op on the global arrays, on one device.
HostArray<float> global(
    const std::vector<HostArray<float>>& in,
    const std::function<DeviceArray<float>(std::vector<DeviceArray<float>>)>& f) {
  const Device one = Device::modeled(ferry::specs::tiny());
  std::vector<DeviceArray<float>> on;
  for (const auto& h : in) on.push_back(ferry::to_device(one, h));
  return f(on).to_host();
}

void expect_near(const HostArray<float>& got, const HostArray<float>& want, float tol) {
  ASSERT_EQ(got.shape(), want.shape());
  for (std::size_t i = 0; i < got.data().size(); ++i) {
    EXPECT_NEAR(got.data()[i], want.data()[i], tol) << "element " << i;
  }
}

std::vector<std::pair<MeshSpec, Placements>> elementwise_cases() {
  return {{ring(4), {Shard{0}}},
          {ring(4), {Shard{-1}}},
          {ring(4), {Replicate{}}},
          {square(), {Shard{0}, Shard{1}}},
          {square(), {Replicate{}, Shard{0}}},
          {square(), {Shard{1}, Replicate{}}}};
}

TEST(MeshOps, BinaryOpsOfTwoArraysRunPerDeviceAndKeepThePlacements) {
  const HostArray<float> ha = values(Shape{6, 5});
  const HostArray<float> hb = values(Shape{6, 5}, 5);
  using MeshFn = std::function<MeshArray<float>(const MeshArray<float>&, const MeshArray<float>&)>;
  using DevFn =
      std::function<DeviceArray<float>(const DeviceArray<float>&, const DeviceArray<float>&)>;
  const std::vector<std::pair<MeshFn, DevFn>> ops = {
      {[](auto& a, auto& b) { return a + b; }, [](auto& a, auto& b) { return a + b; }},
      {[](auto& a, auto& b) { return a - b; }, [](auto& a, auto& b) { return a - b; }},
      {[](auto& a, auto& b) { return a * b; }, [](auto& a, auto& b) { return a * b; }},
      {[](auto& a, auto& b) { return a / (b * b + 1.0F); },
       [](auto& a, auto& b) { return a / (b * b + 1.0F); }},
      {[](auto& a, auto& b) { return ferry::maximum(a, b); },
       [](auto& a, auto& b) { return ferry::maximum(a, b); }},
      {[](auto& a, auto& b) { return ferry::minimum(a, b); },
       [](auto& a, auto& b) { return ferry::minimum(a, b); }}};
  for (const auto& [spec, ps] : elementwise_cases()) {
    Mesh mesh = Mesh::modeled(spec);
    const MeshArray<float> a = ferry::distribute(ha, mesh, ps);
    const MeshArray<float> b = ferry::distribute(hb, mesh, ps);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      SCOPED_TRACE("op " + std::to_string(k) + " on " + spec.name);
      const MeshArray<float> c = ops[k].first(a, b);
      EXPECT_EQ(c.placements(), a.placements());
      EXPECT_EQ(c.global_shape(), ha.shape());
      EXPECT_EQ(ferry::to_host(c),
                global({ha, hb}, [&](auto v) { return ops[k].second(v[0], v[1]); }));
    }
  }
}

TEST(MeshOps, ScalarAndUnaryOpsRunPerDeviceAndKeepThePlacements) {
  const HostArray<float> h = values(Shape{6, 5});
  using MeshFn = std::function<MeshArray<float>(const MeshArray<float>&)>;
  using DevFn = std::function<DeviceArray<float>(const DeviceArray<float>&)>;
  const std::vector<std::pair<MeshFn, DevFn>> ops = {
      {[](auto& a) { return a + 1.5F; }, [](auto& a) { return a + 1.5F; }},
      {[](auto& a) { return 1.5F + a; }, [](auto& a) { return 1.5F + a; }},
      {[](auto& a) { return 2.0F - a; }, [](auto& a) { return 2.0F - a; }},
      {[](auto& a) { return a - 2.0F; }, [](auto& a) { return a - 2.0F; }},
      {[](auto& a) { return a * 3.0F; }, [](auto& a) { return a * 3.0F; }},
      {[](auto& a) { return 3.0F * a; }, [](auto& a) { return 3.0F * a; }},
      {[](auto& a) { return a / 4.0F; }, [](auto& a) { return a / 4.0F; }},
      {[](auto& a) { return 4.0F / (a * a + 1.0F); },
       [](auto& a) { return 4.0F / (a * a + 1.0F); }},
      {[](auto& a) { return ferry::maximum(a, 0.5F); },
       [](auto& a) { return ferry::maximum(a, 0.5F); }},
      {[](auto& a) { return ferry::minimum(a, 0.5F); },
       [](auto& a) { return ferry::minimum(a, 0.5F); }},
      {[](auto& a) { return -a; }, [](auto& a) { return -a; }},
      {[](auto& a) { return ferry::neg(a); }, [](auto& a) { return ferry::neg(a); }},
      {[](auto& a) { return ferry::exp(a); }, [](auto& a) { return ferry::exp(a); }},
      {[](auto& a) { return ferry::relu(a); }, [](auto& a) { return ferry::relu(a); }},
      {[](auto& a) { return ferry::gelu(a); }, [](auto& a) { return ferry::gelu(a); }},
      {[](auto& a) { return ferry::tanh(a); }, [](auto& a) { return ferry::tanh(a); }}};
  for (const auto& [spec, ps] : elementwise_cases()) {
    Mesh mesh = Mesh::modeled(spec);
    const MeshArray<float> a = ferry::distribute(h, mesh, ps);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      SCOPED_TRACE("op " + std::to_string(k) + " on " + spec.name);
      const MeshArray<float> c = ops[k].first(a);
      EXPECT_EQ(c.placements(), a.placements());
      EXPECT_EQ(ferry::to_host(c), global({h}, [&](auto v) { return ops[k].second(v[0]); }));
    }
  }
}

TEST(MeshOps, PartialsPassThroughTheOpsTheyCommuteWith) {
  Mesh mesh = Mesh::modeled(square());
  const HostArray<float> ha = values(Shape{4, 6});
  const HostArray<float> hb = values(Shape{4, 6}, 3);
  const Placements sum_ps = {Partial{}, Shard{1}};
  const MeshArray<float> a = ferry::distribute(ha, mesh, sum_ps);
  const MeshArray<float> b = ferry::distribute(hb, mesh, sum_ps);
  const auto want = [&](auto f) { return global({ha, hb}, [&](auto v) { return f(v[0], v[1]); }); };
  auto check = [&](const MeshArray<float>& c, const Placements& ps, const HostArray<float>& w) {
    EXPECT_EQ(c.placements(), ps);
    EXPECT_EQ(ferry::to_host(c), w);
  };
  check(a + b, sum_ps, want([](auto& x, auto& y) { return x + y; }));
  check(a - b, sum_ps, want([](auto& x, auto& y) { return x - y; }));
  check(a * 2.0F, sum_ps, want([](auto& x, auto&) { return x * 2.0F; }));
  check(2.0F * a, sum_ps, want([](auto& x, auto&) { return x * 2.0F; }));
  check(a / 4.0F, sum_ps, want([](auto& x, auto&) { return x / 4.0F; }));
  check(-a, sum_ps, want([](auto& x, auto&) { return -x; }));

  const Placements max_ps = {Partial{ReduceOp::max}, Shard{1}};
  const Placements min_ps = {Partial{ReduceOp::min}, Shard{1}};
  const MeshArray<float> m = ferry::distribute(ha, mesh, max_ps);
  const MeshArray<float> n = ferry::distribute(hb, mesh, max_ps);
  check(ferry::maximum(m, n), max_ps, want([](auto& x, auto& y) { return ferry::maximum(x, y); }));
  check(m + 1.0F, max_ps, want([](auto& x, auto&) { return x + 1.0F; }));
  check(m - 1.0F, max_ps, want([](auto& x, auto&) { return x - 1.0F; }));
  check(ferry::maximum(m, 0.0F), max_ps,
        want([](auto& x, auto&) { return ferry::maximum(x, 0.0F); }));
  check(-m, min_ps, want([](auto& x, auto&) { return -x; }));
  const MeshArray<float> lo = ferry::distribute(ha, mesh, min_ps);
  check(ferry::minimum(lo, 0.0F), min_ps,
        want([](auto& x, auto&) { return ferry::minimum(x, 0.0F); }));
  check(-lo, max_ps, want([](auto& x, auto&) { return -x; }));
}

/// A Partial(`op`) array of `shape` on a 1-D mesh whose part on device i is values(shape, salt +
/// 3 i): every device holds a different summand.
MeshArray<float> parts_of(const Mesh& mesh, const Shape& shape, ReduceOp op, int salt) {
  std::vector<DeviceArray<float>> parts;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    parts.push_back(ferry::to_device(mesh.device(i), values(shape, salt + 3 * i)));
  }
  return MeshArray<float>::from_shards(mesh, std::move(parts), shape, {Partial{op}});
}

TEST(MeshOps, APartialSumOrMeanTimesAReplicateStaysPartial) {
  // Linear in the Partial operand: each device multiplies (or divides) its own part by the
  // replicated value, and the sum (or mean) of the results is the result of the sum.
  using Fn = std::function<MeshArray<float>(const MeshArray<float>&, const MeshArray<float>&)>;
  using One =
      std::function<DeviceArray<float>(const DeviceArray<float>&, const DeviceArray<float>&)>;
  struct Linear {
    std::string name;
    Fn mesh;  // of the Partial p and the Replicate r
    One one;
  };
  const std::vector<Linear> linear = {
      {"p * r", [](auto& p, auto& r) { return p * r; }, [](auto& p, auto& r) { return p * r; }},
      {"r * p", [](auto& p, auto& r) { return r * p; }, [](auto& p, auto& r) { return r * p; }},
      {"p / r", [](auto& p, auto& r) { return p / (r * r + 1.0F); },
       [](auto& p, auto& r) { return p / (r * r + 1.0F); }},
      {"multiply(p, r) * 3 / 2",
       [](auto& p, auto& r) { return -ferry::multiply(p, r) * 3.0F / 2.0F; },
       [](auto& p, auto& r) { return -ferry::multiply(p, r) * 3.0F / 2.0F; }}};
  Mesh mesh = Mesh::modeled(ring(4));
  const HostArray<float> hr = values(Shape{3, 5}, 7);
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    const MeshArray<float> p = parts_of(mesh, Shape{3, 5}, op, 1);
    const MeshArray<float> r = ferry::distribute(hr, mesh, {Replicate{}});
    // The host's truth: the Partial all-reduced to its global value, then the plain op.
    const HostArray<float> hp = ferry::to_host(ferry::redistribute(p, {Replicate{}}));
    for (const Linear& f : linear) {
      SCOPED_TRACE(f.name + " of a " + ferry::detail::placement_text(Partial{op}));
      ferry::wait(p);
      ferry::wait(r);
      mesh.reset_stats();
      const MeshArray<float> c = f.mesh(p, r);
      ferry::wait(c);
      EXPECT_TRUE(ferry_test::link_ops(mesh).empty());  // no communication
      EXPECT_EQ(c.placements(), (Placements{Partial{op}}));
      expect_near(ferry::to_host(c), global({hp, hr}, [&](auto v) { return f.one(v[0], v[1]); }),
                  1e-5F);
    }
  }
  // On the square, a sum over the dim cut along axis 0 is Partial(sum) there, still Shard(1)
  // along axis 1; the Replicate operand cut alike along axis 1.
  Mesh sq = Mesh::modeled(square());
  const HostArray<float> hx = values(Shape{4, 4, 6}, 2);
  const HostArray<float> hb = values(Shape{4, 6}, 5);
  const MeshArray<float> a = ferry::sum(ferry::distribute(hx, sq, {Shard{0}, Shard{2}}), {0});
  ASSERT_EQ(a.placements(), (Placements{Partial{}, Shard{1}}));
  const MeshArray<float> b = ferry::distribute(hb, sq, {Replicate{}, Shard{1}});
  const HostArray<float> hs = global({hx}, [](auto v) { return ferry::sum(v[0], {0}); });
  for (const Linear& f : linear) {
    SCOPED_TRACE(f.name + " on the square");
    ferry::wait(a);
    ferry::wait(b);
    sq.reset_stats();
    const MeshArray<float> c = f.mesh(a, b);
    ferry::wait(c);
    EXPECT_TRUE(ferry_test::link_ops(sq).empty());
    EXPECT_EQ(c.placements(), (Placements{Partial{}, Shard{1}}));
    expect_near(ferry::to_host(c), global({hs, hb}, [&](auto v) { return f.one(v[0], v[1]); }),
                1e-5F);
  }
  // A Partial along each axis, of each operand: the product is a sum over both axes of the
  // products of the parts, which is the product of the two sums.
  const HostArray<float> hy = values(Shape{4, 4, 6}, 9);
  const MeshArray<float> rows = ferry::sum(ferry::distribute(hx, sq, {Shard{0}, Replicate{}}), {0});
  const MeshArray<float> cols = ferry::sum(ferry::distribute(hy, sq, {Replicate{}, Shard{0}}), {0});
  ASSERT_EQ(cols.placements(), (Placements{Replicate{}, Partial{}}));
  const MeshArray<float> both = rows * cols;
  EXPECT_EQ(both.placements(), (Placements{Partial{}, Partial{}}));
  expect_near(ferry::to_host(both), global({hx, hy}, [](auto v) {
                return ferry::sum(v[0], {0}) * ferry::sum(v[1], {0});
              }),
              1e-5F);
}

TEST(MeshOps, ReductionsOverAShardedDimGivePartials) {
  const HostArray<float> h = values(Shape{4, 6, 3});
  struct Case {
    MeshSpec spec;
    Placements in;
    std::vector<int> axes;
    bool keepdims;
    Placements out;
  };
  const std::vector<Case> cases = {
      {ring(4), {Shard{1}}, {1}, false, {Partial{}}},
      {ring(4), {Shard{1}}, {0, 2}, false, {Shard{0}}},
      {ring(4), {Shard{1}}, {0, 2}, true, {Shard{1}}},
      {ring(4), {Shard{2}}, {0}, false, {Shard{1}}},
      {ring(4), {Replicate{}}, {-1}, true, {Replicate{}}},
      {ring(4), {Shard{0}}, {}, false, {Partial{}}},
      {square(), {Shard{0}, Shard{2}}, {0}, false, {Partial{}, Shard{1}}},
      {square(), {Shard{0}, Shard{2}}, {0, 2}, true, {Partial{}, Partial{}}},
      {square(), {Replicate{}, Shard{1}}, {2}, false, {Replicate{}, Shard{1}}}};
  for (const Case& c : cases) {
    Mesh mesh = Mesh::modeled(c.spec);
    // The partials and the all-reduces that replicate them keep nothing.
    ferry_test::expect_balanced_after(mesh, [&] {
      const MeshArray<float> a = ferry::distribute(h, mesh, c.in);
      for (int which = 0; which < 3; ++which) {
        SCOPED_TRACE(c.spec.name + " " + ferry::detail::placements_text(c.in) + " op " +
                     std::to_string(which));
        Placements out = c.out;
        if (which == 2) {  // max: Partial(max) where sum gives Partial(sum)
          for (auto& p : out) {
            if (std::holds_alternative<Partial>(p)) p = Partial{ReduceOp::max};
          }
        }
        const MeshArray<float> r = which == 0   ? ferry::sum(a, c.axes, c.keepdims)
                                   : which == 1 ? ferry::mean(a, c.axes, c.keepdims)
                                                : ferry::max(a, c.axes, c.keepdims);
        EXPECT_EQ(r.placements(), out);
        const HostArray<float> want = global({h}, [&](auto v) {
          return which == 0   ? ferry::sum(v[0], c.axes, c.keepdims)
                 : which == 1 ? ferry::mean(v[0], c.axes, c.keepdims)
                              : ferry::max(v[0], c.axes, c.keepdims);
        });
        expect_near(ferry::to_host(r), want, 1e-5F);
        // Partial to Replicate by an all-reduce gives the same value on every device.
        const MeshArray<float> everywhere =
            ferry::redistribute(r, Placements(out.size(), Replicate{}));
        for (const auto& shard : everywhere.to_host()) expect_near(shard, want, 1e-5F);
      }
    });
  }
}

TEST(MeshOps, ReductionsPassAPartialOfTheirOwnKind) {
  Mesh mesh = Mesh::modeled(ring(4));
  const HostArray<float> h = values(Shape{4, 6});
  const MeshArray<float> s = ferry::distribute(h, mesh, {Partial{}});
  EXPECT_EQ(ferry::sum(s, {1}).placements(), (Placements{Partial{}}));
  expect_near(ferry::to_host(ferry::mean(s, {0})),
              global({h}, [](auto v) { return ferry::mean(v[0], {0}); }), 1e-6F);
  const MeshArray<float> m = ferry::distribute(h, mesh, {Partial{ReduceOp::max}});
  EXPECT_EQ(ferry::to_host(ferry::max(m, {1})),
            global({h}, [](auto v) { return ferry::max(v[0], {1}); }));
  EXPECT_EQ(ferry::to_host(ferry::min(ferry::distribute(h, mesh, {Shard{1}}), {1})),
            global({h}, [](auto v) { return ferry::min(v[0], {1}); }));
}

/// array_split gives the last devices an empty block when a dim is shorter than the mesh
/// axis ((3, 2) rows over 4 devices: 1, 1, 1, 0). max and min over that dim equal the one-device
/// op, the empty block holding its Partial's identity (-inf, +inf; the lowest and highest int),
/// where the device's own max refused its empty axis; an empty global dim is still refused.
TEST(MeshOps, MaxAndMinOverAnEmptyBlockOfAShardedDim) {
  Mesh mesh = Mesh::modeled(ring(4));
  const HostArray<float> h(Shape{3, 2}, std::vector<float>{1, -2, 3, 4, 5, -6});
  const HostArray<std::int32_t> hi(Shape{3, 2}, std::vector<std::int32_t>{1, -2, 3, 4, 5, -6});
  ferry_test::expect_balanced_after(mesh, [&] {
    const MeshArray<float> x = ferry::distribute(h, mesh, {Shard{0}});
    const MeshArray<std::int32_t> xi = ferry::distribute(hi, mesh, {Shard{0}});
    EXPECT_EQ(x.shard(3).shape(), (Shape{0, 2}));
    for (const bool keepdims : {false, true}) {
      SCOPED_TRACE(keepdims ? "keepdims" : "no keepdims");
      EXPECT_EQ(ferry::to_host(ferry::max(x, {0}, keepdims)),
                global({h}, [&](auto v) { return ferry::max(v[0], {0}, keepdims); }));
      EXPECT_EQ(ferry::to_host(ferry::min(x, {0}, keepdims)),
                global({h}, [&](auto v) { return ferry::min(v[0], {0}, keepdims); }));
      const Device one = Device::modeled(ferry::specs::tiny());
      EXPECT_EQ(ferry::to_host(ferry::max(xi, {}, keepdims)),
                ferry::max(ferry::to_device(one, hi), {}, keepdims).to_host());
      EXPECT_EQ(ferry::to_host(ferry::min(xi, {}, keepdims)),
                ferry::min(ferry::to_device(one, hi), {}, keepdims).to_host());
    }
    // The empty block's identity, seen on its own device before the all-reduce.
    EXPECT_EQ(ferry::max(x, {0}).shard(3).to_host(),
              HostArray<float>(Shape{2}, std::vector<float>(2, -INFINITY)));
    EXPECT_EQ(ferry::min(xi).shard(3).to_host()(), std::numeric_limits<std::int32_t>::max());
    const MeshArray<float> none =
        ferry::distribute(HostArray<float>(Shape{0, 2}), mesh, {Shard{0}});
    EXPECT_THROW((void)ferry::max(none, {0}), ferry::ShapeError);
  });
}

/// The 16-bit floating types reduce as float does: sum, mean, max and min over a sharded dim
/// with an empty block (whose identity, -inf or +inf, is made through float: bfloat16 and
/// float16 have no unary minus; the reductions did not compile for them). Small integers, so
/// that every order of the sum is exact; a mean's local sums are divided first, within a unit
/// in the last place of the one-device mean.
template <class T>
void expect_sixteen_bit_reductions() {
  Mesh mesh = Mesh::modeled(ring(4));
  std::vector<T> v;
  for (const float f : {1.0F, -2.0F, 3.0F, 4.0F, 5.0F, -6.0F}) v.push_back(T(f));
  const HostArray<T> h(Shape{3, 2}, v);
  const Device one = Device::modeled(ferry::specs::tiny());
  const DeviceArray<T> whole = ferry::to_device(one, h);
  ferry_test::expect_balanced_after(mesh, [&] {
    const MeshArray<T> x = ferry::distribute(h, mesh, {Shard{0}});
    EXPECT_EQ(ferry::to_host(ferry::sum(x, {0})), ferry::sum(whole, {0}).to_host());
    EXPECT_EQ(ferry::to_host(ferry::max(x, {0})), ferry::max(whole, {0}).to_host());
    EXPECT_EQ(ferry::to_host(ferry::min(x, {0})), ferry::min(whole, {0}).to_host());
    const HostArray<T> mean = ferry::to_host(ferry::mean(x, {0}));
    const HostArray<T> want = ferry::mean(whole, {0}).to_host();
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(float(mean.data()[i]), float(want.data()[i]), 0.02F) << "element " << i;
    }
    EXPECT_EQ(float(ferry::max(x, {0}).shard(3).to_host().data()[0]), -INFINITY);
    EXPECT_EQ(float(ferry::min(x, {0}).shard(3).to_host().data()[0]), INFINITY);
  });
}

TEST(MeshOps, SixteenBitFloatsReduceAsFloatDoes) {
  expect_sixteen_bit_reductions<ferry::bfloat16>();
  expect_sixteen_bit_reductions<ferry::float16>();
}

TEST(MeshOps, SoftmaxAndNormsRunPerDeviceOverAWholeDim) {
  const HostArray<float> h = values(Shape{6, 8});
  const HostArray<float> hw = values(Shape{8}, 2);
  const HostArray<float> hb = values(Shape{8}, 9);
  for (const auto& [spec, ps] : std::vector<std::pair<MeshSpec, Placements>>{
           {ring(4), {Shard{0}}}, {ring(4), {Replicate{}}}, {square(), {Shard{0}, Replicate{}}}}) {
    Mesh mesh = Mesh::modeled(spec);
    const MeshArray<float> a = ferry::distribute(h, mesh, ps);
    const Placements everywhere(ps.size(), Replicate{});
    const MeshArray<float> w = ferry::distribute(hw, mesh, everywhere);
    const MeshArray<float> b = ferry::distribute(hb, mesh, everywhere);
    const MeshArray<float> s = ferry::softmax(a, -1);
    EXPECT_EQ(s.placements(), a.placements());
    EXPECT_EQ(ferry::to_host(s), global({h}, [](auto v) { return ferry::softmax(v[0], -1); }));
    EXPECT_EQ(ferry::to_host(ferry::layer_norm(a, {.weight = w, .bias = b, .eps = 1e-5})),
              global({h, hw, hb}, [](auto v) {
                return ferry::layer_norm(v[0], {.weight = v[1], .bias = v[2], .eps = 1e-5});
              }));
    EXPECT_EQ(ferry::to_host(ferry::rms_norm(a)),
              global({h}, [](auto v) { return ferry::rms_norm(v[0]); }));
    EXPECT_EQ(ferry::rms_norm(a, {.weight = w}).placements(), a.placements());
  }
  Mesh mesh = Mesh::modeled(ring(4));
  const MeshArray<float> cols = ferry::distribute(h, mesh, {Shard{1}});
  EXPECT_EQ(ferry::to_host(ferry::softmax(cols, 0)),
            global({h}, [](auto v) { return ferry::softmax(v[0], 0); }));
}

TEST(MeshOps, ShapeOpsCarryTheShardsAlong) {
  const HostArray<float> h = values(Shape{4, 6, 4});
  Mesh mesh = Mesh::modeled(square());
  // Views and copies of reshaped and transposed shards are freed with the arrays.
  ferry_test::expect_balanced_after(mesh, [&] {
    const MeshArray<float> a = ferry::distribute(h, mesh, {Shard{0}, Replicate{}});
    const MeshArray<float> r = ferry::reshape(a, Shape{4, 3, 8});
    EXPECT_EQ(r.placements(), (Placements{Shard{0}, Replicate{}}));
    EXPECT_EQ(ferry::to_host(r), global({h}, [](auto v) {
                return ferry::reshape(v[0], Shape{4, 3, 8});
              }));
    const MeshArray<float> r2 =
        ferry::reshape(ferry::distribute(h, mesh, {Shard{1}, Shard{0}}), Shape{4, 6, 2, 2});
    EXPECT_EQ(r2.placements(), (Placements{Shard{1}, Shard{0}}));
    EXPECT_EQ(ferry::to_host(r2), global({h}, [](auto v) {
                return ferry::reshape(v[0], Shape{4, 6, 2, 2});
              }));

    const MeshArray<float> b = ferry::distribute(h, mesh, {Shard{0}, Shard{2}});
    const MeshArray<float> p = ferry::transpose(b, {2, 0, 1});
    EXPECT_EQ(p.placements(), (Placements{Shard{1}, Shard{0}}));
    EXPECT_EQ(p.global_shape(), (Shape{4, 4, 6}));
    EXPECT_EQ(ferry::to_host(p), global({h}, [](auto v) {
                return ferry::permute(v[0], {2, 0, 1});
              }));
    const MeshArray<float> t = ferry::transpose(b);
    EXPECT_EQ(t.placements(), (Placements{Shard{2}, Shard{0}}));
    EXPECT_EQ(ferry::to_host(t), global({h}, [](auto v) { return ferry::transpose(v[0]); }));
    const MeshArray<float> q =
        ferry::transpose(ferry::distribute(h, mesh, {Partial{}, Shard{1}}), {1, -1, 0});
    EXPECT_EQ(q.placements(), (Placements{Partial{}, Shard{0}}));
    EXPECT_EQ(ferry::to_host(q), global({h}, [](auto v) {
                return ferry::permute(v[0], {1, 2, 0});
              }));
  });
}

TEST(MeshOps, MatmulCoversMegatronsLayers) {
  const HostArray<float> hx = values(Shape{6, 8});
  const HostArray<float> hw = values(Shape{8, 12}, 4);
  const auto want = global({hx, hw}, [](auto v) { return ferry::matmul(v[0], v[1]); });
  struct Case {
    MeshSpec spec;
    Placements x, w, out;
  };
  const std::vector<Case> cases = {
      {ring(4), {Replicate{}}, {Replicate{}}, {Replicate{}}},
      {ring(4), {Shard{0}}, {Replicate{}}, {Shard{0}}},
      {ring(4), {Replicate{}}, {Shard{1}}, {Shard{1}}},
      {ring(4), {Shard{-1}}, {Shard{0}}, {Partial{}}},
      {ring(4), {Partial{}}, {Replicate{}}, {Partial{}}},
      {ring(4), {Replicate{}}, {Partial{}}, {Partial{}}},
      {square(), {Shard{0}, Replicate{}}, {Replicate{}, Shard{1}}, {Shard{0}, Shard{1}}},
      {square(), {Shard{0}, Shard{1}}, {Replicate{}, Shard{0}}, {Shard{0}, Partial{}}},
      {square(), {Replicate{}, Shard{1}}, {Shard{1}, Shard{0}}, {Shard{1}, Partial{}}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec.name + " " + ferry::detail::placements_text(c.x) + " x " +
                 ferry::detail::placements_text(c.w));
    Mesh mesh = Mesh::modeled(c.spec);
    // Operands, per-device products and the export's copies: all freed with the arrays.
    ferry_test::expect_balanced_after(mesh, [&] {
      const MeshArray<float> y =
          ferry::matmul(ferry::distribute(hx, mesh, c.x), ferry::distribute(hw, mesh, c.w));
      EXPECT_EQ(y.placements(), c.out);
      EXPECT_EQ(y.global_shape(), (Shape{6, 12}));
      expect_near(ferry::to_host(y), want, 1e-4F);
    });
  }
  // Batched activations: (2, 3, 8) sharded on the batch dim times column-parallel weights.
  Mesh mesh = Mesh::modeled(square());
  const HostArray<float> hb = values(Shape{2, 3, 8});
  const MeshArray<float> y = ferry::matmul(ferry::distribute(hb, mesh, {Shard{0}, Replicate{}}),
                                           ferry::distribute(hw, mesh, {Replicate{}, Shard{1}}));
  EXPECT_EQ(y.placements(), (Placements{Shard{0}, Shard{2}}));
  EXPECT_EQ(ferry::to_host(y), global({hb, hw}, [](auto v) { return ferry::matmul(v[0], v[1]); }));
}

TEST(MeshOps, MegatronMlpEqualsTheUnshardedOne) {
  const HostArray<float> hx = values(Shape{8, 16});
  const HostArray<float> h1 = values(Shape{16, 32}, 1);
  const HostArray<float> h2 = values(Shape{32, 16}, 2);
  const HostArray<float> want = global({hx, h1, h2}, [](auto v) {
    return ferry::matmul(ferry::gelu(ferry::matmul(v[0], v[1]) * 0.125F), v[2]);
  });
  {  // tensor parallel over a ring of 4
    Mesh mesh = Mesh::modeled(ring(4));
    ferry_test::expect_balanced_after(mesh, [&] {
      const MeshArray<float> x = ferry::distribute(hx, mesh, {Replicate{}});
      const MeshArray<float> w1 = ferry::distribute(h1, mesh, {Shard{1}});
      const MeshArray<float> w2 = ferry::distribute(h2, mesh, {Shard{0}});
      const MeshArray<float> h = ferry::gelu(ferry::matmul(x, w1) * 0.125F);
      EXPECT_EQ(h.placements(), (Placements{Shard{1}}));
      const MeshArray<float> y = ferry::matmul(h, w2);
      EXPECT_EQ(y.placements(), (Placements{Partial{}}));
      const MeshArray<float> out = ferry::redistribute(y, {Replicate{}});
      for (const auto& shard : out.to_host()) expect_near(shard, want, 1e-3F);
    });
  }
  {  // data parallel on axis 0, tensor parallel on axis 1
    Mesh mesh = Mesh::modeled(square());
    ferry_test::expect_balanced_after(mesh, [&] {
      const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}, Replicate{}});
      const MeshArray<float> w1 = ferry::distribute(h1, mesh, {Replicate{}, Shard{1}});
      const MeshArray<float> w2 = ferry::distribute(h2, mesh, {Replicate{}, Shard{0}});
      const MeshArray<float> y = ferry::matmul(ferry::gelu(ferry::matmul(x, w1) * 0.125F), w2);
      EXPECT_EQ(y.placements(), (Placements{Shard{0}, Partial{}}));
      const MeshArray<float> out = ferry::redistribute(y, {Shard{0}, Replicate{}});
      expect_near(ferry::to_host(out), want, 1e-3F);
    });
  }
}

TEST(MeshOpsBadInput, ArraysOfTwoMeshesShapesOrPlacements) {
  Mesh one = Mesh::modeled(ring(4));
  Mesh two = Mesh::modeled(square());
  const HostArray<float> h = values(Shape{4, 4});
  const MeshArray<float> a = ferry::distribute(h, one, {Shard{0}});
  const MeshArray<float> other = ferry::distribute(h, two, {Shard{0}, Replicate{}});
  expect_error<ferry::InvalidArgument>(
      [&] { return a + other; },
      "[add] the operands live on two meshes: ring (4) and square (2, 2); an op takes arrays of "
      "one mesh");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::matmul(a, other); },
      "[matmul] the operands live on two meshes: ring (4) and square (2, 2); an op takes arrays "
      "of one mesh");
  expect_error<ferry::ShapeError>(
      [&] {
        return a * ferry::distribute(values(Shape{4, 2}), one, {Shard{0}});
      },
      "[multiply] global shapes (4, 4) and (4, 2) do not broadcast");
  expect_error<PlacementError>(
      [&] { return a - ferry::distribute(h, one, {Replicate{}}); },
      "[subtract] placements differ: a (Shard(0)), b (Replicate()); call redistribute(b, "
      "(Shard(0))) (b = redistribute(b, a.placements())) first");
  expect_error<PlacementError>(
      [&] { return ferry::distribute(h, one, {Partial{}}) + a; },
      "[add] placements differ: a (Partial(sum)), b (Shard(0)); call redistribute(a, "
      "(Replicate())) and redistribute(b, (Replicate())) first");
  const MeshArray<float> bare = MeshArray<float>::from_shards(one, a.shards());
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::exp(bare); },
      "[exp] the array has no global view (a collective's result, or from_shards without "
      "placements): give it placements with MeshArray::from_shards(mesh, shards, global_shape, "
      "placements)");
  expect_error<ferry::InvalidArgument>([&] { return ferry::maximum(a, MeshArray<float>()); },
                                       "[maximum] b is an empty mesh array");
}

TEST(MeshOpsBadInput, PartialsAnOpCannotPassThrough) {
  Mesh mesh = Mesh::modeled(square());
  const HostArray<float> h = values(Shape{4, 4});
  const MeshArray<float> s = ferry::distribute(h, mesh, {Shard{0}, Partial{}});
  expect_error<PlacementError>(
      [&] { return s * s; },
      "[multiply] both operands are Partial(sum) on mesh axis 1 (placements (Shard(0), "
      "Partial(sum))), and multiply of the parts is not the parts of multiply; call "
      "redistribute(a, (Shard(0), Replicate())) and redistribute(b, (Shard(0), Replicate())) "
      "first");
  expect_error<PlacementError>(
      [&] { return s + 1.0F; },
      "[add] the array is Partial(sum) on mesh axis 1 (placements (Shard(0), Partial(sum))), and "
      "array, scalar is not applied part by part; call redistribute(a, (Shard(0), Replicate())) "
      "first");
  expect_error<PlacementError>(
      [&] { return 1.0F / s; },
      "[divide] the array is Partial(sum) on mesh axis 1 (placements (Shard(0), Partial(sum))), "
      "and scalar, array is not applied part by part; call redistribute(a, (Shard(0), "
      "Replicate())) first");
  expect_error<PlacementError>(
      [&] { return ferry::relu(s); },
      "[relu] the array is Partial(sum) on mesh axis 1 (placements (Shard(0), Partial(sum))), "
      "and relu of the parts is not relu of their reduction; call redistribute(a, (Shard(0), "
      "Replicate())) first");
  expect_error<PlacementError>(
      [&] { return ferry::max(s, {0}); },
      "[max] the array is Partial(sum) on mesh axis 1 (placements (Shard(0), Partial(sum))), and "
      "max of the parts is not max of their sum; call redistribute(a, (Shard(0), Replicate())) "
      "first");
  const MeshArray<float> m = ferry::distribute(h, mesh, {Replicate{}, Partial{ReduceOp::max}});
  expect_error<PlacementError>(
      [&] { return m * 2.0F; },
      "[multiply] the array is Partial(max) on mesh axis 1 (placements (Replicate(), "
      "Partial(max))), and array, scalar is not applied part by part; call redistribute(a, "
      "(Replicate(), Replicate())) first");
  expect_error<PlacementError>(
      [&] { return ferry::sum(m, {1}); },
      "[sum] the array is Partial(max) on mesh axis 1 (placements (Replicate(), Partial(max))), "
      "and sum of the parts is not sum of their max; call redistribute(a, (Replicate(), "
      "Replicate())) first");
  expect_error<ferry::InvalidArgument>([&] { return ferry::sum(m, {2}); },
                                       "[sum] axis 2 is out of range for a global array of rank 2");
}

TEST(MeshOpsBadInput, APartialAgainstAReplicateOnlyWhereTheOpIsLinearInIt) {
  Mesh mesh = Mesh::modeled(ring(4));
  expect_balanced_after(mesh, [&] {
    const HostArray<float> h = values(Shape{3, 4});
    const MeshArray<float> p = parts_of(mesh, Shape{3, 4}, ReduceOp::sum, 0);
    const MeshArray<float> r = ferry::distribute(h, mesh, {Replicate{}});
    // Adding a replicated value to each part would add it once per part: four times.
    expect_error<PlacementError>(
        [&] { return p + r; },
        "[add] placements differ: a (Partial(sum)), b (Replicate()); call redistribute(a, "
        "(Replicate())) first");
    expect_error<PlacementError>(
        [&] { return r - p; },
        "[subtract] placements differ: a (Replicate()), b (Partial(sum)); call redistribute(b, "
        "(Replicate())) (b = redistribute(b, a.placements())) first");
    // Dividing by a sum is not dividing by its parts.
    expect_error<PlacementError>(
        [&] { return r / p; },
        "[divide] placements differ: a (Replicate()), b (Partial(sum)); call redistribute(b, "
        "(Replicate())) (b = redistribute(b, a.placements())) first");
    // The largest of the parts times a value is not the largest of the products (a negative
    // value turns it into the smallest).
    const MeshArray<float> m = parts_of(mesh, Shape{3, 4}, ReduceOp::max, 0);
    expect_error<PlacementError>(
        [&] { return m * r; },
        "[multiply] placements differ: a (Partial(max)), b (Replicate()); call redistribute(a, "
        "(Replicate())) first");
    // A maximum against a Replicate is not linear either.
    expect_error<PlacementError>(
        [&] { return ferry::maximum(p, r); },
        "[maximum] placements differ: a (Partial(sum)), b (Replicate()); call redistribute(a, "
        "(Replicate())) first");
    // Two Partials along one axis: the product of two sums is not the sum of the products.
    expect_error<PlacementError>(
        [&] { return p * p; },
        "[multiply] both operands are Partial(sum) on mesh axis 0 (placements (Partial(sum))), "
        "and multiply of the parts is not the parts of multiply; call redistribute(a, "
        "(Replicate())) and redistribute(b, (Replicate())) first");
    // A Partial against a Shard: the parts are whole, the shard a block.
    expect_error<PlacementError>(
        [&] { return p * ferry::distribute(h, mesh, {Shard{0}}); },
        "[multiply] placements differ: a (Partial(sum)), b (Shard(0)); call redistribute(a, "
        "(Replicate())) and redistribute(b, (Replicate())) first");
  });
}

/// A Partial(`op`) array of T on a 2-device mesh whose parts are `x0` and `x1` (one element).
template <class T>
MeshArray<T> two_parts(const Mesh& mesh, T x0, T x1, ReduceOp op) {
  std::vector<DeviceArray<T>> parts = {
      ferry::to_device(mesh.device(0), std::vector<T>{x0}, Shape{1}),
      ferry::to_device(mesh.device(1), std::vector<T>{x1}, Shape{1})};
  return MeshArray<T>::from_shards(mesh, std::move(parts), Shape{1}, {Partial{op}});
}

// Integers wrap and their quotients truncate: the ops that commute with a floating reduction do
// not all commute with an integer one. Those refused would give values no one-device op gives
// (each case's comment); those kept still give them.
TEST(MeshOpsBadInput, IntegerPartialsPassOnlyWhatWrappingKeeps) {
  Mesh mesh = Mesh::modeled(ferry_test::line_of(2));
  const auto sum_i32 = two_parts<std::int32_t>(mesh, 3, 3, ReduceOp::sum);  // 6
  // 6 / 2 is 3; 3 / 2 + 3 / 2 would be 2.
  expect_error<PlacementError>(
      [&] { return sum_i32 / 2; },
      "[divide] the array is Partial(sum) on mesh axis 0 (placements (Partial(sum))), and array, "
      "scalar is not applied part by part; call redistribute(a, (Replicate())) first");
  const MeshArray<std::int32_t> two = ferry::distribute(
      HostArray<std::int32_t>(Shape{1}, std::vector<std::int32_t>{2}), mesh, {Replicate{}});
  expect_error<PlacementError>(
      [&] { return sum_i32 / two; },
      "[divide] placements differ: a (Partial(sum)), b (Replicate()); call redistribute(a, "
      "(Replicate())) first");
  // A wrapping sum scales and negates part by part (int8 100 + 100 is -56, times 3 is 88).
  const auto sum_i8 = two_parts<std::int8_t>(mesh, 100, 100, ReduceOp::sum);
  EXPECT_EQ(ferry::to_host(sum_i8 * std::int8_t{3}).data()[0], std::int8_t{88});
  EXPECT_EQ(ferry::to_host(-sum_i8).data()[0], std::int8_t{56});
  EXPECT_EQ(ferry::to_host(sum_i32 * two).data()[0], 12);
  EXPECT_EQ((sum_i32 * two).placements(), (Placements{Partial{}}));
  // int8 max(100, 50) + 50 is -106; max(100 + 50, 50 + 50) would be 100.
  const auto max_i8 = two_parts<std::int8_t>(mesh, 100, 50, ReduceOp::max);
  expect_error<PlacementError>(
      [&] { return max_i8 + std::int8_t{50}; },
      "[add] the array is Partial(max) on mesh axis 0 (placements (Partial(max))), and array, "
      "scalar is not applied part by part; call redistribute(a, (Replicate())) first");
  expect_error<PlacementError>(
      [&] { return max_i8 - std::int8_t{1}; },
      "[subtract] the array is Partial(max) on mesh axis 0 (placements (Partial(max))), and "
      "array, scalar is not applied part by part; call redistribute(a, (Replicate())) first");
  // -max(-128, 0) is 0; min(-(-128), -0) would be -128. A uint8's negation is 256 minus it.
  expect_error<PlacementError>(
      [&] { return -two_parts<std::int8_t>(mesh, -128, 0, ReduceOp::max); },
      "[neg] the array is Partial(max) on mesh axis 0 (placements (Partial(max))), and neg of "
      "the parts is not neg of their reduction; call redistribute(a, (Replicate())) first");
  expect_error<PlacementError>(
      [&] { return -two_parts<std::uint8_t>(mesh, 0, 1, ReduceOp::min); },
      "[neg] the array is Partial(min) on mesh axis 0 (placements (Partial(min))), and neg of "
      "the parts is not neg of their reduction; call redistribute(a, (Replicate())) first");
  // A maximum with a constant keeps an integer max.
  EXPECT_EQ(ferry::to_host(ferry::maximum(max_i8, std::int8_t{70})).data()[0], std::int8_t{100});
  // Conversions: int32 300 as uint8 is 44, so max(300, 200) as uint8 is not max(44, 200); to
  // bool each part tests != 0, refused at the call (the export could not reduce bools by max).
  // Widening and to floating keep the order; an integer sum converted to floating would not
  // wrap where the integer one does (int8 100 + 100 is -56, 100.0 + 100.0 is 200).
  const auto max_i32 = two_parts<std::int32_t>(mesh, 300, 200, ReduceOp::max);
  expect_error<PlacementError>(
      [&] { return ferry::astype<std::uint8_t>(max_i32); },
      "[astype] the array is Partial(max) on mesh axis 0 (placements (Partial(max))), and "
      "converting int32 parts to uint8 is not converting their max; call redistribute(a, "
      "(Replicate())) first");
  expect_error<PlacementError>(
      [&] { return ferry::astype<bool>(two_parts<float>(mesh, -1.0F, 0.0F, ReduceOp::max)); },
      "[astype] the array is Partial(max) on mesh axis 0 (placements (Partial(max))), and "
      "converting float32 parts to bool is not converting their max; call redistribute(a, "
      "(Replicate())) first");
  expect_error<PlacementError>(
      [&] { return ferry::astype<float>(sum_i8); },
      "[astype] the array is Partial(sum) on mesh axis 0 (placements (Partial(sum))), and "
      "converting int8 parts to float32 is not converting their sum; call redistribute(a, "
      "(Replicate())) first");
  EXPECT_EQ(ferry::to_host(ferry::astype<std::int64_t>(max_i32)).data()[0], 300);
  EXPECT_EQ(ferry::to_host(ferry::astype<double>(max_i32)).data()[0], 300.0);
  EXPECT_EQ(ferry::to_host(ferry::astype<std::int16_t>(max_i8)).data()[0], std::int16_t{100});
  EXPECT_EQ(ferry::to_host(ferry::astype<std::uint8_t>(two_parts<float>(mesh, 300.0F, -5.0F,
                                                                         ReduceOp::max)))
                .data()[0],
            std::uint8_t{255});  // saturates, as the one-device conversion of 300
  // The floating rules are unchanged: a float max moves by a constant, a sum divides.
  EXPECT_EQ(ferry::to_host(two_parts<float>(mesh, 3.0F, 3.0F, ReduceOp::sum) / 2.0F).data()[0],
            3.0F);
  EXPECT_EQ(ferry::to_host(two_parts<float>(mesh, 1.0F, 5.0F, ReduceOp::max) + 1.0F).data()[0],
            6.0F);
  EXPECT_EQ(ferry::to_host(-two_parts<float>(mesh, 1.0F, 5.0F, ReduceOp::max)).data()[0], -5.0F);
}

TEST(MeshOpsBadInput, SoftmaxNormsAndShapeOpsOnShardedDims) {
  Mesh mesh = Mesh::modeled(square());
  const HostArray<float> h = values(Shape{4, 6, 4});
  const MeshArray<float> a = ferry::distribute(h, mesh, {Shard{0}, Shard{2}});
  expect_error<PlacementError>(
      [&] { return ferry::softmax(a, -1); },
      "[softmax] axis 2 is sharded along mesh axis 1 (placements (Shard(0), Shard(2))); call "
      "redistribute(a, (Shard(0), Replicate())) or shard another dim first");
  expect_error<PlacementError>(
      [&] { return ferry::layer_norm(a); },
      "[layer_norm] the normalized last dim 2 is sharded along mesh axis 1 (placements "
      "(Shard(0), Shard(2))); call redistribute(a, (Shard(0), Replicate())) or shard another "
      "dim first");
  const MeshArray<float> p = ferry::distribute(h, mesh, {Partial{}, Replicate{}});
  expect_error<PlacementError>(
      [&] { return ferry::rms_norm(p); },
      "[rms_norm] the array is Partial(sum) on mesh axis 0 (placements (Partial(sum), "
      "Replicate())); call redistribute(a, (Replicate(), Replicate())) first");
  const MeshArray<float> rows = ferry::distribute(h, mesh, {Shard{0}, Replicate{}});
  const MeshArray<float> w = ferry::distribute(values(Shape{4}), mesh, {Shard{0}, Replicate{}});
  expect_error<PlacementError>(
      [&] { return ferry::layer_norm(rows, {.weight = w}); },
      "[layer_norm] weight is placed (Shard(0), Replicate()); it must be Replicate on every mesh "
      "axis: call redistribute(weight, (Replicate(), Replicate())) first");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::rms_norm(
            rows, {.bias = ferry::distribute(values(Shape{3}), mesh, {Replicate{}, Replicate{}})});
      },
      "[rms_norm] bias must have the shape (4) of x's last axis, got (3) for x of (4, 6, 4)");
  expect_error<PlacementError>(
      [&] {
        return ferry::reshape(a, Shape{4, 24});
      },
      "[reshape] a global (4, 6, 4) placed (Shard(0), Shard(2)) cannot become (4, 24) shard by "
      "shard: Shard(2) on mesh axis 1 cuts dim 2 (4) into 2 blocks, which do not land on whole "
      "entries of one dim of the result as array_split cuts it; call redistribute(a, (Shard(0), "
      "Replicate())) first");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::reshape(a, Shape{5, 5});
      },
      "[reshape] cannot reshape a global (4, 6, 4) into (5, 5)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::transpose(a, {0, 0, 1});
      },
      "[transpose] axes (0, 0, 1) are not a permutation of the 3 dims of a global (4, 6, 4)");
}

TEST(MeshOpsBadInput, MatmulPlacementsFerryWouldHaveToGuessAt) {
  Mesh mesh = Mesh::modeled(ring(4));
  const HostArray<float> hx = values(Shape{8, 8});
  const HostArray<float> hw = values(Shape{8, 8});
  auto mm = [&](Placements x, Placements w) {
    return ferry::matmul(ferry::distribute(hx, mesh, x), ferry::distribute(hw, mesh, w));
  };
  expect_error<PlacementError>(
      [&] { return mm({Replicate{}}, {Shard{0}}); },
      "[matmul] on mesh axis 0 a is Replicate() and w is Shard(0) (a (Replicate()), w "
      "(Shard(0))), which no local product places; call redistribute(a, (Shard(1))) first");
  expect_error<PlacementError>(
      [&] { return mm({Shard{1}}, {Replicate{}}); },
      "[matmul] on mesh axis 0 a is Shard(1) and w is Replicate() (a (Shard(1)), w "
      "(Replicate())), which no local product places; call redistribute(w, (Shard(0))) first");
  expect_error<PlacementError>(
      [&] { return mm({Shard{1}}, {Shard{1}}); },
      "[matmul] on mesh axis 0 a is Shard(1) and w is Shard(1) (a (Shard(1)), w (Shard(1))), "
      "which no local product places; call redistribute(w, (Shard(0))) first");
  expect_error<PlacementError>(
      [&] { return mm({Shard{0}}, {Shard{1}}); },
      "[matmul] on mesh axis 0 a is Shard(0) and w is Shard(1) (a (Shard(0)), w (Shard(1))), "
      "which no local product places; call redistribute(w, (Replicate())) first");
  expect_error<PlacementError>(
      [&] { return mm({Partial{}}, {Shard{1}}); },
      "[matmul] on mesh axis 0 a is Partial(sum) and w is Shard(1) (a (Partial(sum)), w "
      "(Shard(1))), which no local product places; call redistribute(a, (Replicate())) first");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::matmul(ferry::distribute(hx, mesh, {Replicate{}}),
                             ferry::distribute(values(Shape{6, 8}), mesh, {Replicate{}}));
      },
      "[matmul] inner sizes differ: (8, 8) x (6, 8)");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::matmul(ferry::distribute(values(Shape{8}), mesh, {Replicate{}}),
                             ferry::distribute(hw, mesh, {Replicate{}}));
      },
      "[matmul] a mesh matmul takes a of rank >= 2 and w of rank 2, got (8) x (8, 8)");
}

}  // namespace

}  // namespace test_mesh_ops
