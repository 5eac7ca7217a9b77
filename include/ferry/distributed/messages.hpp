#pragma once
// The data messages of a mesh over MPI processes (distributed/transport.hpp moves them): what a
// message holds, the sends and receives that carry one, and how long each piece of memory
// lives, since MPI may still write into (or read from) a buffer after the program that asked
// for it has moved on.
//
// A data message is the source's bytes and one status byte: 0, or 1 when the source failed on
// its own process, the bytes then being (the start of) that failure's message.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {
// Apart from the rest of ferry::detail: these names are plain, and only the transport uses them.
namespace mpi_data {

/// The bytes of a data message, taken from the cache of `device` when there is one. The
/// message may outlive every step of that device (a send still in flight when the program has
/// dropped its arrays and mesh), so it holds the device: the bytes go back to its cache before
/// the device can go (members are destroyed last to first).
struct Message {
  std::shared_ptr<DeviceState> device;
  Buffer bytes;
};

/// One message to one peer, on its channel's tag.
struct Send {
  int peer = 0;
  int tag = 0;
  std::shared_ptr<Message> message;  // set once the data is done
  MPI_Request request = MPI_REQUEST_NULL;
  bool posted = false;
  bool done = false;
};

/// One step of a call's data to send, and the sends (indices into the call's sends) that carry
/// its one copy.
struct Outgoing {
  Ref<Step> data;  // held while the call is built: no other step can take its address
  std::vector<std::size_t> slots;
  std::shared_ptr<Message> message;  // set once the data is done
};

/// One message from a peer: the data of member `from` for member `to`, which opens `gate`.
struct Receive {
  int peer = 0;
  int tag = 0;
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::size_t bytes = 0;
  Ref<Step> gate;
  Buffer buffer;
  MPI_Request request = MPI_REQUEST_NULL;
  bool posted = false;
  bool done = false;
  std::chrono::steady_clock::time_point deadline{};
};

/// A request cancelled (with what it writes into) that MPI has yet to complete.
struct Cancelled {
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<DeviceState> device;  // whose cache `buffer` goes back to: outlives it
  Buffer buffer;
};

/// The message for `done`: its bytes and a status byte, or its error's text and status 1.
/// Its memory comes from the cache of `done`'s device, as each receive's does from its
/// stand-in's: a gradient all-reduced step after step then reuses warm blocks instead of
/// first-touching new ones (64 MiB of page faults cost more than sending them).
inline Message message_of(const Step& done, std::size_t limit, std::string_view op) {
  if (const std::exception_ptr& e = done.error()) {
    std::string text = "failed";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      text = x.what();
    } catch (...) {
    }
    text.resize(std::min(text.size(), limit));
    Buffer out = Buffer::allocate(text.size() + 1, nullptr, op);
    std::memcpy(out.data(), text.data(), text.size());
    out.data()[text.size()] = std::byte{1};
    return {nullptr, std::move(out)};
  }
  Buffer out = Buffer::allocate(limit + 1, &done.device()->buffers(), op);
  if (limit != 0) std::memcpy(out.data(), done.output().data(), limit);
  out.data()[limit] = std::byte{0};
  return {done.device(), std::move(out)};
}

/// Whether `r` is complete (or null); an errored request is freed, since nothing more will
/// come of it.
inline bool test_once(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return true;
  int flag = 0;
  if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    MPI_Request_free(&r);
    return true;
  }
  return flag != 0;
}

/// Forgets the cancelled requests that MPI has completed (their buffers go with them).
inline void drain(std::vector<Cancelled>& list) {
  std::erase_if(list, [](Cancelled& c) { return test_once(c.request); });
}

/// Waits for every cancelled request: a cancelled receive completes at once.
inline void drain_all(std::vector<Cancelled>& list) {
  for (Cancelled& c : list) MPI_Wait(&c.request, MPI_STATUS_IGNORE);
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
