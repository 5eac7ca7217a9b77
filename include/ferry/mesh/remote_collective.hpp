#pragma once
// A collective over a mesh whose devices live in several processes (runtime/remote.hpp, on MPI
// in ferry/distributed/): the scope during which receive() asks the mesh's transport for the
// data that crosses processes, and the fingerprint every process sends so that calls that
// disagree fail on every rank instead of hanging. On a mesh of one process all of it is a
// pointer test.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/runtime/remote.hpp"

namespace ferry::detail {

/// The collective being built on this thread over a mesh of several processes: receive()
/// asks its transport for the data that crosses processes (runtime/remote.hpp).
struct RemoteScope {
  MeshState* mesh = nullptr;
  std::shared_ptr<RemoteCall> call;
  int host_process = -1;  // the one process whose host receives an export, or -1: every one
};
inline thread_local RemoteScope* t_remote_scope = nullptr;

/// Begins a collective on every process of `mesh` (nothing for a mesh of this process alone)
/// and makes it the current one of this thread until the scope ends. `describe()` gives its
/// fingerprint: the processes compare it to find calls that disagree. `host_process`: for an
/// export gathered on one process only, that process (see RemoteScope).
class RemoteCollective {
 public:
  template <class Describe>
  RemoteCollective(MeshState& mesh, std::string_view op, Describe&& describe,
                   int host_process = -1) {
    if (mesh.remote == nullptr) return;
    scope_.mesh = &mesh;
    scope_.host_process = host_process;
    scope_.call = mesh.remote->begin(op, describe());
    outer_ = std::exchange(t_remote_scope, &scope_);
    active_ = true;
  }
  RemoteCollective(const RemoteCollective&) = delete;
  RemoteCollective& operator=(const RemoteCollective&) = delete;
  /// The call begun on every process (null on a mesh of one process).
  RemoteCall* call() const noexcept { return scope_.call.get(); }
  ~RemoteCollective() {
    if (!active_) return;
    t_remote_scope = outer_;
    scope_.mesh->remote->end(*scope_.call);
  }

 private:
  RemoteScope scope_;
  RemoteScope* outer_ = nullptr;
  bool active_ = false;
};

/// The fingerprint of collective `call` ("all_reduce(sum)") on `a` along `axis`: the call, the
/// element type, the shards' shapes (one when they agree) and the axis.
template <Element T>
std::string collective_fingerprint(std::string call, const MeshArray<T>& a, int axis) {
  // Made at every call over processes: one allocation (room for the usual text), not one
  // per piece appended.
  std::string out;
  out.reserve(call.size() + 96);
  out += call;
  out += " of ";
  out += name_of(dtype_of<T>);
  out += ' ';
  bool same = true;
  for (const DeviceArray<T>& s : a.shards()) same = same && s.shape() == a.shards()[0].shape();
  if (same) {
    out += a.shards()[0].shape().to_string();
  } else {
    out += "[";
    for (std::size_t i = 0; i < a.shards().size(); ++i)
      out += (i == 0 ? "" : ", ") + a.shards()[i].shape().to_string();
    out += "]";
  }
  if (axis < 0) {
    out += " over the whole mesh";
  } else {
    out += " along axis ";
    out += std::to_string(axis);
  }
  return out;
}

/// "permute({0, 1}, {1, 0})": a permute's fingerprint call.
inline std::string permute_text(const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs) {
  std::string out = "permute(";
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    out += (i == 0 ? "{" : ", {") + std::to_string(pairs[i].first) + ", " +
           std::to_string(pairs[i].second) + "}";
  }
  return out + ")";
}

}  // namespace ferry::detail
