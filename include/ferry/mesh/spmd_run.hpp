#pragma once
// The per-device run of ferry::spmd (mesh/spmd.hpp): SpmdRun, the devices' threads of one spmd
// call and the baton they pass, so that only one runs at a time, in an order set by the
// program alone; and exchange, a device's named-axis collective call, which waits until every
// device has made it, checks that all made the same call, and has the last of them run the
// mesh collective for all. It is its own file because it is the scheduling of the devices'
// functions, which knows nothing of spmd's arguments, results or which collective runs; spmd.hpp
// builds the user's API on it. See spmd.hpp's comment for the whole story.

#include <any>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/program/trace.hpp"
#include "ferry/runtime/recorder.hpp"

namespace ferry::detail {

/// One device's collective call at a sequence point of an spmd run.
struct SpmdCall {
  std::string op;    // "all_reduce"
  std::string text;  // the call as printed in errors: "all_reduce(float32 (2, 3), 'tp', sum)"
  std::string key;   // what every device's call must agree on
  std::any operand;  // the device's DeviceArray<T>
  /// Runs the mesh collective over every device's operand (row-major), giving each its result.
  std::function<std::vector<std::any>(const Mesh&, std::vector<std::any>&)> run;
};

/// The devices' threads of one spmd call and the baton they pass (see the file's comment).
class SpmdRun {
 public:
  explicit SpmdRun(Mesh mesh)
      : mesh_(std::move(mesh)),
        n_(static_cast<std::size_t>(mesh_.size())),
        state_(n_, State::running),
        threw_(n_, false),
        calls_(n_),
        results_(n_),
        errors_(n_),
        induced_(n_) {}

  const Mesh& mesh() const noexcept { return mesh_; }

  /// Blocks device k's thread until it holds the baton.
  void begin(std::size_t k) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return turn_ == static_cast<std::int64_t>(k); });
  }

  /// Starts the run: device 0 gets the baton.
  void start() {
    std::lock_guard lock(mutex_);
    pass_baton();
  }

  /// Device k's function returned (error null) or threw `error`; gives up the baton.
  void finish(std::size_t k, const std::exception_ptr& error) {
    std::lock_guard lock(mutex_);
    state_[k] = State::finished;
    threw_[k] = error != nullptr;
    pass_baton();
  }

  /// Whether `error`, device k's, is one the run gave it because another device went missing
  /// (spmd then prefers to rethrow the cause).
  bool induced(std::size_t k, const std::exception_ptr& error) const {
    std::lock_guard lock(mutex_);
    for (const std::exception_ptr& e : induced_[k]) {
      if (e == error) return true;
    }
    return false;
  }

  /// Device k's call of a collective: waits for the others, gives its result or throws.
  std::any exchange(std::size_t k, SpmdCall call) {
    std::unique_lock lock(mutex_);
    calls_[k] = std::move(call);
    state_[k] = State::waiting;
    pass_baton();
    cv_.wait(lock, [&] { return turn_ == static_cast<std::int64_t>(k); });
    std::any out = std::move(results_[k]);
    results_[k].reset();
    if (std::exception_ptr e = std::exchange(errors_[k], nullptr)) std::rethrow_exception(e);
    return out;
  }

 private:
  enum class State : std::uint8_t { running, waiting, finished };

  std::string device_text(std::size_t k) const {
    return "device " + std::to_string(k) + " (" + mesh_.devices()[k].name() + ")";
  }

  // Under mutex_: the lowest running device gets the baton; when none runs but some wait,
  // their collective is settled first.
  void pass_baton() {
    bool waiting = false;
    for (std::size_t k = 0; k < n_; ++k) waiting = waiting || state_[k] == State::waiting;
    bool running = false;
    for (std::size_t k = 0; k < n_; ++k) running = running || state_[k] == State::running;
    if (!running && waiting) settle();
    turn_ = -1;
    for (std::size_t k = 0; k < n_; ++k) {
      if (state_[k] == State::running) {
        turn_ = static_cast<std::int64_t>(k);
        break;
      }
    }
    cv_.notify_all();
  }

  // Under mutex_, with no device running: every waiting device gets its collective's result or
  // an error, and runs again.
  void settle() {
    ++round_;
    std::vector<std::size_t> missing;
    for (std::size_t k = 0; k < n_; ++k) {
      if (state_[k] == State::finished) missing.push_back(k);
    }
    if (!missing.empty()) {
      for (std::size_t k = 0; k < n_; ++k) {
        if (state_[k] != State::waiting) continue;
        std::string who;
        for (std::size_t i = 0; i < missing.size(); ++i) {
          who += (i == 0 ? "" : ", ") + device_text(missing[i]) +
                 (threw_[missing[i]] ? " threw" : " returned");
        }
        const std::exception_ptr e = std::make_exception_ptr(InvalidArgument(
            message(calls_[k]->op, "under spmd, ", device_text(k), " calls ", calls_[k]->text,
                    " (collective ", round_, " of its program), but ", who,
                    " before reaching it: every device must make the same collective calls")));
        errors_[k] = e;
        induced_[k].push_back(e);
      }
    } else {
      const SpmdCall& first = *calls_[0];
      std::exception_ptr error;
      for (std::size_t k = 1; k < n_ && !error; ++k) {
        if (calls_[k]->key != first.key) {
          error = std::make_exception_ptr(InvalidArgument(
              message(first.op, "under spmd, collective ", round_, " differs: ", device_text(0),
                      " calls ", first.text, ", ", device_text(k), " calls ", calls_[k]->text)));
        }
      }
      if (!error) {
        std::vector<std::any> operands;
        operands.reserve(n_);
        for (std::size_t k = 0; k < n_; ++k) operands.push_back(std::move(calls_[k]->operand));
        try {
          std::vector<std::any> out = first.run(mesh_, operands);
          for (std::size_t k = 0; k < n_; ++k) results_[k] = std::move(out[k]);
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (error) {
        for (std::size_t k = 0; k < n_; ++k) errors_[k] = error;
      }
    }
    for (std::size_t k = 0; k < n_; ++k) {
      if (state_[k] == State::waiting) state_[k] = State::running;
      calls_[k].reset();
    }
  }

  const Mesh mesh_;
  const std::size_t n_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::int64_t turn_ = -1;
  std::int64_t round_ = 0;
  std::vector<State> state_;
  std::vector<bool> threw_;
  std::vector<std::optional<SpmdCall>> calls_;
  std::vector<std::any> results_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::vector<std::exception_ptr>> induced_;
};

/// The spmd run this thread is a device of, and which device.
inline thread_local SpmdRun* t_spmd_run = nullptr;
inline thread_local std::size_t t_spmd_device = 0;
/// While jit traces an spmd function on a device's thread (mesh/spmd_jit.hpp): that device's
/// trace, and the values of the collectives' results in it, whose ops a replay must submit
/// whether or not anything reads them (every device must join each collective).
struct SpmdTracing {
  Trace* trace = nullptr;
  std::vector<std::uint32_t> collectives;
};
inline thread_local SpmdTracing* t_spmd_tracing = nullptr;

/// Runs `body(k)` for every device k of `mesh` on a thread of its own under one SpmdRun, each
/// with `tape` as its gradient tape; returns once every body has returned. Rethrows the first
/// error by device order, preferring a cause to the errors the run gave devices left waiting at
/// a collective by it.
template <class Body>
void run_on_devices(const Mesh& mesh, Tape* tape, Body body) {
  const auto n = static_cast<std::size_t>(mesh.size());
  SpmdRun run(mesh);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    try {
      threads.emplace_back([&, k] {
        t_spmd_run = &run;
        t_spmd_device = k;
        t_tape = tape;
        t_record_depth = 0;
        run.begin(k);
        std::exception_ptr error;
        try {
          body(k);
        } catch (...) {
          error = std::current_exception();
        }
        errors[k] = error;
        t_tape = nullptr;
        t_spmd_run = nullptr;
        run.finish(k, error);
      });
    } catch (...) {
      // No thread for devices k..n-1: they finish at once, with the reason.
      for (std::size_t j = k; j < n; ++j) {
        errors[j] = std::current_exception();
        run.finish(j, errors[j]);
      }
      break;
    }
  }
  run.start();
  for (std::thread& t : threads) t.join();
  std::exception_ptr first;
  for (std::size_t k = 0; k < n && !first; ++k) {
    if (errors[k] && !run.induced(k, errors[k])) first = errors[k];
  }
  for (std::size_t k = 0; k < n && !first; ++k) first = errors[k];
  if (first) std::rethrow_exception(first);
}

/// Hides the program trace recording on this thread for its lifetime: the mesh collective one
/// device runs for all is no op of that device's trace (the trace records the call itself).
class HiddenTrace {
 public:
  HiddenTrace() noexcept
      : recorder_(std::exchange(t_recorder, nullptr)),
        context_(std::exchange(t_sym_context, nullptr)),
        float_context_(std::exchange(t_sym_float_context, nullptr)),
        depth_(std::exchange(t_record_depth, 0)) {}
  ~HiddenTrace() {
    t_recorder = recorder_;
    t_sym_context = context_;
    t_sym_float_context = float_context_;
    t_record_depth = depth_;
  }
  HiddenTrace(const HiddenTrace&) = delete;
  HiddenTrace& operator=(const HiddenTrace&) = delete;

 private:
  Recorder* recorder_;
  SymContext* context_;
  SymFloatContext* float_context_;
  int depth_;
};

/// The run of the calling device; InvalidArgument, as `op`, outside spmd.
inline SpmdRun& spmd_run(std::string_view op, std::string_view axis) {
  if (t_spmd_run == nullptr) {
    fail<InvalidArgument>(op, "axis '", axis,
                          "' is a named mesh axis, which only a function run by ferry::spmd has; "
                          "outside it, give a MeshArray and an axis index");
  }
  return *t_spmd_run;
}

/// "float32 (2, 3)".
template <Element T>
std::string operand_text(const DeviceArray<T>& x) {
  return std::string(name_of(dtype_of<T>)) + " " + x.shape().to_string();
}

/// Device k's call of a named-axis collective on `x`: checks the operand, then meets the other
/// devices; `collective(mesh_array)` is the mesh collective the last of them runs for all.
/// `same_shape`: each device's result has its operand's shape (the mesh collective checks the
/// operands agree), so a trace keeps its sizes symbolic; otherwise a trace guards the operand's
/// sizes. Under jit's trace of spmd (mesh/spmd_jit.hpp) the call is recorded as one op of the
/// device's trace whose replay makes the same call (inside an spmd that another trace meets,
/// nothing records: spmd refuses that trace).
template <Element T, class Collective>
DeviceArray<T> exchange(std::string_view op, SpmdRun& run, std::string_view axis,
                        const std::string& params, DeviceArray<T> x, Collective collective,
                        bool same_shape) {
  const std::size_t k = t_spmd_device;
  const Device here = run.mesh().devices()[k];
  if (!x.valid()) fail<InvalidArgument>(op, "empty handle");
  if (!(x.device() == here)) {
    fail<InvalidArgument>(op, "under spmd, device ", k, " (", here.name(),
                          ") gives an operand that lives on ", x.device().name(),
                          ": each device's operand must be its own");
  }
  SpmdTracing* const tracing = t_spmd_tracing;
  Trace* const recorder = tracing != nullptr ? tracing->trace : nullptr;
  const Ref<Step> operand =
      recorder != nullptr ? Ref<Step>::share(ArrayAccess::step(x)) : Ref<Step>();
  const Shape traced = recorder != nullptr ? recorder->shape_of(*operand) : Shape();
  SpmdCall call;
  call.op = std::string(op);
  call.key = call.op + "(" + std::string(name_of(dtype_of<T>)) + ", '" + std::string(axis) + "'" +
             params + ")";
  call.text = call.op + "(" + operand_text(x) + ", '" + std::string(axis) + "'" + params + ")";
  call.operand = std::move(x);
  call.run = [collective](const Mesh& mesh, std::vector<std::any>& operands) {
    const HiddenTrace hidden;
    std::vector<DeviceArray<T>> shards;
    shards.reserve(operands.size());
    for (std::any& a : operands) shards.push_back(std::any_cast<DeviceArray<T>&&>(std::move(a)));
    MeshArray<T> out = collective(MeshArray<T>::from_shards(mesh, std::move(shards)));
    std::vector<std::any> results;
    for (DeviceArray<T>& s : std::move(out).shards()) results.emplace_back(std::move(s));
    return results;
  };
  std::any out = run.exchange(k, std::move(call));
  DeviceArray<T> result = std::any_cast<DeviceArray<T>&&>(std::move(out));
  if (recorder != nullptr) {
    Step& made = *ArrayAccess::step(result);
    Shape shape = made.shape();
    if (same_shape) {
      shape = traced;
    } else if (t_sym_context != nullptr) {
      for (std::size_t d = 0; d < traced.rank(); ++d) {
        const std::uint32_t node = SymAccess::node(traced[d]);
        if (node != 0) t_sym_context->guard(node, SymAccess::value(traced[d]));
      }
    }
    OpCall recorded;
    recorded.name = op;  // a literal of the named-axis collective
    recorded.inputs = {operand.get()};
    recorded.replay = [op, name = std::string(axis), params, collective, same_shape](
                          std::span<Step* const> in, std::span<const std::int64_t>) {
      DeviceArray<T> y = exchange(op, spmd_run(op, name), name, params,
                                  ArrayAccess::wrap<T>(Ref<Step>::share(in[0])), collective,
                                  same_shape);
      return ArrayAccess::take(y);
    };
    tracing->collectives.push_back(recorder->record_effect(std::move(recorded), made, shape));
  }
  return result;
}

}  // namespace ferry::detail
