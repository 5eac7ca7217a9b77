#pragma once
// Step: one node of the dependency graph. It owns the metadata of its output (known at once),
// the buffer its kernel fills (known later), and the links that tell it when it may run.
//
// Ownership, which is what keeps teardown flat: a step holds strong references to its inputs
// only until it has run; its successors are reached through Edges embedded in those successors
// (no reference, no allocation); a submitted step holds one reference to itself (the "graph
// reference") until it has run. So a step is only ever destroyed after it ran, when its input
// list is already empty, and destroying any handle frees at most one step, never a chain.
//
// Buffers are counted apart from steps: a step's "claims" are its own production (until it
// completes) and its unfinished readers, a view's readers included (a view reads its source's
// buffer). A buffer is reused in place (donation) only once nothing else claims it (and no
// named view shares it), and freed by deallocate(force) once nothing claims it: views that
// are merely named do not keep a forced free from freeing, they fail at their next use.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/runtime/block_pool.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/buffer_cache.hpp"
#include "ferry/runtime/executor_base.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/spin.hpp"
#include "ferry/runtime/step_kind.hpp"
#include "ferry/runtime/step_name.hpp"

namespace ferry::detail {

class DeviceState;
class Step;

/// Everything the model needs to place a step besides its inputs and output shape: kind, op
/// name, cost, the output's layout, and the input whose buffer the output takes over.
struct StepInfo {
  StepKind kind = StepKind::compute;
  StepName name;  // lent by an op whose name is static (StepName::of_static), else a copy
  Cost cost;
  Layout layout{};
  /// The index of the input donated to this step (see Step::arm), or -1.
  int donor = -1;
  std::size_t view_offset = 0;  // a view's first byte in its source's buffer
  std::int64_t model_bytes = -1;  // model memory: -1 its bytes; 0 links' data; n ring staging
};

/// A link from a finished step to a step waiting for it. Lives inside the waiting step.
struct Edge {
  Edge* next = nullptr;
  Step* waiter = nullptr;
};

/// The step whose kernel runs on this thread right now, or null. Exports check it.
inline thread_local const Step* t_running_step = nullptr;

class Step : public RefCounted {
 public:
  // Steps are born on host threads and mostly die on workers: recycle their memory through
  // BlockPool rather than malloc (see block_pool.hpp). Deleting through the virtual destructor
  // passes the size of the most derived step.
  static void* operator new(std::size_t bytes) { return BlockPool::allocate(bytes); }
  static void operator delete(void* p, std::size_t bytes) noexcept {
    BlockPool::deallocate(p, bytes);
  }

  /// Throws InvalidArgument (naming the op) if the output cannot fit. By reference: copies cost.
  Step(std::shared_ptr<DeviceState> device, ExecutorBase& executor, StepInfo&& info, DType dtype,
       const Shape& shape, std::span<Step* const> inputs)
      : device_(std::move(device)),
        executor_(&executor),
        info_(std::move(info)),
        shape_(ShapeAccess::plain(shape)),  // the values of this call: kernels never guard
        dtype_(dtype),
        output_bytes_(storage_bytes(info_.name, shape_, size_of(dtype_), info_.layout)) {
    inputs_.assign(inputs);
  }

  // ---- metadata: immutable once built, readable from any thread ----
  const StepInfo& info() const noexcept { return info_; }
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  const std::shared_ptr<DeviceState>& device() const noexcept { return device_; }
  ExecutorBase& executor() const noexcept { return *executor_; }
  /// Where the kernel splits its work (kernels::parallel_for): the step's executor.
  const kernels::ChunkRunner& runner() const noexcept { return *executor_; }
  /// Submission index on its device, assigned by DeviceState.
  std::uint64_t id() const noexcept { return id_; }
  void set_id(std::uint64_t id) noexcept { id_ = id; }
  /// Where the device model keeps its record of this step: set by the model at submission, so
  /// it finds an input's record without a lookup.
  std::uint32_t model_slot() const noexcept { return model_slot_; }
  void set_model_slot(std::uint32_t slot) noexcept { model_slot_ = slot; }
  /// Where the output's buffer comes from: its device's cache, set by DeviceState when the
  /// step enters the graph (null: the system).
  void set_buffer_cache(BufferCache* cache) noexcept { buffer_cache_ = cache; }
  /// The bytes of the output's buffer (tiles padded).
  std::size_t output_bytes() const noexcept { return output_bytes_; }
  const Layout& layout() const noexcept { return info_.layout; }
  /// The inputs, until the step has run (then empty: it no longer keeps them alive; a view
  /// keeps its source).
  std::size_t input_count() const noexcept { return inputs_.size(); }
  const Step& input(std::size_t i) const noexcept { return *inputs_[i].step; }

  // ---- completion: readable from any thread ----
  bool done() const noexcept { return (state_.load(std::memory_order_acquire) & kDone) != 0; }
  /// Blocks the calling thread until the step is done: a short spin, then a futex wait.
  void wait_done() const noexcept {
    std::uint32_t s = state_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinPolls && (s & kDone) == 0; ++i) {
      spin_poll(i);
      s = state_.load(std::memory_order_acquire);
    }
    while ((s & kDone) == 0) {
      s = state_.fetch_or(kWaiter, std::memory_order_acq_rel) | kWaiter;
      if ((s & kDone) != 0) break;
      state_.wait(s, std::memory_order_acquire);
      s = state_.load(std::memory_order_acquire);
    }
  }
  /// The exception the step failed with (its own or an input's), once done; null if none.
  const std::exception_ptr& error() const noexcept { return error_; }
  /// The output bytes, once done without error.
  const Buffer& output() const noexcept { return output_; }
  Buffer take_output() noexcept { return std::move(output_); }
  void set_output(Buffer b) noexcept { output_ = std::move(b); }
  /// The step belongs to a model-only device: it keeps no buffer and runs no kernel.
  void set_no_values() noexcept {
    no_values_ = true;
    output_ = Buffer();
  }
  bool has_values() const noexcept { return !no_values_; }

  // ---- kernel access, valid while the step runs ----
  template <class T>
  const T* in(std::size_t i) const noexcept {
    return reinterpret_cast<const T*>(inputs_[i].step->output_.data());
  }
  template <class T>
  T* out() const noexcept {
    return reinterpret_cast<T*>(output_.data());
  }
  /// The i-th input step itself (for views, which borrow its buffer).
  Step& input_step(std::size_t i) const noexcept { return *inputs_[i].step; }

  // ---- user handles (DeviceArray), counted apart from the graph's internal references ----

  /// Counts one more DeviceArray naming this step; true if it is the first.
  bool add_handle() noexcept {
    const bool first = handles_.fetch_add(1, std::memory_order_relaxed) == 0;
    if (first && info_.kind == StepKind::view)
      inputs_[0].step->views_.fetch_add(1, std::memory_order_relaxed);
    return first;
  }
  /// Counts one DeviceArray fewer; true if it was the last (no user can name the step again).
  bool drop_handle() noexcept {
    const bool last = handles_.fetch_sub(1, std::memory_order_acq_rel) == 1;
    if (last && info_.kind == StepKind::view)
      inputs_[0].step->views_.fetch_sub(1, std::memory_order_acq_rel);
    return last;
  }
  /// The DeviceArrays naming this step now (exact only while no other thread copies them).
  std::uint32_t handles() const noexcept { return handles_.load(std::memory_order_acquire); }
  /// Views (reshapes, slices) of this step's buffer that a DeviceArray still names: the user
  /// may read them at any later time. (Views nobody names any more hold a claim until their
  /// readers have run, like any reader.)
  std::uint32_t views() const noexcept { return views_.load(std::memory_order_acquire); }
  /// Whether the output took over the donor's buffer (known once the step has run).
  bool donated() const noexcept { return donated_; }

  // ---- explicit frees ----

  /// deallocate(force): marks the buffer freed and frees it as soon as nothing claims it (now,
  /// if the step is done and has no unfinished reader). True for the first call. Called on
  /// the buffer's owner, never on a view.
  bool force_free() noexcept {
    const std::uint32_t prev = claims_.fetch_or(kFreed, std::memory_order_acq_rel);
    if ((prev & kFreed) != 0) return false;
    if ((prev & kClaimMask) == 0) output_ = Buffer();
    return true;
  }
  /// Whether deallocate(force) freed this step's buffer: for a view, its source's.
  bool freed() const noexcept {
    if (info_.kind == StepKind::view) return inputs_[0].step->freed();
    return (claims_.load(std::memory_order_acquire) & kFreed) != 0;
  }
  /// The step whose buffer this one's output is: its source for a view, else itself.
  Step& buffer_owner() noexcept { return info_.kind == StepKind::view ? *inputs_[0].step : *this; }

  /// The views of this step that the model has not been told are gone: a list DeviceState
  /// keeps under its lock, so a forced free can tell the model about all of them.
  Step* first_view() const noexcept { return first_view_; }
  Step* next_view() const noexcept { return next_view_; }
  /// Adds `view` (a view of this step) to the list. Under the device's lock.
  void link_view(Step& view) noexcept {
    view.next_view_ = first_view_;
    view.prev_view_ = nullptr;
    if (first_view_ != nullptr) first_view_->prev_view_ = &view;
    first_view_ = &view;
  }
  /// Takes `view` out of the list. Under the device's lock.
  void unlink_view(Step& view) noexcept {
    if (view.prev_view_ != nullptr) {
      view.prev_view_->next_view_ = view.next_view_;
    } else if (first_view_ == &view) {
      first_view_ = view.next_view_;
    }
    if (view.next_view_ != nullptr) view.next_view_->prev_view_ = view.prev_view_;
    view.next_view_ = view.prev_view_ = nullptr;
  }
  /// Whether the model was told that the user let go of the step (force_free or the last
  /// handle), so it is told once. Guarded by the device's lock.
  bool mark_released_to_model() noexcept { return !std::exchange(released_to_model_, true); }

  // ---- graph protocol, driven by DeviceState and the executors ----

  /// Takes the graph reference and links the step behind each unfinished input. A step with a
  /// donor also waits until nothing but itself claims the donor's buffer: readers submitted
  /// before it must read the old values before it overwrites them. Returns true when nothing
  /// is pending, so the caller posts the step itself.
  bool arm() noexcept {
    retain();
    const std::size_t n = inputs_.size();
    // One count per input, one for the donor's other claims, one that keeps the step from being
    // posted by an input finishing mid-loop.
    pending_.store(static_cast<std::uint32_t>(n + 2), std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      Input& in = inputs_[i];
      in.edge.waiter = this;
      if (!in.step->link(&in.edge)) pending_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (info_.donor < 0 ||
        !wait_for_exclusive(*inputs_[static_cast<std::size_t>(info_.donor)].step)) {
      pending_.fetch_sub(1, std::memory_order_relaxed);
    }
    return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

  /// Runs the kernel (unless an input failed, whose error it then carries), then drops its
  /// inputs. Never throws: a kernel's exception is stored for the exports. A view runs no
  /// kernel: its output borrows its input's buffer.
  void run() noexcept {
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].step->error_) {
        error_ = inputs_[i].step->error_;
        break;
      }
    }
    if (no_values_) {
      // A model-only device: the model times the step, nothing computes it.
    } else if (!error_ && info_.kind == StepKind::view) {
      std::byte* source = inputs_[0].step->output_.data();
      output_ = Buffer::borrow(source != nullptr ? source + info_.view_offset : nullptr,
                               output_bytes(), nullptr, nullptr);
    } else if (!error_) {
      if (info_.donor >= 0) {  // nothing else claims it: arm() saw to that
        // Take the ownership; the donor keeps a borrowed view so the kernel still reads it.
        Buffer& donor = inputs_[static_cast<std::size_t>(info_.donor)].step->output_;
        output_ = std::move(donor);
        donor = Buffer::borrow(output_.data(), output_.bytes(), nullptr, nullptr);
        donated_ = true;
      }
      const Step* outer = std::exchange(t_running_step, this);
      try {
        if (output_.data() == nullptr) {
          output_ = Buffer::allocate(output_bytes(), buffer_cache_, info_.name);
          // Tile padding is zero, so equal tiled arrays have equal bytes.
          if (info_.layout.order == Order::tiled && output_bytes() != 0) {
            std::memset(output_.data(), 0, output_bytes());
          }
        }
        execute();
      } catch (...) {
        error_ = std::current_exception();
        output_ = Buffer();
      }
      t_running_step = outer;
    }
  }

  /// Marks the step done, wakes exporters, and calls `on_ready(step)` for each successor
  /// whose last pending input this was; then lets go of its inputs' buffers, which may make a
  /// donation ready (also through `on_ready`).
  template <class OnReady>
  void complete(OnReady&& on_ready) noexcept {
    if ((state_.exchange(kDone, std::memory_order_acq_rel) & kWaiter) != 0) state_.notify_all();
    Edge* e = successors_.exchange(closed(), std::memory_order_acq_rel);
    while (e != nullptr) {
      // Read the link before the decrement: once it reaches zero the waiter may run and free
      // the edge on another thread.
      Edge* next = e->next;
      Step* waiter = e->waiter;
      if (waiter->pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) on_ready(*waiter);
      e = next;
    }
    drop_claim(*this, on_ready);  // its own production
    for (std::size_t i = 0; i < inputs_.size(); ++i) drop_claims(inputs_[i], on_ready);
    // A view's output is its source's buffer, so it keeps its one input as long as it lives
    // (its readers claim that buffer themselves); views are always made on a non-view source,
    // so this never forms a chain.
    if (info_.kind == StepKind::view) return;
    inputs_.clear();
  }

 protected:
  ~Step() override {
    // Left here: a view's source, or the inputs of a step that never ran (its submission
    // threw). A view's readers have run: its claim may be the last a donation waits for.
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      drop_claims(inputs_[i], [](Step& w) { w.executor().post(w); });
    }
    inputs_.clear();
  }
  virtual void execute() = 0;

 private:
  static constexpr std::uint32_t kDone = 1;
  static constexpr std::uint32_t kWaiter = 2;
  static constexpr int kSpinPolls = 2000;
  static constexpr std::uint32_t kFreed = 1u << 31;  // in claims_: deallocate(force) was called
  static constexpr std::uint32_t kWaited = 1u << 30;  // in claims_: a donation waits (waiter_)
  static constexpr std::uint32_t kClaimMask = kWaited - 1;

  /// Lets go of one claim on `s`'s buffer. The last one frees a force-freed buffer and makes
  /// the donation waiting for it ready. Only a last claim let go of after the donation began to
  /// wait does: the count may reach zero, rise (a new reader) and reach zero again, and a
  /// release of the first zero that read waiter_ late made the donation ready twice (a hang).
  template <class OnReady>
  static void drop_claim(Step& s, OnReady&& on_ready) noexcept {
    const std::uint32_t prev = s.claims_.fetch_sub(1, std::memory_order_acq_rel);
    if ((prev & kClaimMask) != 1) return;
    if ((prev & kFreed) != 0) s.output_ = Buffer();
    if ((prev & kWaited) == 0) return;
    s.claims_.fetch_and(~kWaited, std::memory_order_relaxed);
    if (Step* w = s.waiter_.exchange(nullptr, std::memory_order_acq_rel)) {
      if (w->pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) on_ready(*w);
    }
  }

  /// Lets go of the claims an input slot holds: on its step's buffer and, for a view, on the
  /// view's source's.
  template <class OnReady>
  static void drop_claims(auto& in, OnReady&& on_ready) noexcept {
    if (std::exchange(in.claimed, false)) drop_claim(*in.step, on_ready);
    if (Step* source = std::exchange(in.through_view, nullptr)) drop_claim(*source, on_ready);
  }

  /// Registers this step as the donor's exclusive waiter and gives up its own claims on the
  /// donor (it overwrites the buffer rather than reading it). True if others still claim the
  /// buffer: the last of them to let go releases this step.
  bool wait_for_exclusive(Step& donor) noexcept {
    std::uint32_t ours = 0;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].step == &donor) {
        inputs_[i].claimed = false;
        ++ours;
      }
      if (inputs_[i].through_view == &donor) {
        inputs_[i].through_view = nullptr;
        ++ours;
      }
    }
    // Published by the exchange below; its kWaited tells the claims let go of later to look.
    donor.waiter_.store(this, std::memory_order_relaxed);
    std::uint32_t prev = donor.claims_.load(std::memory_order_relaxed);
    bool others = false;
    do {
      others = (prev & kClaimMask) != ours;
    } while (!donor.claims_.compare_exchange_weak(prev, (prev - ours) | (others ? kWaited : 0),
                                                  std::memory_order_acq_rel,
                                                  std::memory_order_relaxed));
    if (!others) donor.waiter_.store(nullptr, std::memory_order_relaxed);  // none will reach 0
    return others;
  }

  static Edge* closed() noexcept {
    static Edge sentinel;
    return &sentinel;
  }

  /// Adds `e` to the successors unless the step already completed (then returns false and
  /// the caller treats this input as ready).
  bool link(Edge* e) noexcept {
    Edge* head = successors_.load(std::memory_order_acquire);
    do {
      if (head == closed()) return false;
      e->next = head;
    } while (!successors_.compare_exchange_weak(head, e, std::memory_order_release,
                                                std::memory_order_acquire));
    return true;
  }

  struct Input {
    Step* step = nullptr;  // holds a reference
    Step* through_view = nullptr;  // for a view: its source, whose buffer this slot claims too
    Edge edge;
    bool claimed = true;  // holds a claim on the step's buffer (all but a donor's slots)
  };

  /// The inputs, inline for up to two (every unary and binary op), beyond that in a BlockPool
  /// block (a collective's reduction reads every member: malloc and free cost more than its model).
  class InputList {
   public:
    InputList() = default;
    InputList(const InputList&) = delete;
    InputList& operator=(const InputList&) = delete;
    ~InputList() { clear(); }

    void assign(std::span<Step* const> steps) {
      if (steps.size() > kInline) {
        heap_ = static_cast<Input*>(BlockPool::allocate(steps.size() * sizeof(Input)));
        for (std::size_t i = 0; i < steps.size(); ++i) new (heap_ + i) Input{};
      }
      size_ = steps.size();
      for (std::size_t i = 0; i < size_; ++i) {
        steps[i]->retain();
        steps[i]->claims_.fetch_add(1, std::memory_order_relaxed);
        data()[i].step = steps[i];
        if (steps[i]->info_.kind == StepKind::view) {  // it reads the source's bytes
          Step* source = steps[i]->inputs_[0].step;
          source->claims_.fetch_add(1, std::memory_order_relaxed);
          data()[i].through_view = source;
        }
      }
    }
    void clear() noexcept {
      for (std::size_t i = 0; i < size_; ++i) data()[i].step->release();
      if (heap_ != nullptr) {  // Input is trivially destructible: the block goes back as it is
        BlockPool::deallocate(std::exchange(heap_, nullptr), size_ * sizeof(Input));
      }
      size_ = 0;
    }
    std::size_t size() const noexcept { return size_; }
    Input& operator[](std::size_t i) noexcept { return data()[i]; }
    const Input& operator[](std::size_t i) const noexcept { return data()[i]; }

   private:
    static constexpr std::size_t kInline = 2;
    Input* data() noexcept { return heap_ != nullptr ? heap_ : inline_; }
    const Input* data() const noexcept { return heap_ != nullptr ? heap_ : inline_; }
    static_assert(std::is_trivially_destructible_v<Input>);
    Input inline_[kInline];
    Input* heap_ = nullptr;  // size_ of them, from BlockPool; null when inline_ holds them
    std::size_t size_ = 0;
  };

  // First, beside the reference count: a reader's construction and completion touch both, so
  // they share a cache line instead of moving two between cores.
  std::atomic<std::uint32_t> claims_{1};  // its own production, unfinished readers, live views
  std::atomic<std::uint32_t> views_{0};    // views a DeviceArray names
  std::atomic<Step*> waiter_{nullptr};    // the donation waiting for the last claim
  std::shared_ptr<DeviceState> device_;  // keeps the device (and its executor) alive
  ExecutorBase* executor_;
  StepInfo info_;
  Shape shape_;
  DType dtype_;
  std::size_t output_bytes_;
  std::uint64_t id_ = 0;
  std::uint32_t model_slot_ = 0;
  InputList inputs_;
  std::atomic<Edge*> successors_{nullptr};
  std::atomic<std::uint32_t> pending_{0};
  mutable std::atomic<std::uint32_t> state_{0};
  std::atomic<std::uint32_t> handles_{0};
  bool donated_ = false;
  bool no_values_ = false;
  bool released_to_model_ = false;  // guarded by the device's lock, as are the view links
  Step* first_view_ = nullptr;
  Step* next_view_ = nullptr;
  Step* prev_view_ = nullptr;
  BufferCache* buffer_cache_ = nullptr;
  std::exception_ptr error_;
  Buffer output_;
};

}  // namespace ferry::detail
