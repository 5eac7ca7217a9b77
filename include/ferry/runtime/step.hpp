#pragma once
// Step: one node of the dependency graph. It owns the metadata of its output (known at once),
// the buffer its kernel fills (known later), and the links that tell it when it may run.
//
// Ownership, which is what keeps teardown flat: a step holds strong references to its inputs
// only until it has run; its successors are reached through Edges embedded in those successors
// (no reference, no allocation); a submitted step holds one reference to itself (the "graph
// reference") until it has run. So a step is only ever destroyed after it ran, when its input
// list is already empty, and destroying any handle frees at most one step, never a chain.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/runtime/block_pool.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/spin.hpp"

namespace ferry::detail {

class DeviceState;
class ExecutorBase;
class Step;

/// What a step does, as the device model sees it.
enum class StepKind : std::uint8_t {
  copy_in,   // host to device (an import)
  copy_out,  // device to host (an export)
  copy_d2d,  // device to device
  compute,   // a kernel on a compute unit
  view,      // metadata only: the output aliases the input's buffer (reshape)
};

constexpr std::string_view name_of(StepKind k) noexcept {
  switch (k) {
    case StepKind::copy_in: return "copy_in";
    case StepKind::copy_out: return "copy_out";
    case StepKind::copy_d2d: return "copy_d2d";
    case StepKind::compute: return "compute";
    case StepKind::view: return "view";
  }
  return "?";
}

/// Everything the model needs to place a step besides its inputs and output: kind, op name
/// and cost.
struct StepInfo {
  StepKind kind = StepKind::compute;
  std::string name;
  Cost cost;
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
  static void operator delete(void* p, std::size_t bytes) noexcept { BlockPool::deallocate(p, bytes); }

  /// Throws InvalidArgument (naming the op) when the output could not fit in memory.
  Step(std::shared_ptr<DeviceState> device, ExecutorBase& executor, StepInfo info, DType dtype,
       Shape shape, std::span<Step* const> inputs)
      : device_(std::move(device)),
        executor_(&executor),
        info_(std::move(info)),
        shape_(shape),
        dtype_(dtype),
        output_bytes_(checked_bytes(info_.name, shape_, size_of(dtype_))) {
    inputs_.assign(inputs);
  }

  // ---- metadata: immutable once built, readable from any thread ----
  const StepInfo& info() const noexcept { return info_; }
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  const std::shared_ptr<DeviceState>& device() const noexcept { return device_; }
  ExecutorBase& executor() const noexcept { return *executor_; }
  /// Submission index on its device, assigned by DeviceState.
  std::uint64_t id() const noexcept { return id_; }
  void set_id(std::uint64_t id) noexcept { id_ = id; }
  /// Where the device model keeps its record of this step: set by the model at submission, so
  /// it finds an input's record without a lookup.
  std::uint32_t model_slot() const noexcept { return model_slot_; }
  void set_model_slot(std::uint32_t slot) noexcept { model_slot_ = slot; }
  std::size_t output_bytes() const noexcept { return output_bytes_; }
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
      cpu_relax();
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
  bool add_handle() noexcept { return handles_.fetch_add(1, std::memory_order_relaxed) == 0; }
  /// Counts one DeviceArray fewer; true if it was the last (no user can name the step again).
  bool drop_handle() noexcept { return handles_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  // ---- graph protocol, driven by DeviceState and the executors ----

  /// Takes the graph reference and links the step behind each unfinished input. Returns true
  /// when no input is pending, so the caller posts the step itself.
  bool arm() noexcept {
    retain();
    const std::size_t n = inputs_.size();
    pending_.store(static_cast<std::uint32_t>(n + 1), std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      Input& in = inputs_[i];
      in.edge.waiter = this;
      if (!in.step->link(&in.edge)) pending_.fetch_sub(1, std::memory_order_relaxed);
    }
    // The extra count kept the step from being posted by an input finishing mid-loop.
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
    if (!error_ && info_.kind == StepKind::view) {
      output_ = Buffer::borrow(inputs_[0].step->output_.data(), output_bytes(), nullptr, nullptr);
    } else if (!error_) {
      const Step* outer = std::exchange(t_running_step, this);
      try {
        if (output_.data() == nullptr) output_ = Buffer::allocate(output_bytes());
        execute();
      } catch (...) {
        error_ = std::current_exception();
        output_ = Buffer();
      }
      t_running_step = outer;
    }
    // A view reads its source's buffer for as long as it lives, so it keeps its one input;
    // views are always made on a non-view source, so this never forms a chain.
    if (info_.kind != StepKind::view) inputs_.clear();
  }

  /// Marks the step done, wakes exporters, and calls `on_ready(step)` for each successor
  /// whose last pending input this was.
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
  }

 protected:
  ~Step() override { inputs_.clear(); }
  virtual void execute() = 0;

 private:
  static constexpr std::uint32_t kDone = 1;
  static constexpr std::uint32_t kWaiter = 2;
  static constexpr int kSpinPolls = 2000;

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
    Edge edge;
  };

  /// The inputs, inline for up to two (every unary and binary op), on the heap beyond.
  class InputList {
   public:
    InputList() = default;
    InputList(const InputList&) = delete;
    InputList& operator=(const InputList&) = delete;
    ~InputList() { clear(); }

    void assign(std::span<Step* const> steps) {
      if (steps.size() > kInline) heap_ = std::make_unique<Input[]>(steps.size());
      size_ = steps.size();
      for (std::size_t i = 0; i < size_; ++i) {
        steps[i]->retain();
        data()[i].step = steps[i];
      }
    }
    void clear() noexcept {
      for (std::size_t i = 0; i < size_; ++i) data()[i].step->release();
      size_ = 0;
      heap_.reset();
    }
    std::size_t size() const noexcept { return size_; }
    Input& operator[](std::size_t i) noexcept { return data()[i]; }
    const Input& operator[](std::size_t i) const noexcept { return data()[i]; }

   private:
    static constexpr std::size_t kInline = 2;
    Input* data() noexcept { return heap_ ? heap_.get() : inline_; }
    const Input* data() const noexcept { return heap_ ? heap_.get() : inline_; }
    Input inline_[kInline];
    std::unique_ptr<Input[]> heap_;
    std::size_t size_ = 0;
  };

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
  std::exception_ptr error_;
  Buffer output_;
};

/// A step whose kernel is the callable `Kernel`, called as `kernel(step)`.
template <class Kernel>
class KernelStep final : public Step {
 public:
  KernelStep(std::shared_ptr<DeviceState> device, ExecutorBase& executor, StepInfo info,
             DType dtype, Shape shape, std::span<Step* const> inputs, Kernel kernel)
      : Step(std::move(device), executor, std::move(info), dtype, shape, inputs),
        kernel_(std::move(kernel)) {}

 private:
  void execute() override { kernel_(static_cast<const Step&>(*this)); }
  Kernel kernel_;
};

}  // namespace ferry::detail
