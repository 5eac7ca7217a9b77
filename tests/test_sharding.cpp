// Placements of mesh arrays: distribute from the host and from a device, to_host, and every
// redistribute transition (Shard, Replicate, Partial of sum, max, min and mean, to and from each
// other) against the global array on the host, on 1-D and 2-D meshes, with sizes that divide and
// sizes that do not (NumPy's array_split: the first size % n parts one larger); the bytes each
// transition puts on the links, worked out by hand; memory back where it was; bad input by exact
// type and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/meshes.hpp"

namespace test_sharding {

namespace {

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
using ferry::Topology;
using ferry_test::expect_error;
using ferry_test::grid;
using ferry_test::line_of;

/// Element k of a test array: small multiples of 1/4, exact in every floating type, so sums,
/// maxima and means over 2, 4 or 8 of them are exact too.
template <class T>
T value(std::int64_t k) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>((k * 7) % 23 - 11) * static_cast<T>(0.25);
  } else {
    return static_cast<T>((k * 7) % 23 - 11);
  }
}

template <class T>
HostArray<T> global_of(Shape shape, std::int64_t salt = 0) {
  HostArray<T> h(shape);
  for (std::int64_t k = 0; k < shape.numel(); ++k)
    h.data()[static_cast<std::size_t>(k)] = value<T>(k + salt);
  return h;
}

/// np.array_split's part p of n of an axis of `size`, counted the way NumPy documents it.
std::pair<std::int64_t, std::int64_t> numpy_part(std::int64_t size, std::int64_t n,
                                                 std::int64_t p) {
  std::int64_t begin = 0;
  for (std::int64_t k = 0; k < p; ++k) begin += size / n + (k < size % n ? 1 : 0);
  return {begin, size / n + (p < size % n ? 1 : 0)};
}

/// The block of `g` that device `i` of `mesh` holds under `ps` (Partial read as Replicate).
template <class T>
HostArray<T> block_of(const HostArray<T>& g, const Placements& ps, const ferry::MeshShape& mesh,
                      std::int64_t i) {
  const auto rank = static_cast<int>(g.shape().rank());
  const auto at = mesh.coordinate_of(i).indices();
  std::vector<std::int64_t> begin(g.shape().rank(), 0);
  std::vector<std::int64_t> sizes(g.shape().dims().begin(), g.shape().dims().end());
  for (std::size_t a = 0; a < ps.size(); ++a) {
    if (const auto* s = std::get_if<Shard>(&ps[a])) {
      const auto d = static_cast<std::size_t>(s->dim < 0 ? s->dim + rank : s->dim);
      std::tie(begin[d], sizes[d]) = numpy_part(g.shape().dims()[d], mesh.sizes()[a], at[a]);
    }
  }
  const Shape local(std::span<const std::int64_t>(sizes.data(), sizes.size()));
  HostArray<T> out(local);
  for (std::int64_t k = 0; k < local.numel(); ++k) {
    std::int64_t rest = k;
    std::int64_t flat = 0;
    std::int64_t stride = 1;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      const std::int64_t idx = rest % sizes[d] + begin[d];
      rest /= sizes[d];
      flat += idx * stride;
      stride *= g.shape().dims()[d];
    }
    out.data()[static_cast<std::size_t>(k)] = g.data()[static_cast<std::size_t>(flat)];
  }
  return out;
}

/// What device `i` holds of a global `g` placed by `ps`: its block, or zeros where a
/// Partial(sum) axis puts it off position 0.
template <class T>
HostArray<T> expected_shard(const HostArray<T>& g, const Placements& ps,
                            const ferry::MeshShape& mesh, std::int64_t i) {
  HostArray<T> b = block_of(g, ps, mesh, i);
  const auto at = mesh.coordinate_of(i).indices();
  for (std::size_t a = 0; a < ps.size(); ++a) {
    const auto* p = std::get_if<Partial>(&ps[a]);
    if (p != nullptr && p->op == ReduceOp::sum && at[a] != 0) return HostArray<T>(b.shape());
  }
  return b;
}

std::string text(const Placements& ps) {
  std::ostringstream os;
  for (const auto& p : ps) os << p << ' ';
  return os.str();
}

/// Checks every shard of `a` (unless `summands`: shards made by partial_of) and its assembled
/// global value against `g` placed by `ps`.
template <class T>
void expect_placed(const MeshArray<T>& a, const HostArray<T>& g, const Placements& ps,
                   bool summands = false) {
  SCOPED_TRACE("placements " + text(ps));
  ASSERT_TRUE(a.placed());
  EXPECT_EQ(a.global_shape(), g.shape());
  Placements from_start = ps;  // placements() counts Shard dims from the start
  for (auto& p : from_start) {
    if (auto* s = std::get_if<Shard>(&p); s != nullptr && s->dim < 0)
      s->dim += static_cast<int>(g.shape().rank());
  }
  EXPECT_EQ(a.placements(), from_start);
  const auto shards = a.to_host();
  for (std::int64_t i = 0; i < a.size() && !summands; ++i) {
    EXPECT_EQ(shards[static_cast<std::size_t>(i)], expected_shard(g, ps, a.mesh().shape(), i))
        << "device " << i;
  }
  EXPECT_EQ(ferry::to_host(a), g);
}

/// A mesh array whose global value is `g` with a Partial(op) (one op) on the axes `ps` says:
/// device i's summand at an element depends on the element and on i's coordinates along those
/// axes; the summands of one element reduce to g's element exactly (sum: g plus (n - 1) steps,
/// then minus a step each; max: g and smaller values; min: g and larger ones; mean: g plus and
/// minus a step, in pairs). Shard and Replicate axes cut or copy as they say.
template <class T>
MeshArray<T> partial_of(const Mesh& mesh, const HostArray<T>& g, const Placements& ps) {
  std::vector<DeviceArray<T>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    const auto at = mesh.shape().coordinate_of(i).indices();
    std::int64_t k = 0;  // the position among the summands of an element, row-major
    std::int64_t count = 1;
    ReduceOp op = ReduceOp::sum;
    for (std::size_t a = 0; a < ps.size(); ++a) {
      if (const auto* p = std::get_if<Partial>(&ps[a])) {
        k = k * mesh.shape().sizes()[a] + at[a];
        count *= mesh.shape().sizes()[a];
        op = p->op;
      }
    }
    HostArray<T> b = block_of(g, ps, mesh.shape(), i);
    for (std::int64_t e = 0; e < b.shape().numel(); ++e) {
      T& x = b.data()[static_cast<std::size_t>(e)];
      const T step = static_cast<T>(1 + e % 3);
      if (op == ReduceOp::sum) {
        // Summand 0 is g + step * (count - 1), every other one -step.
        x = k == 0 ? static_cast<T>(x + step * static_cast<T>(count - 1)) : static_cast<T>(-step);
      } else if (op == ReduceOp::max) {
        x = k == count - 1 ? x : static_cast<T>(x - step);
      } else if (op == ReduceOp::min) {
        x = k == 0 ? x : static_cast<T>(x + step);
      } else if (count > 1) {  // mean: pairs of +step and -step around g
        x = static_cast<T>(x + (k % 2 == 0 ? step : -step));
      }
    }
    shards.push_back(ferry::to_device(mesh.device(i), b));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards), g.shape(), ps);
}

/// `a`, made with placements `from`, redistributed to every placement of `targets` and checked;
/// then, the arrays gone, the model's bookkeeping (each transition's padding, slices and
/// collectives freed).
template <class T>
void check_transitions(const Mesh& mesh, const HostArray<T>& g, const Placements& from,
                       const std::vector<Placements>& targets) {
  ferry_test::expect_balanced_after(mesh, [&] {
    bool partial = false;
    for (const auto& p : from) partial = partial || std::holds_alternative<Partial>(p);
    const MeshArray<T> a = partial ? partial_of(mesh, g, from) : ferry::distribute(g, mesh, from);
    expect_placed(a, g, from, partial);
    for (const Placements& to : targets) {
      SCOPED_TRACE("from " + text(from) + "to " + text(to));
      // An axis that stays Partial keeps the summands partial_of made.
      bool kept = false;
      for (std::size_t x = 0; x < to.size(); ++x) {
        kept = kept || (std::holds_alternative<Partial>(to[x]) && to[x] == from[x]);
      }
      expect_placed(ferry::redistribute(a, to), g, to, kept);
    }
  });
}

/// Bytes each link carried in the mesh's window, by name.
std::map<std::string, std::int64_t> link_bytes(const Mesh& mesh) {
  std::map<std::string, std::int64_t> out;
  for (const auto& l : mesh.stats().links) out[l.name] = l.bytes;
  return out;
}

std::uint64_t total_h2d(const Mesh& mesh) {
  std::uint64_t n = 0;
  for (const auto& d : mesh.devices()) n += d.stats().bytes_h2d;
  return n;
}

// ---- the placements themselves ----

TEST(Placements, PrintCompareAndDefaultToASum) {
  std::ostringstream os;
  os << Shard{1} << ' ' << Shard{-1} << ' ' << Replicate{} << ' ' << Partial{} << ' '
     << Partial{ReduceOp::max} << ' ' << ferry::Placement(Partial{ReduceOp::mean});
  EXPECT_EQ(os.str(), "Shard(1) Shard(-1) Replicate() Partial(sum) Partial(max) Partial(mean)");
  EXPECT_EQ(Partial{}, Partial{ReduceOp::sum});
  EXPECT_NE(ferry::Placement(Shard{0}), ferry::Placement(Shard{1}));
  EXPECT_NE(ferry::Placement(Shard{0}), ferry::Placement(Replicate{}));
  EXPECT_NE(ferry::Placement(Partial{}), ferry::Placement(Partial{ReduceOp::min}));
  // Placements compare as given: Shard{-1} is not Shard{1} until a shape says so.
  EXPECT_NE(ferry::Placement(Shard{-1}), ferry::Placement(Shard{1}));
}

// ---- distribute and to_host ----

TEST(Distribute, FromTheHostEachDeviceImportsOnlyItsOwnBlock) {
  Mesh mesh = Mesh::modeled(line_of(4));
  for (const Shape& shape : {Shape{8, 3}, Shape{10, 3}, Shape{2, 3}}) {
    SCOPED_TRACE(shape.to_string());
    const auto g = global_of<float>(shape);
    mesh.reset_stats();
    const auto a = ferry::distribute(g, mesh, {Shard{0}});
    expect_placed(a, g, {Shard{0}});
    EXPECT_EQ(a.placements(), (Placements{Shard{0}}));
    for (std::int64_t i = 0; i < 4; ++i) {
      // array_split: 10 rows are 3, 3, 2, 2; 2 rows are 1, 1, 0, 0.
      const std::int64_t rows = numpy_part(shape.dims()[0], 4, i).second;
      EXPECT_EQ(a.shard(i).shape(), (Shape{rows, 3}));
      EXPECT_EQ(mesh.device(i).stats().bytes_h2d, static_cast<std::uint64_t>(rows * 3 * 4))
          << "device " << i;
    }
    EXPECT_TRUE(link_bytes(mesh).empty());
  }
  // A Shard dim counted from the end is kept from the start; Replicate imports the whole.
  const auto g = global_of<double>(Shape{3, 7});
  mesh.reset_stats();
  const auto b = ferry::distribute(g, mesh, {Shard{-1}});
  EXPECT_EQ(b.placements(), (Placements{Shard{1}}));
  expect_placed(b, g, {Shard{1}});
  EXPECT_EQ(total_h2d(mesh), 3u * 7u * 8u);
  mesh.reset_stats();
  expect_placed(ferry::distribute(g, mesh, {Replicate{}}), g, {Replicate{}});
  EXPECT_EQ(total_h2d(mesh), 4u * 3u * 7u * 8u);
}

TEST(Distribute, PartialGivesASumToPositionZeroAndAMaxOrMeanToEveryone) {
  Mesh mesh = Mesh::modeled(line_of(4));
  const auto g = global_of<double>(Shape{2, 5});
  mesh.reset_stats();
  const auto sum = ferry::distribute(g, mesh, {Partial{}});
  expect_placed(sum, g, {Partial{}});
  EXPECT_EQ(total_h2d(mesh), 2u * 5u * 8u);  // the zeros are made on their devices
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::mean}) {
    expect_placed(ferry::distribute(g, mesh, {Partial{op}}), g, {Partial{op}});
  }
}

TEST(Distribute, OnATwoDimensionalMeshEachAxisCutsItsOwnDim) {
  Mesh mesh = Mesh::modeled(grid(2, 4));
  const auto g = global_of<float>(Shape{5, 7});
  for (const Placements& ps : std::vector<Placements>{{Shard{0}, Shard{1}},
                                                      {Shard{1}, Shard{0}},
                                                      {Replicate{}, Shard{-1}},
                                                      {Shard{0}, Replicate{}},
                                                      {Partial{}, Shard{1}},
                                                      {Shard{1}, Partial{ReduceOp::max}},
                                                      {Replicate{}, Replicate{}}}) {
    expect_placed(ferry::distribute(g, mesh, ps), g, ps);
  }
  // (Shard(0), Shard(1)) of 5 x 7 on 2 x 4: rows 3 and 2, columns 2, 2, 2, 1.
  const auto a = ferry::distribute(g, mesh, {Shard{0}, Shard{1}});
  EXPECT_EQ(a.shard(ferry::MeshCoordinate{0, 0}).shape(), (Shape{3, 2}));
  EXPECT_EQ(a.shard(ferry::MeshCoordinate{1, 3}).shape(), (Shape{2, 1}));
}

TEST(Distribute, FromADeviceTheBlocksTravelTheMeshLinks) {
  // A line of 4; an (8, 2) float array on device 0, Shard(0): a block is 2 rows, 16 bytes.
  // Device 0 keeps its block (a view, no copy); blocks 1, 2, 3 go hop by hop, so link 0->1
  // carries three blocks, 1->2 two and 2->3 one, and nothing goes back.
  Mesh mesh = Mesh::modeled(line_of(4));
  const auto g = global_of<float>(Shape{8, 2});
  const auto on0 = ferry::to_device(mesh.device(0), g);
  mesh.reset_stats();
  const auto a = ferry::distribute(on0, mesh, {Shard{0}});
  expect_placed(a, g, {Shard{0}});
  EXPECT_EQ(link_bytes(mesh), (std::map<std::string, std::int64_t>{
                                  {"link 0->1", 48}, {"link 1->2", 32}, {"link 2->3", 16}}));
  // From the cpu, each block is an import of the device receiving it.
  const auto on_cpu = ferry::to_device(ferry::Device::cpu(), g);
  mesh.reset_stats();
  const auto b = ferry::distribute(on_cpu, mesh, {Shard{1}});
  expect_placed(b, g, {Shard{1}});
  for (std::int64_t i = 0; i < 4; ++i) {  // 2 columns on 4 devices: 1, 1, 0, 0 of 8 rows
    EXPECT_EQ(mesh.device(i).stats().bytes_h2d, i < 2 ? 8u * 4u : 0u) << "device " << i;
  }
  EXPECT_TRUE(link_bytes(mesh).empty());
  // On a 2-D mesh, from another device of it, every placement.
  const Mesh two = Mesh::modeled(grid(2, 4));
  const auto g2 = global_of<std::int32_t>(Shape{3, 6});
  const auto on5 = ferry::to_device(two.device(5), g2);
  for (const Placements& ps : std::vector<Placements>{
           {Shard{1}, Shard{0}}, {Replicate{}, Shard{1}}, {Partial{}, Replicate{}}}) {
    expect_placed(ferry::distribute(on5, two, ps), g2, ps);
  }
}

TEST(Distribute, ToHostReducesAPartialExactlyAsAllReduceDoes) {
  // Summands whose sum rounds: the assembled value must be the all-reduce's, bit for bit.
  // Device (r, c)'s summand depends on the coordinates of its Partial axes only: a Replicate
  // axis holds copies.
  const Mesh mesh = Mesh::modeled(grid(2, 4));
  const auto summands = [&](const Placements& ps) {
    std::vector<DeviceArray<float>> shards;
    for (std::int64_t i = 0; i < 8; ++i) {
      const auto at = mesh.shape().coordinate_of(i).indices();
      const std::int64_t r = std::holds_alternative<Partial>(ps[0]) ? at[0] : 0;
      const std::int64_t c = std::holds_alternative<Partial>(ps[1]) ? at[1] : 0;
      std::vector<float> v;
      for (int k = 0; k < 12; ++k)
        v.push_back(0.1f * static_cast<float>(k + 1) / static_cast<float>(4 * r + c + 3));
      shards.push_back(ferry::to_device(mesh.device(i), v, Shape{3, 4}));
    }
    return shards;
  };
  for (const Placements& ps : std::vector<Placements>{{Partial{}, Partial{}},
                                                      {Replicate{}, Partial{ReduceOp::mean}},
                                                      {Partial{ReduceOp::mean}, Replicate{}}}) {
    SCOPED_TRACE(text(ps));
    const auto a = MeshArray<float>::from_shards(mesh, summands(ps), Shape{3, 4}, ps);
    const HostArray<float> assembled = ferry::to_host(a);
    const auto replicated = ferry::redistribute(a, {Replicate{}, Replicate{}});
    for (const auto& h : replicated.to_host()) EXPECT_EQ(h, assembled);
  }
  // By hand for one axis: the all_reduce of the stacked summands.
  const auto shards = summands({Replicate{}, Partial{}});
  const auto a = MeshArray<float>::from_shards(mesh, shards, Shape{3, 4}, {Replicate{}, Partial{}});
  const auto reduced =
      ferry::all_reduce(MeshArray<float>::from_shards(mesh, shards), ReduceOp::sum, 1);
  EXPECT_EQ(ferry::to_host(a), reduced.shard(0).to_host());
}

TEST(Distribute, ToHostOnProcessZeroOfAOneProcessMeshIsToHost) {
  // A mesh of one process has process 0 only: the value there, and any other is refused; the
  // devices' memory comes back once the array goes.
  const Mesh mesh = Mesh::modeled(grid(2, 4));
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto g = global_of<float>(Shape{4, 8});
    const auto a = ferry::distribute(g, mesh, {Shard{0}, Partial{}});
    const std::optional<HostArray<float>> on0 = ferry::to_host(a, 0);
    ASSERT_TRUE(on0.has_value());
    EXPECT_EQ(*on0, ferry::to_host(a));
    const std::string name = mesh.spec().name;
    expect_error<ferry::InvalidArgument>(
        [&] { return ferry::to_host(a, 1); },
        "[to_host] process 1 of mesh " + name + ", which lives in one process (0)");
    expect_error<ferry::InvalidArgument>([&] { return ferry::to_host(a, -1); },
                                         "[to_host] process -1: processes count from 0");
  });
}

// ---- every transition against the host ----

TEST(Redistribute, EveryTransitionOnALineMatchesTheHost) {
  Mesh mesh = Mesh::modeled(line_of(4));
  // Sizes that divide by 4 (8 x 4) and sizes that do not (7 x 5, 2 x 3: empty blocks).
  for (const Shape& shape : {Shape{8, 4}, Shape{7, 5}, Shape{2, 3}}) {
    SCOPED_TRACE(shape.to_string());
    const auto g = global_of<double>(shape);
    const std::vector<Placements> all = {{Shard{0}},
                                         {Shard{1}},
                                         {Replicate{}},
                                         {Partial{}},
                                         {Partial{ReduceOp::max}},
                                         {Partial{ReduceOp::min}},
                                         {Partial{ReduceOp::mean}}};
    for (const Placements& from : all) check_transitions(mesh, g, from, all);
  }
}

TEST(Redistribute, EveryAxisOfATwoDimensionalMeshChangesAlongItself) {
  Mesh mesh = Mesh::modeled(grid(2, 4));
  const auto g = global_of<float>(Shape{5, 6});
  const std::vector<Placements> targets = {
      {Replicate{}, Replicate{}}, {Shard{0}, Shard{1}},
      {Shard{1}, Shard{0}},  // a swap: one axis is gathered first
      {Replicate{}, Shard{0}},    {Shard{1}, Replicate{}},
      {Partial{}, Shard{1}},      {Replicate{}, Partial{ReduceOp::max}},
  };
  const std::vector<Placements> sources = {
      {Shard{0}, Shard{1}},       {Shard{1}, Shard{0}},  {Shard{0}, Replicate{}},
      {Replicate{}, Replicate{}}, {Partial{}, Shard{0}}, {Shard{1}, Partial{ReduceOp::mean}},
      {Partial{}, Partial{}},
  };
  for (const Placements& from : sources) check_transitions(mesh, g, from, targets);
}

TEST(Redistribute, OnAT3000TheIntegersOfAModelGoFromShardedToReplicated) {
  Mesh mesh = Mesh::modeled(ferry::specs::t3000());
  const auto g = global_of<std::int32_t>(Shape{6, 10});
  check_transitions(mesh, g, {Shard{0}, Shard{1}},
                    {{Replicate{}, Replicate{}}, {Shard{1}, Shard{0}}, {Replicate{}, Shard{0}}});
  check_transitions(mesh, g, {Partial{ReduceOp::max}, Partial{ReduceOp::max}},
                    {{Replicate{}, Replicate{}}, {Shard{1}, Partial{ReduceOp::max}}});
}

TEST(Redistribute, BoolArraysShardAndReplicate) {
  Mesh mesh = Mesh::modeled(line_of(2));
  HostArray<bool> g(Shape{3, 2});
  for (std::size_t k = 0; k < 6; ++k) g.data()[k] = k % 3 == 1;
  check_transitions(mesh, g, {Shard{0}}, {{Replicate{}}, {Shard{1}}});
}

TEST(Redistribute, ThePlacementItHasAlreadyIsNoOp) {
  Mesh mesh = Mesh::modeled(line_of(4));
  const auto a = ferry::distribute(global_of<float>(Shape{4, 4}), mesh, {Shard{0}});
  mesh.reset_stats();
  const auto b = ferry::redistribute(a, {Shard{-2}});
  // The same shards, not copies of them.
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ferry::detail::ArrayAccess::step(b.shard(i)),
              ferry::detail::ArrayAccess::step(a.shard(i)));
  }
  EXPECT_TRUE(link_bytes(mesh).empty());
}

// ---- what each transition puts on the links ----

TEST(RedistributeLinks, ReplicateToShardAndToPartialMoveNothing) {
  Mesh mesh = Mesh::modeled(line_of(4));
  const auto a = ferry::distribute(global_of<float>(Shape{8, 6}), mesh, {Replicate{}});
  ferry::wait(a);
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(a, {Shard{1}}));
  ferry::wait(ferry::redistribute(a, {Partial{}}));
  EXPECT_TRUE(link_bytes(mesh).empty());
  EXPECT_EQ(mesh.stats().communication_time, std::chrono::nanoseconds(0));
  for (const auto& d : mesh.devices()) EXPECT_EQ(d.stats().bytes_d2d, 0u) << d.name();
}

TEST(RedistributeLinks, ShardToReplicateIsALineAllGather) {
  // 4 devices on a line, (8, 2) floats: each block 16 bytes. A line all-gather sends whole
  // blocks toward both ends: link p->p+1 carries the p+1 blocks left of it, link p+1->p the
  // 3-p right of it.
  Mesh mesh = Mesh::modeled(line_of(4));
  const auto a = ferry::distribute(global_of<float>(Shape{8, 2}), mesh, {Shard{0}});
  ferry::wait(a);
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(a, {Replicate{}}));
  EXPECT_EQ(link_bytes(mesh), (std::map<std::string, std::int64_t>{{"link 0->1", 16},
                                                                   {"link 1->2", 32},
                                                                   {"link 2->3", 48},
                                                                   {"link 3->2", 16},
                                                                   {"link 2->1", 32},
                                                                   {"link 1->0", 48}}));
}

TEST(RedistributeLinks, OnATwoDimensionalMeshEachRowGathersOnItsOwnLinks) {
  // (Replicate, Shard(1)) of (2, 8) floats on 2 x 4: each row holds the whole array in four
  // (2, 2) blocks of 16 bytes. Gathering axis 1 is a line all-gather along each row (as on the
  // line of 4 above, twice); nothing crosses between the rows (links 0->4, ...).
  Mesh mesh = Mesh::modeled(grid(2, 4));
  const auto a = ferry::distribute(global_of<float>(Shape{2, 8}), mesh, {Replicate{}, Shard{1}});
  ferry::wait(a);
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(a, {Replicate{}, Replicate{}}));
  EXPECT_EQ(link_bytes(mesh), (std::map<std::string, std::int64_t>{{"link 0->1", 16},
                                                                   {"link 1->2", 32},
                                                                   {"link 2->3", 48},
                                                                   {"link 3->2", 16},
                                                                   {"link 2->1", 32},
                                                                   {"link 1->0", 48},
                                                                   {"link 4->5", 16},
                                                                   {"link 5->6", 32},
                                                                   {"link 6->7", 48},
                                                                   {"link 7->6", 16},
                                                                   {"link 6->5", 32},
                                                                   {"link 5->4", 48}}));
}

TEST(RedistributeLinks, PartialAndShardTransitionsOnTwoDevices) {
  // A line of 2, each device's buffer (4, 4) floats, 64 bytes (the Shard{1} blocks (4, 2),
  // 32 bytes).
  Mesh mesh = Mesh::modeled(line_of(2));
  const auto g = global_of<float>(Shape{4, 4});
  const auto partial = partial_of(mesh, g, {Partial{}});
  const auto sharded = ferry::distribute(g, mesh, {Shard{1}});
  ferry::wait(partial);
  ferry::wait(sharded);
  using Bytes = std::map<std::string, std::int64_t>;
  // All-reduce: a reduce-scatter (each sends the other's half, 32 bytes) then an all-gather
  // (each sends its reduced half, 32 bytes): 64 bytes each way.
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(partial, {Replicate{}}));
  EXPECT_EQ(link_bytes(mesh), (Bytes{{"link 0->1", 64}, {"link 1->0", 64}}));
  // Reduce-scatter alone: 32 bytes each way.
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(partial, {Shard{0}}));
  EXPECT_EQ(link_bytes(mesh), (Bytes{{"link 0->1", 32}, {"link 1->0", 32}}));
  // All-to-all of the (4, 2) blocks: each sends the other its half, 16 bytes each way.
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(sharded, {Shard{0}}));
  EXPECT_EQ(link_bytes(mesh), (Bytes{{"link 0->1", 16}, {"link 1->0", 16}}));
  // Uneven: 3 rows on 2 devices are padded to 2 + 2 around the reduce-scatter: 2 rows of 4
  // floats, 32 bytes, each way.
  const auto odd = partial_of(mesh, global_of<float>(Shape{3, 4}), {Partial{}});
  ferry::wait(odd);
  mesh.reset_stats();
  ferry::wait(ferry::redistribute(odd, {Shard{0}}));
  EXPECT_EQ(link_bytes(mesh), (Bytes{{"link 0->1", 32}, {"link 1->0", 32}}));
}

// ---- memory ----

TEST(ShardingMemory, EveryBufferIsFreedWhenTheArraysGo) {
  Mesh mesh = Mesh::modeled(grid(2, 4));
  {
    const auto g = global_of<float>(Shape{5, 6});
    const auto a = ferry::distribute(g, mesh, {Shard{0}, Shard{1}});
    const auto b = ferry::redistribute(a, {Shard{1}, Shard{0}});
    const auto c = ferry::redistribute(b, {Partial{}, Replicate{}});
    const auto d = ferry::redistribute(c, {Shard{0}, Replicate{}});
    EXPECT_EQ(ferry::to_host(d), g);
    const auto e =
        ferry::distribute(ferry::to_device(mesh.device(3), g), mesh, {Replicate{}, Shard{1}});
    EXPECT_EQ(ferry::to_host(ferry::redistribute(e, {Replicate{}, Replicate{}})), g);
  }
  // Nothing held on any device, DRAM or L1, and no schedule shorter than its bound.
  const ferry_test::MemoryInUse nothing(8, {0, 0});
  ferry_test::expect_books_balanced(mesh, nothing);
}

// A device's failed step of a distribute or redistribute names the op the program called,
// beside the step's own op, as a composite op's step does ("[var] step 3 (mean)"): its
// all_gather or all_to_all once named itself alone. Device (1, 1) of a 2 x 2 fails its step k.
TEST(ShardingFaults, AFailedStepNamesTheOpTheProgramCalled) {
  for (const auto& [step, called, op] :
       {std::tuple{std::uint64_t{0}, "distribute", "to_device"},
        std::tuple{std::uint64_t{1}, "redistribute", "all_gather"},
        std::tuple{std::uint64_t{3}, "redistribute", "all_to_all"}}) {
    SCOPED_TRACE(step);
    MeshSpec spec = grid(2, 2);
    spec.devices[3].faults.fail_steps = {step};
    const Mesh mesh = Mesh::modeled(spec);
    const auto g = global_of<float>(Shape{4, 4});
    const auto x = ferry::distribute(g, mesh, {Shard{0}, Shard{1}});
    const auto y = ferry::redistribute(x, {Shard{1}, Shard{0}});
    try {
      (void)ferry::to_host(y);
      ADD_FAILURE() << "no DeviceFault";
    } catch (const ferry::DeviceFault& e) {
      EXPECT_EQ(e.called(), called);
      EXPECT_EQ(e.op(), op);
      const std::string head = "[" + std::string(called) + "] step " + std::to_string(step) +
                               " (" + op + ") on " + mesh.device(3).name() + " failed";
      EXPECT_EQ(std::string(e.what()).rfind(head, 0), 0u) << e.what();
    }
  }
}

// ---- arrays without a global view ----

TEST(ShardingViews, FromShardsWithoutPlacementsHasNoGlobalView) {
  Mesh mesh = Mesh::modeled(line_of(2));
  const auto a =
      MeshArray<float>::from_shards(mesh, {ferry::full<float>(mesh.device(0), Shape{2}, 1.0f),
                                           ferry::full<float>(mesh.device(1), Shape{2}, 2.0f)});
  EXPECT_FALSE(a.placed());
  const std::string no_view =
      "the array has no global view (a collective's result, or from_shards without "
      "placements): give one with MeshArray::from_shards(mesh, shards, global_shape, "
      "placements), or make the array with distribute";
  expect_error<ferry::InvalidArgument>([&] { return a.placements(); },
                                       "[MeshArray::placements] " + no_view);
  expect_error<ferry::InvalidArgument>([&] { return a.global_shape(); },
                                       "[MeshArray::global_shape] " + no_view);
  EXPECT_FALSE(ferry::all_gather(a).placed());  // a collective's result has none either
  // With placements, the same shards are the halves of a (4) array, or summands of a (2) one.
  const auto halves = MeshArray<float>::from_shards(mesh, a.shards(), Shape{4}, {Shard{0}});
  EXPECT_EQ(ferry::to_host(halves), (HostArray<float>(Shape{4}, {1, 1, 2, 2})));
  const auto summands = MeshArray<float>::from_shards(mesh, a.shards(), Shape{2}, {Partial{}});
  EXPECT_EQ(ferry::to_host(summands), (HostArray<float>(Shape{2}, {3, 3})));
}

// ---- bad input ----

TEST(ShardingBadInput, PlacementsMustFitTheMeshAndTheRank) {
  Mesh mesh = Mesh::modeled(grid(2, 4));
  const auto g = global_of<float>(Shape{4, 6});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::distribute(g, mesh, {Shard{0}}); },
      "[distribute] placements (Shard(0)) give 1 placements for mesh grid (2, 4) of 2 axes; give "
      "one per mesh axis");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::distribute(g, mesh, {Replicate{}, Shard{2}});
      },
      "[distribute] Shard(2) on mesh axis 1 is out of range for an array of rank 2 (4, 6)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::distribute(g, mesh, {Shard{-3}, Replicate{}});
      },
      "[distribute] Shard(-3) on mesh axis 0 is out of range for an array of rank 2 (4, 6)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::distribute(g, mesh, {Shard{1}, Shard{-1}});
      },
      "[distribute] placements (Shard(1), Shard(-1)) shard dim 1 along mesh axes 0 and 1; a dim "
      "may be sharded along one mesh axis only");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::distribute(g, mesh, {Replicate{}, Partial{static_cast<ReduceOp>(9)}});
      },
      "[distribute] Partial(ReduceOp(9)) on mesh axis 1 has no ReduceOp (sum, max, min or mean)");
  const auto a = ferry::distribute(g, mesh, {Shard{0}, Replicate{}});
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::redistribute(a, {Replicate{}, Replicate{}, Replicate{}});
      },
      "[redistribute] placements (Replicate(), Replicate(), Replicate()) give 3 placements for "
      "mesh grid (2, 4) of 2 axes; give one per mesh axis");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::redistribute(a, {Shard{5}, Replicate{}});
      },
      "[redistribute] Shard(5) on mesh axis 0 is out of range for an array of rank 2 (4, 6)");
  const Mesh one = Mesh::modeled(line_of(2));
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::distribute(HostArray<float>(Shape{}), one, {Shard{0}}); },
      "[distribute] Shard(0) on mesh axis 0 is out of range for an array of rank 0 ()");
}

TEST(ShardingBadInput, APartialMustSuitTheElementType) {
  Mesh mesh = Mesh::modeled(line_of(2));
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::distribute(global_of<std::int32_t>(Shape{2}), mesh,
                                 {Partial{ReduceOp::mean}});
      },
      "[distribute] ReduceOp::mean needs a floating element type, got int32");
  HostArray<bool> flags(Shape{2});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::distribute(flags, mesh, {Partial{}}); },
      "[distribute] Partial(sum) on mesh axis 0 needs a numeric element type, got bool");
  // redistribute reaches the same check on its own path.
  const auto ints_sharded = ferry::distribute(global_of<std::int32_t>(Shape{2}), mesh, {Shard{0}});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::redistribute(ints_sharded, {Partial{ReduceOp::mean}}); },
      "[redistribute] ReduceOp::mean needs a floating element type, got int32");
  const auto b = ferry::distribute(flags, mesh, {Shard{0}});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::redistribute(b, {Partial{ReduceOp::max}}); },
      "[redistribute] Partial(max) on mesh axis 0 needs a numeric element type, got bool");
  // from_shards refuses them too, rather than leaving an array nothing can reduce (redistribute
  // of a bool Partial once marked differing shards Replicate), and so do spmd's results.
  expect_error<ferry::InvalidArgument>(
      [&] {
        return MeshArray<std::int32_t>::from_shards(
            mesh,
            {ferry::full<std::int32_t>(mesh.device(0), Shape{2}, 1),
             ferry::full<std::int32_t>(mesh.device(1), Shape{2}, 3)},
            Shape{2}, {Partial{ReduceOp::mean}});
      },
      "[MeshArray::from_shards] ReduceOp::mean needs a floating element type, got int32");
  const std::vector<ferry::DeviceArray<bool>> flag_shards = {
      ferry::to_device(mesh.device(0), flags), ferry::to_device(mesh.device(1), flags)};
  expect_error<ferry::InvalidArgument>(
      [&] { return MeshArray<bool>::from_shards(mesh, flag_shards, Shape{2}, {Partial{}}); },
      "[MeshArray::from_shards] Partial(sum) on mesh axis 0 needs a numeric element type, got "
      "bool");
  const auto step = ferry::spmd(
      mesh, [](const ferry::DeviceArray<bool>& x) { return x; }, {{Partial{ReduceOp::max}}});
  EXPECT_THROW(static_cast<void>(step(MeshArray<bool>::from_shards(mesh, flag_shards))),
               ferry::InvalidArgument);
}

TEST(ShardingBadInput, ArraysWithoutAViewOrWithShardsOfTheWrongShape) {
  Mesh mesh = Mesh::modeled(line_of(2));
  const auto half = [&](std::int64_t i, std::int64_t n) {
    return ferry::full<float>(mesh.device(i), Shape{n, 3}, 1.0f);
  };
  expect_error<ferry::ShapeError>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {half(0, 2), half(1, 2)}, Shape{5, 3},
                                             {Shard{0}});
      },
      "[MeshArray::from_shards] shard 0 has shape (2, 3); placements (Shard(0)) of global shape "
      "(5, 3) give device 0 (0) the shape (3, 3)");
  expect_error<ferry::ShapeError>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {half(0, 2), half(1, 3)}, Shape{2, 3},
                                             {Replicate{}});
      },
      "[MeshArray::from_shards] shard 1 has shape (3, 3); placements (Replicate()) of global "
      "shape (2, 3) give device 1 (1) the shape (2, 3)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return MeshArray<float>::from_shards(mesh, {half(0, 2), half(1, 2)}, Shape{4, 3}, {});
      },
      "[MeshArray::from_shards] placements () give 0 placements for mesh row (2) of 1 axis; give "
      "one per mesh axis");
  const auto unplaced = MeshArray<float>::from_shards(mesh, {half(0, 2), half(1, 2)});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::redistribute(unplaced, {Replicate{}}); },
      "[redistribute] the mesh array has no global view (a collective's result, or from_shards "
      "without placements): give it placements with MeshArray::from_shards(mesh, shards, "
      "global_shape, placements)");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::to_host(unplaced); },
      "[to_host] the mesh array has no global view (a collective's result, or from_shards "
      "without placements): a.to_host() gives each shard's values, or give it placements with "
      "MeshArray::from_shards(mesh, shards, global_shape, placements)");
  expect_error<ferry::InvalidArgument>([] { return ferry::to_host(MeshArray<float>()); },
                                       "[to_host] empty mesh array");
  expect_error<ferry::InvalidArgument>(
      [] { return ferry::redistribute(MeshArray<float>(), {Replicate{}}); },
      "[redistribute] empty mesh array");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::distribute(DeviceArray<float>(), mesh, {Replicate{}}); },
      "[distribute] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

}  // namespace

}  // namespace test_sharding
