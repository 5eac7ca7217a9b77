#pragma once
// MeshSpec: the numbers that describe many devices on one interconnect (their shape, the
// topology of each axis, the links and the collective library's costs), and presets with
// public figures. The mesh simulator that runs them on one clock reads these.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/core/error.hpp"
#include "ferry/model/spec.hpp"

namespace ferry {

/// A position in a mesh, one index per axis: `MeshCoordinate{1, 3}` is row 1, column 3 of a
/// 2-D mesh. A plain value: MeshShape::index_of checks it against a shape.
class MeshCoordinate {
 public:
  MeshCoordinate() = default;
  MeshCoordinate(std::initializer_list<std::int64_t> indices) : indices_(indices) {}
  explicit MeshCoordinate(std::vector<std::int64_t> indices) : indices_(std::move(indices)) {}

  std::size_t rank() const noexcept { return indices_.size(); }
  /// Index along `axis`; throws InvalidArgument when `axis >= rank()`.
  std::int64_t operator[](std::size_t axis) const {
    if (axis >= indices_.size()) {
      detail::fail<InvalidArgument>("MeshCoordinate", "axis ", axis, " of the rank-",
                                    indices_.size(), " coordinate ", to_string());
    }
    return indices_[axis];
  }
  const std::vector<std::int64_t>& indices() const noexcept { return indices_; }
  /// "(1, 3)".
  std::string to_string() const { return list_text(indices_); }
  bool operator==(const MeshCoordinate&) const = default;

  /// "(a, b, c)" of a list of integers: shared with MeshShape.
  static std::string list_text(const std::vector<std::int64_t>& values) {
    std::string s = "(";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) s += ", ";
      s += std::to_string(values[i]);
    }
    return s + ")";
  }

 private:
  std::vector<std::int64_t> indices_;
};

/// The extents of a mesh, one per axis, of any rank: `MeshShape{2, 4}` is 2 rows of 4 devices
/// (a T3000), `MeshShape{8}` a single axis of 8 (an NVSwitch node). A vector rather than
/// (rows, cols) because the meshes ferry learns from are not all 2-D (JAX's Mesh and TT-NN's
/// MeshShape take any rank); a plain value that validate(MeshSpec) checks.
class MeshShape {
 public:
  MeshShape() = default;
  MeshShape(std::initializer_list<std::int64_t> sizes) : sizes_(sizes) {}
  explicit MeshShape(std::vector<std::int64_t> sizes) : sizes_(std::move(sizes)) {}

  std::size_t rank() const noexcept { return sizes_.size(); }
  /// Extent of `axis`; throws InvalidArgument when `axis >= rank()`.
  std::int64_t operator[](std::size_t axis) const {
    if (axis >= sizes_.size()) {
      detail::fail<InvalidArgument>("MeshShape", "axis ", axis, " of the rank-", sizes_.size(),
                                    " mesh shape ", to_string());
    }
    return sizes_[axis];
  }
  const std::vector<std::int64_t>& sizes() const noexcept { return sizes_; }
  /// The number of devices: the product of the extents (1 for rank 0; 0 when an extent is
  /// not positive; the largest int64 when the product overflows it). Throws nothing.
  std::int64_t size() const noexcept {
    // A non-positive extent anywhere makes an empty mesh, even after extents that overflow.
    if (std::ranges::any_of(sizes_, [](std::int64_t s) { return s <= 0; })) return 0;
    std::int64_t n = 1;
    for (std::int64_t s : sizes_) {
      if (n > std::numeric_limits<std::int64_t>::max() / s)
        return std::numeric_limits<std::int64_t>::max();
      n *= s;
    }
    return n;
  }
  /// "(2, 4)".
  std::string to_string() const { return MeshCoordinate::list_text(sizes_); }
  bool operator==(const MeshShape&) const = default;

  /// The row-major position of `c` (the last axis varies fastest), the order of
  /// MeshSpec::devices. Throws InvalidArgument when `c` has another rank or an index out of
  /// range, or when its position is past the largest int64 (no mesh has that many devices).
  std::int64_t index_of(const MeshCoordinate& c) const {
    return index_of(c, "MeshShape::index_of");
  }
  /// As index_of(c), its errors naming `op`: the call that was given `c`.
  std::int64_t index_of(const MeshCoordinate& c, std::string_view op) const {
    if (c.rank() != rank()) {
      detail::fail<InvalidArgument>(op, "coordinate ", c.to_string(), " has rank ", c.rank(),
                                    ", mesh shape ", to_string(), " has rank ", rank());
    }
    std::int64_t index = 0;
    for (std::size_t axis = 0; axis < rank(); ++axis) {
      const std::int64_t i = c.indices()[axis];
      if (i < 0 || i >= sizes_[axis]) {
        detail::fail<InvalidArgument>(op, "coordinate ", c.to_string(), " is outside mesh shape ",
                                      to_string(), " on axis ", axis);
      }
      // Here 0 <= i < sizes_[axis]; a position past the int64 range is no device's.
      if (index > (std::numeric_limits<std::int64_t>::max() - i) / sizes_[axis]) {
        detail::fail<InvalidArgument>(op, "coordinate ", c.to_string(), " of mesh shape ",
                                      to_string(),
                                      " has a row-major position past the largest int64");
      }
      index = index * sizes_[axis] + i;
    }
    return index;
  }

  /// The coordinate of row-major position `index`. Throws InvalidArgument when `index` is not
  /// in [0, size()).
  MeshCoordinate coordinate_of(std::int64_t index) const {
    if (index < 0 || index >= size()) {
      detail::fail<InvalidArgument>("MeshShape::coordinate_of", "index ", index,
                                    " is outside mesh shape ", to_string(), " of ", size(),
                                    " devices");
    }
    std::vector<std::int64_t> c(rank());
    for (std::size_t axis = rank(); axis-- > 0;) {
      c[axis] = index % sizes_[axis];
      index /= sizes_[axis];
    }
    return MeshCoordinate(std::move(c));
  }

 private:
  std::vector<std::int64_t> sizes_;
};

/// How the devices along one mesh axis are joined.
enum class Topology : std::uint8_t {
  ring,             // each device to its two neighbours, the last back to the first
  line,             // each device to its neighbours; the two ends have one
  fully_connected,  // a switch (an NVSwitch): every pair one hop, each device one port to it
};

/// "ring", "line", "fully_connected" ("unknown" for a value outside the enum).
constexpr std::string_view name_of(Topology t) noexcept {
  switch (t) {
    case Topology::ring: return "ring";
    case Topology::line: return "line";
    case Topology::fully_connected: return "fully_connected";
  }
  return "unknown";
}

/// The links of a mesh and the costs of the collective library that drives them. One LinkSpec
/// serves every axis: the meshes it describes use one kind of link throughout.
struct LinkSpec {
  /// Line rate of one link in one direction. Through a switch: of one link between a device
  /// and the switch.
  double bytes_per_second = 0;
  /// Time for a packet to cross one hop (a link and the receiving end's router), paid once
  /// per hop even where packets stream through several.
  Duration hop_latency{};
  /// Links between two neighbouring devices (through a switch: between a device and the
  /// switch) that the library uses: their rates add up.
  std::int64_t links_per_pair = 1;
  /// The library's fixed cost per collective call (launch, handshakes, the final barrier).
  Duration call_overhead{};
  /// The library's cost per algorithm step (a semaphore round trip between neighbours).
  Duration step_overhead{};
  /// The fraction of the line rate the library's packets reach (headers, flow control, the
  /// gaps between packets).
  double efficiency = 1;
  /// Messages of fewer bytes (as nccl-tests counts them: an all-gather's output, a
  /// reduce-scatter's input, an all-reduce's buffer) take the one-shot algorithm, which pays
  /// fewer steps for more bytes on some links. 0: never.
  std::int64_t one_shot_bytes = 0;
  /// The share of the rate above (line rate x efficiency) that the library reaches when a
  /// collective runs between two chips (a group of two, line or ring: one neighbouring pair),
  /// in (0, 1]; 1: what it reaches on longer lines and rings. tt-metal's CCL on Wormhole
  /// reaches ~83% of the line rate on an 8-chip ring but only ~51-59% between 2 chips
  /// (shared/data/devices/wormhole_ccl.csv), whose traffic is the same in both directions of
  /// one link. It is a pair's, not a line's: the same report's lines of 4 and 8 chips (rows
  /// that file does not carry) reach 83-94% of the line rate on their busiest link, at least
  /// the ring's. Its reports give no cause. It is the library's two-chip algorithm, not the
  /// link, that pays it, so it is a factor of the group rather than a second link rate.
  double pair_rate_factor = 1;
  /// The library runs a stepped all-reduce (ring, line or switch; not one-shot) as two calls, a
  /// reduce-scatter then an all-gather, each paying call_overhead (tt-metal's all_reduce is that
  /// composite; NCCL's is one kernel). wormhole_ccl.csv shows it: a 2-chip all-reduce of 4 KiB
  /// takes 12.8 us where an all-gather of the same size takes 7.1.
  bool composite_all_reduce = false;
};

/// Many devices on one interconnect. Checked when a mesh is built (detail::validate).
struct MeshSpec {
  std::string name = "custom";
  /// One spec per device, in the row-major order of `shape`. Devices may differ (one may carry
  /// a fault plan).
  std::vector<DeviceSpec> devices;
  MeshShape shape;
  /// One per axis of `shape`: how the devices along that axis are joined.
  std::vector<Topology> topology;
  /// Empty, or one distinct non-empty name per axis ({"dp", "tp"}).
  std::vector<std::string> axis_names;
  LinkSpec link;
};

namespace specs {

/// One Wormhole (B0) chip as a Tenstorrent n300 card carries two of them, the chip of the
/// T3000 and Galaxy meshes. From Tenstorrent's n300 specification (docs.tenstorrent.com,
/// Wormhole specifications): 64 Tensix cores per chip at 1 GHz; 96 MB of SRAM per chip (1.5 MB
/// a core); 12 GB of GDDR6 per chip at 288 GB/s; 131 TFLOPS FP16 per card, so 65.5 per chip
/// (taken for BF16). From tt-metal's "Basic Ethernet Multichip" report: 16 Ethernet cores a
/// chip, each 100 Gb/s (12.5 GB/s) per direction, which is what a copy to another device
/// crosses. Everything else is mesh_accelerator()'s (the n150, the same chip with 72 cores):
/// the assumed FP32/FP64/integer ratios, the SRAM rate per core, PCIe and the latencies. Its
/// kernels start in the order they were submitted (SchedulePolicy::fifo): tt-metal's command
/// queue is a ring buffer the chip's prefetcher reads in order, and a collective's reductions
/// run between the kernels submitted around them, not after every kernel a critical path
/// would put first.
inline DeviceSpec wormhole_b0() {
  constexpr double kCores = 64;
  DeviceSpec s = mesh_accelerator();
  s.name = "wormhole_b0";
  s.compute_units = 64;
  const double bf16 = 131e12 / 2 / kCores;
  s.unit_flops_per_second = {bf16, bf16 / 4, bf16 / 32, bf16 / 4};
  s.l1_bytes = 64 * (std::int64_t{3} << 19);  // 1.5 MiB a core
  s.l1_bytes_per_second = 64 * 1e9 * kCores;
  s.d2d_bytes_per_second = 12.5e9;
  s.policy = SchedulePolicy::fifo;
  return s;
}

/// The collective costs of tt-metal's CCL on Wormhole Ethernet, shared by t3000() and galaxy().
/// The line rate is from tt-metal's "Basic Ethernet Multichip" report: 100 Gb/s (12.5 GB/s) per
/// link per direction. Every other figure is calibrate()'s fit to
/// shared/data/devices/wormhole_ccl.csv (tt-metal's CCL benchmark: ring all-gather on 8 chips,
/// line all-gather and all-reduce on 2, 4 KiB to 1 GiB; benchmarks/fidelity prints the fit,
/// median error 4.0%, worst 1.12x): the library reaches 80% of the line rate on a ring (and,
/// as the table cannot tell, on longer lines) and two thirds of that between two chips; a hop
/// costs 0.56 us (the report's 8-chip ring ping gives 650-690 ns a hop, so the same order), a
/// step 1.2 us, a call 5.07 us, and an all-reduce is two calls (tt-metal composes it of a
/// reduce-scatter and an all-gather). No one-shot algorithm: the table shows no change of
/// algorithm at any size, so none is modeled.
inline LinkSpec wormhole_ethernet(std::int64_t links_per_pair) {
  LinkSpec l;
  l.bytes_per_second = 12.5e9;
  l.hop_latency = std::chrono::nanoseconds(560);
  l.links_per_pair = links_per_pair;
  l.call_overhead = std::chrono::nanoseconds(5070);
  l.step_overhead = std::chrono::nanoseconds(1200);
  l.efficiency = 0.80;
  l.pair_rate_factor = 0.665;
  l.one_shot_bytes = 0;
  l.composite_all_reduce = true;
  return l;
}

/// A Tenstorrent T3000: 8 Wormhole chips (four n300 cards) in a 2x4 mesh, from tt-metal's
/// "Basic Ethernet Multichip" report. Each axis is a line (the mesh has no wrap-around
/// links); its perimeter closes a ring of all 8, which whole-mesh collectives run on (the
/// "ring" rows of wormhole_ccl.csv). The two chips of an n300 are joined by two links, one
/// kept by the dispatcher for the chip without PCIe, so one link per pair is the library's
/// (the benchmark's rows used one link too). Link costs: wormhole_ethernet().
inline MeshSpec t3000() {
  MeshSpec m;
  m.name = "t3000";
  m.devices.assign(8, wormhole_b0());
  m.shape = MeshShape{2, 4};
  m.topology = {Topology::line, Topology::line};
  m.link = wormhole_ethernet(1);
  return m;
}

/// A Tenstorrent Galaxy: 32 Wormhole chips in an 8x4 mesh, from tt-metal's "Basic Ethernet
/// Multichip" report: the inner chips use all 16 of their Ethernet links, four to each
/// neighbour; the edge links are left for joining Galaxies (or closing a torus), so each axis
/// is a line. Link costs: wormhole_ethernet() with 4 links per pair.
inline MeshSpec galaxy() {
  MeshSpec m;
  m.name = "galaxy";
  m.devices.assign(32, wormhole_b0());
  m.shape = MeshShape{8, 4};
  m.topology = {Topology::line, Topology::line};
  m.link = wormhole_ethernet(4);
  return m;
}

/// An NVIDIA DGX/HGX H100: 8 h100_sxm() on NVSwitches, every pair one hop. From NVIDIA's H100
/// data sheet: NVLink 4, 18 links a GPU at 25 GB/s per direction each, 450 GB/s per direction
/// in all. NCCL's ring all-reduce reaches about 370 GB/s of bus bandwidth there on large
/// messages; nccl-tests (doc/PERFORMANCE.md) defines busbw as the algorithm bandwidth times
/// 2(n-1)/n for an all-reduce, which is the bytes each GPU's port carries per second, so the
/// library reaches 370/450 of the line rate. Not measured, and so typical figures for NCCL on
/// NVLink: ~1 us a hop through the switch, ~8 us a call, ~1 us a step, the one-shot algorithm
/// below 256 KiB (where NCCL leaves its low-latency protocols).
inline MeshSpec dgx_h100() {
  MeshSpec m;
  m.name = "dgx_h100";
  m.devices.assign(8, h100_sxm());
  m.shape = MeshShape{8};
  m.topology = {Topology::fully_connected};
  m.link.bytes_per_second = 25e9;
  m.link.links_per_pair = 18;
  m.link.hop_latency = std::chrono::microseconds(1);
  m.link.call_overhead = std::chrono::microseconds(8);
  m.link.step_overhead = std::chrono::microseconds(1);
  m.link.efficiency = 370.0 / 450.0;
  m.link.one_shot_bytes = std::int64_t{256} << 10;
  return m;
}

}  // namespace specs

namespace detail {

/// Throws InvalidArgument, as `op`, naming the first field of `l` no link could have; each
/// message starts with `where` (`mesh spec 't3000': `).
inline void validate(const LinkSpec& l, std::string_view op, std::string_view where) {
  const auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v)) {
      fail<InvalidArgument>(op, where, "link.", field, " must be positive, got ", v);
    }
  };
  // As validate(DeviceSpec): a time at most 2^53 ns (kLongestStep) and a rate at least one
  // per second, so that a collective's times fit the model's 64-bit nanoseconds.
  const auto non_negative = [&](Duration d, const char* field) {
    if (d < Duration::zero()) {
      fail<InvalidArgument>(op, where, "link.", field, " must not be negative, got ", d.count(),
                            " ns");
    }
    if (d > kLongestStep) {
      fail<InvalidArgument>(op, where, "link.", field,
                            " must be at most 2^53 ns (about 104 days), got ", d.count(), " ns");
    }
  };
  // `v`: bytes_per_second, alone or times the factors that scale it, named by `field`.
  const auto rate = [&](double v, const char* field, const char* what) {
    if (v < 1) {
      fail<InvalidArgument>(op, where, "link.", field, what, " must be at least 1 per second, got ",
                            v);
    }
  };
  positive(l.bytes_per_second, "bytes_per_second");
  rate(l.bytes_per_second, "bytes_per_second", "");
  if (l.links_per_pair < 1) {
    fail<InvalidArgument>(op, where, "link.links_per_pair must be positive, got ",
                          l.links_per_pair);
  }
  non_negative(l.hop_latency, "hop_latency");
  non_negative(l.call_overhead, "call_overhead");
  non_negative(l.step_overhead, "step_overhead");
  if (!(l.efficiency > 0 && l.efficiency <= 1)) {
    fail<InvalidArgument>(op, where, "link.efficiency must be in (0, 1], got ", l.efficiency);
  }
  rate(l.bytes_per_second * l.efficiency, "efficiency", " x bytes_per_second");
  if (l.one_shot_bytes < 0) {
    fail<InvalidArgument>(op, where, "link.one_shot_bytes must not be negative, got ",
                          l.one_shot_bytes);
  }
  if (!(l.pair_rate_factor > 0 && l.pair_rate_factor <= 1)) {
    fail<InvalidArgument>(op, where, "link.pair_rate_factor must be in (0, 1], got ",
                          l.pair_rate_factor);
  }
  rate(l.bytes_per_second * l.efficiency * l.pair_rate_factor, "pair_rate_factor",
       " x efficiency x bytes_per_second");
}

/// Throws InvalidArgument naming the first field of `m` that no mesh could have: a shape
/// without axes or with an extent below 1; a count of devices other than the shape's; a
/// topology list whose length is not the rank, or a ring of fewer than 3 devices (a ring of 2
/// would join one pair twice: that is a line, with links_per_pair links); axis names of the
/// wrong count, empty or repeated; an impossible link; and any device spec that
/// validate(DeviceSpec) refuses (its message, after the device's index). `op`: the call that
/// was given `m` (Mesh::modeled, mesh_over), which the message names.
inline void validate(const MeshSpec& m, std::string_view op) {
  const MeshShape& shape = m.shape;
  if (shape.rank() == 0) {
    fail<InvalidArgument>(op, "mesh spec '", m.name, "': shape must have at least one axis, got ",
                          shape.to_string());
  }
  std::int64_t count = 1;
  for (std::size_t axis = 0; axis < shape.rank(); ++axis) {
    const std::int64_t extent = shape.sizes()[axis];
    if (extent < 1) {
      fail<InvalidArgument>(op, "mesh spec '", m.name, "': shape[", axis,
                            "] must be positive, got ", extent);
    }
    if (count > std::numeric_limits<std::int32_t>::max() / extent) {
      fail<InvalidArgument>(op, "mesh spec '", m.name, "': shape ", shape.to_string(),
                            " has more devices than a mesh can hold");
    }
    count *= extent;
  }
  if (static_cast<std::int64_t>(m.devices.size()) != count) {
    fail<InvalidArgument>(op, "mesh spec '", m.name,
                          "': devices must have one spec per device of shape ", shape.to_string(),
                          " (", count, "), got ", m.devices.size());
  }
  if (m.topology.size() != shape.rank()) {
    fail<InvalidArgument>(op, "mesh spec '", m.name,
                          "': topology must have one entry per axis of shape ", shape.to_string(),
                          ", got ", m.topology.size());
  }
  for (std::size_t axis = 0; axis < shape.rank(); ++axis) {
    const Topology t = m.topology[axis];
    if (t != Topology::ring && t != Topology::line && t != Topology::fully_connected) {
      fail<InvalidArgument>(op, "mesh spec '", m.name, "': topology[", axis,
                            "] is not a Topology (", static_cast<int>(t), ")");
    }
    if (t == Topology::ring && shape.sizes()[axis] < 3) {
      fail<InvalidArgument>(op, "mesh spec '", m.name, "': topology[", axis, "] is a ring of ",
                            shape.sizes()[axis], " devices; a ring needs at least 3 (use a line)");
    }
  }
  if (!m.axis_names.empty()) {
    if (m.axis_names.size() != shape.rank()) {
      fail<InvalidArgument>(op, "mesh spec '", m.name,
                            "': axis_names must be empty or have one name per axis of shape ",
                            shape.to_string(), ", got ", m.axis_names.size());
    }
    for (std::size_t axis = 0; axis < m.axis_names.size(); ++axis) {
      if (m.axis_names[axis].empty()) {
        fail<InvalidArgument>(op, "mesh spec '", m.name, "': axis_names[", axis, "] is empty");
      }
      for (std::size_t earlier = 0; earlier < axis; ++earlier) {
        if (m.axis_names[earlier] == m.axis_names[axis]) {
          fail<InvalidArgument>(op, "mesh spec '", m.name, "': axis_names[", axis, "] repeats '",
                                m.axis_names[axis], "' of axis_names[", earlier, "]");
        }
      }
    }
  }
  validate(m.link, op, "mesh spec '" + m.name + "': ");
  for (std::size_t i = 0; i < m.devices.size(); ++i) {
    try {
      validate(m.devices[i]);
    } catch (const InvalidArgument& e) {
      // The device's own message without its "[Device::modeled] ": the mesh is what is built.
      const std::string_view text = e.what();
      const std::size_t start = text.find("] ");
      fail<InvalidArgument>(op, "mesh spec '", m.name, "': devices[", i, "]: ",
                            start == std::string_view::npos ? text : text.substr(start + 2));
    }
  }
}

}  // namespace detail
}  // namespace ferry
