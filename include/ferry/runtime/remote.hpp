#pragma once
// RemoteMesh: the seam between a mesh whose devices live in several processes and the
// transport that joins those processes (ferry/distributed/ implements it on MPI). The core
// knows nothing of the transport: it asks it, at each collective, whether a member is local,
// to check that every process makes the same call, to send a local shard to another process
// and to expect one from another process. The data enters the graph through two kinds of step
// that no device submits:
//
// - GateStep: a step with no inputs that the transport completes from outside the graph (its
//   progress thread), with the bytes it received or with an error. Steps that read it wait
//   for it like for any input, so no executor thread ever blocks on the network.
// - ForwardStep: a step that reads one input and, once that input is done (or failed), hands it
//   to a callback on the thread that completed it, which copies the bytes out for sending.
//
// Neither is announced to a device model: they are plumbing, not work of a device.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/runtime/executor_base.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/step.hpp"
#include "ferry/runtime/wait_driver.hpp"

namespace ferry::detail {

/// The executor of the plumbing steps: a ForwardStep runs on the thread that made it ready; a
/// GateStep is never posted (nothing arms it).
class PlumbingExecutor final : public ExecutorBase {
 public:
  static PlumbingExecutor& instance() {
    static PlumbingExecutor e;
    return e;
  }
  void post(Step& ready) override;  // below, once ForwardStep is known
  void wait(const Step& s) override { s.wait_done(); }
  // Never 0: collectives drive a stepped executor only for steps of one (see receive()).
  std::size_t thread_count() const noexcept override { return 1; }
};

/// A step completed from outside the graph: open() with the received bytes, or fail(). Exactly
/// one of them, exactly once.
class GateStep final : public Step {
 public:
  /// A gate for data of `dtype`, `shape` and `layout` (a step that reads it sees that
  /// metadata), kept alive by the caller's Ref and, until it completes, by itself.
  GateStep(std::shared_ptr<DeviceState> device, std::string name, DType dtype, Shape shape,
           Layout layout)
      : Step(std::move(device), PlumbingExecutor::instance(),
             StepInfo{StepKind::copy_d2d, std::move(name), {}, layout}, dtype, shape, {}) {
    retain();  // the graph reference, which finish() drops
  }

  /// Completes the gate holding `bytes` (at least output_bytes() long), or handing them to
  /// its reader (hand_to); steps waiting for it go to their executors.
  void open(Buffer bytes) noexcept {
    Step* reader = taker_.exchange(this, std::memory_order_acq_rel);
    if (reader != nullptr) {
      // The gate keeps a view of the bytes it hands over (its reader owns them; nothing else
      // reads the gate): with no output, run() would allocate a block of the data's size that
      // nobody reads.
      Buffer view = Buffer::borrow(bytes.data(), bytes.bytes());
      reader->set_output(std::move(bytes));  // it waits for this gate: it is not running
      set_output(std::move(view));
      reader->retain();  // the holder outlives its own run: a late ask reads it (~GateStep)
      holder_.store(reader, std::memory_order_release);
    } else {
      set_output(std::move(bytes));
      holder_.store(this, std::memory_order_release);
    }
    finish();
  }

  /// `reader`, this gate's only reader, built and not yet submitted (so not running), takes
  /// the received bytes over as its own output instead of copying them: now, if the gate is
  /// open already, else when it opens. A gate that fails gives it nothing. Call at most once,
  /// and forget() it if the reader goes without being submitted.
  void hand_to(Step& reader) noexcept {
    Step* none = nullptr;
    if (!taker_.compare_exchange_strong(none, &reader, std::memory_order_acq_rel)) {
      reader.set_output(take_output());  // opened: done, and nothing else reads it
      reader.retain();
      holder_.store(&reader, std::memory_order_release);
    }
  }

  /// Lets go of the reader that holds the bytes, which the gate kept alive for holder().
  ~GateStep() override {
    const Step* held = holder_.load(std::memory_order_acquire);
    if (held != nullptr && held != this) held->release();
  }

  /// The step whose output holds the bytes this gate opened with (done, not failed): its
  /// reader once that took them over (hand_to), kept alive by the gate while the gate lives,
  /// else the gate itself; null when a reader took them and was forgotten (never submitted:
  /// the bytes went with it).
  const Step* holder() const noexcept { return holder_.load(std::memory_order_acquire); }
  /// Undoes hand_to(reader), whose reader goes without being submitted: before the gate
  /// opened, so that it opens with nobody to take the bytes; after, giving back the reference
  /// the gate kept (the bytes go with the reader).
  void forget(Step& reader) noexcept {
    Step* expected = &reader;
    taker_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
    const Step* held = &reader;
    if (holder_.compare_exchange_strong(held, nullptr, std::memory_order_acq_rel)) {
      reader.release();
    }
  }
  /// Completes the gate failed with `error`, which reaches every step that reads it.
  void fail(std::exception_ptr error) noexcept {
    failure_ = std::move(error);
    finish();
  }

 private:
  void finish() noexcept {
    run();
    // Opened by a waiter's poll, the readers on the waiter's executor run on the waiter.
    complete([](Step& ready) { hand_on_ready(ready); });
    release();
  }
  void execute() override {
    if (failure_) std::rethrow_exception(failure_);
  }

  std::exception_ptr failure_;
  std::atomic<Step*> taker_{nullptr};  // hand_to's reader; the gate itself once open() ran
  std::atomic<const Step*> holder_{nullptr};  // see holder()
};

/// A step that hands its one input to `deliver` once the input is done or failed (see
/// Step::error()), on the thread that completed it. It holds a claim on the input's buffer
/// until then, so the bytes cannot be reused or donated before they are read; and longer while
/// `deliver` keeps a Hold of it (an MPI send from those bytes, until MPI is done with them).
class ForwardStep final : public Step {
 public:
  /// Keeps the step from completing, and so its claim on its input's buffer, while any copy of
  /// it lives; the last one to go completes it (on that thread). Copyable; never allocates.
  class Hold {
   public:
    Hold() noexcept = default;
    explicit Hold(ForwardStep* s) noexcept : s_(s) {
      if (s_ != nullptr) s_->holds_.fetch_add(1, std::memory_order_relaxed);
    }
    Hold(const Hold& o) noexcept : Hold(o.s_) {}
    Hold(Hold&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Hold& operator=(Hold o) noexcept {
      std::swap(s_, o.s_);
      return *this;
    }
    ~Hold() {
      if (s_ != nullptr && s_->holds_.fetch_sub(1, std::memory_order_acq_rel) == 1) s_->finish();
    }

   private:
    ForwardStep* s_ = nullptr;
  };
  using Deliver = std::function<void(const Step& input, const Hold& hold)>;

  /// Links behind `input` and fires as soon as it is done (now, if it is already).
  static void start(Step& input, Deliver deliver) {
    Step* inputs[] = {&input};
    Ref<Step> ref = Ref<Step>::adopt(new ForwardStep(input, inputs, std::move(deliver)));
    if (ref->arm()) static_cast<ForwardStep&>(*ref).fire();
  }

  /// Hands the input to `deliver_` (whose captures go right after), then completes and drops
  /// the graph reference arm() took, once no Hold is left.
  void fire() noexcept {
    const Hold self(this);
    try {
      deliver_(input_step(0), self);
    } catch (...) {
      // deliver_ reports its own failures to the transport; nothing may escape a completion.
    }
    deliver_ = nullptr;  // what it captured may hold a Hold (a message): no cycle through it
  }

 private:
  ForwardStep(Step& input, std::span<Step* const> inputs, Deliver deliver)
      : Step(input.device(), PlumbingExecutor::instance(),
             StepInfo{StepKind::copy_d2d, "send", {}, input.layout()}, input.dtype(),
             Shape(std::int64_t{0}), inputs),
        deliver_(std::move(deliver)) {}
  void execute() override {}
  void finish() noexcept {
    complete([](Step& ready) { ready.executor().post(ready); });
    release();
  }

  Deliver deliver_;
  std::atomic<std::uint32_t> holds_{0};
};

inline void PlumbingExecutor::post(Step& ready) { static_cast<ForwardStep&>(ready).fire(); }

/// One collective as a remote mesh's transport tracks it (opaque to the core).
class RemoteCall {
 public:
  RemoteCall() = default;
  RemoteCall(const RemoteCall&) = delete;
  RemoteCall& operator=(const RemoteCall&) = delete;
  virtual ~RemoteCall() = default;
};

/// The processes behind a mesh: each owns some of its members (row-major device positions);
/// the others are model-only stand-ins on this process. Every process runs the same program,
/// so every process makes every collective call, in the same order. Thread-safe.
class RemoteMesh {
 public:
  RemoteMesh() = default;
  RemoteMesh(const RemoteMesh&) = delete;
  RemoteMesh& operator=(const RemoteMesh&) = delete;
  virtual ~RemoteMesh() = default;

  /// This process's index among the mesh's processes (its rank in the world), their count, and
  /// the one that owns member `member`.
  virtual int process() const noexcept = 0;
  virtual int processes() const noexcept = 0;
  virtual int owner(std::int64_t member) const noexcept = 0;

  /// Whether this process owns member `member`.
  bool local(std::int64_t member) const noexcept { return owner(member) == process(); }

  /// Why a read here of an array on member `member`, which another process owns, finds no
  /// values: what the member's stand-in on this process says in NoValues (the owner, and what
  /// would bring the values here), in the transport's terms.
  virtual std::string not_here(std::int64_t member) const = 0;

  /// Whether the owners' devices compute; false when every member is model-only on its own
  /// process too (ferry::mpi::mesh_over(..., model_only)), so no process has any shard's values.
  virtual bool values() const noexcept = 0;

  /// The next collective of the mesh, `op` ("all_reduce") described by `fingerprint` (its
  /// arguments, element type, shapes and axis): every process must begin the same one. Throws
  /// (the mesh's earlier failure, a world that ended) when the mesh can take no more calls.
  virtual std::shared_ptr<RemoteCall> begin(std::string_view op, std::string fingerprint) = 0;

  /// The caller has made every expect() and send() of `call`: the transport may forget the
  /// call once those are done (not before: they may come after the peers' fingerprints).
  virtual void end(RemoteCall& call) = 0;

  /// A gate that opens once every process has begun the same call as `call`, and fails with
  /// CollectiveMismatch or PeerTimeout otherwise. `device` is whose step reads it.
  virtual Ref<Step> verified(RemoteCall& call, const std::shared_ptr<DeviceState>& device) = 0;

  /// A gate (a GateStep) that opens with the bytes of member `from`'s data, which its owner
  /// sends for the receive by local member `to`; `like` (the stand-in of that data here) gives
  /// its metadata. Its reader may take the bytes over (GateStep::hand_to). `into`, when it
  /// has like's bytes: where they land if the message carries them alone (the gate opens with
  /// it), so that they are received in their final place; otherwise it is let go of.
  virtual Ref<Step> expect(RemoteCall& call, std::int64_t from, std::int64_t to,
                           const Step& like, Buffer into) = 0;

  /// Sends `data` (a step of local member `from`) to the owner of member `to` once it is done,
  /// or its error once it failed; the owner expects it (expect(call, from, to, ...)). `verdict`
  /// is the failure its device's model decided for it (Arrival::failure: an injected fault, say),
  /// null if none: the kernel runs all the same, so only this says that the data failed, and
  /// then that failure is sent instead of the bytes.
  virtual void send(RemoteCall& call, std::int64_t from, std::int64_t to, Step& data,
                    std::exception_ptr verdict) = 0;

  /// As send() to the host (member -1), but to process `process` alone: an export gathered on
  /// that process only (ferry::to_host(a, process)), which expects it there as the host does.
  virtual void send_to_process(RemoteCall& call, std::int64_t from, int process, Step& data,
                               std::exception_ptr verdict) = 0;
};

}  // namespace ferry::detail
