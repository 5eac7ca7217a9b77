#pragma once
// matmul with NumPy semantics: 2-D matrix products, stacks of them with broadcast batch
// dimensions, and 1-D operands promoted to a row (left) or column (right) vector and dropped
// from the result.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/kernels/matmul.hpp"
#include "ferry/kernels/strided.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

namespace detail {

/// The batch dimensions of a (promoted) matmul operand: all but the last two.
inline Shape batch_of(const Shape& s) {
  return Shape(s.dims().first(s.rank() - 2));
}

inline Shape promoted(const Shape& s, bool is_left) {
  if (s.rank() != 1) return s;
  return is_left ? Shape{std::int64_t{1}, s[0]} : Shape{s[0], std::int64_t{1}};
}

/// matmul's output shape for symbolic operand shapes: guards the inner sizes equal and each
/// batch broadcasting decision.
inline Shape matmul_rule(const Shape& a, const Shape& b) {
  const Shape pa = promoted(a, true);
  const Shape pb = promoted(b, false);
  rely_on(pb[pb.rank() - 2] == pa[pa.rank() - 1]);
  std::array<SymInt, kMaxRank> dims{};
  std::size_t rank = 0;
  std::array<SymInt, kMaxRank> ba{};
  std::array<SymInt, kMaxRank> bb{};
  for (std::size_t i = 0; i + 2 < pa.rank(); ++i) ba[i] = pa[i];
  for (std::size_t i = 0; i + 2 < pb.rank(); ++i) bb[i] = pb[i];
  const Shape batch = broadcast_rule(Shape(std::span<const SymInt>(ba.data(), pa.rank() - 2)),
                                     Shape(std::span<const SymInt>(bb.data(), pb.rank() - 2)));
  for (std::size_t i = 0; i < batch.rank(); ++i) dims[rank++] = batch[i];
  if (a.rank() != 1) dims[rank++] = pa[pa.rank() - 2];
  if (b.rank() != 1) dims[rank++] = pb[pb.rank() - 1];
  return Shape(std::span<const SymInt>(dims.data(), rank));
}

}  // namespace detail

/// The matrix product of a and b. Throws ShapeError at the call for a rank-0 operand, inner
/// sizes that differ, or batch dimensions that do not broadcast; DeviceMismatch and
/// InvalidArgument like add. Integers wrap; floating results sum products in order of k.
template <Element A, Element B>
DeviceArray<A> matmul(const DeviceArray<A>& a, const DeviceArray<B>& b);

namespace detail {

/// The kernel of `batch` products of (m x k) by (k x n) matrices, the operands' batch strides
/// `ta` and `tb` in whole matrices (so the kernel steps from one matrix to the next).
template <Numeric T>
auto matmul_kernel(const Shape& batch, const Strides& ta, const Strides& tb, std::int64_t m,
                   std::int64_t k, std::int64_t n) {
  return [batch, ta, tb, m, k, n](const Step& s) {
    const T* pa_data = s.in<T>(0);
    const T* pb_data = s.in<T>(1);
    T* pc = s.out<T>();
    const kernels::ChunkRunner& runner = s.runner();
    const std::int64_t count = batch.numel();
    // A stack of at least two products per thread splits over the stack (each product on
    // one thread); otherwise each product splits its own tiles. Both give the same bits.
    if (count < 2 * runner.parallelism()) {
      const std::array<Strides, 3> strides{row_major_strides(batch), ta, tb};
      kernels::for_each_run(batch, strides, [&](const auto& off, const auto& step,
                                                std::int64_t run) {
        for (std::int64_t i = 0; i < run; ++i) {
          kernels::gemm(pa_data + (off[1] + i * step[1]) * m * k,
                        pb_data + (off[2] + i * step[2]) * k * n, pc + (off[0] + i) * m * n, m, k,
                        n, runner);
        }
      });
      return;
    }
    // The operands of every product, in the output's order.
    std::vector<std::array<std::int64_t, 2>> sources;
    sources.reserve(static_cast<std::size_t>(count));
    const std::array<Strides, 2> strides{ta, tb};
    kernels::for_each_run(batch, strides, [&](const auto& off, const auto& step, std::int64_t run) {
      for (std::int64_t i = 0; i < run; ++i) {
        sources.push_back({off[0] + i * step[0], off[1] + i * step[1]});
      }
    });
    const double flops = 2.0 * static_cast<double>(count) * static_cast<double>(m) *
                         static_cast<double>(n) * static_cast<double>(k);
    kernels::parallel_for(flops >= kernels::kGemmParallelFlops ? runner : kernels::inline_runner(),
                          count, 1, [&](std::int64_t b0, std::int64_t b1) {
                            for (std::int64_t i = b0; i < b1; ++i) {
                              const auto& src = sources[static_cast<std::size_t>(i)];
                              kernels::gemm(pa_data + src[0] * m * k, pb_data + src[1] * k * n,
                                            pc + i * m * n, m, k, n);
                            }
                          });
  };
}

/// The kernel of one product of (m x k) by (k x n) matrices: what the batched kernel does for an
/// empty batch, without carrying a batch shape and strides through every copy of the step.
template <Numeric T>
auto matmul_kernel(std::int64_t m, std::int64_t k, std::int64_t n) {
  return [m, k, n](const Step& s) {
    kernels::gemm(s.in<T>(0), s.in<T>(1), s.out<T>(), m, k, n, s.runner());
  };
}

/// The model's view of a matmul: the output tiles of batch.numel() products (the operands'
/// real bytes, which broadcasting may make fewer than batch copies).
inline Cost matmul_cost(const Step& a, const Step& b, std::int64_t batch, std::int64_t m,
                        std::int64_t k, std::int64_t n, std::size_t element_bytes) {
  Cost cost = Cost::matmul(batch, m, k, n, static_cast<double>(element_bytes));
  cost.bytes_read = bytes_of(a) + bytes_of(b);
  return cost;
}

/// A replay's matmul: the trace's guards vouch for the operands and `call.shape` is the output
/// the op would compute, so the sizes are only read, for the kernel.
template <Numeric T>
Handle replay_matmul(const DirectCall& call) {
  const Step& sa = *call.inputs[0];
  const Step& sb = *call.inputs[1];
  const std::span<const std::int64_t> da = sa.shape().dims();
  const std::span<const std::int64_t> db = sb.shape().dims();
  const std::int64_t m = da.size() == 1 ? 1 : da[da.size() - 2];
  const std::int64_t k = da.back();
  const std::int64_t n = db.size() == 1 ? 1 : db.back();
  // The output is the batch shape, then m unless `a` is 1-D, then n unless `b` is.
  const std::size_t kept = (da.size() != 1 ? 1u : 0u) + (db.size() != 1 ? 1u : 0u);
  if (call.shape.rank() == kept) {
    return submit_direct<T>(call, matmul_cost(sa, sb, 1, m, k, n, sizeof(T)),
                            matmul_kernel<T>(m, k, n));
  }
  const Shape batch(call.shape.dims().first(call.shape.rank() - kept));
  // An operand of rank 2 or less has no batch dimensions: its strides stay 0.
  const Strides ta =
      da.size() > 2 ? broadcast_strides(Shape(da.first(da.size() - 2)), batch) : Strides{};
  const Strides tb =
      db.size() > 2 ? broadcast_strides(Shape(db.first(db.size() - 2)), batch) : Strides{};
  return submit_direct<T>(call, matmul_cost(sa, sb, batch.numel(), m, k, n, sizeof(T)),
                          matmul_kernel<T>(batch, ta, tb, m, k, n));
}

template <Element T>
void record_matmul(Recorder& rec, const DeviceArray<T>& a, const DeviceArray<T>& b,
                   const DeviceArray<T>& out) {
  Step& sa = *ArrayAccess::step(a);
  Step& sb = *ArrayAccess::step(b);
  OpCall call{
      "matmul", {&sa, &sb}, {}, [](std::span<Step* const> in, std::span<const std::int64_t>) {
        return handle_of(matmul(as_array<T>(in[0]), as_array<T>(in[1])));
      }};
  call.direct = &replay_matmul<T>;
  record(rec, std::move(call), out, matmul_rule(rec.shape_of(sa), rec.shape_of(sb)));
}

}  // namespace detail

template <Element A, Element B>
DeviceArray<A> matmul(const DeviceArray<A>& a, const DeviceArray<B>& b) {
  detail::RecordScope scope;
  detail::check_same_element<A, B>();
  detail::check_numeric<A>();
  if constexpr (!std::is_same_v<A, B> || !Numeric<A>) {
    return {};
  } else {
    using T = A;
    constexpr std::string_view name = "matmul";
    detail::Step& sa = detail::step_of(name, a);
    detail::Step& sb = detail::step_of(name, b);
    detail::Step* inputs[] = {&sa, &sb};
    const auto& dev = detail::common_device(name, inputs);
    if (sa.shape().rank() == 0 || sb.shape().rank() == 0) {
      detail::fail<ShapeError>(name, "needs arrays of rank 1 or more, got ", sa.shape(), " x ",
                               sb.shape());
    }
    const Shape pa = detail::promoted(sa.shape(), true);
    const Shape pb = detail::promoted(sb.shape(), false);
    const std::int64_t m = pa.dims()[pa.rank() - 2];
    const std::int64_t k = pa.dims()[pa.rank() - 1];
    const std::int64_t n = pb.dims()[pb.rank() - 1];
    if (pb.dims()[pb.rank() - 2] != k) {
      detail::fail<ShapeError>(name, "inner sizes differ: ", sa.shape(), " x ", sb.shape());
    }
    const Shape batch_a = detail::batch_of(pa);
    const Shape batch_b = detail::batch_of(pb);
    if (!detail::broadcasts(batch_a, batch_b)) {
      detail::fail<ShapeError>(name, "batch dimensions ", batch_a, " and ", batch_b,
                               " do not broadcast: ", sa.shape(), " x ", sb.shape());
    }
    const Shape batch = detail::broadcast_shapes(name, batch_a, batch_b);
    std::array<std::int64_t, kMaxRank> dims{};
    std::size_t rank = 0;
    for (std::int64_t d : batch) dims[rank++] = d;
    if (sa.shape().rank() != 1) dims[rank++] = m;
    if (sb.shape().rank() != 1) dims[rank++] = n;
    const Shape out(std::span<const std::int64_t>(dims.data(), rank));
    auto info = [&] {
      return detail::StepInfo{detail::StepKind::compute, name,
                              detail::matmul_cost(sa, sb, batch.numel(), m, k, n, sizeof(T))};
    };
    // Without a batch, the kernel carries three sizes instead of a shape and two strides.
    DeviceArray<T> result =
        batch.rank() == 0
            ? detail::launch<T>(dev, info(), out, inputs, detail::matmul_kernel<T>(m, k, n))
            : detail::launch<T>(
                  dev, info(), out, inputs,
                  detail::matmul_kernel<T>(batch, detail::broadcast_strides(batch_a, batch),
                                           detail::broadcast_strides(batch_b, batch), m, k, n));
    if (detail::Recorder* rec = scope.recorder()) detail::record_matmul(*rec, a, b, result);
    if (detail::Tape* tape = scope.tape()) {
      detail::record_grad<T>(*tape, inputs, *detail::ArrayAccess::step(result),
                             [](auto t, detail::GradCall& c) { detail::matmul_backward(t, c); });
    }
    return result;
  }
}

}  // namespace ferry
