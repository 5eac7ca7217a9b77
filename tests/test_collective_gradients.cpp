// Gradients through reduce_scatter and all_to_all, and the redistributions made of them (Partial
// to Shard, Shard(i) to Shard(j)), against central finite differences, and the reduce-scatter's
// vector-Jacobian product as an all-gather of the cotangents. And what the backward of each
// collective sends: the transposed collective, one call, the very messages that collective
// called directly puts on the links (mesh/collective_tape.hpp), not copies member to member.
//
// Both collectives cut each member's shard before sending it; the cut must be recorded on the
// tape (detail::recorded_slice, in mesh/collective_support.hpp), or every gradient through them is
// silently zero, as it was before these checks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/mesh_gradcheck.hpp"
#include "support/meshes.hpp"

namespace test_collective_gradients {

namespace {

using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::Partial;
using ferry::ReduceOp;
using ferry::Shape;
using ferry::Shard;
using ferry::Topology;
using ferry_test::check_through;
using ferry_test::D;
using ferry_test::four;
using ferry_test::hosts;
using ferry_test::quarters;
using ferry_test::redistributed;
using ferry_test::vjp_of;

using ferry_test::link_ops;
using ferry_test::ring;
using ferry_test::square;

TEST(CollectiveGradients, ReduceScattersCotangentIsAnAllGather) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // The slices the tape records around the cut (detail::recorded_slice) go with it.
  ferry_test::expect_balanced_after(mesh, [&] {
    const std::vector<D> xs = quarters(mesh, 1);
    std::vector<D> cs;
    for (const D& a : quarters(mesh, 3)) cs.push_back(ferry::slice(a, 1, 0, 1));  // (2, 1)
    const auto dxs = vjp_of(
        mesh, [](MeshArray<double> a) { return ferry::reduce_scatter(a, 1); }, xs, cs);
    EXPECT_EQ(hosts(dxs),
              hosts(ferry::all_gather(MeshArray<double>::from_shards(mesh, cs), 1).shards()));
  });
}

TEST(CollectiveGradients, ReduceScatterAndAllToAllMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  // Every evaluation's arrays, and the tape's, are freed.
  ferry_test::expect_balanced_after(mesh, [&] {
    check_through(mesh, four(Shape{4, 2}),
                  [](MeshArray<double> a) { return ferry::reduce_scatter(a, 0); });
    check_through(mesh, four(Shape{2, 4}),
                  [](MeshArray<double> a) { return ferry::reduce_scatter(a, 1, ReduceOp::mean); });
    check_through(mesh, four(Shape{4, 2}),
                  [](MeshArray<double> a) { return ferry::all_to_all(a, 0, 1); });
  });
  const Mesh sq = Mesh::modeled(square());
  ferry_test::expect_balanced_after(sq, [&] {
    check_through(sq, four(Shape{2, 3}), [](MeshArray<double> a) {
      return ferry::reduce_scatter(a, 0, ReduceOp::sum, 0);
    });
  });
}

TEST(CollectiveGradients, RedistributionsThroughThemMatchFiniteDifferences) {
  const Mesh mesh = Mesh::modeled(ring(4));
  {
    SCOPED_TRACE("Partial to Shard: a reduce-scatter, padded");
    check_through(mesh, four(Shape{5, 2}), redistributed(Shape{5, 2}, {Partial{}}, {Shard{0}}));
  }
  {
    SCOPED_TRACE("Shard(0) to Shard(1): an all-to-all");
    check_through(mesh, four(Shape{1, 4}), redistributed(Shape{4, 4}, {Shard{0}}, {Shard{1}}));
  }
}

/// `collective`'s vjp at quarters(1) with cotangents `cotangents(mesh)` on a fresh mesh of
/// `spec`, against `collective` then `transpose` of the same cotangents called directly on
/// another: the same messages of each op on the links (the backward is one call of the
/// transpose), the same gradients, and the model's books balanced after.
template <class F, class Cs, class G>
void expect_backward_is(const MeshSpec& spec, F collective, Cs cotangents, G transpose) {
  const Mesh direct = Mesh::modeled(spec);
  std::vector<ferry::HostArray<double>> want;
  ferry_test::expect_balanced_after(direct, [&] {
    ferry::wait(collective(MeshArray<double>::from_shards(direct, quarters(direct, 1))));
    want = hosts(transpose(MeshArray<double>::from_shards(direct, cotangents(direct))).shards());
  });
  const Mesh mesh = Mesh::modeled(spec);
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto dxs = vjp_of(mesh, collective, quarters(mesh, 1), cotangents(mesh));
    EXPECT_EQ(hosts(dxs), want);
  });
  EXPECT_EQ(link_ops(mesh), link_ops(direct));
}

/// quarters(`salt`) on each device of `mesh`, reshaped to `shape` (8 elements).
auto cotangents_of(Shape shape, int salt) {
  return [=](const Mesh& mesh) {
    std::vector<D> cs;
    for (const D& a : quarters(mesh, salt)) cs.push_back(ferry::reshape(a, shape));
    return cs;
  };
}

TEST(CollectiveGradients, TheBackwardOfEachCollectiveIsItsTransposeCalledOnce) {
  {
    SCOPED_TRACE("all_gather: a reduce-scatter");
    // (2, 4) gathered along dim 1: (2, 16) cotangents, made of four (2, 4) blocks.
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::all_gather(a, 1); },
        [](const Mesh& mesh) {
          std::vector<D> cs;
          for (const D& c : quarters(mesh, 2)) cs.push_back(ferry::concat({c, -c, c * 0.5, c}, 1));
          return cs;
        },
        [](MeshArray<double> c) { return ferry::reduce_scatter(c, 1); });
  }
  {
    SCOPED_TRACE("all_reduce: an all-reduce");
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::all_reduce(a); },
        cotangents_of(Shape{2, 4}, 3), [](MeshArray<double> c) { return ferry::all_reduce(c); });
  }
  {
    SCOPED_TRACE("all_reduce of the mean along an axis of a 2 x 2 mesh: the same");
    expect_backward_is(
        square(), [](MeshArray<double> a) { return ferry::all_reduce(a, ReduceOp::mean, 0); },
        cotangents_of(Shape{2, 4}, 4),
        [](MeshArray<double> c) { return ferry::all_reduce(c, ReduceOp::mean, 0); });
  }
  {
    SCOPED_TRACE("reduce_scatter: an all-gather");
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::reduce_scatter(a, 1); },
        [](const Mesh& mesh) {
          std::vector<D> cs;
          for (const D& c : quarters(mesh, 5)) cs.push_back(ferry::slice(c, 1, 1, 2));  // (2, 1)
          return cs;
        },
        [](MeshArray<double> c) { return ferry::all_gather(c, 1); });
  }
  {
    SCOPED_TRACE("all_to_all: the all-to-all with the dims swapped");
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::all_to_all(a, 1, 0); },
        cotangents_of(Shape{8, 1}, 6),
        [](MeshArray<double> c) { return ferry::all_to_all(c, 0, 1); });
  }
  {
    SCOPED_TRACE("broadcast: the root gets every member's cotangent, by an all-reduce");
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::broadcast(a, 1); },
        cotangents_of(Shape{2, 4}, 8), [](MeshArray<double> c) {
          // The root's own cotangent is its input's already; the sum of the others' comes by
          // an all-reduce (the same messages whatever the root's part holds).
          const Mesh& m = c.mesh();
          return MeshArray<double>::from_shards(
              m, {ferry::zeros<double>(m.device(0), Shape{2, 4}), ferry::all_reduce(c).shard(1),
                  ferry::zeros<double>(m.device(2), Shape{2, 4}),
                  ferry::zeros<double>(m.device(3), Shape{2, 4})});
        });
  }
  {
    SCOPED_TRACE("permute: the inverse permutation");
    // Device 1 sends nothing (no cotangent), device 2 keeps its own shard.
    expect_backward_is(
        ring(4), [](MeshArray<double> a) { return ferry::permute(a, {{0, 3}, {2, 2}, {3, 0}}); },
        cotangents_of(Shape{2, 4}, 7), [](MeshArray<double> c) {
          const MeshArray<double> back = ferry::permute(c, {{3, 0}, {0, 3}});
          // What the vjp gives: device 1 nothing (zeros), device 2 its own cotangent.
          std::vector<D> v = back.shards();
          v[2] = c.shard(2);
          return MeshArray<double>::from_shards(c.mesh(), std::move(v));
        });
  }
}

/// What grad of sum(collective(xs).shard(k)) (a loss on device k alone) gives at quarters(1)
/// on a fresh mesh of `spec`, and the messages each op put on the links; the books balance.
template <class F>
std::pair<std::vector<ferry::HostArray<double>>, ferry_test::LinkOps> grad_of_one_shard(
    const MeshSpec& spec, F collective, std::int64_t k) {
  const Mesh mesh = Mesh::modeled(spec);
  std::vector<ferry::HostArray<double>> grads;
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto loss = [&](const std::vector<D>& xs) {
      return ferry::sum(collective(MeshArray<double>::from_shards(mesh, xs)).shard(k));
    };
    grads = hosts(ferry::grad(loss)(quarters(mesh, 1)));
  });
  return {grads, link_ops(mesh)};
}

/// The messages of `collective` at quarters(1) then `backward` of quarters(2), called directly.
template <class F, class G>
ferry_test::LinkOps called_directly(const MeshSpec& spec, F collective, G backward) {
  const Mesh mesh = Mesh::modeled(spec);
  ferry::wait(collective(MeshArray<double>::from_shards(mesh, quarters(mesh, 1))));
  ferry::wait(backward(MeshArray<double>::from_shards(mesh, quarters(mesh, 2))));
  return link_ops(mesh);
}

/// (2, 4) arrays of `v` on devices whose `on` is 1, zeros on the others.
std::vector<ferry::HostArray<double>> filled(const std::vector<double>& on, double v) {
  std::vector<ferry::HostArray<double>> out;
  for (const double f : on) out.emplace_back(Shape{2, 4}, std::vector<double>(8, f * v));
  return out;
}

TEST(CollectiveGradients, AGivenMoveUnderATapeDifferentiatesAndDonatesAsAKeptOne) {
  // broadcast and permute write into a given operand's shards, but not where a tape records
  // (collective_donation.hpp; the tape also holds every shard it saw). The operand here is
  // fresh, each shard's only handle the one moved in: given or kept, the gradient and every
  // device's donations (the backward's own, of its fresh cotangents) are the same.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shift{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  for (const bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "broadcast from 1" : "ring shift");
    std::vector<std::vector<ferry::HostArray<double>>> grads;
    std::vector<std::vector<std::uint64_t>> donations;
    for (const bool given : {false, true}) {
      const auto collective = [&](MeshArray<double> a) {
        const MeshArray<double> kept = given ? MeshArray<double>() : a;
        if (broadcast) return ferry::broadcast(given ? std::move(a) : kept, 1);
        return ferry::permute(given ? std::move(a) : kept, shift);
      };
      const Mesh mesh = Mesh::modeled(ring(4));
      ferry_test::expect_balanced_after(mesh, [&] {
        const auto loss = [&](const std::vector<D>& xs) {
          std::vector<D> doubled;
          for (const D& x : xs) doubled.push_back(x * 2.0);
          const auto r = collective(MeshArray<double>::from_shards(mesh, std::move(doubled)));
          return ferry::sum(r.shard(2));
        };
        grads.push_back(hosts(ferry::grad(loss)(quarters(mesh, 1))));
      });
      donations.emplace_back();
      for (const ferry::Device& d : mesh.devices()) donations.back().push_back(d.stats().donations);
    }
    // Device 2's result is twice member 1's shard either way: d loss / d x_1 = 2, else 0.
    EXPECT_EQ(grads[0], filled({0, 1, 0, 0}, 2.0));
    EXPECT_EQ(grads[1], grads[0]);
    EXPECT_EQ(donations[1], donations[0]);
  }
}

TEST(CollectiveGradients, ACotangentOnOneMemberIsSentNotSummedWithZeros) {
  {
    SCOPED_TRACE("all_reduce, the loss on device 2: every input's gradient is device 2's "
                 "cotangent, broadcast from there");
    const auto [grads, sent] =
        grad_of_one_shard(ring(4), [](MeshArray<double> a) { return ferry::all_reduce(a); }, 2);
    EXPECT_EQ(grads, filled({1, 1, 1, 1}, 1.0));
    EXPECT_EQ(sent, called_directly(
                        ring(4), [](MeshArray<double> a) { return ferry::all_reduce(a); },
                        [](MeshArray<double> c) { return ferry::broadcast(c, 2); }));
  }
  {
    SCOPED_TRACE("all_reduce mean along axis 0 of a 2 x 2, the loss on device 3: its column "
                 "gets half the cotangent by a broadcast from position 1, the other column "
                 "nothing");
    const auto mean0 = [](MeshArray<double> a) { return ferry::all_reduce(a, ReduceOp::mean, 0); };
    const auto [grads, sent] = grad_of_one_shard(square(), mean0, 3);
    EXPECT_EQ(grads, filled({0, 1, 0, 1}, 0.5));
    EXPECT_EQ(sent, called_directly(square(), mean0, [](MeshArray<double> c) {
                return ferry::broadcast(c, 1, 0);
              }));
  }
  {
    SCOPED_TRACE("broadcast from 1, the loss on device 3: device 3's cotangent goes back to "
                 "the root in one permute");
    const auto from1 = [](MeshArray<double> a) { return ferry::broadcast(a, 1); };
    const auto [grads, sent] = grad_of_one_shard(ring(4), from1, 3);
    EXPECT_EQ(grads, filled({0, 1, 0, 0}, 1.0));
    EXPECT_EQ(sent, called_directly(ring(4), from1, [](MeshArray<double> c) {
                return ferry::permute(c, {{3, 1}});
              }));
  }
  {
    SCOPED_TRACE("broadcast from 1, the loss on the root: the root's result is its input, "
                 "nothing goes back over the links");
    const auto from1 = [](MeshArray<double> a) { return ferry::broadcast(a, 1); };
    const auto [grads, sent] = grad_of_one_shard(ring(4), from1, 1);
    EXPECT_EQ(grads, filled({0, 1, 0, 0}, 1.0));
    EXPECT_EQ(sent, called_directly(ring(4), from1, [](MeshArray<double> c) { return c; }));
  }
}

TEST(CollectiveGradients, AGradientOfAGradientGoesThroughTheTransposeToo) {
  // The inner gradient's backward calls the transposed collectives under the outer tape, which
  // records them as groups in turn: the gradient of that gradient against finite differences.
  const Mesh mesh = Mesh::modeled(ring(4));
  ferry_test::expect_balanced_after(mesh, [&] {
    auto inner = [&](const std::vector<D>& xs) {
      std::vector<D> cubes;
      for (const D& x : xs) cubes.push_back(x * x * x);
      const MeshArray<double> y = ferry::all_reduce(MeshArray<double>::from_shards(mesh, cubes));
      std::vector<D> squares;
      for (const D& s : y.shards()) squares.push_back(s * s);
      return ferry_test::total(ferry::all_gather(MeshArray<double>::from_shards(mesh, squares), 0));
    };
    check_through(mesh, four(Shape{3}), [&](const MeshArray<double>& a) {
      return MeshArray<double>::from_shards(mesh, ferry::grad(inner)(a.shards()));
    });
    // The inner loss on device 1 alone: its backward broadcasts, and the outer one goes back
    // through the broadcast's transpose.
    auto on_one = [&](const std::vector<D>& xs) {
      std::vector<D> cubes;
      for (const D& x : xs) cubes.push_back(x * x * x);
      const D y = ferry::all_reduce(MeshArray<double>::from_shards(mesh, cubes)).shard(1);
      return ferry::sum(y * y);
    };
    check_through(mesh, four(Shape{3}), [&](const MeshArray<double>& a) {
      return MeshArray<double>::from_shards(mesh, ferry::grad(on_one)(a.shards()));
    });
  });
}

TEST(CollectiveGradients, MaxMinAndRaggedGathersMatchFiniteDifferences) {
  // Random shards: no two members tie, so each max or min is differentiable at them.
  const Mesh mesh = Mesh::modeled(ring(4));
  ferry_test::expect_balanced_after(mesh, [&] {
    for (const ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      SCOPED_TRACE(op == ReduceOp::max ? "max" : "min");
      check_through(mesh, four(Shape{2, 3}),
                    [op](MeshArray<double> a) { return ferry::all_reduce(a, op); });
      check_through(mesh, four(Shape{4, 2}),
                    [op](MeshArray<double> a) { return ferry::reduce_scatter(a, 0, op); });
    }
    // Shards of 1, 3, 2 and 1 rows gathered: each member keeps its block of the summed
    // cotangents.
    check_through(mesh, {Shape{1, 2}, Shape{3, 2}, Shape{2, 2}, Shape{1, 2}},
                  [](MeshArray<double> a) { return ferry::all_gather(a, 0); });
  });
  const Mesh sq = Mesh::modeled(square());
  ferry_test::expect_balanced_after(sq, [&] {
    check_through(sq, four(Shape{2, 3}),
                  [](MeshArray<double> a) { return ferry::all_reduce(a, ReduceOp::max, 1); });
    check_through(sq, {Shape{1, 2}, Shape{2, 2}, Shape{3, 2}, Shape{1, 2}},
                  [](MeshArray<double> a) { return ferry::all_gather(a, 0, 0); });
  });
}

TEST(CollectiveGradients, MembersTiedAtTheExtremeShareTheSumOfTheCotangents) {
  // Four members, three elements; member k's cotangent is k + 1 everywhere, so every element's
  // sum is 10. max: element 0 tied by members 1 and 3 (2), element 1 by 0 and 1 (5), element
  // 2 by 0, 2 and 3 (3): each gets 10 / 2, 10 / 2, 10 / 3 there, the others 0. min: element 0
  // is member 2's (0), element 1 member 3's (1), element 2 member 1's (0): 10 each, alone.
  // Over the links: the cotangents' sum and the ties' count, two all-reduces, and no copy of
  // a member's input to another (as the rule of ferry::max over the members stacked).
  const std::vector<std::vector<double>> x = {{1, 5, 3}, {2, 5, 0}, {0, 4, 3}, {2, 1, 3}};
  const double third = 10.0 / 3.0;
  const std::vector<std::vector<double>> want_max = {
      {0, 5, third}, {5, 5, 0}, {0, 0, third}, {5, 0, third}};
  const std::vector<std::vector<double>> want_min = {{0, 0, 0}, {0, 0, 10}, {10, 0, 0}, {0, 10, 0}};
  for (const ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    SCOPED_TRACE(op == ReduceOp::max ? "max" : "min");
    const Mesh mesh = Mesh::modeled(ring(4));
    ferry_test::expect_balanced_after(mesh, [&] {
      std::vector<D> xs;
      std::vector<D> cs;
      for (std::int64_t k = 0; k < 4; ++k) {
        xs.push_back(ferry::to_device(mesh.device(k), x[static_cast<std::size_t>(k)], Shape{3}));
        cs.push_back(ferry::full<double>(mesh.device(k), Shape{3}, static_cast<double>(k + 1)));
      }
      const auto dxs = vjp_of(
          mesh, [op](MeshArray<double> a) { return ferry::all_reduce(a, op); }, xs, cs);
      const auto& want = op == ReduceOp::max ? want_max : want_min;
      for (std::size_t k = 0; k < 4; ++k) {
        const auto got = dxs[k].to_host();
        for (std::int64_t e = 0; e < 3; ++e) {
          EXPECT_EQ(got(e), want[k][static_cast<std::size_t>(e)]) << "member " << k << " element "
                                                                  << e;
        }
      }
    });
    const ferry_test::LinkOps ops = link_ops(mesh);
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops.begin()->first, "all_reduce");
  }
}

}  // namespace

}  // namespace test_collective_gradients
