// ferry::value_and_grad, grad and vjp of functions of mesh arrays (mesh/mesh_gradients.hpp):
// placed mesh arrays as variables (each gradient placed as its array), DeviceArrays beside
// them, and a value that is a placed mesh array, seeded on every shard. Checked against plain
// loops on the host with values whose every order of additions gives the same float (so the
// comparisons are exact), with the model's books balanced after each; every bad input is a
// typed error naming the transform called. The MLP's gradients against nn::value_and_grad,
// .shard(0) and one device are test_replicated_loss's.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_mesh_grad {

namespace {

using ferry::DeviceArray;
using ferry::HostArray;
using ferry::InvalidArgument;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::Placements;
using ferry::ReduceOp;
using ferry::Replicate;
using ferry::Shape;
using ferry::Shard;
using ferry_test::expect_error;
using ferry_test::ring;
using ferry_test::square;
using ferry_test::values;

constexpr std::int64_t kRows = 8, kCols = 3;

/// The meshes: a ring of 4 with the rows cut along it, and a 2 x 2 with the rows cut along
/// axis 0 and copies along axis 1.
struct Case {
  std::string name;
  MeshSpec spec;
  Placements x;  // the (8, 3) input's placements; the (3) weight is Replicate everywhere
};
std::vector<Case> cases() {
  return {{"ring of 4", ring(4), {Shard{0}}}, {"2 x 2", square(), {Shard{0}, Replicate{}}}};
}

Placements replicated(const Mesh& mesh) { return Placements(mesh.shape().rank(), Replicate{}); }

/// What f's output is: x * w (placed as x), its sum over the rows as it comes (Partial(sum)
/// along the axis that cuts them), the same summands read as Partial(mean) (the value is then
/// their mean), or the sum all-reduced (Replicate).
enum class Out { shard, partial_sum, partial_mean, replicate };

MeshArray<float> f(const MeshArray<float>& x, const MeshArray<float>& w, Out out) {
  const MeshArray<float> y = x * w;
  if (out == Out::shard) return y;
  const MeshArray<float> s = ferry::sum(y, {0});
  Placements ps = s.placements();
  if (out == Out::replicate) return ferry::redistribute(s, replicated(s.mesh()));
  if (out == Out::partial_mean) {
    for (auto& p : ps) {
      if (ferry::detail::is_partial(p)) p = Partial{ReduceOp::mean};
    }
    return MeshArray<float>::from_shards(s.mesh(), s.shards(), s.global_shape(), ps);
  }
  return s;
}

/// The values of `h`, row-major.
std::vector<float> all(const HostArray<float>& h) { return {h.data().begin(), h.data().end()}; }
/// The global values of `a`, row-major.
std::vector<float> global(const MeshArray<float>& a) { return all(ferry::to_host(a)); }

TEST(MeshGrad, VjpWithAGivenCotangentIsThePlainLoop) {
  const HostArray<float> hx = values(Shape{kRows, kCols}, 1);
  const HostArray<float> hw = values(Shape{kCols}, 5);
  for (const Case& c : cases()) {
    for (const Out out : {Out::shard, Out::partial_sum, Out::partial_mean, Out::replicate}) {
      SCOPED_TRACE(c.name + ", output " + std::to_string(static_cast<int>(out)));
      Mesh mesh = Mesh::modeled(c.spec);
      const MeshArray<float> x = ferry::distribute(hx, mesh, c.x);
      const MeshArray<float> w = ferry::distribute(hw, mesh, replicated(mesh));
      const Shape ys = out == Out::shard ? Shape{kRows, kCols} : Shape{kCols};
      const HostArray<float> hc = values(ys, 9);
      // The cotangent placed as the output: the same ops on the same shapes say how.
      const Placements cp = f(x, w, out).placements();
      const MeshArray<float> dy = ferry::distribute(hc, mesh, cp);
      ferry::wait(x);
      ferry::wait(w);
      ferry::wait(dy);
      // The mean's cotangent reaches each summand divided by their count along the axis cut.
      const float n = out == Out::partial_mean ? static_cast<float>(mesh.shape().sizes()[0]) : 1;
      // d<dy, y>/dx[i][j] = dy[.][j] w[j]; d/dw[j] = sum_i dy[.][j] x[i][j].
      std::vector<float> want_dx(static_cast<std::size_t>(kRows * kCols));
      std::vector<float> want_dw(static_cast<std::size_t>(kCols), 0.0F);
      for (std::int64_t i = 0; i < kRows; ++i) {
        for (std::int64_t j = 0; j < kCols; ++j) {
          const auto k = static_cast<std::size_t>(i * kCols + j);
          const float cot = hc.data()[out == Out::shard ? k : static_cast<std::size_t>(j)] / n;
          want_dx[k] = cot * hw.data()[static_cast<std::size_t>(j)];
          want_dw[static_cast<std::size_t>(j)] += cot * hx.data()[k];
        }
      }
      ferry_test::expect_balanced_after(mesh, [&] {
        auto [y, dx, dw] = ferry::vjp(
            [&](const MeshArray<float>& a, const MeshArray<float>& b) { return f(a, b, out); }, x,
            w, dy);
        EXPECT_EQ(y.placements(), cp);
        EXPECT_EQ(dx.placements(), x.placements());
        EXPECT_EQ(dw.placements(), w.placements());
        EXPECT_EQ(global(dx), want_dx);
        EXPECT_EQ(global(dw), want_dw);
        // Every copy of a Replicate axis holds the whole gradient.
        for (const DeviceArray<float>& s : dw.shards()) EXPECT_EQ(all(s.to_host()), want_dw);
      });
    }
  }
}

TEST(MeshGrad, ValueAndGradAndGradOfAMeshLossWithADeviceArrayBeside) {
  // loss = sum(x * distribute(w)) all-reduced: a Replicate mesh scalar. w lives on device 0
  // and reaches the others by copies, whose backward brings each device's gradient home.
  const HostArray<float> hx = values(Shape{kRows, kCols}, 1);
  const HostArray<float> hw = values(Shape{kCols}, 5);
  float want_loss = 0;
  std::vector<float> want_dx(static_cast<std::size_t>(kRows * kCols));
  std::vector<float> want_dw(static_cast<std::size_t>(kCols), 0.0F);
  for (std::size_t k = 0; k < want_dx.size(); ++k) {
    const std::size_t j = k % static_cast<std::size_t>(kCols);
    want_loss += hx.data()[k] * hw.data()[j];
    want_dx[k] = hw.data()[j];
    want_dw[j] += hx.data()[k];
  }
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Mesh mesh = Mesh::modeled(c.spec);
    const MeshArray<float> x = ferry::distribute(hx, mesh, c.x);
    const DeviceArray<float> w = ferry::to_device(mesh.device(0), hw);
    ferry::wait(x);
    ferry::wait(w);
    auto loss_fn = [&](const MeshArray<float>& a, const DeviceArray<float>& b) {
      const MeshArray<float> l = ferry::sum(a * ferry::distribute(b, mesh, replicated(mesh)));
      return ferry::redistribute(l, replicated(mesh));
    };
    ferry_test::expect_balanced_after(mesh, [&] {
      auto [loss, dx, dw] = ferry::value_and_grad(loss_fn)(x, w);
      static_assert(std::is_same_v<decltype(loss), MeshArray<float>>);
      static_assert(std::is_same_v<decltype(dw), DeviceArray<float>>);
      EXPECT_EQ(ferry::to_host(loss)(), want_loss);
      EXPECT_EQ(dx.placements(), x.placements());
      EXPECT_EQ(global(dx), want_dx);
      EXPECT_TRUE(dw.device() == mesh.device(0));
      EXPECT_EQ(all(dw.to_host()), want_dw);
    });
    ferry_test::expect_balanced_after(mesh, [&] {
      // grad: the same gradients, bit for bit; and with respect to the mesh array alone.
      auto [dx, dw] = ferry::grad(loss_fn)(x, w);
      EXPECT_EQ(global(dx), want_dx);
      EXPECT_EQ(all(dw.to_host()), want_dw);
      const DeviceArray<float> cw = w;  // captured: a constant
      const MeshArray<float> only = ferry::grad([&](const MeshArray<float>& a) {
        return loss_fn(a, cw);
      })(x);
      EXPECT_EQ(global(only), want_dx);
    });
  }
}

TEST(MeshGrad, BadLossesAreTypedErrorsNamingTheTransform) {
  Mesh mesh = Mesh::modeled(ring(4));
  const MeshArray<float> x = ferry::distribute(values(Shape{kRows, kCols}, 1), mesh, {Shard{0}});
  const MeshArray<float> w = ferry::distribute(values(Shape{kCols}, 5), mesh, {Replicate{}});
  ferry::wait(x);
  ferry::wait(w);
  using M = const MeshArray<float>&;
  ferry_test::expect_balanced_after(mesh, [&] {
    expect_error<InvalidArgument>(
        [&] { ferry::value_and_grad([](M a, M b) { return a * b; })(x, w); },
        "[value_and_grad] the loss is a mesh array of global shape (8, 3); it must be a placed "
        "scalar (global shape ())");
    expect_error<InvalidArgument>(
        [&] {
          ferry::grad([&](M a) {
            return MeshArray<float>::from_shards(mesh, ferry::sum(a * w).shards());
          })(x);
        },
        "[grad] the loss is a mesh array without a global view; it must be a placed scalar "
        "(global shape ())");
    expect_error<InvalidArgument>(
        [&] { ferry::grad([&](M a) { return ferry::max(a * w); })(x); },
        "[grad] the loss is placed (Partial(max)); a loss is Replicate, Partial(sum) or "
        "Partial(mean) on each mesh axis, not Partial(max) (mesh axis 0)");
    expect_error<InvalidArgument>(
        [&] { ferry::vjp([&](M a) { return ferry::min(a * w, {0}); }, x, w); },
        "[vjp] the function's value is placed (Partial(min)); a value is Shard, Replicate, "
        "Partial(sum) or Partial(mean) on each mesh axis, not Partial(min) (mesh axis 0)");
    expect_error<InvalidArgument>(
        [&] {
          ferry::vjp([&](M a) { return MeshArray<float>::from_shards(mesh, (a * w).shards()); },
                     x, x);
        },
        "[vjp] the function's value is a mesh array without a global view; give it placements "
        "(MeshArray::from_shards or redistribute)");
  });
}

TEST(MeshGrad, BadCotangentsAndArgumentsAreTypedErrors) {
  Mesh mesh = Mesh::modeled(ring(4));
  Mesh other = Mesh::modeled(ferry_test::line_of(4, ferry::Topology::ring, "other"));
  const HostArray<float> hx = values(Shape{kRows, kCols}, 1);
  const MeshArray<float> x = ferry::distribute(hx, mesh, {Shard{0}});
  const MeshArray<float> w = ferry::distribute(values(Shape{kCols}, 5), mesh, {Replicate{}});
  const MeshArray<float> xr = ferry::distribute(hx, mesh, {Replicate{}});
  const MeshArray<float> xo = ferry::distribute(hx, other, {Shard{0}});
  const MeshArray<float> wt = ferry::distribute(values(Shape{kCols, kRows}, 1), mesh, {Shard{1}});
  const MeshArray<float> xp = ferry::distribute(hx, mesh, {Partial{}});
  for (const auto* a : {&x, &w, &xr, &xo, &wt, &xp}) ferry::wait(*a);
  using M = const MeshArray<float>&;
  auto times = [&](M a) { return a * w; };  // placed as a: Shard(0) for x
  ferry_test::expect_balanced_after(mesh, [&] {
    expect_error<InvalidArgument>(
        [&] { ferry::vjp(times, x, xr); },
        "[vjp] the cotangent is placed (Replicate()), the function's value (Shard(0)): "
        "redistribute the cotangent to the value's placements");
    expect_error<ferry::ShapeError>(
        [&] { ferry::vjp(times, x, wt); },
        "[vjp] the cotangent has global shape (3, 8), the function's value (8, 3)");
    expect_error<InvalidArgument>(
        [&] { ferry::vjp(times, x, MeshArray<float>::from_shards(mesh, x.shards())); },
        "[vjp] the cotangent has no global view (placements); give it the function's value's, "
        "(Shard(0)), with MeshArray::from_shards or distribute");
    expect_error<InvalidArgument>(
        [&] { ferry::vjp(times, x, xo); },
        "[vjp] the cotangent lives on mesh other (4), the function's value on mesh ring (4)");
    expect_error<InvalidArgument>(
        [&] { ferry::vjp(times, x, MeshArray<float>{}); },
        "[vjp] the cotangent is an empty mesh array");
    auto loss = [&](M a, M b) { return ferry::redistribute(ferry::sum(a * b), {Replicate{}}); };
    expect_error<InvalidArgument>(
        [&] { ferry::value_and_grad(loss)(xp, w); },
        "[value_and_grad] argument 0 is placed (Partial(sum)); an argument is Shard or "
        "Replicate on each mesh axis, not Partial(sum) (mesh axis 0)");
    expect_error<InvalidArgument>(
        [&] { ferry::grad(loss)(x, MeshArray<float>::from_shards(mesh, w.shards())); },
        "[grad] argument 1 has no global view (placements); give it some with "
        "MeshArray::from_shards or distribute");
    expect_error<InvalidArgument>([&] { ferry::grad(loss)(MeshArray<float>{}, w); },
                                  "[grad] argument 0 is empty");
  });
}

}  // namespace

}  // namespace test_mesh_grad
