// The two other forms of ferry::value_and_grad, grad and vjp over mesh arrays
// (autodiff/arguments.hpp, autodiff/grad.hpp, mesh/mesh_gradients.hpp): placed mesh arrays
// picked by position (value_and_grad(f, {i, ...})), mixed with DeviceArrays, a mesh argument
// not picked a constant that costs nothing; and vjp of a function returning a std::tuple of
// mesh arrays and DeviceArrays, with a std::tuple of cotangents. Checked against plain loops on
// the host with values whose every order of additions gives the same float (so the comparisons
// are exact), on a ring of 4 and a 2 x 2, the model's books balanced after each; every bad
// position and bad cotangent is a typed error naming the transform and the values.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_mesh_grad_forms {

using ferry::DeviceArray;
using ferry::HostArray;
using ferry::InvalidArgument;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::Placements;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry_test::expect_error;
using ferry_test::values;

constexpr std::int64_t kRows = 8, kCols = 3;
constexpr auto kCells = static_cast<std::size_t>(kRows * kCols);
constexpr auto kWidth = static_cast<std::size_t>(kCols);

/// The meshes: a ring of 4 with the rows cut along it, and a 2 x 2 with the rows cut along
/// axis 0 and copies along axis 1.
struct Case {
  std::string name;
  MeshSpec spec;
  Placements x;  // the (8, 3) input's placements; the (3) weight is Replicate everywhere
};
std::vector<Case> cases() {
  return {{"ring of 4", ferry_test::ring(4), {Shard{0}}},
          {"2 x 2", ferry_test::square(), {Shard{0}, Replicate{}}}};
}

Placements replicated(const Mesh& mesh) { return Placements(mesh.shape().rank(), Replicate{}); }

/// The values of `h`, row-major.
std::vector<float> all(const HostArray<float>& h) { return {h.data().begin(), h.data().end()}; }
/// The global values of `a`, row-major.
std::vector<float> global(const MeshArray<float>& a) { return all(ferry::to_host(a)); }
std::vector<float> global(const DeviceArray<float>& a) { return all(a.to_host()); }

/// The inputs: x (8, 3) placed as the case says, w (3) Replicate, b (3) a DeviceArray on
/// device 0; and their host values.
struct Inputs {
  HostArray<float> hx = values(Shape{kRows, kCols}, 1);
  HostArray<float> hw = values(Shape{kCols}, 5);
  HostArray<float> hb = values(Shape{kCols}, 11);
  MeshArray<float> x, w;
  DeviceArray<float> b;

  Inputs(const Mesh& mesh, const Placements& xp)
      : x(ferry::distribute(hx, mesh, xp)),
        w(ferry::distribute(hw, mesh, replicated(mesh))),
        b(ferry::to_device(mesh.device(0), hb)) {
    ferry::wait(x);
    ferry::wait(w);
    ferry::wait(b);
  }
  float x_at(std::size_t k) const { return hx.data()[k]; }
  float w_at(std::size_t j) const { return hw.data()[j]; }
  float b_at(std::size_t j) const { return hb.data()[j]; }
};

// ---------------------------------------------------------------------------------------------
// Positions.

/// loss(x, w, b) = sum(x * w + x * x * b), every copy holding it: a Replicate mesh scalar.
MeshArray<float> loss(const MeshArray<float>& x, const MeshArray<float>& w,
                      const DeviceArray<float>& b) {
  const Mesh mesh = x.mesh();
  const MeshArray<float> bs = ferry::distribute(b, mesh, replicated(mesh));
  return ferry::redistribute(ferry::sum(x * w + x * x * bs), replicated(mesh));
}

/// loss's value and gradients, on the host: dx = w + 2 x b, dw = sum_i x, db = sum_i x^2.
struct LossWant {
  float value = 0;
  std::vector<float> dx = std::vector<float>(kCells);
  std::vector<float> dw = std::vector<float>(kWidth, 0.0F);
  std::vector<float> db = std::vector<float>(kWidth, 0.0F);
};
LossWant loss_want(const Inputs& in) {
  LossWant r;
  for (std::size_t k = 0; k < kCells; ++k) {
    const std::size_t j = k % kWidth;
    const float x = in.x_at(k);
    r.value += x * in.w_at(j) + x * x * in.b_at(j);
    r.dx[k] = in.w_at(j) + 2 * x * in.b_at(j);
    r.dw[j] += x;
    r.db[j] += x * x;
  }
  return r;
}

using Picked = std::variant<DeviceArray<float>, MeshArray<float>>;

/// The global values of a gradient picked by position.
std::vector<float> global(const Picked& g) {
  return std::visit([](const auto& a) { return global(a); }, g);
}

TEST(MeshGradForms, MeshArgumentsPickedByPositionAreThePlainLoop) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Mesh mesh = Mesh::modeled(c.spec);
    const Inputs in(mesh, c.x);
    const LossWant want = loss_want(in);
    const std::vector<std::vector<float>> by_position{want.dx, want.dw, want.db};
    // f takes mesh arrays and a DeviceArray: a picked gradient is either, as the variant says.
    for (const std::vector<int>& argnums :
         std::vector<std::vector<int>>{{0}, {1}, {2}, {2, 0}, {1, 2, 0}, {0, 1}}) {
      SCOPED_TRACE(::testing::PrintToString(argnums));
      ferry_test::expect_balanced_after(mesh, [&] {
        auto [value, grads] = ferry::value_and_grad(loss, argnums)(in.x, in.w, in.b);
        static_assert(std::is_same_v<decltype(grads), std::vector<Picked>>);
        EXPECT_EQ(value.placements(), replicated(mesh));
        EXPECT_EQ(ferry::to_host(value)(), want.value);
        ASSERT_EQ(grads.size(), argnums.size());
        for (std::size_t i = 0; i < argnums.size(); ++i) {
          const auto at = static_cast<std::size_t>(argnums[i]);
          // Each gradient is of its argument's type, placed as it is, on its device.
          EXPECT_EQ(grads[i].index(), at == 2 ? 0U : 1U) << "gradient " << i;
          if (at == 2) {
            EXPECT_TRUE(std::get<0>(grads[i]).device() == mesh.device(0));
          } else {
            EXPECT_EQ(std::get<1>(grads[i]).placements(), (at == 0 ? in.x : in.w).placements());
          }
          EXPECT_EQ(global(grads[i]), by_position[at]) << "gradient " << i;
        }
        // grad(f, argnums) gives the same vector, and with has_aux (loss, aux, vector).
        const std::vector<Picked> alone = ferry::grad(loss, argnums)(in.x, in.w, in.b);
        ASSERT_EQ(alone.size(), argnums.size());
        for (std::size_t i = 0; i < argnums.size(); ++i)
          EXPECT_EQ(global(alone[i]), by_position[static_cast<std::size_t>(argnums[i])]);
        auto with_aux = [](const MeshArray<float>& x, const MeshArray<float>& w,
                           const DeviceArray<float>& b) {
          return std::pair{loss(x, w, b), 7};
        };
        auto [l, aux, picked] =
            ferry::value_and_grad(with_aux, argnums, ferry::has_aux)(in.x, in.w, in.b);
        EXPECT_EQ(ferry::to_host(l)(), want.value);
        EXPECT_EQ(aux, 7);
        ASSERT_EQ(picked.size(), argnums.size());
        EXPECT_EQ(global(picked.back()), by_position[static_cast<std::size_t>(argnums.back())]);
      });
    }
    // A function of mesh arrays alone: its gradients picked by position are mesh arrays.
    ferry_test::expect_balanced_after(mesh, [&] {
      const DeviceArray<float> b = in.b;  // captured: a constant
      auto g = [&](const MeshArray<float>& x, const MeshArray<float>& w) { return loss(x, w, b); };
      auto [value, grads] = ferry::value_and_grad(g, {1, 0})(in.x, in.w);
      static_assert(std::is_same_v<decltype(grads), std::vector<MeshArray<float>>>);
      ASSERT_EQ(grads.size(), 2U);
      EXPECT_EQ(grads[0].placements(), in.w.placements());
      EXPECT_EQ(global(grads[0]), want.dw);
      EXPECT_EQ(global(grads[1]), want.dx);
      // Every copy of a Replicate axis holds the whole gradient.
      for (const DeviceArray<float>& s : grads[0].shards()) EXPECT_EQ(global(s), want.dw);
    });
  }
}

/// What a program ran in a window of its own: each device's steps, and the links' messages.
struct Work {
  std::vector<std::uint64_t> steps;
  ferry_test::LinkOps sent;
  bool operator==(const Work&) const = default;
};
template <class Program>
Work work_of(Mesh& mesh, Program&& program) {
  mesh.reset_stats();
  ferry_test::expect_balanced_after(mesh, program);
  Work w;
  for (const ferry::DeviceStats& d : mesh.stats().devices) w.steps.push_back(d.steps);
  w.sent = ferry_test::link_ops(mesh);
  return w;
}

TEST(MeshGradForms, AMeshArgumentNotPickedIsAConstantThatCostsNothing) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Mesh mesh = Mesh::modeled(c.spec);
    const Inputs in(mesh, c.x);
    const LossWant want = loss_want(in);
    using M = const MeshArray<float>&;
    using D = const DeviceArray<float>&;
    // The same arrays captured instead: constants the tape never sees.
    const MeshArray<float> cx = in.x, cw = in.w;
    const DeviceArray<float> cb = in.b;
    const Work by_b = work_of(mesh, [&] {
      auto [v, g] = ferry::value_and_grad(loss, {2})(in.x, in.w, in.b);
      EXPECT_EQ(global(g[0]), want.db);
    });
    const Work captured_b = work_of(mesh, [&] {
      auto [v, g] = ferry::value_and_grad([&](D b) { return loss(cx, cw, b); })(in.b);
      EXPECT_EQ(global(g), want.db);
    });
    // Neither x nor w gets a cotangent: the same steps on every device, the same messages.
    EXPECT_EQ(by_b, captured_b);
    const Work by_x = work_of(mesh, [&] {
      auto [v, g] = ferry::value_and_grad(loss, {0})(in.x, in.w, in.b);
      EXPECT_EQ(global(g[0]), want.dx);
    });
    const Work captured_x = work_of(mesh, [&] {
      auto [v, g] = ferry::value_and_grad([&](M x) { return loss(x, cw, cb); })(in.x);
      EXPECT_EQ(global(g), want.dx);
    });
    EXPECT_EQ(by_x, captured_x);
    // Picking w as well costs its cotangent (and its copies' all-reduce): the measure sees it.
    const Work by_xw = work_of(mesh, [&] {
      ferry::value_and_grad(loss, {0, 1})(in.x, in.w, in.b);
    });
    EXPECT_NE(by_xw.steps, by_x.steps);
    EXPECT_NE(by_xw.sent, by_x.sent);
  }
}

TEST(MeshGradForms, BadPositionsAreTheTypedErrorsOfTheDeviceArrayForm) {
  Mesh mesh = Mesh::modeled(ferry_test::ring(4));
  const Inputs in(mesh, {Shard{0}});
  const MeshArray<float> xp = ferry::distribute(in.hx, mesh, {Partial{}});
  const MeshArray<float> unplaced = MeshArray<float>::from_shards(mesh, in.w.shards());
  ferry::wait(xp);
  const std::vector<DeviceArray<float>> list{in.b};
  using M = const MeshArray<float>&;
  using D = const DeviceArray<float>&;
  using L = const std::vector<DeviceArray<float>>&;
  // (x, w, b, list, n): n an int.
  auto f = [](M x, M w, D b, L, int) { return loss(x, w, b); };
  // The DeviceArray form: the same positions, the same messages.
  auto h = [](D, D, D b, L, int) { return ferry::sum(b * b); };
  // Calls value_and_grad(f, argnums) (grad(f, argnums) when `grad`), or on the DeviceArrays
  // h(b, b, b, list, 2) when not `on_mesh`.
  auto call = [&](bool on_mesh, bool grad, std::vector<int> argnums) {
    return [&, on_mesh, grad, argnums] {
      if (on_mesh && grad) ferry::grad(f, argnums)(in.x, in.w, in.b, list, 2);
      if (on_mesh && !grad) ferry::value_and_grad(f, argnums)(in.x, in.w, in.b, list, 2);
      if (!on_mesh && grad) ferry::grad(h, argnums)(in.b, in.b, in.b, list, 2);
      if (!on_mesh && !grad) ferry::value_and_grad(h, argnums)(in.b, in.b, in.b, list, 2);
    };
  };
  ferry_test::expect_balanced_after(mesh, [&] {
    for (const bool on_mesh : {true, false}) {
      SCOPED_TRACE(on_mesh ? "mesh arrays" : "DeviceArrays");
      expect_error<InvalidArgument>(
          call(on_mesh, false, {0, 5}),
          "[value_and_grad] argument position 5 of a call with 5 arguments");
      expect_error<InvalidArgument>(call(on_mesh, true, {-1}),
                                    "[grad] argument position -1 of a call with 5 arguments");
      expect_error<InvalidArgument>(call(on_mesh, false, {1, 2, 1}),
                                    "[value_and_grad] argument position 1 is given twice");
      expect_error<InvalidArgument>(
          call(on_mesh, true, {4}),
          "[grad] argument 4 is not a floating-point DeviceArray or MeshArray");
      expect_error<InvalidArgument>(
          call(on_mesh, false, {0, 3}),
          "[value_and_grad] argument 3 is a std::vector of arrays, which positions do not pick: "
          "value_and_grad(f) without positions differentiates it");
    }
    // A picked mesh argument is checked as value_and_grad(f) checks one.
    expect_error<InvalidArgument>(
        [&] {
          ferry::grad(f, {2, 0})(xp, in.w, in.b, list, 2);
        },
        "[grad] argument 0 is placed (Partial(sum)); an argument is Shard or Replicate on each "
        "mesh axis, not Partial(sum) (mesh axis 0)");
    expect_error<InvalidArgument>(
        [&] { ferry::value_and_grad(f, {1})(in.x, unplaced, in.b, list, 2); },
        "[value_and_grad] argument 1 has no global view (placements); give it some with "
        "MeshArray::from_shards or distribute");
    expect_error<InvalidArgument>(
        [&] { ferry::value_and_grad(f, {1})(in.x, MeshArray<float>{}, in.b, list, 2); },
        "[value_and_grad] argument 1 is empty");
    // One not picked is a constant, whatever its placements.
    const std::vector<Picked> db =
        ferry::grad([](M x, M w, D b, M) { return loss(x, w, b); }, {2})(in.x, in.w, in.b, xp);
    EXPECT_EQ(global(db[0]), loss_want(in).db);
  });
}

// ---------------------------------------------------------------------------------------------
// vjp of a std::tuple.

/// The outputs of `outs`: x * w (placed as x), its sum over the rows as it comes (Partial(sum)
/// along the axis that cuts them), that sum all-reduced (Replicate), and device 0's copy of it
/// times b (a DeviceArray).
struct Outs {
  MeshArray<float> y, s, r;
  DeviceArray<float> d;
};
Outs outs(const MeshArray<float>& x, const MeshArray<float>& w, const DeviceArray<float>& b) {
  Outs o;
  o.y = x * w;
  o.s = ferry::sum(o.y, {0});
  o.r = ferry::redistribute(o.s, replicated(x.mesh()));
  o.d = o.r.shard(0) * b;
  return o;
}

/// The cotangents of the four outputs, on the host (a missing output's are zeros).
struct Cots {
  HostArray<float> y = HostArray<float>(Shape{kRows, kCols});
  HostArray<float> s = HostArray<float>(Shape{kCols});
  HostArray<float> r = HostArray<float>(Shape{kCols});
  HostArray<float> d = HostArray<float>(Shape{kCols});
};

/// The sum of the products with every output, by the plain loop: dx = cy w + (cs + cr + cd b) w,
/// dw = sum_i cy x + (cs + cr + cd b) sum_i x, db = cd r.
struct VjpWant {
  std::vector<float> dx = std::vector<float>(kCells);
  std::vector<float> dw = std::vector<float>(kWidth, 0.0F);
  std::vector<float> db = std::vector<float>(kWidth, 0.0F);
};
VjpWant vjp_want(const Inputs& in, const Cots& c) {
  VjpWant r;
  std::vector<float> column(kWidth, 0.0F);  // sum_i x
  for (std::size_t k = 0; k < kCells; ++k) column[k % kWidth] += in.x_at(k);
  for (std::size_t k = 0; k < kCells; ++k) {
    const std::size_t j = k % kWidth;
    const float per_column = c.s.data()[j] + c.r.data()[j] + c.d.data()[j] * in.b_at(j);
    r.dx[k] = (c.y.data()[k] + per_column) * in.w_at(j);
    r.dw[j] += c.y.data()[k] * in.x_at(k);
  }
  for (std::size_t j = 0; j < kWidth; ++j) {
    const float per_column = c.s.data()[j] + c.r.data()[j] + c.d.data()[j] * in.b_at(j);
    r.dw[j] += per_column * column[j];
    r.db[j] = c.d.data()[j] * column[j] * in.w_at(j);
  }
  return r;
}

TEST(MeshGradForms, VjpOfATupleOfMeshArraysIsThePlainLoop) {
  using M = const MeshArray<float>&;
  using D = const DeviceArray<float>&;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Mesh mesh = Mesh::modeled(c.spec);
    const Inputs in(mesh, c.x);
    const Outs o = outs(in.x, in.w, in.b);
    Cots hc;
    hc.y = values(Shape{kRows, kCols}, 9);
    hc.s = values(Shape{kCols}, 13);
    hc.r = values(Shape{kCols}, 17);
    hc.d = values(Shape{kCols}, 3);
    // The cotangents placed as the outputs.
    const MeshArray<float> cy = ferry::distribute(hc.y, mesh, o.y.placements());
    const MeshArray<float> cs = ferry::distribute(hc.s, mesh, o.s.placements());
    const MeshArray<float> cr = ferry::distribute(hc.r, mesh, o.r.placements());
    const DeviceArray<float> cd = ferry::to_device(mesh.device(0), hc.d);
    for (const auto* a : {&cy, &cs, &cr}) ferry::wait(*a);
    ferry::wait(cd);
    // Three mesh outputs, placed three ways (on the 2 x 2 all Replicate along axis 1).
    ferry_test::expect_balanced_after(mesh, [&] {
      Cots only = hc;
      only.d = HostArray<float>(Shape{kCols});
      const VjpWant want = vjp_want(in, only);
      auto [ys, dx, dw] = ferry::vjp(
          [&](M x, M w) {
            const Outs a = outs(x, w, in.b);
            return std::tuple{a.y, a.s, a.r};
          },
          in.x, in.w, std::tuple{cy, cs, cr});
      EXPECT_EQ(std::get<0>(ys).placements(), o.y.placements());
      EXPECT_EQ(std::get<1>(ys).placements(), o.s.placements());
      EXPECT_EQ(global(std::get<2>(ys)), global(o.r));
      EXPECT_EQ(dx.placements(), in.x.placements());
      EXPECT_EQ(dw.placements(), in.w.placements());
      EXPECT_EQ(global(dx), want.dx);
      EXPECT_EQ(global(dw), want.dw);
      for (const DeviceArray<float>& s : dw.shards()) EXPECT_EQ(global(s), want.dw);
    });
    // Mesh arrays and a DeviceArray, the DeviceArray first; b an argument too.
    ferry_test::expect_balanced_after(mesh, [&] {
      const VjpWant want = vjp_want(in, hc);
      auto [ys, dx, dw, db] = ferry::vjp(
          [](M x, M w, D b) {
            const Outs a = outs(x, w, b);
            return std::tuple{a.d, a.r, a.y, a.s};
          },
          in.x, in.w, in.b, std::tuple{cd, cr, cy, cs});
      static_assert(std::is_same_v<decltype(db), DeviceArray<float>>);
      EXPECT_EQ(global(std::get<0>(ys)), global(o.d));
      EXPECT_EQ(global(dx), want.dx);
      EXPECT_EQ(global(dw), want.dw);
      EXPECT_TRUE(db.device() == mesh.device(0));
      EXPECT_EQ(global(db), want.db);
    });
  }
}

TEST(MeshGradForms, ATupleOfCopiesGoesBackAsOneOutputDoes) {
  using M = const MeshArray<float>&;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Mesh mesh = Mesh::modeled(c.spec);
    const Inputs in(mesh, c.x);
    const HostArray<float> h1 = values(Shape{kCols}, 17), h2 = values(Shape{kCols}, 4);
    HostArray<float> h12(Shape{kCols});
    for (std::size_t j = 0; j < kWidth; ++j) h12.data()[j] = h1.data()[j] + h2.data()[j];
    const MeshArray<float> c1 = ferry::distribute(h1, mesh, replicated(mesh));
    const MeshArray<float> c2 = ferry::distribute(h2, mesh, replicated(mesh));
    const MeshArray<float> c12 = ferry::distribute(h12, mesh, replicated(mesh));
    for (const auto* a : {&c1, &c2, &c12}) ferry::wait(*a);
    auto r = [&](M x, M w) { return outs(x, w, in.b).r; };
    Cots only;
    only.r = h12;
    const VjpWant want = vjp_want(in, only);
    // One Replicate output as itself, and the same array twice in a tuple with the two
    // cotangents whose sum is the first's: the seeds are copies (CopyWalk) either way, so the
    // all-reduce goes back with nothing on the links, and the gradients are the same floats.
    std::vector<float> one_dx, one_dw;
    const Work one = work_of(mesh, [&] {
      auto [y, dx, dw] = ferry::vjp(r, in.x, in.w, c12);
      one_dx = global(dx);
      one_dw = global(dw);
    });
    const Work twice = work_of(mesh, [&] {
      auto [ys, dx, dw] = ferry::vjp(
          [&](M x, M w) {
            const auto a = r(x, w);
            return std::tuple{a, a};
          },
          in.x, in.w, std::tuple{c1, c2});
      EXPECT_EQ(global(dx), one_dx);
      EXPECT_EQ(global(dw), one_dw);
    });
    EXPECT_EQ(one_dx, want.dx);
    EXPECT_EQ(one_dw, want.dw);
    // The tuple adds one sum of the two seeds per device; the messages are the same.
    EXPECT_EQ(twice.sent, one.sent);
  }
}

TEST(MeshGradForms, BadTupleCotangentsAreTypedErrorsNamingTheirPosition) {
  Mesh mesh = Mesh::modeled(ferry_test::ring(4));
  Mesh other = Mesh::modeled(ferry_test::line_of(4, ferry::Topology::ring, "other"));
  const Inputs in(mesh, {Shard{0}});
  const MeshArray<float> cy = ferry::distribute(values(Shape{kRows, kCols}, 9), mesh, {Shard{0}});
  const MeshArray<float> cr = ferry::distribute(values(Shape{kCols}, 17), mesh, {Replicate{}});
  const MeshArray<float> cr_shard = ferry::distribute(values(Shape{kCols}, 17), mesh, {Shard{0}});
  const MeshArray<float> cy_t = ferry::distribute(values(Shape{kCols, kRows}, 9), mesh, {Shard{0}});
  const MeshArray<float> cy_other =
      ferry::distribute(values(Shape{kRows, kCols}, 9), other, {Shard{0}});
  const DeviceArray<float> cd = ferry::to_device(mesh.device(0), values(Shape{kCols}, 3));
  const DeviceArray<float> cd_on1 = ferry::to_device(mesh.device(1), values(Shape{kCols}, 3));
  const DeviceArray<float> cd_short = ferry::to_device(mesh.device(0), values(Shape{2}, 3));
  for (const auto* a : {&cy, &cr, &cr_shard, &cy_t, &cy_other}) ferry::wait(*a);
  for (const auto* a : {&cd, &cd_on1, &cd_short}) ferry::wait(*a);
  using M = const MeshArray<float>&;
  using D = const DeviceArray<float>&;
  auto yr = [](M x, M w, D b) {
    const Outs a = outs(x, w, b);
    return std::tuple{a.y, a.r, a.d};
  };
  auto run = [&](const MeshArray<float>& y, const MeshArray<float>& r,
                 const DeviceArray<float>& d) {
    return [&, y, r, d] { ferry::vjp(yr, in.x, in.w, in.b, std::tuple{y, r, d}); };
  };
  ferry_test::expect_balanced_after(mesh, [&] {
    expect_error<InvalidArgument>(
        run(cy, cr_shard, cd),
        "[vjp] cotangent 1 is placed (Shard(0)), output 1 (Replicate()): redistribute the "
        "cotangent to the output's placements");
    expect_error<ferry::ShapeError>(run(cy_t, cr, cd),
                                    "[vjp] cotangent 0 has global shape (3, 8), output 0 (8, 3)");
    expect_error<InvalidArgument>(
        run(cy, MeshArray<float>::from_shards(mesh, cr.shards()), cd),
        "[vjp] cotangent 1 has no global view (placements); give it output 1's, (Replicate()), "
        "with MeshArray::from_shards or distribute");
    expect_error<InvalidArgument>(
        run(cy_other, cr, cd),
        "[vjp] cotangent 0 lives on mesh other (4), output 0 on mesh ring (4)");
    expect_error<InvalidArgument>(run(cy, MeshArray<float>{}, cd),
                                  "[vjp] cotangent 1 is an empty mesh array");
    expect_error<ferry::ShapeError>(run(cy, cr, cd_short),
                                    "[vjp] cotangent 2 has shape (2), output 2 (3)");
    expect_error<ferry::DeviceMismatch>(run(cy, cr, cd_on1),
                                        "[vjp] cotangent 2 lives on " + mesh.device(1).name() +
                                            ", output 2 on " + mesh.device(0).name());
    // Bad outputs, by position too.
    expect_error<InvalidArgument>(
        [&] {
          ferry::vjp(
              [](M x, M w) {
                return std::tuple{x * w, ferry::min(x * w, {0})};
              },
              in.x, in.w, std::tuple{cy, cr});
        },
        "[vjp] output 1 is placed (Partial(min)); a value is Shard, Replicate, Partial(sum) or "
        "Partial(mean) on each mesh axis, not Partial(min) (mesh axis 0)");
    expect_error<InvalidArgument>(
        [&] {
          ferry::vjp(
              [&](M x, M w) {
                return std::tuple{MeshArray<float>::from_shards(mesh, (x * w).shards()), w};
              },
              in.x, in.w, std::tuple{cy, cr});
        },
        "[vjp] output 0 is a mesh array without a global view; give it placements "
        "(MeshArray::from_shards or redistribute)");
  });
}

}  // namespace test_mesh_grad_forms
