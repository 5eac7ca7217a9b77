#pragma once
// DeviceModel: the StepObserver a modeled device installs. It turns each submitted step into a
// simulator command (with its duration from the cost model) and each export into a sync.

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/called_op.hpp"
#include "ferry/model/command.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/simulator.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/runtime/device_state.hpp"

namespace ferry::detail {

/// The arguments of one plan_step question, compared as a whole so that an argument added
/// later is compared too (DeviceModel::plan_of remembers the last answer).
struct PlanQuestion {
  StepKind kind = StepKind::compute;
  Cost cost;
  DType dtype = DType::float32;  // the element type the kernel computes on
  double l1_share = 0;           // the share of the bytes read that come from L1
  bool writes_l1 = false;

  bool operator==(const PlanQuestion&) const = default;
};

/// plan_step's answer to a PlanQuestion, and its solo_duration (a function of the plan and the
/// spec, which never changes): both remembered together.
struct PlanAnswer {
  KernelPlan plan;
  Duration solo{};
};

class DeviceModel final : public StepObserver {
 public:
  /// A model of `spec` for the device called `device`.
  explicit DeviceModel(DeviceSpec spec, std::string device = "device")
      : sim_(std::move(spec), std::move(device)) {}

  void submitted(Step& s) override { submit(s, nullptr); }

  void submitted_transfer(Step& s, const Arrival& from) override { submit(s, &from); }

  void handles_gone(const Step& s) override { sim_.drop_handle(s.model_slot()); }

  Arrival settle(const Step& s) override { return sim_.settle(s.model_slot()); }

  std::exception_ptr foresee(const Step& s) override { return sim_.foresee(s.model_slot()); }

  void read_until(const Step& s, Duration until) override {
    sim_.read_until(s.model_slot(), until);
  }

  /// The copy an export of `s` would make (its d2h engine, link and bytes_d2h, its faults and
  /// fallback), with no step of its own: the step receiving the data lives on the host CPU's
  /// device. Nothing but that arrival reads the copy, so its handle goes at once.
  Arrival send_to_host(const Step& s, std::uint64_t id) override {
    const auto bytes = static_cast<double>(s.output_bytes());
    const Cost cost{0, bytes, bytes};
    const std::uint64_t input = s.model_slot();
    CommandDesc d;
    d.id = id;
    d.kind = StepKind::copy_out;
    d.plan = plan_step(sim_.spec(), StepKind::copy_out, cost, s.dtype());
    d.inputs = {&input, 1};
    d.bytes_moved = bytes;
    d.name = "to";
    d.shape = &s.shape();
    d.dtype = s.dtype();
    if (sim_.spec().fallback == Fallback::host) {
      d.host_duration =
          fallback_duration(sim_.spec(), StepKind::copy_out, cost, s.dtype(), bytes, 0);
    }
    const std::uint32_t slot = sim_.submit(d);
    const Arrival arrival = sim_.settle(slot);
    sim_.drop_handle(slot);
    return arrival;
  }

  void host_sync(std::span<Step* const> steps, std::span<std::exception_ptr> errors) override {
    ids_.clear();
    for (const Step* s : steps) ids_.push_back(s->model_slot());
    const bool copies = !steps.empty() && steps.front()->info().kind == StepKind::copy_out;
    sim_.sync(ids_, errors, copies ? "to_host" : "wait");
    if (copies) {
      for (std::uint64_t slot : ids_) sim_.drop_handle(slot);  // the export has read them
    }
  }

  Simulator& simulator() noexcept { return sim_; }

 private:
  /// `s` as a command; `arrival` set for data from another device: a copy's one input is on
  /// that device (the arrival stands for it), a kernel's inputs are on this one.
  void submit(Step& s, const Arrival* arrival) {
    ids_.clear();
    const StepKind kind = s.info().kind;
    if (arrival == nullptr || kind == StepKind::compute) {
      for (std::size_t i = 0; i < s.input_count(); ++i) ids_.push_back(s.input(i).model_slot());
    }
    // A kernel computes on its inputs' element type (a comparison writes bools from floats).
    const DType computes_on = s.input_count() != 0 ? s.input(0).dtype() : s.dtype();
    CommandDesc d;
    d.id = s.id();
    d.kind = kind;
    const PlanAnswer& answer = plan_of({kind, s.info().cost, computes_on, l1_share_read(s),
                                        s.layout().space == MemorySpace::l1});
    d.plan = answer.plan;
    d.solo = answer.solo;
    const bool holds_nothing =
        kind == StepKind::view || kind == StepKind::copy_out || s.info().model_bytes == 0;
    // A ring's staging (StepInfo::model_bytes) is memory of the model's alone: the host computes
    // nothing into it.
    d.out_bytes = holds_nothing             ? 0
                  : s.info().model_bytes > 0 ? static_cast<std::uint64_t>(s.info().model_bytes)
                                             : s.output_bytes();
    d.has_handle = true;  // an export's copy is held by the export until it has read the result
    d.inputs = ids_;
    d.l1 = s.layout().space == MemorySpace::l1 && kind != StepKind::copy_out;
    d.donor = s.info().donor;
    d.arrival = arrival;
    const Cost& cost = s.info().cost;
    d.bytes_moved =
        kind == StepKind::compute ? cost.bytes_read + cost.bytes_written : cost.bytes_read;
    d.name = s.info().name;
    d.name_static = s.info().name.lent();
    d.called = called_op();  // announced on the thread that called the op
    d.shape = &s.shape();
    d.dtype = s.dtype();
    d.flops = cost.flops;
    if (sim_.spec().fallback == Fallback::host) {
      d.host_duration = fallback_duration(sim_.spec(), kind, cost, computes_on, read_back(s),
                                          static_cast<double>(d.out_bytes));
    }
    s.set_model_slot(sim_.submit(d));
  }

  /// plan_step's answer (and its solo duration), remembered for the last kPlansKept questions:
  /// it is a function of its arguments (the spec never changes, and tilings_ only remembers what
  /// it chose), and a chain, a replayed program or a layer's few kernels (a training step's
  /// matmuls, transposes and reductions, repeated layer after layer) ask the same few over and
  /// over. A NaN in the question never matches, so it always gets its own answer. The search
  /// starts after the last answer given: a program that repeats asks its questions mostly in the
  /// order they were first kept, so a repeated layer finds each within a few looks (a galaxy
  /// layer's chip, with its collectives' steps, asks more than 8 distinct ones, which a smaller
  /// memo evicted in turn).
  const PlanAnswer& plan_of(const PlanQuestion& question) {
    std::size_t i = next_look_;
    for (std::size_t n = 0; n < plans_kept_; ++n) {
      if (plans_[i].first == question) {
        next_look_ = i + 1 == plans_kept_ ? 0 : i + 1;
        return plans_[i].second;
      }
      i = i + 1 == plans_kept_ ? 0 : i + 1;
    }
    const std::size_t at = next_plan_;
    auto& [q, answer] = plans_[at];
    next_plan_ = (next_plan_ + 1) % kPlansKept;
    if (plans_kept_ < kPlansKept) ++plans_kept_;
    next_look_ = at + 1 == plans_kept_ ? 0 : at + 1;
    answer.plan = plan_step(sim_.spec(), question.kind, question.cost, question.dtype,
                            question.l1_share, question.writes_l1, &tilings_);
    answer.solo = solo_duration(sim_.spec(), answer.plan);
    q = question;
    return answer;
  }

  /// The device bytes a host fallback of `s` reads back: its inputs' buffers (a copy from
  /// another device is relayed through the host).
  static double read_back(const Step& s) {
    if (s.info().kind == StepKind::copy_d2d) return s.info().cost.bytes_read;
    if (s.info().kind == StepKind::view) return 0;
    double bytes = 0;
    for (std::size_t i = 0; i < s.input_count(); ++i)
      bytes += static_cast<double>(s.input(i).output_bytes());
    return bytes;
  }

  /// The share of the bytes `s` reads that come from L1: its inputs' buffers, weighed by size.
  static double l1_share_read(const Step& s) {
    // Almost every step reads nothing from L1: the share is 0 without the sum of all it reads
    // (summed as before otherwise: the same bits).
    double l1 = 0;
    for (std::size_t i = 0; i < s.input_count(); ++i) {
      if (s.input(i).layout().space == MemorySpace::l1)
        l1 += static_cast<double>(s.input(i).output_bytes());
    }
    if (l1 == 0) return 0;
    double all = 0;
    for (std::size_t i = 0; i < s.input_count(); ++i)
      all += static_cast<double>(s.input(i).output_bytes());
    return l1 / all;
  }

  Simulator sim_;
  MatmulTilings tilings_;  // the matmul shapes seen, and how the model tiles them
  static constexpr std::size_t kPlansKept = 32;
  std::array<std::pair<PlanQuestion, PlanAnswer>, kPlansKept> plans_;  // see plan_of
  std::size_t plans_kept_ = 0;  // how many of plans_ hold an answer
  std::size_t next_plan_ = 0;   // the one the next new question replaces
  std::size_t next_look_ = 0;   // where plan_of's search starts: after its last answer
  std::vector<std::uint64_t> ids_;  // scratch: the slots of a step's inputs, or of a sync
};

}  // namespace ferry::detail
