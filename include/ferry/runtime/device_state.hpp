#pragma once
// DeviceState: the untyped device behind a ferry::Device handle. It binds an executor (where
// kernels really run) to a StepObserver (the device model, which says when they would run),
// is the one place where steps enter the graph, and owns the cache its steps' buffers come
// from.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "ferry/runtime/buffer_cache.hpp"
#include "ferry/runtime/executor.hpp"
#include "ferry/runtime/interconnect.hpp"
#include "ferry/runtime/small_mutex.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// When and how the data of a step on another device becomes available: what a transfer
/// between devices waits for in the receiving device's model.
struct Arrival {
  Duration at{};
  std::exception_ptr failure;  // the source's model failed the step
};

/// The model's view of the runtime: the narrow seam a device model plugs into. Calls arrive
/// under the device's lock, in submission order, so an observer needs no locking of its own.
class StepObserver {
 public:
  StepObserver() = default;
  StepObserver(const StepObserver&) = delete;
  StepObserver& operator=(const StepObserver&) = delete;
  virtual ~StepObserver() = default;

  /// `s` was submitted: its id, kind, name, cost, output shape and dtype, and its inputs (with
  /// their ids) are set. Called before `s` can run.
  virtual void submitted(Step& s) = 0;
  /// `s` waits for data that comes from another device, which `from` says when (and how) it
  /// is there: a copy's input 0 is that device's step (the copy reads nothing of this one); a
  /// kernel's inputs are this device's, read as submitted() reads them (a reduction that waits
  /// for a collective's messages). Otherwise as submitted().
  virtual void submitted_transfer(Step& s, const Arrival& from) {
    (void)from;
    submitted(s);
  }
  /// The user let go of `s` (its last DeviceArray is gone, or deallocate(force)): once its
  /// readers are done, its buffer is free. (A forced free of a step with views also lets go
  /// of each view: `s.freed()` says which case it is.)
  virtual void handles_gone(const Step& s) { (void)s; }
  /// Decides the schedule until `s` completes, as if something waited for it but without
  /// moving the host's clock, and says when its data can leave for another device (the host
  /// sends it now: once it is ready and the host's clock has reached the call).
  virtual Arrival settle(const Step& s) {
    (void)s;
    return {};
  }
  /// The failure the model already knows `s` will end with (or ended with), without deciding
  /// any schedule: what settle() would say of its failure whenever it is asked, when it is
  /// certain at the step's submission. Null when none is known yet.
  virtual std::exception_ptr foresee(const Step& s) {
    (void)s;
    return {};
  }
  /// A transfer to another device reads the data of `s` (done: settled) over a mesh's links
  /// until `until`, when it has arrived: its buffer stays in use until then.
  virtual void read_until(const Step& s, Duration until) {
    (void)s;
    (void)until;
  }
  /// `s` moves to the host CPU (a transfer to Device::cpu()): the model places the copy over
  /// its link to the host, as submission number `id`, and says when the host has the data.
  /// Without a model of that link, the data is there when `s` is.
  virtual Arrival send_to_host(const Step& s, std::uint64_t id) {
    (void)id;
    return settle(s);
  }
  /// The host blocks until every step of `steps` is done: one export. The model may fail a
  /// step the device could not run (out of memory, a fault): it puts the error for steps[i]
  /// in errors[i], and the export throws it.
  virtual void host_sync(std::span<Step* const> steps, std::span<std::exception_ptr> errors) = 0;
};

class DeviceState {
 public:
  /// A device named `name` whose buffers wait for reuse in a cache of at most `cache_limit`
  /// bytes.
  DeviceState(std::string name, std::shared_ptr<ExecutorBase> executor,
              std::unique_ptr<StepObserver> observer, std::size_t cache_limit)
      : name_(std::move(name)),
        executor_(std::move(executor)),
        observer_(std::move(observer)),
        buffers_(BufferCache::open(cache_limit)) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;
  // Buffers still out (a HostArray, a step a worker still holds) keep the cache until they
  // come back.
  ~DeviceState() { buffers_->close(); }

  /// Where this device's step outputs come from and go back to.
  BufferCache& buffers() const noexcept { return *buffers_; }

  const std::string& name() const noexcept { return name_; }
  ExecutorBase& executor() const noexcept { return *executor_; }
  const std::shared_ptr<ExecutorBase>& executor_handle() const noexcept { return executor_; }

  /// Gives the observer to `f` under the device's lock (stats, tests).
  template <class F>
  decltype(auto) with_observer(F&& f) {
    std::lock_guard lock(mutex_);
    return std::forward<F>(f)(*observer_);
  }

  /// Enters `s` into the graph: numbers it, tells the model, links it behind its inputs and
  /// posts it if they are all done already.
  void submit(Step& s) {
    announce(s);
    if (s.arm()) post(s);
  }

  /// Enters a step that is complete on arrival (an import whose data the host just copied).
  void submit_done(Step& s) {
    announce(s);
    s.complete([](Step& ready) { ready.executor().post(ready); });
  }

  /// Enters `s`, which waits for data from another device arriving as `from` says: a copy of
  /// a step of another device (its input 0) to this one, or a kernel (StepObserver's
  /// submitted_transfer says which inputs the model reads).
  void submit_transfer(Step& s, const Arrival& from) {
    {
      std::lock_guard lock(mutex_);
      refuse_freed_inputs(s);
      s.set_id(next_id_++);
      s.set_buffer_cache(buffers_);
      if (model_only()) s.set_no_values();
      observer_->submitted_transfer(s, from);
    }
    if (s.arm()) post(s);
  }

  /// How many steps were submitted so far: the submission index the next one gets.
  std::uint64_t submitted_steps() {
    std::lock_guard lock(mutex_);
    return next_id_;
  }

  /// The model's verdict on when `s` (a step of this device) has its data.
  Arrival settle(const Step& s) {
    std::lock_guard lock(mutex_);
    return observer_->settle(s);
  }

  /// The failure the model already knows `s` (a step of this device) meets, if any.
  std::exception_ptr foresee(const Step& s) {
    std::lock_guard lock(mutex_);
    return observer_->foresee(s);
  }

  /// A transfer over a mesh's links reads the data of `s` (a step of this device, settled)
  /// until `until`.
  void read_until(const Step& s, Duration until) {
    std::lock_guard lock(mutex_);
    observer_->read_until(s, until);
  }

  /// When the host has the data of `s` (a step of this device), the model placing the copy
  /// that brings it there, which takes a submission number of this device.
  Arrival send_to_host(const Step& s) {
    std::lock_guard lock(mutex_);
    return observer_->send_to_host(s, next_id_++);
  }

  /// Enters a step that the calling thread runs itself once its inputs are done (an export's
  /// copy to host memory: no worker hand-off on the way back to the host).
  void submit_on_host(Step& s) { announce(s); }

  /// Tells the model the host waits for `steps`, all of this device; errors[i] receives the
  /// model's verdict on steps[i] (null: it ran).
  void host_sync(std::span<Step* const> steps, std::span<std::exception_ptr> errors) {
    std::lock_guard lock(mutex_);
    observer_->host_sync(steps, errors);
  }

  /// The last handle naming `s` is gone.
  void handles_gone(Step& s) {
    release_to_model(s);
    drop_user();
  }

  /// deallocate(force): frees `s`'s buffer (`s` owns it: not a view) once its readers are
  /// done, in the model too; its views, which share that buffer, are let go of with it.
  void force_free(Step& s) {
    if (!s.force_free()) return;
    std::lock_guard lock(mutex_);
    if (s.mark_released_to_model()) observer_->handles_gone(s);
    while (Step* view = s.first_view()) {
      s.unlink_view(*view);
      if (view->mark_released_to_model()) observer_->handles_gone(*view);
    }
  }

  /// Makes the device model-only (once, as it is made, before it is shared): its steps keep
  /// no buffer and run no kernel; the model times them as usual. `why` is what a read of its
  /// arrays says (NoValues): a mesh's stand-in for another process's member names that process.
  void set_model_only(std::string why = "the device is model-only") {
    no_values_reason_ = why.empty() ? "the device is model-only" : std::move(why);
  }
  /// Whether set_model_only() was called: a model-only device has a reason for its lack of values.
  bool model_only() const noexcept { return !no_values_reason_.empty(); }
  /// Why this model-only device's arrays have no values, for NoValues' messages.
  const std::string& no_values_reason() const noexcept { return no_values_reason_; }

  /// Makes this device member `index` of a mesh joined by `net` (once, as the mesh is made:
  /// before the device is shared, or, for a device the program gives ferry::mpi::mesh_over,
  /// while no other thread uses it).
  void join(std::weak_ptr<Interconnect> net, std::int64_t index) {
    interconnect_ = std::move(net);
    interconnect_index_ = index;
  }
  /// Whether the device is a member of a mesh that is still alive.
  bool in_mesh() const noexcept { return !interconnect_.expired(); }
  /// The interconnect this device and `other` share, with their positions in it; null when
  /// they share none (or the mesh is gone).
  std::shared_ptr<Interconnect> shared_interconnect(const DeviceState& other, std::int64_t& from,
                                                    std::int64_t& to) const {
    std::shared_ptr<Interconnect> mine = interconnect_.lock();
    if (mine == nullptr || mine != other.interconnect_.lock()) return nullptr;
    from = interconnect_index_;
    to = other.interconnect_index_;
    return mine;
  }

  /// Counts the user's handles to the device: Device objects, and steps that DeviceArrays name.
  /// Steps keep their device alive, and a stepped executor keeps its pending steps, so without
  /// this signal undriven work on a ManualExecutor would keep itself alive forever.
  void add_user() noexcept { users_.fetch_add(1, std::memory_order_relaxed); }
  void drop_user() noexcept {
    if (users_.fetch_sub(1, std::memory_order_acq_rel) == 1) executor_->device_unreachable();
  }

 private:
  /// Runs a ready step: on the executor; on a model-only device, where it computes nothing,
  /// here and now (a worker hand-off would be most of its cost), and so for a view on a pool
  /// of threads (it computes nothing either: its output borrows its source's bytes). Its
  /// successors, ready by then or later, go to their executors as usual. A view of a part of
  /// a done shard that a collective sends to another process is then sent at the call: posted,
  /// it waited for a worker to wake (2 ranks, 256 KiB: the reduce-scatter's sends went 3 to
  /// 8 us after the call returned). A stepped executor (no threads) still runs it when stepped.
  void post(Step& s) {
    if (model_only() || (s.info().kind == StepKind::view && executor_->thread_count() != 0)) {
      run_step(s, nullptr);
    } else {
      executor_->post(s);
    }
  }

  void release_to_model(Step& s) {
    std::lock_guard lock(mutex_);
    if (!s.mark_released_to_model()) return;
    if (s.info().kind == StepKind::view) s.buffer_owner().unlink_view(s);
    observer_->handles_gone(s);
  }

  /// Throws UseAfterFree, as `s`'s op, when deallocate(force) freed one of its inputs on
  /// another thread after the op checked it (step_of) and before this submission: checked
  /// under the lock under which the free tells the model, so the model never gets a step
  /// reading a buffer it was told is gone. The step, never submitted, lets go of its claims as
  /// it is destroyed (the last one frees the buffer).
  static void refuse_freed_inputs(const Step& s) {
    for (std::size_t i = 0; i < s.input_count(); ++i) {
      const Step& in = s.input(i);
      if (in.freed()) {
        fail<UseAfterFree>(s.info().name, "the array of shape ", in.shape(), " made by '",
                           in.info().name, "' was freed by deallocate(force)");
      }
    }
  }

  void announce(Step& s) {
    std::lock_guard lock(mutex_);
    refuse_freed_inputs(s);
    s.set_id(next_id_++);
    s.set_buffer_cache(buffers_);
    if (model_only()) s.set_no_values();
    observer_->submitted(s);
    // Until the model hears that the view is gone, its source can find it: a forced free
    // of the source lets go of its views too.
    if (s.info().kind == StepKind::view) s.buffer_owner().link_view(s);
  }

  std::string name_;
  std::shared_ptr<ExecutorBase> executor_;
  SmallMutex mutex_;
  std::uint64_t next_id_ = 0;  // guarded by mutex_
  std::atomic<std::size_t> users_{0};
  std::unique_ptr<StepObserver> observer_;
  BufferCache* buffers_;  // opened here, closed by the destructor
  std::weak_ptr<Interconnect> interconnect_;  // set by join(), then read only
  std::int64_t interconnect_index_ = -1;
  std::string no_values_reason_;  // set by set_model_only() (empty: computes), then read only
};

}  // namespace ferry::detail
