#pragma once
// ideal_time: the closed-form duration of a collective plan on an idle interconnect, which the
// mesh simulator's timeline gives a stepped plan when nothing else runs (a one-step plan with
// relays can take up to a hop latency more); and the parts of it the link
// model shares (a plan's library calls, the rate of its busiest link, its load).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "ferry/core/config.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/model/collective_steps.hpp"
#include "ferry/model/horizon.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry {

namespace detail {

/// Where a plan's sums of bytes are held (PlanLoad).
inline constexpr std::int64_t kMostBytes = std::numeric_limits<std::int64_t>::max();

/// Whether `plan` runs between two chips (one neighbouring pair, whatever its topology says):
/// where LinkSpec::pair_rate_factor applies.
inline bool runs_as_pair(const CollectivePlan& plan) noexcept { return plan.members == 2; }

/// The library calls `plan` costs: two for a stepped all-reduce of a library that composes it
/// (LinkSpec::composite_all_reduce), one otherwise, none for a plan without steps.
inline std::int64_t plan_calls(const CollectivePlan& plan, const LinkSpec& link) noexcept {
  if (plan.steps.empty()) return 0;
  const bool stepped = plan.algorithm != CollectiveAlgorithm::one_shot;
  return plan.collective == Collective::all_reduce && stepped && link.composite_all_reduce ? 2 : 1;
}

/// The rate, in bytes per second, at which `plan`'s busiest link direction carries its bytes:
/// links_per_pair links of bytes_per_second, times efficiency, times pair_rate_factor between
/// two chips.
inline double plan_rate(const CollectivePlan& plan, const LinkSpec& link) noexcept {
  return link.bytes_per_second * static_cast<double>(link.links_per_pair) * link.efficiency *
         (runs_as_pair(plan) ? link.pair_rate_factor : 1.0);
}

/// What ideal_time counts of a plan, link costs apart: its steps, the hops of each step's
/// longest relay chain summed, and the bytes of each step's busiest link summed (held at the
/// largest int64, as the load of each link in a step: kMostBytes, which no plan times).
struct PlanLoad {
  std::int64_t steps = 0;
  std::int64_t hops = 0;
  std::int64_t busiest_bytes = 0;
};

FERRY_DECL PlanLoad plan_load(const CollectivePlan& plan);
#if FERRY_DEFINES_DECLS
FERRY_DECL PlanLoad plan_load(const CollectivePlan& plan) {
  PlanLoad out;
  // Keys: (source, target) for a direction of a neighbouring pair; through a switch
  // (member, -1) for its port out and (-1, member) for its port in.
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> load;
  for (const CollectiveStep& step : plan.steps) {
    load.clear();
    for (const Transfer& t : step.transfers) {
      // A one-shot ring all-reduce of 256 buffers of 2^53 bytes puts some 2^66 on one link.
      const auto add = [&](std::int64_t from, std::int64_t to) {
        std::int64_t& bytes = load[{from, to}];
        bytes = held_sum(bytes, t.bytes);
      };
      if (t.direction == LinkDirection::switched) {
        add(t.source, -1);
        add(-1, t.target);
      } else {
        add(t.source, t.target);
      }
    }
    std::int64_t busiest = 0;
    for (const auto& [key, bytes] : load) busiest = std::max(busiest, bytes);
    ++out.steps;
    out.hops += step.hops();
    out.busiest_bytes = held_sum(out.busiest_bytes, busiest);
  }
  return out;
}
#endif

/// ideal_time from a plan's load, its calls and its rate (plan_calls, plan_rate), in ns.
inline double ideal_ns(const PlanLoad& load, std::int64_t calls, double rate,
                       const LinkSpec& link) noexcept {
  const auto ns = [](Duration d) { return static_cast<double>(d.count()); };
  return static_cast<double>(calls) * ns(link.call_overhead) +
         static_cast<double>(load.steps) * ns(link.step_overhead) +
         static_cast<double>(load.hops) * ns(link.hop_latency) +
         static_cast<double>(load.busiest_bytes) * 1e9 / rate;
}

/// ideal_time, its errors naming `op` (the call that was given `plan` or `link`).
inline Duration ideal_time_as(std::string_view op, const CollectivePlan& plan,
                              const LinkSpec& link) {
  validate(link, op, "");
  if (plan.steps.empty()) return Duration::zero();
  const PlanLoad load = plan_load(plan);
  if (load.busiest_bytes == kMostBytes) {  // held: its time is not known, only too long
    fail<InvalidArgument>(op, name_of(plan.collective), " of ", plan.bytes, " B over ",
                          plan.members, " devices (", name_of(plan.topology),
                          ") would carry 2^63 B or more over one link, longer than the model "
                          "times one step (2^53 ns, about 104 days)");
  }
  const double ns = ideal_ns(load, plan_calls(plan, link), plan_rate(plan, link), link);
  // As the device model refuses a step longer than kLongestStep: a program's sums of such
  // times would overflow its 64-bit nanoseconds (and past 2^63 ns llround holds none).
  if (!(ns <= static_cast<double>(kLongestStep.count()))) {
    fail<InvalidArgument>(op, name_of(plan.collective), " of ", plan.bytes, " B over ",
                          plan.members, " devices (", name_of(plan.topology), ") would take ", ns,
                          " ns, longer than the model times one step (2^53 ns, about 104 days)");
  }
  return Duration(std::llround(ns));
}

}  // namespace detail

/// The time `plan` takes on an idle interconnect of `link`s, in closed form: the library's
/// call overhead (twice for a stepped all-reduce where LinkSpec::composite_all_reduce), then
/// for each step its step overhead, one hop latency for each hop of its longest relay chain
/// (packets stream through relays), and the bytes of its busiest link at the rate the library
/// reaches (links_per_pair links of bytes_per_second, times efficiency, times
/// pair_rate_factor between two chips). A link is one direction between two neighbours of a ring or
/// line; through a switch, each member's port out and its port in. Reductions are not
/// counted: real implementations reduce packets as they stream in, and the mesh puts them on
/// the devices' compute units, where a ring's or line's step reduction hides behind the next
/// step's transfer unless it takes longer (LinkModel). A plan without steps takes no time
/// (nothing is launched).
/// Throws InvalidArgument for a link no mesh could have (naming the field), and for a plan
/// that would take longer than the model times one step (2^53 ns, about 104 days), naming
/// its collective, bytes, members and topology.
inline Duration ideal_time(const CollectivePlan& plan, const LinkSpec& link) {
  return detail::ideal_time_as("ideal_time", plan, link);
}

}  // namespace ferry
