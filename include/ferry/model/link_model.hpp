#pragma once
// LinkModel: the modeled interconnect of a mesh. Each directed link (a neighbouring pair on a
// ring or line axis; a device's port to the switch and the switch's port to a device on a
// fully connected axis) is a resource that carries one message at a time. Messages are placed
// in the order collectives were called, each in the first gap of its link that fits it from
// when it can start: a collective's plan (model/collective_plan.hpp) runs over the links step
// by step, each member starting a step once it has everything of the step before.
//
// A message over one hop holds the link for its bytes at the link's rate (line rate x
// efficiency x links per pair, times pair_rate_factor between two chips) and arrives a
// hop latency after its last byte left: the latency is the path's, not the link's, so
// messages queued on one link pay it once. A relayed message streams through: hop h starts at
// least a hop latency after hop h-1 started and arrives at least a hop latency after it
// arrived. Each library call pays the call overhead before its first step (a composite
// all-reduce pays two), each step its step overhead.
//
// Reductions: given ReductionTimes (a ring or line reduce-scatter, or an all-reduce's half of
// one), each member reduces what it received in a step into its partial once the step is over
// (its arrival plus the step overhead) and its previous reduction is done, for as long as its
// chip takes alone (ReductionTimes::time); run() reports each (ReductionStep), and the
// collective places each on the chip's compute units as a command of its own. A message that
// carries a partial streams behind the reduction that makes it, as a relay streams behind its
// previous hop: it arrives at least a hop latency after that reduction ends, so a step's
// reduction overlaps the next step's transfer (as NCCL's and tt-metal's rings reduce packets
// as they pass them on) and a step takes the longer of the two. The links see each
// reduction's solo time: a chip's schedule is decided after the call (model/simulator.hpp), so
// they cannot see the kernels beside it. Without ReductionTimes (ideal_time, every other plan)
// reductions take no link time. On an idle mesh whose members start together, a stepped plan
// whose reductions are shorter than its steps takes ideal_time: its busiest link's bytes and
// its longest relay's hops each step.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/model/horizon.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

/// What one directed link of a mesh carried in the current window.
struct LinkStats {
  /// The devices (row-major indices) it joins: from `from` to `to`. Through a switch, the
  /// link is a device's port: `to` (or `from`) is -1 for the switch.
  std::int64_t from = 0;
  std::int64_t to = 0;
  /// Time it carried a message, and the bytes.
  Duration busy{};
  std::int64_t bytes = 0;
  /// "link 0->1", "link 3->switch", "link switch->3".
  std::string name;
};

}  // namespace ferry

namespace ferry::detail {

/// One reduction of a stepped reduce-scatter (LinkModel::run): member `member` (a position of
/// the plan) reduces the `bytes` it received in `step` (0-based) into its partial, from `start`
/// to `end` alone on its chip; `arrival`: when that step was over for it (its last message of
/// the step plus the step overhead), which `start` waits for besides its previous reduction.
struct ReductionStep {
  std::int64_t member = 0;
  std::int64_t step = 0;
  std::int64_t bytes = 0;
  Duration arrival{};
  Duration start{};
  Duration end{};
};

/// How long a member's chip takes, alone, to reduce what it received in one step into its
/// partial: what LinkModel::run places each step's reduction with.
class ReductionTimes {
 public:
  /// For device `device` (a row-major index of the mesh), reducing `bytes` received.
  virtual Duration time(std::int64_t device, std::int64_t bytes) = 0;

 protected:
  ~ReductionTimes() = default;
};

class LinkModel {
 public:
  /// One message on one link: a slice of the mesh trace.
  struct Use {
    std::size_t link = 0;  // index into links()
    Duration start{};
    Duration end{};
    std::int64_t bytes = 0;
    std::string_view op;  // the collective's name, or "to": static storage
  };

  explicit LinkModel(const MeshSpec& spec) : spec_(spec) {}

  /// Runs `plan` among `members` (row-major device indices, in the group's order), member i
  /// starting at ready[i]. Returns when each member has its result (before its local kernels).
  /// `reduced`, when given, receives when each member p has the last message it reduces into
  /// slice p, the one a reduce-scatter leaves it (after that step's overhead; ready[p] plus
  /// the call overheads where none comes): for a stepped all-reduce, the end of member p's
  /// reduce-scatter half, when it holds every input of its part and the all-gather half's
  /// messages are still to fly. `times`, when given, places each member's reduction of each
  /// step in which it received a message to reduce (the file comment says how), appended to
  /// `steps` in the order placed (step by step, members in order); messages carrying a partial
  /// stream behind it. Times are held at kHorizon (model/horizon.hpp): the devices fail what
  /// would receive past it. Throws InvalidArgument, naming the collective, for a message longer
  /// on its link than the model times one step (too_long), before placing any.
  FERRY_DECL std::vector<Duration> run(const CollectivePlan& plan,
                                       std::span<const std::int64_t> members,
                                       std::span<const Duration> ready,
                                       std::vector<Duration>* reduced = nullptr,
                                       ReductionTimes* times = nullptr,
                                       std::vector<ReductionStep>* steps = nullptr);

  /// A message of `bytes` ready at `ready` on device path[0], carried hop by hop along `path`
  /// (device indices, neighbours on their axis; switched[h]: hop h crosses the switch of a
  /// fully connected axis), streaming through each device on the way, for `op` (a string
  /// with static storage). Returns when it has arrived at path.back().
  /// Throws InvalidArgument, naming `op`, for a message longer on a link than the model times
  /// one step (too_long).
  Duration carry(std::span<const std::int64_t> path, const std::vector<bool>& switched,
                 std::int64_t bytes, Duration ready, std::string_view op) {
    if (double ns = 0; path.size() > 1 && too_long(bytes, link_rate(), ns)) {
      fail<InvalidArgument>(op, "a message of ", bytes, " B at ", link_rate(), " B/s would take ",
                            ns, kTooLong);
    }
    Duration start = ready;
    Duration arrival = ready;
    for (std::size_t h = 0; h + 1 < path.size(); ++h) {
      Duration no_sooner{};
      if (h > 0) {
        start = until_horizon(start, spec_.link.hop_latency);
        no_sooner = until_horizon(arrival, spec_.link.hop_latency);
      }
      std::tie(start, arrival) =
          send(path[h], path[h + 1], switched[h], bytes, link_rate(), start, no_sooner, op);
    }
    return arrival;
  }

  /// The links used so far, in the order first used.
  const std::vector<LinkStats>& links() const noexcept { return links_; }
  /// Every message of the window, in the order placed.
  const std::vector<Use>& uses() const noexcept { return uses_; }
  /// The last time any link is busy until (a message arrives a hop latency later).
  Duration last_end() const noexcept { return last_end_; }

  /// Starts a new window at `at`: the figures and the messages start over; a link still busy
  /// stays busy.
  void reset(Duration at) {
    for (LinkStats& l : links_) {
      l.busy = Duration::zero();
      l.bytes = 0;
    }
    uses_.clear();
    last_end_ = at;
  }

 private:
  /// One hop from device `from` to device `to` (through the switch when `switched`), starting
  /// no earlier than `earliest` and arriving no earlier than `no_sooner`: {start, arrival}.
  std::pair<Duration, Duration> send(std::int64_t from, std::int64_t to, bool switched,
                                     std::int64_t bytes, double rate, Duration earliest,
                                     Duration no_sooner, std::string_view op) {
    const Duration wire = wire_time(bytes, rate);
    Duration start{};
    if (switched) {
      const std::size_t out = port(from, true);
      const std::size_t in = port(to, false);
      start = earliest;
      for (;;) {  // the first time both ports are free for the whole message
        const Duration at_out = first_gap(out, start, wire);
        start = first_gap(in, at_out, wire);
        if (start == at_out) break;
      }
      occupy(out, start, until_horizon(start, wire), bytes, op);
      occupy(in, start, until_horizon(start, wire), bytes, op);
    } else {
      const std::size_t l = pair(from, to);
      start = first_gap(l, earliest, wire);
      occupy(l, start, until_horizon(start, wire), bytes, op);
    }
    return {start, std::max(until_horizon(start, wire + spec_.link.hop_latency), no_sooner)};
  }

  static std::int64_t n_of(std::span<const std::int64_t> members) noexcept {
    return static_cast<std::int64_t>(members.size());
  }

  /// What a point-to-point copy reaches: links_per_pair links at the library's efficiency.
  double link_rate() const noexcept {
    return spec_.link.bytes_per_second * spec_.link.efficiency *
           static_cast<double>(spec_.link.links_per_pair);
  }

  /// `bytes` at `rate` bytes per second, to the nearest ns: at most kLongestStep where
  /// too_long() said no (the cast of a double past the int64 range would be undefined).
  static Duration wire_time(std::int64_t bytes, double rate) noexcept {
    return Duration(static_cast<std::int64_t>(std::min(
        static_cast<double>(bytes) / rate * 1e9 + 0.5, static_cast<double>(kHorizon.count()))));
  }

  /// Whether a message of `bytes` at `rate` bytes per second would hold its link longer than
  /// the model times one step (kLongestStep), as the device model refuses such a step: 2^53
  /// bytes at 1 byte a second would take 9e24 ns. `ns`: how long it would.
  static bool too_long(std::int64_t bytes, double rate, double& ns) noexcept {
    ns = static_cast<double>(bytes) / rate * 1e9;
    return ns > static_cast<double>(kLongestStep.count());
  }
  static constexpr std::string_view kTooLong =
      " ns on its link, longer than the model times one step (2^53 ns, about 104 days)";

  std::size_t pair(std::int64_t from, std::int64_t to) { return find_or_add(from, to); }

  std::size_t port(std::int64_t device, bool out) {
    return out ? find_or_add(device, -1) : find_or_add(-1, device);
  }

  /// The link from `from` to `to` (-1: the switch), added when first used. Its name is only
  /// built then: a collective looks its links up once per message, among the few links out of
  /// `from` (its neighbours and the switch), not in a map of every link.
  std::size_t find_or_add(std::int64_t from, std::int64_t to) {
    const auto row = static_cast<std::size_t>(from + 1);
    if (row >= index_.size()) index_.resize(row + 1);
    for (const auto& [target, i] : index_[row]) {
      if (target == to) return i;
    }
    const std::size_t i = links_.size();
    index_[row].emplace_back(to, i);
    LinkStats l;
    l.from = from;
    l.to = to;
    l.name = "link " + (from < 0 ? std::string("switch") : std::to_string(from)) + "->" +
             (to < 0 ? std::string("switch") : std::to_string(to));
    links_.push_back(std::move(l));
    busy_.emplace_back();
    return i;
  }

  void occupy(std::size_t link, Duration start, Duration end, std::int64_t bytes,
              std::string_view op) {
    Spans& spans = busy_[link];
    spans.insert(std::make_pair(start, end));
    // Gaps far behind are not worth searching: keep the latest spans of each link (the same
    // program keeps the same ones, so the timeline stays a function of the program).
    while (spans.size() > kKeptSpans) spans.pop_front();
    links_[link].busy += end - start;  // the link's spans do not overlap: at most kHorizon
    links_[link].bytes = held_sum(links_[link].bytes, bytes);
    last_end_ = std::max(last_end_, end);
    uses_.push_back({link, start, end, bytes, op});
  }

  const MeshSpec& spec_;
  std::vector<LinkStats> links_;
  /// The earliest time from `earliest` at which `link` is free for `length`: a message fills a
  /// gap other messages left if it fits there (they were placed first, in call order, but
  /// may start later).
  Duration first_gap(std::size_t link, Duration earliest, Duration length) {
    Spans& spans = busy_[link];
    if (!spans.empty() && spans.size() == kKeptSpans)
      earliest = std::max(earliest, spans.front().second);
    // Most messages come after every span of their link: no search.
    if (spans.empty() || spans.back().second <= earliest) return earliest;
    // A link's spans never overlap (each was placed in a gap), so sorted by start they are
    // sorted by end too: the spans that end by `earliest` are a prefix. Usually the rest are
    // few, the latest ones, found from the end; where messages queue far ahead of when they
    // could start (collectives issued faster than the links carry them), by bisection.
    const auto first = spans.begin();
    auto it = spans.end();
    for (int steps = 0; it != first && std::prev(it)->second > earliest; --it) {
      if (++steps == 8) {
        const auto ended = [earliest](const Spans::Span& x) { return x.second <= earliest; };
        it = std::partition_point(first, it, ended);
        break;
      }
    }
    const std::size_t from = spans.index_of(it);
    Duration t = earliest;
    for (std::size_t i = from; it != spans.end(); ++it, ++i) {
      const auto& [start, end] = *it;
      if (end <= t) continue;
      if (start >= t + length) {
        spans.learn_packed(from, i, length);  // no gap between the two fits `length`
        return t;
      }
      t = std::max(t, end);
      // No gap of the spans ahead that Spans::packed_* covers fits: on to the last of them.
      if (i >= spans.packed_from && i + 1 < spans.packed_to && length >= spans.packed_below) {
        i = spans.packed_to - 1;
        it = spans.begin() + static_cast<std::ptrdiff_t>(i - spans.head);
        t = std::max(t, it->second);
      }
    }
    spans.learn_packed(from, spans.v.size(), length);
    return t;
  }

  static constexpr std::size_t kKeptSpans = 256;

  /// A link's latest spans, by start: a vector whose first `head` entries have left. The
  /// oldest leaves by moving `head` (the dead prefix is dropped once it is kKeptSpans long),
  /// so the searches run on plain memory, cheaper than a deque's iterators. `packed_*`: every
  /// gap between two spans of v[packed_from, packed_to) is shorter than packed_below, as a
  /// search that found no gap there learned. A later search for a message at least that long
  /// goes past them at once: on a link whose messages queue back to back far ahead of when
  /// they could start (collectives issued faster than the links carry them), each search
  /// would otherwise walk the same spans. The answers are the same.
  struct Spans {
    using Span = std::pair<Duration, Duration>;
    std::vector<Span> v;
    std::size_t head = 0;
    std::size_t packed_from = 0;
    std::size_t packed_to = 0;  // packed_to <= packed_from + 1: nothing known
    Duration packed_below{};

    std::size_t size() const noexcept { return v.size() - head; }
    bool empty() const noexcept { return v.size() == head; }
    const Span& front() const { return v[head]; }
    const Span& back() const { return v.back(); }
    std::vector<Span>::const_iterator begin() const {
      return v.cbegin() + static_cast<std::ptrdiff_t>(head);
    }
    std::vector<Span>::const_iterator end() const { return v.cend(); }
    std::size_t index_of(std::vector<Span>::const_iterator it) const {
      return static_cast<std::size_t>(it - v.cbegin());
    }
    /// A search found no gap that holds `length` between the spans of v[from, to): kept
    /// where it reaches further than what is known.
    void learn_packed(std::size_t from, std::size_t to, Duration length) {
      if (to <= from + 1 || to < packed_to) return;
      packed_from = from;
      packed_to = to;
      packed_below = length;
    }
    /// A new message lands at or near the end (later than most): appended without a search
    /// where upper_bound would put it. A span inserted among the packed ones splits a gap in
    /// two shorter ones, and moves the spans after it one on.
    void insert(const Span& s) {
      if (empty() || !(s < back())) {
        v.push_back(s);
        return;
      }
      const auto at = std::upper_bound(v.begin() + static_cast<std::ptrdiff_t>(head), v.end(), s);
      const auto k = static_cast<std::size_t>(at - v.begin());
      if (k <= packed_from) ++packed_from;
      if (k < packed_to) ++packed_to;
      v.insert(at, s);
    }
    void pop_front() {
      if (++head < kKeptSpans) return;
      v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(head));
      packed_from = packed_from > head ? packed_from - head : 0;
      packed_to = packed_to > head ? packed_to - head : 0;
      head = 0;
    }
  };
  std::vector<Spans> busy_;  // each link's spans, by start
  /// index_[from + 1]: each link out of `from` (-1: the switch), as {to, index into links_}.
  std::vector<std::vector<std::pair<std::int64_t, std::size_t>>> index_;
  std::vector<Use> uses_;
  Duration last_end_{};
  // run's scratch: each member's arrivals in the step at hand, the step's transfers in the
  // order they are placed, and which members reduced a message in it.
  std::vector<Duration> next_;
  std::vector<const Transfer*> order_;
  std::vector<bool> reduces_;
  // And, with ReductionTimes: the bytes each member reduces in the step at hand, when its last
  // reduction ends, and when it has reduced each slice (member-major; negative: not yet).
  std::vector<std::int64_t> reducing_;
  std::vector<Duration> partial_end_;
  std::vector<Duration> slice_reduced_;
};

#if FERRY_DEFINES_DECLS
FERRY_DECL std::vector<Duration> LinkModel::run(const CollectivePlan& plan,
                                                std::span<const std::int64_t> members,
                                                std::span<const Duration> ready,
                                                std::vector<Duration>* reduced,
                                                ReductionTimes* times,
                                                std::vector<ReductionStep>* steps) {
  const std::size_t n = members.size();
  std::vector<Duration> at(ready.begin(), ready.end());
  if (plan.steps.empty()) {  // nothing is launched (one member, no bytes)
    if (reduced != nullptr) *reduced = at;
    return at;
  }
  const Duration calls = spec_.link.call_overhead * plan_calls(plan, spec_.link);
  const double rate = plan_rate(plan, spec_.link);  // a line's collectives reach less of it
  std::int64_t longest = 0;  // no message is placed before every one is known to fit
  for (const CollectiveStep& step : plan.steps) {
    for (const Transfer& t : step.transfers) longest = std::max(longest, t.bytes);
  }
  if (double ns = 0; too_long(longest, rate, ns)) {
    fail<InvalidArgument>(name_of(plan.collective), name_of(plan.collective), " of ", plan.bytes,
                          " B over ", n, " devices (", name_of(plan.topology),
                          "): a message of ", longest, " B at ", rate, " B/s would take ", ns,
                          kTooLong);
  }
  for (Duration& t : at) t = until_horizon(t, calls);
  if (reduced != nullptr) *reduced = at;
  std::vector<bool>& reduces = reduces_;
  const bool switched = plan.topology == Topology::fully_connected;
  std::vector<Duration>& next = next_;  // scratch kept between calls: no allocation per step
  std::vector<const Transfer*>& order = order_;
  const auto slices = static_cast<std::size_t>(plan.chunks);
  if (times != nullptr) {
    partial_end_.assign(n, Duration{-1});
    slice_reduced_.assign(n * slices, Duration{-1});
  }
  for (std::size_t k = 0; k < plan.steps.size(); ++k) {
    const CollectiveStep& step = plan.steps[k];
    next.assign(at.begin(), at.end());
    if (reduced != nullptr) reduces.assign(n, false);
    if (times != nullptr) reducing_.assign(n, 0);
    order.clear();
    for (const Transfer& t : step.transfers) order.push_back(&t);
    if (switched) {
      // Through a switch every member sends to many at once: in rounds, round k from each
      // member to the one k further on, so no port waits for another (the order real
      // libraries use); the plan lists them by sender.
      const auto round = [&](const Transfer* t) {
        return ((t->target - t->source) % n_of(members) + n_of(members)) % n_of(members);
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](const Transfer* a, const Transfer* b) { return round(a) < round(b); });
    }
    Duration relay_start{};  // the previous transfer: hop h-1 of a relay, when t.hop = h > 1
    Duration relay_arrival{};
    for (const Transfer* transfer : order) {
      const Transfer& t = *transfer;
      const auto src = static_cast<std::size_t>(t.source);
      const auto dst = static_cast<std::size_t>(t.target);
      Duration start = at[src];
      Duration no_sooner{};
      if (t.hop > 1) {  // relayed: streams behind its previous hop
        start = std::max(start, until_horizon(relay_start, spec_.link.hop_latency));
        no_sooner = until_horizon(relay_arrival, spec_.link.hop_latency);
      } else if (times != nullptr) {
        // A partial (or a reduced slice) streams behind the reduction that made it.
        const Duration made = slice_reduced_[src * slices + static_cast<std::size_t>(t.chunk)];
        if (made >= Duration::zero()) no_sooner = until_horizon(made, spec_.link.hop_latency);
      }
      Duration arrival{};
      std::tie(start, arrival) = send(members[src], members[dst], switched, t.bytes, rate, start,
                                      no_sooner, name_of(plan.collective));
      relay_start = start;
      relay_arrival = arrival;
      if (!t.passes_through) next[dst] = std::max(next[dst], arrival);
      if (reduced != nullptr && t.reduce && t.chunk == t.target) reduces[dst] = true;
      if (times != nullptr && t.reduce) reducing_[dst] += t.bytes;
    }
    for (std::size_t i = 0; i < n; ++i) {
      at[i] = until_horizon(next[i], spec_.link.step_overhead);
      if (reduced != nullptr && reduces[i]) (*reduced)[i] = at[i];
      if (times == nullptr || reducing_[i] == 0) continue;
      ReductionStep r;
      r.member = static_cast<std::int64_t>(i);
      r.step = static_cast<std::int64_t>(k);
      r.bytes = reducing_[i];
      r.arrival = at[i];
      r.start = std::max(at[i], partial_end_[i]);
      r.end = until_horizon(r.start, times->time(members[i], r.bytes));
      partial_end_[i] = r.end;
      if (steps != nullptr) steps->push_back(r);
    }
    if (times == nullptr) continue;
    for (const Transfer& t : step.transfers) {
      if (t.reduce) {
        const auto dst = static_cast<std::size_t>(t.target);
        slice_reduced_[dst * slices + static_cast<std::size_t>(t.chunk)] = partial_end_[dst];
      }
    }
  }
  return at;
}
#endif

}  // namespace ferry::detail
