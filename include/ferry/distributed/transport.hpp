#pragma once
// MpiTransport: the RemoteMesh of a mesh over MPI processes (runtime/remote.hpp is the seam).
//
// Each collective call, on every process:
// 1. begin(): the call takes the mesh's next sequence number k and sends its fingerprint (k, a
//    hash of its text, the text) to every other process on the control communicator, tag k,
//    and posts a receive for each peer's k-th fingerprint. Messages between two processes on
//    one tag never overtake each other, so peer p's k-th fingerprint is p's k-th call.
// 2. expect()/send(): each message that crosses processes takes the next number of its channel
//    (sender, receiver), counted in program order on both sides; that number is its tag on the
//    data communicator. A receive is posted at once, on the caller's thread; a send as soon as
//    its data is done (a ForwardStep copies it out on the worker that completed it, and posts
//    it there). Data sent to several peers is copied out once, and every send of it carries
//    that copy; it goes to a peer once however many of the peer's devices need it: the peer
//    copies it for each (a Copy of its Receive). So the data travels while the fingerprints
//    do, rather than a round trip after them.
// 3. The progress thread tests the fingerprints and the data. Nothing received is believed
//    before the call is verified (every peer's fingerprint arrived and matches): a receive
//    that completed (or that MPI failed: a peer that made another call may have sent a larger
//    message) waits for the verdict, and only then opens its gate (or fails it). When a
//    fingerprint differs, the call fails with CollectiveMismatch naming both ranks and both
//    calls; when some peer's has not come within collective_timeout, with PeerTimeout naming
//    the ranks missing. A verified receive that gets no data within the timeout (counted from
//    the verification) fails with PeerTimeout too.
// 4. A failed call fails the gates of its results (the exports throw the error) and breaks the
//    mesh: its channels may disagree from then on, so every later call throws that error.
//
// The data messages themselves, and the lifetimes of their memory: distributed/messages.hpp;
// the fingerprints, and how they are compared: distributed/fingerprint.hpp; steps 3 and 4 (the
// progress side of a call): distributed/call_progress.hpp.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/distributed/call.hpp"
#include "ferry/distributed/fingerprint.hpp"
#include "ferry/distributed/mesh_traffic.hpp"
#include "ferry/distributed/messages.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/peer_notes.hpp"
#include "ferry/distributed/progress.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/remote.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

class MpiTransport final : public RemoteMesh,
                           public ProgressTask,
                           public std::enable_shared_from_this<MpiTransport> {
  using Clock = std::chrono::steady_clock;

 public:
  /// A transport over `ctrl` and `data` (communicators this transport now owns and frees), on
  /// which rank `owner[m]` owns member m, driven by `engine`; `notes` (the World's; null with
  /// one process) say whether a late peer is alive. Without `values` every owner's devices are
  /// model-only: a message then carries its status byte alone (the data's failure, if any), so
  /// the calls are checked and timed out as with values, and no payload crosses.
  MpiTransport(std::shared_ptr<MpiProgress> engine, std::shared_ptr<PeerNotes> notes,
               MPI_Comm ctrl, MPI_Comm data, std::vector<int> owner, std::string mesh_name,
               bool values)
      : engine_(std::move(engine)),
        notes_(std::move(notes)),
        ctrl_(ctrl),
        data_(data),
        owner_(std::move(owner)),
        name_(std::move(mesh_name)),
        values_(values) {
    MPI_Comm_rank(ctrl_, &rank_);
    MPI_Comm_size(ctrl_, &size_);
    int flag = 0;
    int* ub = nullptr;
    MPI_Comm_get_attr(ctrl_, MPI_TAG_UB, static_cast<void*>(&ub), &flag);
    tag_limit_ = flag != 0 && ub != nullptr ? *ub : 32767;  // the standard's least upper bound
    send_count_.assign(static_cast<std::size_t>(size_), 0);
    recv_count_.assign(static_cast<std::size_t>(size_), 0);
    several_.resize(static_cast<std::size_t>(size_));
    for (int p = 0; p < size_; ++p)
      several_[static_cast<std::size_t>(p)] = std::count(owner_.begin(), owner_.end(), p) > 1;
  }
  ~MpiTransport() override { shutdown(); }

  bool values() const noexcept override { return values_; }
  int process() const noexcept override { return rank_; }
  int processes() const noexcept override { return size_; }
  int owner(std::int64_t member) const noexcept override {
    return owner_[static_cast<std::size_t>(member)];
  }
  std::string not_here(std::int64_t member) const override {
    const std::string p = std::to_string(owner(member));
    return "the device is process " + p + "'s (ferry::mpi::mesh_over), and this process only " +
           "models it: read it on process " + p + ", or bring it here with to() onto a device " +
           "this process owns, or with ferry::to_host of a placed mesh array";
  }

  /// The data messages this process sent and received for the mesh so far.
  ferry::mpi::MeshTraffic traffic() {
    std::lock_guard lock(mutex_);
    return traffic_;
  }

  std::shared_ptr<RemoteCall> begin(std::string_view op, std::string fingerprint) override {
    std::lock_guard lock(mutex_);
    if (closed_ || engine_->stopped()) {
      fail<CommunicationError>(op, "mesh ", name_, ": its ferry::mpi::World has ended");
    }
    if (broken_) std::rethrow_exception(broken_);
    auto call = std::make_shared<Call>();
    call->seq = seq_++;
    call->op = std::string(op);
    call->text = std::move(fingerprint);
    call->out = FingerprintMessage::of(call->seq, call->text);
    const auto now = Clock::now();
    call->deadline = now + engine_->timeout();
    call->ask_at = now + engine_->timeout() / 2;
    call->peers.resize(static_cast<std::size_t>(size_));
    const int tag = static_cast<int>(call->seq % static_cast<std::uint64_t>(tag_limit_));
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = call->peers[static_cast<std::size_t>(p)];
      mpi_check(MPI_Isend(&call->out, static_cast<int>(sizeof call->out), MPI_BYTE, p, tag, ctrl_,
                          &peer.sent),
                op, "MPI_Isend");
      mpi_check(MPI_Irecv(&peer.in, static_cast<int>(sizeof peer.in), MPI_BYTE, p, tag, ctrl_,
                          &peer.received),
                op, "MPI_Irecv");
    }
    call->verified = size_ == 1;
    // The mesh may be dropped while its last collective is still moving data: the transport
    // keeps itself until nothing is in flight (progress() lets go).
    if (!keep_alive_) keep_alive_ = shared_from_this();
    calls_.push_back(call);  // in sequence order: seq_ only grows
    engine_->wake();
    return call;
  }

  void end(RemoteCall& c) override {
    // Let go of outside the lock.
    std::vector<std::pair<const Step*, std::shared_ptr<Outgoing>>> outgoing;
    std::vector<std::pair<Ref<Step>, std::size_t>> incoming;
    {
      std::lock_guard lock(mutex_);
      Call& call = static_cast<Call&>(c);
      call.built = true;
      outgoing = std::move(call.outgoing);
      call.outgoing.clear();
      incoming = std::move(call.incoming);
      call.incoming.clear();
    }
    // No more sends: the data need not be held (each copy is made by now, or its ForwardStep
    // holds the data until it is).
    for (const auto& o : outgoing) o.second->data = Ref<Step>();
    engine_->wake();
  }

  Ref<Step> verified(RemoteCall& c, const std::shared_ptr<DeviceState>& device) override {
    Call& call = static_cast<Call&>(c);
    std::lock_guard lock(mutex_);
    if (!call.gate) {
      call.gate = Ref<Step>::adopt(
          new GateStep(device, call.op, DType::boolean, Shape(std::int64_t{0}), Layout{}));
      // Decided already: the gate opens (or fails) now, before anything reads it.
      if (call.failure) {
        call.gate_decided = true;
        static_cast<GateStep&>(*call.gate).fail(call.failure);
      } else if (call.verified) {
        call.gate_decided = true;
        static_cast<GateStep&>(*call.gate).open(Buffer());
      }
    }
    return call.gate;
  }

  Ref<Step> expect(RemoteCall& c, std::int64_t from, std::int64_t to, const Step& like,
                   Buffer into) override {
    Call& call = static_cast<Call&>(c);
    std::unique_lock lock(mutex_);
    for (const auto& [data, index] : call.incoming) {
      if (data.get() == &like) return expect_again(call, index, like, std::move(into), lock);
    }
    const int peer = owner_[static_cast<std::size_t>(from)];
    Receive r;
    r.peer = peer;
    r.from = from;
    r.to = to;
    r.tag = next_tag(recv_count_[static_cast<std::size_t>(peer)]);
    const std::size_t limit = values_ ? like.output_bytes() : 0;
    r.bytes = mpi_data::message_bytes(limit);
    r.bare = mpi_data::bare(limit);
    r.piece = mpi_data::piece_bytes();
    r.room = mpi_data::room_of(r.bytes, r.piece);
    if (r.bare && into.bytes() == r.room) r.buffer = std::move(into);  // no status byte: fits
    r.gate = Ref<Step>::adopt(
        new GateStep(like.device(), call.op, like.dtype(), like.shape(), like.layout()));
    Ref<Step> gate = r.gate;
    Settled settled;
    if (call.failure) {
      settled.failed.emplace_back(std::move(r.gate), call.failure);
    } else {
      if (several_[static_cast<std::size_t>(rank_)]) {
        call.incoming.emplace_back(Ref<Step>::share(const_cast<Step*>(&like)),
                                   call.receives.size());
      }
      call.receives.push_back(std::move(r));
      post_receive(call, call.receives.back(), settled);
    }
    lock.unlock();
    settled.apply();
    engine_->wake();
    return gate;
  }

  void send(RemoteCall& c, std::int64_t from, std::int64_t to, Step& data,
            std::exception_ptr verdict) override {
    (void)from;  // the receiver names it (expect); the channel's order says which message it is
    send_to_peers(c, data, std::move(verdict), [this, to](int p) {
      return to < 0 || p == owner_[static_cast<std::size_t>(to)];
    });
  }

  void send_to_process(RemoteCall& c, std::int64_t from, int process, Step& data,
                       std::exception_ptr verdict) override {
    (void)from;
    send_to_peers(c, data, std::move(verdict), [process](int p) { return p == process; });
  }

  Activity progress() override {
    std::shared_ptr<MpiTransport> idle;  // dropped last, outside the lock
    Settled settled;
    Activity left = Activity::idle;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return Activity::idle;
      const auto now = Clock::now();
      bool moved = false;
      for (auto it = calls_.begin(); it != calls_.end();) {
        Call& call = **it;
        if (!call.failure && !call.verified) {
          moved = check_fingerprints(call, now, settled) || moved;
        }
        if (!call.failure) moved = move_data(call, now, settled) || moved;
        moved = test_sends(call, settled) || moved;
        if (finished(call)) {
          settled.drop.push_back(std::move(*it));  // its messages go outside the lock
          it = calls_.erase(it);
          moved = true;
        } else {
          // A failed call's sends wait only for a peer that may never take them.
          left = std::max(left, call.failure ? Activity::lingering : Activity::waiting);
          ++it;
        }
      }
      mpi_data::drain(cancelled_);
      if (!cancelled_.empty()) left = std::max(left, Activity::lingering);
      if (left == Activity::idle) idle = std::move(keep_alive_);
      if (moved && left != Activity::idle) left = Activity::moved;
    }
    settled.apply();
    return left;
  }

  void shutdown() override {
    std::shared_ptr<MpiTransport> idle;  // dropped last, outside the lock
    Settled settled;
    std::vector<std::shared_ptr<Call>> calls;  // let go of outside the lock
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      for (const auto& call : calls_) {
        if (call->failure) continue;
        fail_call(*call,
                  std::make_exception_ptr(CommunicationError(
                      message(call->op, "the ferry::mpi::World ended before collective ", call->seq,
                              " of mesh ", name_, " (", call->text, ") finished"))),
                  settled);
      }
      // Cancelled receives complete at once; sends get a moment to be taken (a peer that is
      // still running takes them), then are let go of: MPI finishes them on its own.
      mpi_data::drain_all(cancelled_);
      const auto until = Clock::now() + std::chrono::seconds(1);
      for (const auto& call : calls_) {
        for (Peer& p : call->peers) mpi_data::settle_or_free(p.sent, until);
        for (Send& s : call->sends) {
          for (MPI_Request& r : s.requests) mpi_data::settle_or_free(r, until);
        }
      }
      calls = std::move(calls_);
      calls_.clear();
      engine_->retire(ctrl_);
      engine_->retire(data_);
      closed_ = true;
      idle = std::move(keep_alive_);
    }
    settled.apply();
  }

 private:
  /// send() to every other process that `wanted(p)` names.
  template <class Wanted>
  void send_to_peers(RemoteCall& c, Step& data, std::exception_ptr verdict, Wanted wanted) {
    auto call = std::static_pointer_cast<Call>(static_cast<Call&>(c).shared_from_this());
    std::shared_ptr<Outgoing> out;
    bool known = false;
    Settled settled;
    {
      std::lock_guard lock(mutex_);
      // The same data sent again in this call (to another peer, or for another of its
      // devices) shares the first copy rather than making its own. Looked up by address.
      auto& sent = call->outgoing;
      const auto at = std::find_if(sent.begin(), sent.end(),
                                   [&data](const auto& o) { return o.first == &data; });
      known = at != sent.end();
      if (known) {
        out = at->second;
      } else {
        out = std::make_shared<Outgoing>();
        out->data = Ref<Step>::share(&data);
        out->piece = mpi_data::piece_bytes();
        sent.emplace_back(&data, out);
      }
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || !wanted(p)) continue;
        // One message to a peer of several devices, however many of them need the data: it
        // copies it for each (expect() of the same data again). A peer of one device never
        // asks twice in a call, and keeps no list to know.
        if (several_[static_cast<std::size_t>(p)]) {
          if (std::find(out->peers.begin(), out->peers.end(), p) != out->peers.end()) continue;
          out->peers.push_back(p);
        }
        Send s;
        s.peer = p;
        s.tag = next_tag(send_count_[static_cast<std::size_t>(p)]);
        s.piece = out->piece;
        s.message = out->message;  // the copy, if it is made already
        out->slots.push_back(call->sends.size());
        call->sends.push_back(std::move(s));
        if (call->sends.back().message) post_send(*call, call->sends.back(), settled);
      }
    }
    settled.apply();
    if (known) return;
    // Outside the lock: the data may be done already, and then the copy happens right here.
    std::weak_ptr<MpiTransport> self = shared_from_this();
    const std::size_t limit = values_ ? data.output_bytes() : 0;
    ForwardStep::start(data, [self, call, out, limit, verdict](const Step& done,
                                                               const ForwardStep::Hold& hold) {
      auto message = std::make_shared<Message>(
          mpi_data::message_of(done, verdict, limit, out->piece, call->op, hold));
      if (auto t = self.lock()) t->ready(*call, *out, std::move(message));
    });
  }

  using Message = mpi_data::Message;
  using Send = mpi_data::Send;
  using Outgoing = mpi_data::Outgoing;
  using Receive = mpi_data::Receive;
  using Cancelled = mpi_data::Cancelled;

  using Peer = FingerprintPeer;
  using Call = MpiCall;
  using Settled = MpiSettled;

  int next_tag(std::uint64_t& count) const noexcept {
    return static_cast<int>(count++ % static_cast<std::uint64_t>(tag_limit_));
  }

  /// The copy of `out`'s data is made: every send of it is posted now, on this thread (the
  /// worker that completed the data, or the caller), unless the call failed meanwhile.
  void ready(Call& call, Outgoing& out, std::shared_ptr<Message> message) {
    Settled settled;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t s : out.slots) {
        call.sends[s].message = message;
        post_send(call, call.sends[s], settled);
      }
      out.message = std::move(message);
    }
    settled.apply();
    engine_->wake();
  }

  /// Posts `s` (its message is set) unless it is posted or its call failed.
  void post_send(Call& call, Send& s, Settled& settled) {
    if (s.posted || call.failure) return;
    const int rc = mpi_data::post(s, data_);
    if (rc != MPI_SUCCESS) {
      fail_call(call, error_of(call, rc, "MPI_Isend"), settled);
      return;
    }
    ++traffic_.messages_sent;
    traffic_.bytes_sent += s.message->bytes.bytes();
  }

  /// A gate for `like`'s data, which receive `index` of `call` brings already for another
  /// member of this process: it opens with a copy of the bytes (in `into` when that is their
  /// size) when that receive's gate opens, or now if it has, or fails as it does. Called with
  /// `lock` held; returns without it. (Defined in distributed/call_progress.hpp.)
  Ref<Step> expect_again(Call& call, std::size_t index, const Step& like, Buffer into,
                         std::unique_lock<std::mutex>& lock);

  /// Posts the first piece of `r` (the others once it came whole: its size says whether they
  /// follow) into its buffer: the caller's (expect's `into`), or a block of its stand-in's cache.
  void post_receive(Call& call, Receive& r, Settled& settled) {
    if (r.buffer.data() == nullptr)
      r.buffer = Buffer::allocate(r.room, &r.gate->device()->buffers(), call.op);
    const int rc = mpi_data::post(r, 1, data_);
    if (rc != MPI_SUCCESS) fail_call(call, error_of(call, rc, "MPI_Irecv"), settled);
  }

  // The progress side of a call (defined in distributed/call_progress.hpp).

  /// Tests the fingerprints of `call`, which is neither verified nor failed; whether it was
  /// decided (verified or failed).
  bool check_fingerprints(Call& call, Clock::time_point now, Settled& settled);
  /// Tests the receives of `call` (not failed) and posts what is due: a receive's later
  /// pieces once its first came whole, the sends whose data is ready that are not posted yet.
  /// A receive that is complete opens (or fails) its gate only once the call is verified.
  /// Whether anything completed.
  bool move_data(Call& call, Clock::time_point now, Settled& settled);
  /// Fails `call` (and, since the channels may now disagree, every pending call of the mesh):
  /// its gates get `error`, its posted receives are cancelled.
  void fail_call(Call& call, std::exception_ptr error, Settled& settled);
  void fail_one(Call& call, std::exception_ptr error, Settled& settled);
  /// Cancels `requests` (those not complete yet) and keeps them, with the buffer they write
  /// into, until MPI completes them.
  void cancel(std::vector<MPI_Request> requests, Buffer buffer,
              std::shared_ptr<DeviceState> device = nullptr);
  std::string timeout_text() const;
  /// Pings the peers whose fingerprint `call` still waits for, once, halfway to its deadline.
  void ask_late_peers(Call& call, Clock::time_point now);
  /// Pings the peer whose data `r` waits for, once, halfway to its deadline.
  void ask_late_sender(mpi_data::Receive& r, Clock::time_point now);
  /// What the notes say of each peer whose fingerprint `call` still waits for.
  std::string late_peers_text(const Call& call, Clock::time_point now) const;
  /// What the notes say of `peer`, pinged at `asked` (never: a default time point), which has
  /// not `done` what it was waited for: "; the World of rank 1 has ended", "; rank 2 answers
  /// (it runs, but has not <done>)", "; rank 3 has not answered for 1000 ms (...)", or nothing
  /// while the ping is too young to say.
  std::string fate_of(int peer, Clock::time_point asked, Clock::time_point now,
                      std::string_view done) const;

  std::exception_ptr error_of(const Call& call, int rc, std::string_view what) const {
    return std::make_exception_ptr(
        CommunicationError(message(call.op, what, " failed in collective ", call.seq, " of mesh ",
                                   name_, ": ", mpi_error_text(rc), " (MPI error ", rc, ")")));
  }

  std::shared_ptr<MpiProgress> engine_;
  std::shared_ptr<PeerNotes> notes_;  // null with one process
  MPI_Comm ctrl_;
  MPI_Comm data_;
  const std::vector<int> owner_;
  const std::string name_;
  const bool values_;  // false: every owner's devices are model-only
  int rank_ = 0;
  int size_ = 1;
  int tag_limit_ = 32767;

  std::mutex mutex_;  // guards everything below, and every MPI call on this transport's requests
  std::uint64_t seq_ = 0;
  std::vector<std::uint64_t> send_count_;  // per peer: the data channel's next number
  std::vector<std::uint64_t> recv_count_;
  std::vector<bool> several_;  // by rank: whether it owns more than one member
  ferry::mpi::MeshTraffic traffic_;
  // Begun, not yet finished, in sequence order: a few at a time, so a list (no node to
  // allocate a call, as a map's).
  std::vector<std::shared_ptr<Call>> calls_;
  std::vector<Cancelled> cancelled_;
  std::exception_ptr broken_;                 // the first failure: every later call throws it
  std::shared_ptr<MpiTransport> keep_alive_;  // itself, while a call is in flight
  bool closed_ = false;
};

}  // namespace ferry::detail

#include "ferry/distributed/call_progress.hpp"  // IWYU pragma: keep
