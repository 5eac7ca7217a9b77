#pragma once
// StepKind: what a step does, as the device model sees it (a copy, a kernel or a view).

#include <cstdint>
#include <string_view>

namespace ferry::detail {

/// What a step does, as the device model sees it.
enum class StepKind : std::uint8_t {
  copy_in,   // host to device (an import)
  copy_out,  // device to host (an export)
  copy_d2d,  // device to device
  compute,   // a kernel on a compute unit
  view,      // metadata only: the output aliases the input's buffer (reshape)
};

constexpr std::string_view name_of(StepKind k) noexcept {
  switch (k) {
    case StepKind::copy_in: return "copy_in";
    case StepKind::copy_out: return "copy_out";
    case StepKind::copy_d2d: return "copy_d2d";
    case StepKind::compute: return "compute";
    case StepKind::view: return "view";
  }
  return "?";
}

}  // namespace ferry::detail
