#pragma once
// to_host_async: an export that returns at once. Its copies to the host enter the graph like
// any step: each runs (on a worker, and in the model on the device-to-host engine) as soon as
// its array is computed, while the host goes on submitting work. The future's get() is the
// sync point: the modeled host waits there (counted in host_stall), and the values or the
// first failure come out exactly as from to_host. On a ManualExecutor, where nothing runs
// until something drives it, the copies run when get() (or another export, or run_all) does.

#include <cstddef>
#include <future>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/host_array.hpp"

namespace ferry {
namespace detail {

/// The copies of an asynchronous export, in flight.
class PendingExport {
 public:
  /// Submits a copy to the host of each of `sources` into the graph.
  PendingExport(std::string_view op, std::span<Step* const> sources) : op_(op) {
    refuse_inside_step(op);
    refuse_no_values(op, sources);
    note_escape(op);
    copies_.reserve(sources.size());
    for (Step* source : sources) {
      copies_.push_back(make_copy_out(*source, {}));
      source->device()->submit(*copies_.back());
    }
  }
  PendingExport(PendingExport&&) noexcept = default;
  PendingExport& operator=(PendingExport&&) = delete;
  PendingExport(const PendingExport&) = delete;
  PendingExport& operator=(const PendingExport&) = delete;

  /// A future dropped without get() still ends its export (as a std::async future waits in
  /// its destructor), so the model lets go of the copies; errors are dropped with it.
  ~PendingExport() {
    if (copies_.empty()) return;
    try {
      static_cast<void>(collect());
    } catch (...) {  // nobody asked for the values: nobody gets the error
    }
  }

  /// Waits for every copy (the host's sync point) and returns their buffers in order, or
  /// rethrows the first failure in order. Throws ExportInsideStep from inside a kernel, where
  /// the wait could deadlock (the copies' sources may need the worker it holds).
  std::vector<Buffer> collect() {
    refuse_inside_step(op_);
    std::vector<Step*> steps;
    steps.reserve(copies_.size());
    for (Ref<Step>& c : copies_) steps.push_back(c.get());
    std::vector<std::exception_ptr> verdicts(steps.size());
    std::vector<Ref<Step>> copies = std::move(copies_);
    copies_.clear();
    announce_host_sync(steps, verdicts);
    wait_and_rethrow(steps, verdicts);
    std::vector<Buffer> buffers;
    buffers.reserve(copies.size());
    for (Ref<Step>& c : copies) buffers.push_back(c->take_output());
    return buffers;
  }

 private:
  std::string_view op_;  // the export's name, a literal
  std::vector<Ref<Step>> copies_;
};

}  // namespace detail

/// Starts the export of `a` and returns at once; get() waits and returns its values. Throws at
/// the call what to_host would for an empty or freed array, or from inside a kernel; get()
/// rethrows what to_host would for a failed step.
template <Element T>
std::future<HostArray<T>> to_host_async(const DeviceArray<T>& a) {
  detail::Step* sources[] = {&detail::step_of("to_host_async", a)};
  return std::async(std::launch::deferred,
                    [shape = sources[0]->shape(),
                     pending = detail::PendingExport("to_host_async", sources)]() mutable {
                      return HostArray<T>::adopt(shape, std::move(pending.collect()[0]));
                    });
}

/// Starts the export of several arrays at once: get() returns their values in order (one sync
/// for all), so `auto [y, z] = ferry::to_host_async(y, z).get();`. Throws like the one-array form.
template <Element T0, Element T1, Element... Ts>
std::future<std::tuple<HostArray<T0>, HostArray<T1>, HostArray<Ts>...>> to_host_async(
    const DeviceArray<T0>& a0, const DeviceArray<T1>& a1, const DeviceArray<Ts>&... rest) {
  std::array<detail::Step*, 2 + sizeof...(Ts)> sources{&detail::step_of("to_host_async", a0),
                                                      &detail::step_of("to_host_async", a1),
                                                      &detail::step_of("to_host_async", rest)...};
  std::array<Shape, 2 + sizeof...(Ts)> shapes;
  for (std::size_t i = 0; i < sources.size(); ++i) shapes[i] = sources[i]->shape();
  return std::async(std::launch::deferred,
                    [shapes, pending = detail::PendingExport("to_host_async", sources)]() mutable {
                      std::vector<detail::Buffer> buffers = pending.collect();
                      return [&]<std::size_t... I>(std::index_sequence<I...>) {
                        return std::tuple<HostArray<T0>, HostArray<T1>, HostArray<Ts>...>{
                            HostArray<std::tuple_element_t<I, std::tuple<T0, T1, Ts...>>>::adopt(
                                shapes[I], std::move(buffers[I]))...};
                      }
                      (std::make_index_sequence<2 + sizeof...(Ts)>{});
                    });
}

/// Starts the export of a vector of arrays: get() returns their values in order.
template <Element T>
std::future<std::vector<HostArray<T>>> to_host_async(const std::vector<DeviceArray<T>>& arrays) {
  std::vector<detail::Step*> sources;
  std::vector<Shape> shapes;
  for (const DeviceArray<T>& a : arrays) {
    sources.push_back(&detail::step_of("to_host_async", a));
    shapes.push_back(sources.back()->shape());
  }
  return std::async(std::launch::deferred,
                    [shapes = std::move(shapes),
                     pending = detail::PendingExport("to_host_async", sources)]() mutable {
                      std::vector<detail::Buffer> buffers = pending.collect();
                      std::vector<HostArray<T>> out;
                      out.reserve(buffers.size());
                      for (std::size_t i = 0; i < buffers.size(); ++i)
                        out.push_back(HostArray<T>::adopt(shapes[i], std::move(buffers[i])));
                      return out;
                    });
}

}  // namespace ferry
