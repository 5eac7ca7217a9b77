#pragma once
// One collective over MPI processes as its mesh's transport (distributed/transport.hpp) tracks
// it: its fingerprints, the data messages it receives and sends, and the gates it decides.
// The transport posts and tests; this says what a call holds and when it may be forgotten.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ferry/core/inline_list.hpp"
#include "ferry/distributed/fingerprint.hpp"
#include "ferry/distributed/messages.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/remote.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// A collective call over MPI processes, from begin() until nothing of it is in flight. Every
/// member is guarded by its transport's mutex.
struct MpiCall final : RemoteCall, std::enable_shared_from_this<MpiCall> {
  std::uint64_t seq = 0;
  std::string op;
  std::string text;
  FingerprintMessage out;
  std::vector<FingerprintPeer> peers;  // by rank; never resized once the receives are posted
  std::chrono::steady_clock::time_point deadline{};  // for the peers' fingerprints
  // Halfway to the deadline the late peers are pinged (distributed/peer_notes.hpp), so that a
  // PeerTimeout can say whether each answers: when to, and when it was done.
  std::chrono::steady_clock::time_point ask_at{};
  std::chrono::steady_clock::time_point asked{};
  bool verified = false;
  bool built = false;  // end(): every expect() and send() of the call is known
  std::exception_ptr failure;
  // An MPI error of a receive before the call was verified: the call's, unless the
  // fingerprints differ (a peer making another call sends other messages) or never come.
  std::exception_ptr deferred;
  Ref<Step> gate;             // verified(): opens when the call is
  bool gate_decided = false;  // the gate was opened or failed (or is about to be)
  std::vector<mpi_data::Receive> receives;
  std::vector<mpi_data::Send> sends;
  // While the call is built (until end()), by the address of its data: the Ref each holds
  // keeps that address from being reused by another step meanwhile. A list, searched: a call
  // sends a few distinct data (one a local member's shard or part), where a hash table would
  // cost a node and a bucket array at every call.
  std::vector<std::pair<const Step*, std::shared_ptr<mpi_data::Outgoing>>> outgoing;
  // While the call is built, on a process of several members, the data it receives from other
  // processes, by its stand-in (held for its address, as outgoing's data), with the index of
  // its Receive: the same data expected for another member becomes a Copy of it, not a message.
  std::vector<std::pair<Ref<Step>, std::size_t>> incoming;
};

/// Gates decided under the transport's lock, opened or failed once it is let go of:
/// completing a gate runs its readers' completions, which may come back into the transport
/// (a ForwardStep's copy, posting its sends).
struct MpiSettled {
  // Inline lists: a poll settles a gate or two and lets go of a call or two, which as vectors
  // would cost an allocation each at every call.
  InlineList<std::pair<Ref<Step>, Buffer>, 4> open;
  InlineList<std::pair<Ref<Step>, std::exception_ptr>, 4> failed;
  // Let go of once the lock is: a message sent from its data's buffer completes that data's
  // ForwardStep when it goes, which may make a donation ready.
  InlineList<std::shared_ptr<void>, 4> drop;
  void apply() {
    for (auto& [gate, bytes] : open) static_cast<GateStep&>(*gate).open(std::move(bytes));
    for (auto& [gate, error] : failed) static_cast<GateStep&>(*gate).fail(error);
    open.clear();
    failed.clear();
    drop.clear();
  }
};

/// Fails `r` with `error`: the gate of the member it was posted for, and the copies other members
/// of this process were to get of the same data. Its buffer goes back to its device's cache.
inline void fail_receive(mpi_data::Receive& r, const std::exception_ptr& error,
                         MpiSettled& settled) {
  r.buffer = Buffer();
  for (mpi_data::Copy& c : r.copies) settled.failed.emplace_back(std::move(c.gate), error);
  r.copies.clear();
  r.failure = error;
  settled.failed.emplace_back(std::move(r.gate), error);
}

/// Tests the sends of `call` (fingerprints and data): a finished send lets go of its message
/// (into `settled`). Whether one finished.
inline bool test_sends(MpiCall& call, MpiSettled& settled) {
  bool moved = false;
  for (FingerprintPeer& p : call.peers) {
    if (p.sent != MPI_REQUEST_NULL) moved = mpi_data::test_once(p.sent) || moved;
  }
  for (mpi_data::Send& s : call.sends) {
    if (s.posted && !s.done && mpi_data::test_all(s.requests)) {
      s.done = true;
      settled.drop.push_back(std::move(s.message));
      moved = true;
    }
  }
  return moved;
}

/// Whether nothing of `call` is left in flight, so it can be forgotten.
inline bool finished(const MpiCall& call) {
  if (!call.built) return false;
  for (const FingerprintPeer& p : call.peers) {
    if (p.sent != MPI_REQUEST_NULL || p.received != MPI_REQUEST_NULL) return false;
  }
  if (call.failure) {
    // Its sends that were never posted never will be.
    for (const mpi_data::Send& s : call.sends) {
      if (s.posted && !s.done) return false;
    }
    return true;
  }
  if (!call.verified) return false;
  for (const mpi_data::Receive& r : call.receives) {
    if (!r.done) return false;
  }
  for (const mpi_data::Send& s : call.sends) {
    if (!s.done) return false;
  }
  return true;
}

}  // namespace ferry::detail
