#pragma once
// Timeline: the recent history of a modeled device (one slice per command, the host's waits,
// device memory over time), written as a Chrome trace (ui.perfetto.dev, chrome://tracing) or
// drawn as a text Gantt chart. Both depend only on modeled times and the spec: no wall time, no
// address, no process-specific number, so the same program writes the same bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/core/json_text.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/model/bounded_ring.hpp"
#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/ring.hpp"

namespace ferry::detail {

class Timeline {
 public:
  /// One command on one track. Track 0 is the host; track k > 0 is engine k - 1. (add() resets
  /// each field of a reused slice: a field added here is reset there too.)
  struct Slice {
    std::uint64_t id = 0;
    std::size_t track = 0;
    Duration start{};
    Duration end{};
    std::string_view name;  // an op name interned by the simulator, or a literal
    const Shape* shape = &kNoShape;  // the simulator's ShapeTable's (kept while the slice is)
    DType dtype = DType::float32;
    bool fallback = false;  // run on the host: the device rejected it
    double bytes = 0;
    double flops = 0;
    IdList producers;  // commands it reads: the flow arrows
  };  // 128 bytes: what a command writes to the trace when it starts

  /// Keeps the `capacity` most recent slices (0: records nothing).
  explicit Timeline(std::size_t capacity) : slices_(capacity) {}

  /// A new slice to fill in (the oldest is dropped beyond capacity); null when not recording.
  /// last_added() names it for end().
  Slice* add() {
    Slice* added = add_as_left();
    if (added == nullptr) return nullptr;
    // Each field set here, in place: a fresh Slice moved in cost a third of a slice's work
    // (its producers' storage freed and made again, a Shape built and copied).
    Slice& s = *added;
    s.id = 0;
    s.track = 0;
    s.start = s.end = Duration{};
    s.name = {};
    s.shape = &kNoShape;
    s.dtype = DType::float32;
    s.bytes = s.flops = 0;
    s.producers.clear();
    s.fallback = false;
    return &s;
  }
  /// As add(), but the slice as its slot's last slice left it: for describe(), which sets every
  /// field, so that a command's slice (one a command started) is not reset first.
  Slice* add_as_left() {
    if (slices_.capacity() == 0) return nullptr;
    if (slices_.full()) {
      slices_.pop_front();
      ++dropped_;
    }
    ++added_;
    return &slices_.emplace_back_as_left();
  }
  std::uint64_t last_added() const noexcept { return added_ - 1; }

  /// Closes the slice `added` (a last_added() value) at `t`, if it is still kept: a command's
  /// end is known only when it completes, since others sharing memory with it may slow it.
  void end(std::uint64_t added, Duration t) {
    const std::uint64_t first = added_ - slices_.size();
    if (added >= first && added < added_) slices_[static_cast<std::size_t>(added - first)].end = t;
  }

  /// From `t` on, `units` compute units are in use and running work moves `dram` bytes per
  /// second: the trace's counters.
  void usage(Duration t, std::int64_t units, double dram) {
    if (slices_.capacity() == 0) return;
    if (!usage_.empty() && usage_.back().time == t) {
      usage_.back() = {t, units, dram};
      return;
    }
    if (!usage_.empty() && usage_.back().units == units && usage_.back().dram == dram) return;
    if (usage_.size() == 2 * slices_.capacity()) usage_.pop_front();
    usage_.emplace_back() = {t, units, dram};
  }

  /// Fills every field of `s` for the command in `slot` of `slab`, labelled `l`, which just
  /// started on `track`: its span, what it is, and an arrow from each command that made its
  /// inputs' data.
  static void describe(Slice& s, const CommandSlab& slab, std::uint64_t slot,
                       const CommandLabel& l, std::size_t track) {
    const Command& c = slab[slot];
    s.id = c.id;
    s.track = track;
    s.start = c.start;
    s.end = c.start + (c.on_host ? c.host_duration : c.duration);
    s.name = l.name;
    s.shape = l.shape;
    s.dtype = l.dtype;
    s.bytes = static_cast<double>(c.bytes_moved);
    s.flops = l.flops;
    s.fallback = false;
    s.producers.clear();
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const Command& in = slab[c.inputs[i]];
      s.producers.push_back(in.view_of != kNoCommand ? slab[in.view_of].id : in.id);
    }
  }

  /// Device memory in use from time `t` on, in DRAM and in L1.
  void memory(Duration t, std::uint64_t dram_bytes, std::uint64_t l1_bytes) {
    if (slices_.capacity() == 0) return;
    if (!memory_.empty() && memory_.back().time == t) {
      memory_.back() = {t, dram_bytes, l1_bytes};
      return;
    }
    if (memory_.size() == 2 * slices_.capacity()) memory_.pop_front();
    memory_.emplace_back() = {t, dram_bytes, l1_bytes};
  }

  /// Calls `f(shape)` for the shape of every slice kept (ShapeTable::sweep's marks).
  template <class F>
  void for_each_shape(F&& f) const {
    for (std::size_t i = 0; i < slices_.size(); ++i) f(slices_[i].shape);
  }

  /// The slices kept, oldest first.
  std::vector<Slice> slices() const {
    std::vector<Slice> out;
    out.reserve(slices_.size());
    for (std::size_t i = 0; i < slices_.size(); ++i) out.push_back(slices_[i]);
    return out;
  }

  void clear() {
    slices_.clear();
    memory_.clear();
    usage_.clear();
    dropped_ = 0;
  }

  /// The Chrome trace event format, as JSON. `tracks` names track 0 (the host) and each engine.
  std::string json(const std::string& spec_name, const std::vector<std::string>& tracks) const {
    std::string out;
    out.reserve(256 + slices_.size() * 200);
    out += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"spec\":";
    append_json_string(out, spec_name);
    out += ",\"dropped_slices\":";
    out += std::to_string(dropped_);
    out += "},\"traceEvents\":[\n";
    append_events(out, spec_name, tracks, 1, 0);
    out += "\n]}\n";
    return out;
  }

  /// The events of json(), comma-separated, as process `pid` named `process`, numbering the
  /// dependency arrows from flow_base + 1: a mesh's trace puts each device's side by side.
  /// Returns the last arrow's number.
  std::uint64_t append_events(std::string& out, const std::string& process,
                              const std::vector<std::string>& tracks, int pid_number,
                              std::uint64_t flow_base) const {
    const std::string pid = std::to_string(pid_number);
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
    out += pid;
    out += ",\"args\":{\"name\":";
    append_json_string(out, process);
    out += "}}";
    std::vector<bool> used(tracks.size(), false);
    used[0] = true;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      if (slices_[i].track < used.size()) used[slices_[i].track] = true;
    }
    for (std::size_t t = 0; t < tracks.size(); ++t) {
      if (!used[t]) continue;  // a device of many units names only the lanes kernels ran on
      out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":";
      out += pid;
      out += ",\"tid\":";
      out += std::to_string(t);
      out += ",\"args\":{\"name\":";
      append_json_string(out, tracks[t]);
      out += "}}";
    }
    // The commands' slices by step: a host slice names the step it waited for, which made
    // nothing, so an input whose slice was dropped (trace_steps) gets no arrow rather than one
    // from the host's wait.
    std::unordered_map<std::uint64_t, const Slice*> by_id;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      if (slices_[i].track != 0) by_id.emplace(slices_[i].id, &slices_[i]);
    }
    std::uint64_t flow = flow_base;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      const Slice& s = slices_[i];
      out += ",\n{\"name\":";
      append_json_string(out, s.name);
      out += ",\"cat\":\"";
      out += s.track == 0 ? "host" : (s.fallback ? "fallback" : "step");
      out += "\",\"ph\":\"X\",\"pid\":";
      out += pid;
      out += ",\"tid\":";
      out += std::to_string(s.track);
      out += ",\"ts\":";
      append_us(out, s.start);
      out += ",\"dur\":";
      append_us(out, s.end - s.start);
      out += ",\"args\":{\"step\":";
      out += std::to_string(s.id);
      if (s.track != 0) {
        out += ",\"shape\":\"";
        out += s.shape->to_string();
        out += "\",\"dtype\":\"";
        out += name_of(s.dtype);
        out += "\",\"bytes\":";
        append_json_number(out, s.bytes);
        out += ",\"flops\":";
        append_json_number(out, s.flops);
      }
      out += "}}";
      for (std::size_t k = 0; k < s.producers.size(); ++k) {  // an arrow from each input's slice
        const auto it = by_id.find(s.producers[k]);
        if (it == by_id.end()) continue;
        ++flow;
        append_flow(out, "s", flow, *it->second, it->second->start, pid);
        append_flow(out, "f", flow, s, s.start, pid);
      }
    }
    for (std::size_t i = 0; i < memory_.size(); ++i) {
      const MemorySample& m = memory_[i];
      out += ",\n{\"name\":\"device memory\",\"ph\":\"C\",\"pid\":";
      out += pid;
      out += ",\"ts\":";
      append_us(out, m.time);
      out += ",\"args\":{\"dram_bytes\":";
      out += std::to_string(m.dram);
      out += ",\"l1_bytes\":";
      out += std::to_string(m.l1);
      out += "}}";
    }
    for (std::size_t i = 0; i < usage_.size(); ++i) {
      const UsageSample& u = usage_[i];
      out += ",\n{\"name\":\"compute units in use\",\"ph\":\"C\",\"pid\":";
      out += pid;
      out += ",\"ts\":";
      append_us(out, u.time);
      out += ",\"args\":{\"units\":";
      out += std::to_string(u.units);
      out += "}},\n{\"name\":\"DRAM bandwidth in use\",\"ph\":\"C\",\"pid\":";
      out += pid;
      out += ",\"ts\":";
      append_us(out, u.time);
      out += ",\"args\":{\"bytes_per_second\":";
      append_json_number(out, u.dram);
      out += "}}";
    }
    return flow;
  }

  /// A text Gantt chart of [from, to): one row per track that did anything, `width` columns.
  /// '#' marks a column busy at least half its time, '+' a column busy some of it.
  std::string text(const std::vector<std::string>& tracks, Duration from, Duration to,
                   std::size_t width = 64) const {
    const Duration span = std::max(to - from, Duration(1));
    std::vector<std::vector<Duration>> busy(tracks.size());
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      const Slice& s = slices_[i];
      if (s.end <= s.start || s.track >= tracks.size()) continue;
      auto& row = busy[s.track];
      if (row.empty()) row.assign(width, Duration::zero());
      for (std::size_t c = 0; c < width; ++c) {
        const Duration lo = column_start(from, span, c, width);
        const Duration hi = column_start(from, span, c + 1, width);
        const Duration overlap = std::min(hi, s.end) - std::max(lo, s.start);
        if (overlap > Duration::zero()) row[c] += overlap;
      }
    }
    std::size_t label = 0;
    for (const std::string& t : tracks) label = std::max(label, t.size());
    std::string out;
    std::size_t idle = 0;
    for (std::size_t t = 0; t < tracks.size(); ++t) {
      if (busy[t].empty()) {
        ++idle;
        continue;
      }
      out += tracks[t];
      out.append(label - tracks[t].size() + 1, ' ');
      out += '|';
      for (std::size_t c = 0; c < width; ++c) {
        const Duration column =
            column_start(from, span, c + 1, width) - column_start(from, span, c, width);
        const Duration b = busy[t][c];
        out += b * 2 >= column && b > Duration::zero() ? '#' : (b > Duration::zero() ? '+' : '.');
      }
      out += "|\n";
    }
    if (idle != 0) out += "(" + std::to_string(idle) + " tracks idle, not shown)\n";
    return out;
  }

  /// Microseconds with three decimals, from integer nanoseconds: exact and locale-free.
  static void append_us(std::string& out, Duration t) {
    const std::int64_t ns = t.count();
    const std::int64_t whole = ns / 1000;
    const std::int64_t frac = (ns < 0 ? -ns : ns) % 1000;
    if (ns < 0 && whole == 0) out += '-';
    out += std::to_string(whole);
    out += '.';
    if (frac < 100) out += '0';
    if (frac < 10) out += '0';
    out += std::to_string(frac);
  }

 private:
  static Duration column_start(Duration from, Duration span, std::size_t c, std::size_t width) {
    return from + span * static_cast<std::int64_t>(c) / static_cast<std::int64_t>(width);
  }

  static void append_flow(std::string& out, const char* phase, std::uint64_t id, const Slice& s,
                          Duration at, const std::string& pid) {
    out += ",\n{\"name\":\"dependency\",\"cat\":\"dependency\",\"ph\":\"";
    out += phase;
    out += phase[0] == 'f' ? "\",\"bp\":\"e\",\"id\":" : "\",\"id\":";
    out += std::to_string(id);
    out += ",\"pid\":";
    out += pid;
    out += ",\"tid\":";
    out += std::to_string(s.track);
    out += ",\"ts\":";
    append_us(out, at);
    out += '}';
  }

  BoundedRing<Slice> slices_;  // its capacity is the trace's: 0 records nothing
  struct MemorySample {
    Duration time;
    std::uint64_t dram = 0;
    std::uint64_t l1 = 0;
  };
  Ring<MemorySample> memory_;
  struct UsageSample {
    Duration time;
    std::int64_t units = 0;
    double dram = 0;
  };
  Ring<UsageSample> usage_;
  std::uint64_t dropped_ = 0;
  std::uint64_t added_ = 0;  // slices ever added
};

}  // namespace ferry::detail
