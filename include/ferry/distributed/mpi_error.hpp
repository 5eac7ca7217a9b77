#pragma once
// MPI's own errors as ferry errors. ferry's communicators return errors (MPI_ERRORS_RETURN)
// instead of aborting the job, so each failed call becomes a ferry::CommunicationError that
// names the API, the MPI call and MPI's own message (MPI_Error_string).

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>
#include <string_view>

#include "ferry/core/error.hpp"

namespace ferry::detail {

/// MPI's text for error code `rc`.
inline std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS || length < 0) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(length));
}

/// Throws CommunicationError, as `op`, when `rc` (what MPI call `call` returned) is not
/// MPI_SUCCESS.
inline void mpi_check(int rc, std::string_view op, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  fail<CommunicationError>(op, call, " failed: ", mpi_error_text(rc), " (MPI error ", rc, ")");
}

/// `bytes` as the int count that one MPI call takes, for `op`'s `what`: InvalidArgument naming
/// both and the size when MPI cannot count that many (2 GiB and more), never a count cut short.
inline int mpi_count(std::size_t bytes, std::string_view op, std::string_view what) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    fail<InvalidArgument>(op, what, " takes ", bytes,
                          " bytes, more than one MPI message can count (INT_MAX, ", INT_MAX, ")");
  }
  return static_cast<int>(bytes);
}

}  // namespace ferry::detail
