#pragma once
// The fingerprint of a collective over MPI processes: what each process sends every other for
// each call (distributed/transport.hpp posts the sends and receives), and how it tests the ones
// its peers sent against its own. Calls that disagree then fail on every rank instead of
// hanging.

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::detail {

/// FNV-1a: fingerprints compare by hash, since the text travels truncated.
inline std::uint64_t fingerprint_hash(std::string_view text) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

/// A fingerprint as it travels: fixed size, so a receive can be posted before it arrives, and
/// small, so MPI sends it eagerly (a send to a rank that never calls still completes).
struct FingerprintMessage {
  std::uint64_t seq = 0;
  std::uint64_t hash = 0;
  char text[240] = {};

  /// The fingerprint of call number `seq`, described by `text` (which travels cut to fit).
  static FingerprintMessage of(std::uint64_t seq, std::string_view text) noexcept {
    FingerprintMessage out;
    out.seq = seq;
    out.hash = fingerprint_hash(text);
    std::memcpy(out.text, text.data(), std::min(text.size(), sizeof out.text - 1));
    return out;
  }

  /// The text (as sent: at most 239 characters of the call's description).
  std::string_view view() const noexcept { return {text, ::strnlen(text, sizeof text)}; }
};
static_assert(sizeof(FingerprintMessage) <= INT_MAX, "one MPI message, counted in int");

/// One peer's side of a call's fingerprints: the send of this process's to it, and the
/// receive of its own.
struct FingerprintPeer {
  MPI_Request sent = MPI_REQUEST_NULL;
  MPI_Request received = MPI_REQUEST_NULL;
  FingerprintMessage in;
  bool arrived = false;
};

/// What test_fingerprints found.
struct FingerprintCheck {
  int rc = MPI_SUCCESS;  // not MPI_SUCCESS: the MPI_Test that failed, and nothing after it
  int differs = -1;      // the first peer whose fingerprint is not this process's
  bool missing = false;  // some peer's fingerprint has yet to come (missing_peers names them)
};

/// The peers of `peers` (by rank; `self` skipped) whose fingerprint has yet to come: "1, 3".
/// Made only for a PeerTimeout's message, not at every poll that finds one missing.
inline std::string missing_peers(const std::vector<FingerprintPeer>& peers, int self) {
  std::string out;
  for (std::size_t p = 0; p < peers.size(); ++p) {
    if (static_cast<int>(p) == self || peers[p].arrived) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(p);
  }
  return out;
}

/// Tests the fingerprints `peers` (by rank; `self`'s own skipped) that have not arrived yet,
/// comparing each that has with `mine`; stops at the first MPI error or difference.
inline FingerprintCheck test_fingerprints(std::vector<FingerprintPeer>& peers, int self,
                                          const FingerprintMessage& mine) {
  FingerprintCheck out;
  for (std::size_t p = 0; p < peers.size(); ++p) {
    FingerprintPeer& peer = peers[p];
    if (static_cast<int>(p) == self || peer.arrived) continue;
    int flag = 0;
    out.rc = MPI_Test(&peer.received, &flag, MPI_STATUS_IGNORE);
    if (out.rc != MPI_SUCCESS) return out;
    if (flag == 0) {
      out.missing = true;
      continue;
    }
    peer.arrived = true;
    if (peer.in.seq != mine.seq || peer.in.hash != mine.hash) {
      out.differs = static_cast<int>(p);
      return out;
    }
  }
  return out;
}

}  // namespace ferry::detail
