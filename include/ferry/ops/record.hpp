#pragma once
// What every op shares to take part in a program trace: turning steps back into arrays for a
// replay, and the symbolic shape rules. A rule computes an op's output shape from the symbolic
// shapes of its inputs and guards each decision the op made on them (a size equal to 1 or not,
// two sizes equal), so that a replay runs only where the op would decide the same way.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/runtime/recorder.hpp"

namespace ferry::detail {

/// Records the guard "`fact` holds" (a check the op made and passed).
inline void rely_on(SymBool fact) { static_cast<void>(static_cast<bool>(fact)); }

/// Whether `a` and `b` are the same shape, guarding each size compared.
inline bool same_shape_rule(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (std::size_t i = 0; i < a.rank(); ++i) {
    if (!(a[i] == b[i])) return false;
  }
  return true;
}

/// The shape `a` and `b` broadcast to, guarding each "size is 1" decision (see broadcast.hpp).
inline Shape broadcast_rule(const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.rank(), b.rank());
  std::array<SymInt, kMaxRank> out{};
  for (std::size_t i = 0; i < rank; ++i) {
    const SymInt da = i < a.rank() ? a[a.rank() - 1 - i] : SymInt(1);
    const SymInt db = i < b.rank() ? b[b.rank() - 1 - i] : SymInt(1);
    // A constant 1 (a missing dimension, a fixed size) takes the other size whatever it is:
    // there is no decision to guard.
    if (!db.symbolic() && SymAccess::value(db) == 1) {
      out[rank - 1 - i] = da;
    } else if (!da.symbolic() && SymAccess::value(da) == 1) {
      out[rank - 1 - i] = db;
    } else if (da == 1) {
      out[rank - 1 - i] = db;
    } else {
      if (!(db == 1)) rely_on(da == db);
      out[rank - 1 - i] = da;
    }
  }
  return Shape(std::span<const SymInt>(out.data(), rank));
}

/// `s` with dimension `d` replaced by `size`.
inline Shape with_sym_dim(const Shape& s, std::size_t d, const SymInt& size) {
  std::array<SymInt, kMaxRank> dims{};
  for (std::size_t i = 0; i < s.rank(); ++i) dims[i] = i == d ? size : s[i];
  return Shape(std::span<const SymInt>(dims.data(), s.rank()));
}

/// Submits the step of a replayed op whose kernel reads row-major (see DirectCall), of work
/// `cost`: the step launch() submits for such an op given nothing (a replay never donates its
/// values), without launch's general path where no input needs converting. Inlined into the
/// op's direct function: a call of its own, per replayed step, cost 29 instructions of 7,382.
template <Element T, class Kernel>
[[gnu::always_inline]] inline Handle submit_direct(const DirectCall& call, const Cost& cost,
                                                 Kernel kernel) {
  Step& first = *call.inputs.front();
  for (const Step* in : call.inputs) {
    if (in->layout().order == Order::tiled) [[unlikely]] {
      return handle_of(launch<T>(first.device(), {StepKind::compute, call.name, cost},
                                 call.shape, call.inputs, std::move(kernel)));
    }
  }
  return Handle(submit_step(
      first.device(),
      {StepKind::compute, StepName::of_static(call.name), cost,
       {first.layout().space, Order::row_major}},
      dtype_of<T>, call.shape, call.inputs, std::move(kernel)));
}

/// The sizes of `s` as SymInts.
inline std::vector<SymInt> sym_dims(const Shape& s) {
  std::vector<SymInt> dims;
  dims.reserve(s.rank());
  for (std::size_t i = 0; i < s.rank(); ++i) dims.push_back(s[i]);
  return dims;
}

}  // namespace ferry::detail
