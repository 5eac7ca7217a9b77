#pragma once
// The op the program called, while an op made of other ops (var of mean, subtract and square;
// layer_norm; eye; ...) submits its steps: a step the device fails then names it beside the
// step's own op (DeviceFault::called), so that the error says what the program did.

#include <string_view>

namespace ferry::detail {

inline thread_local std::string_view t_called_op;  // empty: none

/// Marks the steps this thread submits during its life as `op`'s, unless an outer op already
/// did: the outermost is the one the program called. `op` has static storage.
class CalledOp {
 public:
  explicit CalledOp(std::string_view op) noexcept : outer_(t_called_op) {
    if (outer_.empty()) t_called_op = op;
  }
  ~CalledOp() { t_called_op = outer_; }
  CalledOp(const CalledOp&) = delete;
  CalledOp& operator=(const CalledOp&) = delete;

 private:
  std::string_view outer_;
};

/// The op the program called around the steps this thread submits now (empty when none).
inline std::string_view called_op() noexcept { return t_called_op; }

}  // namespace ferry::detail
