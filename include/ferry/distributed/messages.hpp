#pragma once
// The data messages of a mesh over MPI processes (distributed/transport.hpp moves them): what a
// message holds, the sends and receives that carry one, and how long each piece of memory
// lives, since MPI may still write into (or read from) a buffer after the program that asked
// for it has moved on.
//
// A data message of failure_bytes or more is the source's bytes alone, sent from the source's own
// buffer (no copy: the sender's ForwardStep keeps its claim on them until MPI is done); a
// failure instead of them is always shorter than the data's first piece, which is how the
// receiver tells them apart. A shorter one is a copy of the bytes and one status byte: 0. A
// failure, when the source failed on its own process (its kernel threw, or its device's model
// failed the step), is (the start of) its message and a status byte 1; or, for a DeviceFault,
// its step, op, called op (empty where it is the op), device and cause, each ended by a zero
// byte but the last, and 2, so that the receiver throws a DeviceFault as one process would. A
// failure may take failure_bytes even where the data is shorter (a loss of one float): the
// receiver makes room for that much.
//
// MPI counts bytes in `int`: a message of 2 GiB or more cannot be one MPI message. Each travels
// as pieces of at most piece_bytes() (the last one shorter), all on the message's tag: MPI keeps
// the messages of one sender on one tag in order, so the receiver's k-th receive gets piece k.
// A failure's message is always shorter than a piece (its text is cut to fit), so the first
// piece alone tells the receiver which it got: a whole piece, and the rest follow; or less,
// and that was all (a failure).

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/core/inline_list.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/remote.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {
// Apart from the rest of ferry::detail: these names are plain, and only the transport uses them.
namespace mpi_data {

/// The most bytes one MPI message of data carries, unless lowered: 1 GiB, well under MPI's
/// INT_MAX. A test lowers it (on every rank alike, between collectives) to send small arrays in
/// many pieces; a send and the receive that takes it must read the same value.
inline std::atomic<std::size_t> piece_limit{std::size_t{1} << 30};

/// piece_limit as the transport uses it: at least 2 (a failure's text, cut to fit a piece,
/// keeps its status byte and still falls short of a whole piece) and at most INT_MAX.
inline std::size_t piece_bytes() noexcept {
  const std::size_t limit = piece_limit.load(std::memory_order_relaxed);
  return std::clamp<std::size_t>(limit, 2, static_cast<std::size_t>(INT_MAX));
}

/// How many pieces of at most `piece` bytes a message of `bytes` bytes travels as (1 at least).
inline std::size_t pieces_of(std::size_t bytes, std::size_t piece) noexcept {
  return bytes <= piece ? 1 : (bytes + piece - 1) / piece;
}

/// The size of piece `k` of a message of `bytes` bytes: an int, since `piece` is at most
/// INT_MAX (piece_bytes()).
inline int piece_count(std::size_t bytes, std::size_t piece, std::size_t k) noexcept {
  return static_cast<int>(std::min(piece, bytes - k * piece));
}

/// The bytes a failure's message (status byte included) may take even when the data it stands
/// for is shorter: a DeviceFault's step, op, called op, device and cause fit in this.
inline constexpr std::size_t failure_bytes = 256;

/// Whether data of `limit` bytes travels bare (its bytes alone, from its own buffer) rather than
/// copied with a status byte: from failure_bytes up, where a failure is told by its length.
inline bool bare(std::size_t limit) noexcept { return limit >= failure_bytes; }

/// The bytes of the message for data of `limit` bytes (0: a model-only mesh's status byte).
inline std::size_t message_bytes(std::size_t limit) noexcept {
  return bare(limit) ? limit : limit + 1;
}

/// The room a receive makes for a message of `bytes` bytes (status byte included): the data's,
/// or, when that is one piece, as much as a failure may take (failure_bytes, within the piece).
inline std::size_t room_of(std::size_t bytes, std::size_t piece) noexcept {
  return bytes > piece ? bytes : std::max(bytes, std::min(piece, failure_bytes));
}

/// The bytes of a data message, taken from the cache of `device` when there is one. The
/// message may outlive every step of that device (a send still in flight when the program has
/// dropped its arrays and mesh), so it holds the device: the bytes go back to its cache before
/// the device can go (members are destroyed last to first).
struct Message {
  std::shared_ptr<DeviceState> device;
  Buffer bytes;               // borrowed from the data's buffer when it travels bare
  ForwardStep::Hold claim;    // then: the data's claim on that buffer, until MPI is done
};

/// One message to one peer, on its channel's tag, in pieces of at most `piece` bytes.
struct Send {
  int peer = 0;
  int tag = 0;
  std::size_t piece = 0;
  std::shared_ptr<Message> message;   // set once the data is done
  InlineList<MPI_Request, 1> requests;  // one a piece, once posted (one below 1 GiB)
  bool posted = false;
  bool done = false;
};

/// One step of a call's data to send, and the sends (indices into the call's sends) that carry
/// its one copy.
struct Outgoing {
  Ref<Step> data;  // held while the call is built: no other step can take its address
  InlineList<std::size_t, 4> slots;  // its sends in the call: a few, in place
  InlineList<int, 4> peers;          // the peers they go to: one message a peer
  std::size_t piece = 0;             // piece_bytes() when the first send was made
  std::shared_ptr<Message> message;  // set once the data is done
};

/// Another gate of this process for data a Receive brings (expect() of the same data for
/// another of this process's members): it opens with its own copy of the bytes, in `into` when
/// that is their size, or fails as the Receive's gate does.
struct Copy {
  Ref<Step> gate;
  Buffer into;
};

/// One message from a peer: the data of member `from` for member `to`, which opens `gate`. Its
/// first piece is received alone, the others once it came whole.
struct Receive {
  int peer = 0;
  int tag = 0;
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::size_t bytes = 0;  // the whole message's, status byte included
  std::size_t piece = 0;
  std::size_t room = 0;  // room_of(bytes, piece): the buffer's size, a failure's at most
  bool bare = false;     // data without a status byte (bare())
  Ref<Step> gate;
  Buffer buffer;
  InlineList<MPI_Request, 1> requests;  // the pieces posted so far (null once complete)
  std::size_t first = 0;              // the first piece's bytes, once it came
  std::size_t arrived = 0;            // the bytes of every piece come so far
  bool posted = false;
  bool done = false;
  std::chrono::steady_clock::time_point deadline{};
  std::chrono::steady_clock::time_point asked{};  // when its peer was pinged (PeerNotes)
  InlineList<Copy, 1> copies;  // other local members' gates for the same data
  std::exception_ptr failure;  // once done: what its gate failed with, if it did
};

/// Set by tests only (on every rank alike, between collectives): expect() of data that another
/// member of this process expects already in the call waits until that data has arrived, so
/// that its copy is made from the step its first gate handed the bytes to, not on arrival.
inline std::atomic<bool> copy_after_arrival{false};

/// The payload of `r` (its data, without the status byte), for its copies.
inline std::size_t payload_bytes(const Receive& r) noexcept {
  return r.bare ? r.bytes : r.bytes - 1;
}

/// A copy of the `n` bytes at `bytes` for another gate of the same data: in `into` when that is
/// their size, else in a block of `device`'s cache. None for no bytes.
inline Buffer copy_of(const std::byte* bytes, std::size_t n, Buffer into, DeviceState& device,
                      std::string_view op) {
  if (n == 0) return Buffer();
  if (into.bytes() != n) return Buffer::copy_of(bytes, n, &device.buffers(), op);
  std::memcpy(into.data(), bytes, n);
  return into;
}

/// Requests cancelled (with what they write into) that MPI has yet to complete.
struct Cancelled {
  std::vector<MPI_Request> requests;
  std::shared_ptr<DeviceState> device;  // whose cache `buffer` goes back to: outlives it
  Buffer buffer;
};

/// The message for `done`, whose device's model gave the verdict `verdict` on it (null: it ran):
/// its `limit` bytes, borrowed from its buffer and held by `claim` when they travel bare, else
/// a copy and a status byte; or, when the model or the kernel failed it (the model's verdict
/// first, as an export of it would throw), that error as status 1 or 2 says, cut to fit the
/// receiver's room_of(message_bytes(limit), piece) and to less than the data's first piece
/// when the data travels bare or would take several pieces of `piece` bytes. A copy's memory
/// comes from the cache of `done`'s device, as each receive's does from its stand-in's: a
/// gradient all-reduced step after step then reuses warm blocks instead of first-touching new
/// ones (64 MiB of page faults cost more than sending them).
inline Message message_of(const Step& done, const std::exception_ptr& verdict, std::size_t limit,
                          std::size_t piece, std::string_view op,
                          const ForwardStep::Hold& claim) {
  if (const std::exception_ptr& e = verdict ? verdict : done.error()) {
    std::string text = "failed";
    std::byte status{1};
    try {
      std::rethrow_exception(e);
    } catch (const DeviceFault& x) {
      status = std::byte{2};
      text = std::to_string(x.step());
      // The called op only where it is another op's: the text must fit failure_bytes.
      const std::string none;
      const std::string& called = x.called() == x.op() ? none : x.called();
      for (const std::string* part : {&x.op(), &called, &x.device(), &x.cause()}) {
        text += '\0';
        text += *part;
      }
    } catch (const std::exception& x) {
      text = x.what();
    } catch (...) {
    }
    const std::size_t bytes = message_bytes(limit);
    const std::size_t room = bare(limit)  ? std::min(piece, limit) - 1
                             : bytes > piece ? piece - 1
                                             : room_of(bytes, piece);
    text.resize(std::min(text.size(), room - 1));
    Buffer out = Buffer::allocate(text.size() + 1, nullptr, op);
    std::memcpy(out.data(), text.data(), text.size());
    out.data()[text.size()] = status;
    return {nullptr, std::move(out), {}};
  }
  if (bare(limit)) return {done.device(), Buffer::borrow(done.output().data(), limit), claim};
  Buffer out = Buffer::allocate(limit + 1, &done.device()->buffers(), op);
  if (limit != 0) std::memcpy(out.data(), done.output().data(), limit);
  out.data()[limit] = std::byte{0};
  return {done.device(), std::move(out), {}};
}

/// Whether `r` is complete (or null); an errored request is freed, since nothing more will
/// come of it. Open MPI frees it already when MPI_Test reports its error (and nulls `r`):
/// freeing the null request again would be an error of its own, and MPI_Request_free reports
/// on MPI_COMM_WORLD, whose errors abort. (A receive cancelled after a peer's larger message
/// truncated it, say: the error shows when the cancellation is tested.)
inline bool test_once(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return true;
  int flag = 0;
  if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    return true;
  }
  return flag != 0;
}

/// Whether every one of `requests` is complete (testing each not yet known to be).
template <class Requests>
bool test_all(Requests& requests) {
  bool all = true;
  for (MPI_Request& r : requests) all = test_once(r) && all;
  return all;
}

/// Posts every piece of `s` (its message is set) to its peer on `comm`: MPI_SUCCESS, or the
/// error of the first piece MPI refused (the pieces before it are posted: `s.requests` holds
/// them).
inline int post(Send& s, MPI_Comm comm) {
  const std::size_t bytes = s.message->bytes.bytes();
  const std::size_t n = pieces_of(bytes, s.piece);
  s.requests.clear();
  for (std::size_t k = 0; k < n; ++k) s.requests.push_back(MPI_REQUEST_NULL);
  s.posted = true;
  for (std::size_t k = 0; k < n; ++k) {
    const int rc = MPI_Isend(s.message->bytes.data() + k * s.piece, piece_count(bytes, s.piece, k),
                             MPI_BYTE, s.peer, s.tag, comm, &s.requests[k]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/// Posts pieces [r.requests.size(), end) of `r` (its buffer is allocated) on `comm`, as
/// post(Send&) does.
inline int post(Receive& r, std::size_t end, MPI_Comm comm) {
  r.posted = true;
  for (std::size_t k = r.requests.size(); k < end; ++k) {
    r.requests.push_back(MPI_REQUEST_NULL);
    MPI_Request& request = r.requests.back();
    // The first piece makes room for a failure longer than the data (room_of).
    const int count = k == 0 ? static_cast<int>(std::min(r.piece, r.room))
                             : piece_count(r.bytes, r.piece, k);
    const int rc = MPI_Irecv(r.buffer.data() + k * r.piece, count,
                             MPI_BYTE, r.peer, r.tag, comm, &request);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/// Tests the posted pieces of `r` not yet complete, counting the bytes of those that are;
/// `waiting` when some are not. MPI_SUCCESS, or the error of the first test that failed.
inline int test(Receive& r, bool& waiting) {
  for (std::size_t k = 0; k < r.requests.size(); ++k) {
    if (r.requests[k] == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_Status status;
    const int rc = MPI_Test(&r.requests[k], &flag, &status);
    if (rc != MPI_SUCCESS) return rc;
    if (flag == 0) {
      waiting = true;
      continue;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    const auto got = static_cast<std::size_t>(std::max(count, 0));
    if (k == 0) r.first = got;
    r.arrived += got;
  }
  return MPI_SUCCESS;
}

/// Whether the message `r` received (every piece in) is data: all of it, and status 0 where
/// it has one.
inline bool whole(const Receive& r) {
  return r.arrived == r.bytes && (r.bare || r.buffer.data()[r.bytes - 1] == std::byte{0});
}

/// The failure that `r` received instead of data (it and its status byte came in the first
/// piece, which they fit): a DeviceFault as the sender's, when it sent one whole; otherwise
/// CommunicationError from `op` naming the member, the rank and the failure's text (a
/// DeviceFault's parts joined by spaces, when they were cut to fit).
inline std::exception_ptr failure_of(const Receive& r, std::string_view op) {
  const std::size_t length = std::max<std::size_t>(r.first, 1) - 1;
  std::string text(reinterpret_cast<const char*>(r.buffer.data()), length);
  if (r.buffer.data()[length] == std::byte{2}) {
    std::vector<std::string> parts{""};
    for (const char c : text) {
      if (c == '\0') {
        parts.emplace_back();
      } else {
        parts.back() += c;
      }
    }
    std::uint64_t step = 0;
    const std::string& digits = parts[0];
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (parts.size() == 5 && ec == std::errc{} && end == digits.data() + digits.size()) {
      return std::make_exception_ptr(DeviceFault(parts[1], step, parts[3], parts[4], parts[2]));
    }
    std::replace(text.begin(), text.end(), '\0', ' ');
  }
  return std::make_exception_ptr(CommunicationError(message(
      op, "the data of member ", r.from, " failed on rank ", r.peer, ": ", text)));
}

/// Forgets the cancelled requests that MPI has completed (their buffers go with them).
inline void drain(std::vector<Cancelled>& list) {
  std::erase_if(list, [](Cancelled& c) { return test_all(c.requests); });
}

/// Waits for every cancelled request: a cancelled receive completes at once.
inline void drain_all(std::vector<Cancelled>& list) {
  for (Cancelled& c : list) {
    for (MPI_Request& r : c.requests) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  list.clear();
}

/// Gives `r` until `until` to complete, then lets go of it (MPI finishes it on its own).
inline void settle_or_free(MPI_Request& r, std::chrono::steady_clock::time_point until) {
  while (r != MPI_REQUEST_NULL && !test_once(r) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
}

}  // namespace mpi_data
}  // namespace ferry::detail
