#pragma once
// The error types ferry throws. Every message starts with the API that raised it in brackets,
// "[matmul] inner sizes differ: (32, 784) x (785, 10)", so a log line names its cause.

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ferry {

/// Base of every error ferry throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Shapes an op cannot combine. Thrown at the call, with the op's name and the shapes.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// Arrays that live on two different devices given to one op. Thrown at the call.
class DeviceMismatch : public Error {
 public:
  using Error::Error;
};

/// A gradient asked through an op that has none: a comparison, argmax, a cast from an integer,
/// a custom step given no backward rule. Thrown by ferry::grad and its kin, naming the op.
class NotDifferentiable : public Error {
 public:
  using Error::Error;
};

/// A value the API does not accept: a data size that does not match the shape, a bad axis, a
/// negative size, an empty handle. Thrown at the call (or, for a value only a kernel can see,
/// such as an integer division by zero, by the exports that depend on it).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Placements an op on mesh arrays cannot combine without communication it will not start on
/// its own: the message names the op, both placements and the redistribute that makes the
/// call work. Thrown at the call. A kind of InvalidArgument.
class PlacementError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// An export (`to_host`, `wait`) called from inside a running step. Waiting there could
/// deadlock the executor, so ferry refuses instead.
class ExportInsideStep : public Error {
 public:
  using Error::Error;
};

/// A step that cannot get the device memory it needs: larger than the device, or waiting for
/// memory that nothing can free any more. Reaches the exports that depend on the step; the
/// device stays usable. Names the step as DeviceFault does: "[var] step 7 (subtract) on ...".
class OutOfDeviceMemory : public Error {
 public:
  using Error::Error;
};

/// A use of an array whose buffer was freed by `deallocate(a, ferry::force)`: any op, export
/// or query on any handle to it. Thrown at the call.
class UseAfterFree : public Error {
 public:
  using Error::Error;
};

/// An export of an array of a model-only device (Device::modeled(spec, ferry::model_only)),
/// whose kernels compute nothing: the message names the op that made the array and the
/// device. Thrown at the call; `wait`, stats and traces work on such arrays.
class NoValues : public Error {
 public:
  using Error::Error;
};

/// A file ferry cannot open, read, write or rename (a checkpoint's path in a missing
/// directory, a disk that filled up). The message names the API, the path and the system's
/// reason. Thrown at the call.
class FileError : public Error {
 public:
  using Error::Error;
};

/// A file whose contents break its format (a truncated or corrupt checkpoint). The message
/// names the API, the file, the entry at fault and the values involved. Thrown at the call,
/// before anything from the file is used.
class FormatError : public Error {
 public:
  using Error::Error;
};

/// Processes of one mesh (ferry::mpi::mesh_over) that disagree on a collective: another op,
/// element type, shape, axis or argument at the same position in their programs. The message
/// names both ranks and both calls ("rank 1 called all_gather(dim 1) ... where rank 0 called
/// all_reduce(sum) ..."). Reaches the results of the collective on every rank involved, through
/// their exports; the mesh is unusable afterwards (its later collectives fail with it too).
class CollectiveMismatch : public Error {
 public:
  using Error::Error;
};

/// A collective that some process of the mesh did not join (it returned early, crashed or is
/// stuck) within the world's collective_timeout: the message names the collective and the
/// ranks that did not arrive. Reaches the collective's results through their exports, instead
/// of a wait that never ends; the mesh is unusable afterwards.
class PeerTimeout : public Error {
 public:
  using Error::Error;
};

/// A failure of the transport between processes (an MPI call that returned an error, with
/// MPI's own message; too little thread support; a world that ended with work in flight; a
/// shard that failed on the rank that owns it, with that rank's message). Thrown at the call
/// or by the exports that depend on the data.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline void append_part(std::string& out, std::string_view s) { out += s; }
inline void append_part(std::string& out, const char* s) { out += s; }
inline void append_part(std::string& out, const std::string& s) { out += s; }
inline void append_part(std::string& out, char c) { out += c; }
template <class N>
  requires std::is_integral_v<N>
void append_part(std::string& out, N n) {
  out += std::to_string(n);
}
/// The shortest text that reads back as the same value: a step of 1e-09 must not print as
/// "0.000000", which std::to_string would make of it.
template <class N>
  requires std::is_floating_point_v<N>
void append_part(std::string& out, N n) {
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, n);
  out.append(text, r.ptr);
}
template <class T>
  requires requires(const T& t) { t.to_string(); }
void append_part(std::string& out, const T& t) {
  out += t.to_string();
}

/// "[op] part part part": the message every ferry error carries.
template <class... Parts>
std::string message(std::string_view op, const Parts&... parts) {
  std::string out;
  out.reserve(64);
  out += '[';
  out += op;
  out += "] ";
  (append_part(out, parts), ...);
  return out;
}

/// "[var] step 3 (mean)", or "[add] step 3" where `called` is empty or `op`: a step of a device
/// as an error names it (DeviceFault, OutOfDeviceMemory), by the op the program called first,
/// then `parts`.
template <class... Parts>
std::string step_message(std::string_view op, std::string_view called, std::uint64_t step,
                         const Parts&... parts) {
  if (called.empty() || called == op) return message(op, "step ", step, parts...);
  return message(called, "step ", step, " (", op, ")", parts...);
}

/// Throws `E` with `message(op, parts...)`.
template <class E, class... Parts>
[[noreturn]] void fail(std::string_view op, const Parts&... parts) {
  throw E(message(op, parts...));
}

}  // namespace detail

/// A step the device failed (an injected fault, see FaultPlan), on a device without a host
/// fallback. Reaches exactly the exports that depend on the step, as itself: the message and
/// the accessors name the op, the step's submission index on its device, and the cause; for a
/// step of an op made of others (var, layer_norm, eye, distribute, redistribute, ...), the op
/// the program called first: "[var] step 3 (mean) on tiny:0 failed: ...".
class DeviceFault : public Error {
 public:
  DeviceFault(std::string op, std::uint64_t step, std::string device, std::string cause,
              std::string called = {})
      : Error(detail::step_message(op, called, step, " on ", device, " failed: ", cause)),
        op_(std::move(op)),
        called_(std::move(called)),
        device_(std::move(device)),
        cause_(std::move(cause)),
        step_(step) {}

  /// The op whose step failed ("add", "to_device", "to_host", ...).
  const std::string& op() const noexcept { return op_; }
  /// The op the program called, whose step failed: op() but for a step of an op made of others
  /// ("var" for its "mean").
  const std::string& called() const noexcept { return called_.empty() ? op_ : called_; }
  /// The failed step's submission index on its device.
  std::uint64_t step() const noexcept { return step_; }
  /// The name of the device that failed it ("modeled:3").
  const std::string& device() const noexcept { return device_; }
  /// Why: "injected kernel fault (seed 7, rate 0.05)", ...
  const std::string& cause() const noexcept { return cause_; }

 private:
  std::string op_;
  std::string called_;
  std::string device_;
  std::string cause_;
  std::uint64_t step_;
};

/// Host memory that could not be had: the real buffer behind an array (kernels compute on the
/// host), even when the modeled device has room for it. Thrown by the exports that depend on
/// the step that needed it (or at the call, for host memory a call allocates itself); the
/// device stays usable.
class OutOfHostMemory : public Error {
 public:
  OutOfHostMemory(std::string op, std::uint64_t bytes, std::string_view why)
      : Error(detail::message(op, "cannot allocate ", bytes, " bytes of host memory: ", why)),
        op_(std::move(op)),
        bytes_(bytes) {}

  /// The op that needed the memory ("zeros", "to_host", "HostArray", ...).
  const std::string& op() const noexcept { return op_; }
  /// How many bytes it asked for.
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::string op_;
  std::uint64_t bytes_;
};

}  // namespace ferry
