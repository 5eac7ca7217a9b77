#pragma once
// The progress side of a collective over MPI processes: what MpiTransport's progress()
// (distributed/transport.hpp, which declares these) does with a call once it is posted. It
// tests the peers' fingerprints and decides the call (verified, CollectiveMismatch or
// PeerTimeout), tests the data and opens the receives' gates once the call is verified, and
// fails a call, with every later call of its mesh, cancelling what it had posted. And a receive
// made again for another member of the process (expect_again), which waits on one already made.

#include <mpi.h>

#include <atomic>
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
#include "ferry/distributed/messages.hpp"
#include "ferry/distributed/transport.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/device_state.hpp"

namespace ferry::detail {

inline bool MpiTransport::check_fingerprints(Call& call, Clock::time_point now,
                                             Settled& settled) {
  const FingerprintCheck found = test_fingerprints(call.peers, rank_, call.out);
  if (found.rc != MPI_SUCCESS) {
    fail_call(call, error_of(call, found.rc, "MPI_Test"), settled);
    return true;
  }
  if (found.differs >= 0) {
    const FingerprintMessage& theirs = call.peers[static_cast<std::size_t>(found.differs)].in;
    fail_call(call,
              std::make_exception_ptr(CollectiveMismatch(message(
                  call.op, "rank ", found.differs, " called ", theirs.view(), " where rank ",
                  rank_, " called ", call.text, " (collective ", call.seq, " of mesh ", name_,
                  ")"))),
              settled);
    return true;
  }
  if (!found.missing) {
    if (call.deferred) {
      fail_call(call, call.deferred, settled);
      return true;
    }
    call.verified = true;
    if (call.gate) {
      call.gate_decided = true;
      settled.open.emplace_back(call.gate, Buffer());
    }
    return true;
  }
  if (now >= call.deadline) {
    const std::string missing = missing_peers(call.peers, rank_);
    fail_call(call,
              std::make_exception_ptr(PeerTimeout(message(
                  call.op, call.text, " (collective ", call.seq, " of mesh ", name_, ") on rank ",
                  rank_, ": rank", missing.find(',') == std::string::npos ? " " : "s ", missing,
                  " did not arrive within ", timeout_text(), late_peers_text(call, now)))),
              settled);
    return true;
  }
  ask_late_peers(call, now);
  return false;
}

inline bool MpiTransport::move_data(Call& call, Clock::time_point now, Settled& settled) {
  if (call.deferred) return false;  // the fingerprints decide what becomes of the call
  bool moved = false;
  for (Receive& r : call.receives) {
    if (r.done) continue;
    if (!r.posted) {
      post_receive(call, r, settled);
      if (call.failure) return true;
      continue;
    }
    if (call.verified && r.deadline == Clock::time_point{}) r.deadline = now + engine_->timeout();
    bool waiting = false;
    const std::size_t before = r.arrived;
    const int rc = mpi_data::test(r, waiting);
    if (rc != MPI_SUCCESS) {
      std::exception_ptr error = error_of(call, rc, "MPI_Test");
      if (call.verified) {
        fail_call(call, std::move(error), settled);
      } else {
        call.deferred = std::move(error);
      }
      return true;
    }
    moved = moved || r.arrived != before;
    if (waiting) {
      if (!call.verified) continue;
      if (now < r.deadline) {
        ask_late_sender(r, now);
        continue;
      }
      fail_call(call,
                std::make_exception_ptr(PeerTimeout(message(
                    call.op, call.text, " (collective ", call.seq, " of mesh ", name_,
                    ") on rank ", rank_, ": rank ", r.peer, " sent no data of member ", r.from,
                    " within ", timeout_text(), fate_of(r.peer, r.asked, now, "sent it")))),
                settled);
      return true;
    }
    const std::size_t pieces = mpi_data::pieces_of(r.bytes, r.piece);
    if (r.requests.size() < pieces && r.first == r.piece) {
      // The first piece came whole, so it was data: the other pieces follow on its tag.
      if (call.verified) r.deadline = now + engine_->timeout();
      const int posted = mpi_data::post(r, pieces, data_);
      if (posted != MPI_SUCCESS) {
        fail_call(call, error_of(call, posted, "MPI_Irecv"), settled);
        return true;
      }
      continue;
    }
    if (!call.verified) continue;  // arrived, but not believed yet
    r.done = true;
    moved = true;
    ++traffic_.messages_received;
    traffic_.bytes_received += r.arrived;
    if (mpi_data::whole(r)) {
      // Without values the status byte was all: the copy it opens computes nothing.
      Buffer got = std::move(r.buffer);
      const std::size_t n = values_ ? mpi_data::payload_bytes(r) : 0;
      DeviceState& device = *r.gate->device();
      for (mpi_data::Copy& c : r.copies) {  // made before any gate opens: none can take `got`
        Buffer copy = mpi_data::copy_of(got.data(), n, std::move(c.into), device, call.op);
        settled.open.emplace_back(std::move(c.gate), std::move(copy));
      }
      r.copies.clear();
      // Another member of this process may still expect the same data in this call: it copies
      // the bytes from where this gate hands them (expect_again), so the gate stays named.
      Ref<Step> gate = several_[static_cast<std::size_t>(rank_)] ? r.gate : std::move(r.gate);
      settled.open.emplace_back(std::move(gate), values_ ? std::move(got) : Buffer());
    } else {
      fail_receive(r, mpi_data::failure_of(r, call.op), settled);
    }
  }
  // Sends whose copy came before a failed post: none, normally (ready() posts them).
  for (Send& s : call.sends) {
    if (s.message) post_send(call, s, settled);
    if (call.failure) return true;
  }
  return moved;
}

inline void MpiTransport::fail_call(Call& call, std::exception_ptr error, Settled& settled) {
  if (!broken_) broken_ = error;
  for (const auto& other : calls_) {
    if (other.get() != &call && !other->failure && other->seq > call.seq)
      fail_one(*other, broken_, settled);
  }
  fail_one(call, std::move(error), settled);
}

inline void MpiTransport::fail_one(Call& call, std::exception_ptr error, Settled& settled) {
  call.failure = error;
  if (call.gate && !call.gate_decided) {
    call.gate_decided = true;
    settled.failed.emplace_back(call.gate, error);
  }
  for (Peer& p : call.peers) {
    if (p.received != MPI_REQUEST_NULL)
      cancel({std::exchange(p.received, MPI_REQUEST_NULL)}, Buffer());
  }
  for (Receive& r : call.receives) {
    if (r.done) continue;
    r.done = true;
    if (r.posted) {
      cancel(std::vector<MPI_Request>(r.requests.begin(), r.requests.end()), std::move(r.buffer),
             r.gate->device());
      r.requests.clear();
    }
    fail_receive(r, error, settled);
  }
}

inline void MpiTransport::cancel(std::vector<MPI_Request> requests, Buffer buffer,
                                 std::shared_ptr<DeviceState> device) {
  std::erase(requests, MPI_REQUEST_NULL);
  if (requests.empty()) return;
  for (MPI_Request& r : requests) MPI_Cancel(&r);
  cancelled_.push_back({std::move(requests), std::move(device), std::move(buffer)});
}

// A receive this process makes again for another of its members (see the declaration).
inline Ref<Step> MpiTransport::expect_again(Call& call, std::size_t index, const Step& like,
                                            Buffer into, std::unique_lock<std::mutex>& lock) {
  while (mpi_data::copy_after_arrival.load(std::memory_order_relaxed) &&
         !call.receives[index].done && !call.failure) {
    lock.unlock();  // the progress thread completes it (only this thread adds receives)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
  Receive& first = call.receives[index];
  Ref<Step> gate = Ref<Step>::adopt(
      new GateStep(like.device(), call.op, like.dtype(), like.shape(), like.layout()));
  Settled settled;
  if (call.failure) {
    settled.failed.emplace_back(gate, call.failure);
  } else if (!first.done) {
    first.copies.push_back({gate, std::move(into)});
  } else if (first.failure) {
    settled.failed.emplace_back(gate, first.failure);
  } else {
    // Arrived already, and handed on by its gate (to the step of the first member that asked,
    // made before this call of expect): copied from there. Nothing of a collective writes over
    // data it received, and this is still the call that received it.
    const std::size_t n = values_ ? mpi_data::payload_bytes(first) : 0;
    Ref<Step> opened = first.gate;  // held while it is read: the progress thread opens it
    const std::int64_t from = first.from;
    lock.unlock();
    const auto& g = static_cast<const GateStep&>(*opened);
    g.wait_done();  // settled.apply(), right after move_data: a spin, then a futex wait
    if (const Step* held = g.holder(); held != nullptr || n == 0) {
      const std::byte* bytes = n > 0 ? held->out<std::byte>() : nullptr;
      settled.open.emplace_back(
          gate, mpi_data::copy_of(bytes, n, std::move(into), *like.device(), call.op));
    } else {  // the first member's receive took the bytes and was never submitted (it threw)
      settled.failed.emplace_back(
          gate, std::make_exception_ptr(CommunicationError(message(
                    call.op, "the data of member ", from, " (collective ", call.seq,
                    " of mesh ", name_, ") went with a receive that failed to start"))));
    }
    settled.apply();
    return gate;
  }
  lock.unlock();
  settled.apply();
  return gate;
}

inline void MpiTransport::ask_late_peers(Call& call, Clock::time_point now) {
  if (!notes_ || now < call.ask_at || call.asked != Clock::time_point{}) return;
  call.asked = now;
  for (std::size_t p = 0; p < call.peers.size(); ++p) {
    if (static_cast<int>(p) != rank_ && !call.peers[p].arrived) notes_->ping(static_cast<int>(p));
  }
}

inline void MpiTransport::ask_late_sender(mpi_data::Receive& r, Clock::time_point now) {
  if (!notes_ || r.asked != Clock::time_point{} || now < r.deadline - engine_->timeout() / 2) {
    return;
  }
  r.asked = now;
  notes_->ping(r.peer);
}

inline std::string MpiTransport::late_peers_text(const Call& call, Clock::time_point now) const {
  std::string out;
  for (std::size_t p = 0; p < call.peers.size(); ++p) {
    const int peer = static_cast<int>(p);
    if (peer == rank_ || call.peers[p].arrived) continue;
    out += fate_of(peer, call.asked, now, "made this call");
  }
  return out;
}

inline std::string MpiTransport::fate_of(int peer, Clock::time_point asked, Clock::time_point now,
                                         std::string_view done) const {
  if (!notes_) return {};
  if (notes_->left(peer)) return "; the World of rank " + std::to_string(peer) + " has ended";
  // A live peer answers within its progress thread's idle sleep (100 ms); a ping younger than
  // this says nothing yet.
  constexpr auto long_enough = std::chrono::milliseconds(500);
  if (asked == Clock::time_point{} || now - asked < long_enough) return {};
  if (notes_->heard(peer) >= asked) {
    return "; rank " + std::to_string(peer) + " answers (it runs, but has not " +
           std::string(done) + ")";
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - asked);
  return "; rank " + std::to_string(peer) + " has not answered for " +
         std::to_string(ms.count()) + " ms (has its process died?)";
}

inline std::string MpiTransport::timeout_text() const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(engine_->timeout());
  return std::to_string(ms.count()) + " ms (the world's collective_timeout)";
}

}  // namespace ferry::detail
