#pragma once
// Interconnect: what joins the devices of a mesh, as the runtime sees it. A device that belongs
// to a mesh knows the mesh's interconnect and its own position in it, so that `a.to(other)`
// between two devices of one mesh travels over the links between them (hop by hop), placed on
// the same link model as the mesh's collectives, instead of over a device's own copy engine;
// and, on a mesh over processes, from a device of one process to a device of another.

#include <cstdint>
#include <memory>
#include <string_view>

#include "ferry/core/cost.hpp"
#include "ferry/runtime/ref.hpp"

namespace ferry::detail {

class DeviceState;
class Step;

class Interconnect {
 public:
  Interconnect() = default;
  Interconnect(const Interconnect&) = delete;
  Interconnect& operator=(const Interconnect&) = delete;
  virtual ~Interconnect() = default;

  /// When `bytes` that are ready at `ready` on member `from` have arrived at member `to` (row-
  /// major positions), carried for `op` over the path between them. Thread-safe.
  virtual Duration carry(std::int64_t from, std::int64_t to, std::int64_t bytes, Duration ready,
                         std::string_view op) = 0;

  /// The copy of `src` (on member `from`) onto `dst` (member `to`) named `op` when two
  /// processes own the two (a mesh over processes): a call every process makes, the owner of
  /// `from` sending the bytes to the owner of `to`. Null otherwise: the caller copies as in one
  /// process.
  virtual Ref<Step> copy_across(Step& src, const std::shared_ptr<DeviceState>& dst,
                                std::int64_t from, std::int64_t to, std::string_view op) = 0;
};

}  // namespace ferry::detail
