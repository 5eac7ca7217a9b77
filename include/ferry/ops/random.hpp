#pragma once
// Random numbers with explicit keys, as JAX's jax.random: a key is a (2,) int64 array holding two
// 32-bit words; `split` derives independent keys from one; each draw is a step that reads its key
// when it runs and computes element i from (i, key) with Philox4x32-10 (kernels/philox.hpp). So
// the same key gives the same numbers on every executor, thread count and device, and under
// `jit` a key is an input like any array: a replay with a new key draws new numbers.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/philox.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/runtime/host_memory.hpp"
#include "ferry/transfer.hpp"

namespace ferry::random {

/// A key array: two 32-bit words, each held in an int64 (only the low 32 bits are read).
using Key = DeviceArray<std::int64_t>;

namespace detail {

using namespace ferry::detail;

/// The key's step, checked: InvalidArgument naming `op` for an empty handle, ShapeError unless
/// it has the shape (2).
inline Step& key_step(std::string_view op, const Key& key) {
  Step& s = step_of(op, key);
  if (s.shape() != Shape{2}) fail<ShapeError>(op, "needs a key of shape (2), got ", s.shape());
  return s;
}

inline std::uint32_t word(const Step& s, int i) {
  return static_cast<std::uint32_t>(static_cast<std::uint64_t>(s.in<std::int64_t>(0)[i]));
}

/// `shape` filled from distribution `d` under `key`.
template <Floating T>
DeviceArray<T> draw(std::string_view op, const Key& key, const Shape& shape,
                    kernels::Distribution d, double a, double b) {
  RecordScope scope;
  Step& sk = key_step(op, key);
  const Shape plain = ShapeAccess::plain(shape);
  Step* inputs[] = {&sk};
  const auto n = static_cast<double>(plain.numel());
  DeviceArray<T> out = launch<T>(
      sk.device(), {StepKind::compute, op, {40 * n, 16, n * sizeof(T)}}, plain, inputs,
      [d, a, b, count = plain.numel()](const Step& st) {
        kernels::random_fill(st.out<T>(), count, word(st, 0), word(st, 1), d, a, b, st.runner());
      });
  if (Tape* tape = scope.tape()) record_no_grad(*tape, inputs, *ArrayAccess::step(out));
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {op, {&sk}, sym_dims(shape),
            [op, d, a, b](std::span<Step* const> in, std::span<const std::int64_t> p) {
              return handle_of(draw<T>(op, as_array<std::int64_t>(in[0]), Shape(p), d, a, b));
            }},
           out, shape);
  }
  return out;
}

/// (n, 2): row j the key of stream j derived from `key`.
FERRY_DECL Key split_rows(const Key& key, std::int64_t n);
#if FERRY_DEFINES_DECLS
FERRY_DECL Key split_rows(const Key& key, std::int64_t n) {
  constexpr std::string_view op = "split";
  RecordScope scope;
  Step& sk = key_step(op, key);
  Step* inputs[] = {&sk};
  Key out =
      launch<std::int64_t>(sk.device(),
                           {StepKind::compute,
                            op,
                            {40.0 * static_cast<double>(n), 16, 16.0 * static_cast<double>(n)}},
                           Shape{n, 2}, inputs, [n](const Step& st) {
                             std::int64_t* o = st.out<std::int64_t>();
                             for (std::int64_t j = 0; j < n; ++j) {
                               const kernels::PhiloxWords w = kernels::element_words(
                                   static_cast<std::uint64_t>(j), 1, word(st, 0), word(st, 1));
                               o[2 * j] = w[0];
                               o[2 * j + 1] = w[1];
                             }
                           });
  if (Tape* tape = scope.tape()) record_no_grad(*tape, inputs, *ArrayAccess::step(out));
  if (Recorder* rec = scope.recorder()) {
    record(*rec,
           {op, {&sk}, {},
            [n](std::span<Step* const> in, std::span<const std::int64_t>) {
              return handle_of(split_rows(as_array<std::int64_t>(in[0]), n));
            }},
           out, Shape{n, 2});
  }
  return out;
}
#endif

}  // namespace detail

/// The key of `seed` on `device` (its low and high 32 bits), as jax.random.key.
inline Key key(const Device& device, std::uint64_t seed) {
  return to_device(device, std::vector<std::int64_t>{static_cast<std::int64_t>(seed & 0xffffffffu),
                                                     static_cast<std::int64_t>(seed >> 32)},
                   Shape{2});
}

/// `n` new keys derived from `key`, each independent of it and of each other (use a key once:
/// split it for more draws). Throws ShapeError for a key not of shape (2), InvalidArgument for
/// an empty handle, a negative n or (n, 2) keys that do not fit in memory, OutOfHostMemory when
/// the host has no room for n handles; all at the call, before anything is submitted.
inline std::vector<Key> split(const Key& key, std::int64_t n = 2) {
  if (n < 0) ferry::detail::fail<InvalidArgument>("split", "negative count ", n);
  // The checks of the (n, 2) array split_rows makes, here so that they name split (Shape's
  // own would not) and come before the host check below, which relies on 16 * n fitting.
  const std::int64_t dims[] = {n, 2};
  ferry::detail::check_count_fits("split", dims);
  (void)ferry::detail::checked_bytes("split", Shape{n, 2}, sizeof(std::int64_t));
  // The n handles are host memory this call takes itself: a count past the host is refused
  // as such, where reserve would throw std::bad_alloc (or abort under a sanitizer).
  static_assert(sizeof(Key) <= 32, "n * sizeof(Key) must not wrap for n < 2^59");
  const std::size_t handles = static_cast<std::size_t>(n) * sizeof(Key);
  std::vector<Key> keys;
  ferry::detail::take_host(handles, "split", [&] { keys.reserve(static_cast<std::size_t>(n)); });
  const Key rows = detail::split_rows(key, n);
  for (std::int64_t j = 0; j < n; ++j) keys.push_back(reshape(slice(rows, 0, j, j + 1), Shape{2}));
  return keys;
}

/// Uniform values in [lo, hi) of `shape` (symbolic in a trace), from 53 random bits each,
/// rounded once to T; a value that would round to hi is the largest T below it (float16 in
/// [0, 1) would otherwise reach 1.0 once in 4096 draws), and one that would round below lo
/// the smallest T at or above it (lo need not be a T: float16's nearest to 0.1 is below it).
/// lo == hi gives lo rounded to T. Throws ShapeError for a bad key, InvalidArgument for an
/// empty handle, bounds that are not finite with lo <= hi, or lo < hi with no T between.
template <Floating T = float>
DeviceArray<T> uniform(const Key& key, Shape shape, double lo = 0, double hi = 1) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi)) {
    ferry::detail::fail<InvalidArgument>("uniform", "needs finite bounds with lo <= hi, got ", lo,
                                         ", ", hi);
  }
  if (lo < hi && !(static_cast<double>(kernels::smallest_at_least<T>(lo)) < hi)) {
    ferry::detail::fail<InvalidArgument>("uniform", "no ", name_of(dtype_of<T>), " lies in [",
                                         lo, ", ", hi, ")");
  }
  return detail::draw<T>("uniform", key, shape, kernels::Distribution::uniform, lo, hi);
}

/// Standard normal values of `shape` (Box-Muller, in double, rounded once to T). Throws like
/// uniform.
template <Floating T = float>
DeviceArray<T> normal(const Key& key, Shape shape) {
  return detail::draw<T>("normal", key, shape, kernels::Distribution::normal, 0, 1);
}

/// True with probability p, independently for each element of `shape`: a uniform draw in a step
/// named "bernoulli", compared with p. Throws InvalidArgument unless 0 <= p <= 1, otherwise like
/// uniform, naming bernoulli.
FERRY_DECL DeviceArray<bool> bernoulli(const Key& key, double p, Shape shape);
#if FERRY_DEFINES_DECLS
FERRY_DECL DeviceArray<bool> bernoulli(const Key& key, double p, Shape shape) {
  if (!(p >= 0 && p <= 1))
    ferry::detail::fail<InvalidArgument>("bernoulli", "needs 0 <= p <= 1, got ", p);
  return less(detail::draw<double>("bernoulli", key, shape, kernels::Distribution::uniform, 0, 1),
              p);
}
#endif

/// x with each element zeroed with probability `rate` and the others scaled by 1 / (1 - rate),
/// so the mean is kept (inverted dropout, as PyTorch's in training mode). Differentiable in x.
/// rate 0 returns x; rate 1 zeros. Throws InvalidArgument unless 0 <= rate <= 1, otherwise like
/// uniform.
template <Floating T>
DeviceArray<T> dropout(const Key& key, const DeviceArray<T>& x, double rate) {
  const ferry::detail::CalledOp called("dropout");
  ferry::detail::step_of("dropout", x);
  if (!(rate >= 0 && rate <= 1))
    ferry::detail::fail<InvalidArgument>("dropout", "needs 0 <= rate <= 1, got ", rate);
  detail::key_step("dropout", key);
  if (rate == 0) return x;
  if (rate == 1) return zeros<T>(x.device(), x.shape());
  return where(bernoulli(key, 1 - rate, x.shape()), x * (1 / (1 - rate)), T{});
}

// Compiled once in the separate mode: the layers call it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(DeviceArray<float> dropout<float>(const Key&, const DeviceArray<float>&,
                                                        double))

}  // namespace ferry::random
