#pragma once
// ferry::jit: a function of arrays and sizes, traced once and replayed for new shapes. The first
// call with a given set of facts runs the function eagerly while a Trace records it; the entry
// it leaves in the cache replays for every later call whose sizes and arguments satisfy the
// same guards, without running the function again.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/ops/layout.hpp"
#include "ferry/program/cache_index.hpp"
#include "ferry/program/entry.hpp"
#include "ferry/program/result_traits.hpp"
#include "ferry/program/trace.hpp"
#include "ferry/program/updates.hpp"

namespace ferry {

/// How a program caches its traces.
enum class CacheMode : std::uint8_t {
  /// Sizes and SymInt and SymFloat arguments are symbols: one entry serves every call for which
  /// the guards the trace recorded hold (the default).
  symbolic,
  /// Every size and argument is a constant: one entry per combination.
  static_shapes,
};

namespace detail {

template <class X>
inline constexpr bool kIsSymArg = std::is_same_v<X, SymInt> ||
                                  (std::is_integral_v<X> && !std::is_same_v<X, bool>);

/// The parameter list of a function object's call operator.
template <class F>
struct CallTraits : CallTraits<decltype(&F::operator())> {};
template <class R, class... A>
struct CallTraits<R (*)(A...)> {
  using Result = R;
  using Params = std::tuple<std::remove_cvref_t<A>...>;
};
template <class R, class C, class... A>
struct CallTraits<R (C::*)(A...) const> : CallTraits<R (*)(A...)> {};
template <class R, class C, class... A>
struct CallTraits<R (C::*)(A...)> : CallTraits<R (*)(A...)> {};

/// How many of a parameter list's types are DeviceArrays.
template <class Params>
struct ArrayCount;
template <class... P>
struct ArrayCount<std::tuple<P...>>
    : std::integral_constant<std::size_t, (std::size_t{0} + ... + (kIsArray<P> ? 1 : 0))> {};

/// What a program's calls share: the cache, its counters and the declared input layouts.
struct ProgramCache {
  std::mutex mutex;
  std::vector<std::unique_ptr<const Entry>> entries;  // never removed: a lookup keeps a pointer
  CacheIndex index;
  std::size_t hits = 0;
  std::size_t misses = 0;
  std::optional<std::vector<Layout>> layouts;  // set by the first trace, then never changed
  // The layouts once set, for calls to read without the lock.
  std::atomic<const std::vector<Layout>*> published_layouts{nullptr};
  std::vector<std::string> refusals;  // the most recent traces not cached, and why
  // With Updates: how many state arrays the first trace read (every call must read as many).
  std::optional<std::size_t> state_arrays;
};

}  // namespace detail

/// A traced program: call it like the function it wraps. Parameters are DeviceArrays, SymInts
/// (sizes or scalars that may differ between calls without a new trace), SymFloats (floating
/// scalars, a learning rate: inputs of the trace, so a new value replays the same entry) and
/// plain integers, floats and doubles (constants of a trace: each value gets its own entry). It
/// returns a DeviceArray, a std::vector of them or a tuple/pair of DeviceArrays (of which one
/// element may be such a vector: its length is what the others leave).
///
/// What the function reads from elsewhere (arrays and numbers it captures) is a constant of
/// each trace: pass what changes between calls as a parameter, or name the objects it updates
/// in place (a module, an optimizer) with ferry::updates, whose arrays are then inputs and
/// outputs of every trace. An array argument given away (std::move, a temporary) whose handle
/// was the last may be donated by a replay, as an eager op donates it: the elementwise step
/// (or fused run) that reads it last writes its output into its buffer, when that output has
/// its shape, type and layout and no view shares it; a copy the caller kept, or a view, keeps
/// the buffer as it is (so do the arrays of the objects it updates). Copies share one cache;
/// every call is safe from any thread (a program with Updates: from one thread at a time, as
/// the objects it updates are).
template <class F>
class Program {
  using Traits = detail::CallTraits<F>;
  using Params = typename Traits::Params;
  using Result = std::remove_cvref_t<typename Traits::Result>;
  static constexpr std::size_t kParams = std::tuple_size_v<Params>;
  static constexpr std::size_t kArrays = detail::ArrayCount<Params>::value;
  static constexpr std::size_t kScalars = kParams - kArrays;

 public:
  explicit Program(F fn, CacheMode mode = CacheMode::symbolic)
      : fn_(std::move(fn)), mode_(mode), cache_(std::make_shared<detail::ProgramCache>()) {}

  /// A program that also updates `updates`' objects in place (see ferry::updates).
  Program(F fn, Updates updates, CacheMode mode = CacheMode::symbolic)
      : fn_(std::move(fn)), mode_(mode), cache_(std::make_shared<detail::ProgramCache>()),
        updates_(std::move(updates)) {}

  /// Runs the program: replays a cached entry whose guards hold, else traces the function
  /// (running it eagerly) and caches the entry. Throws what the function or its ops throw,
  /// InvalidArgument naming "jit" for an empty array argument.
  template <class... Args>
    requires(sizeof...(Args) == kParams)
  Result operator()(Args&&... args) const {
    Params params{std::forward<Args>(args)...};
    // Inside another program's trace, this one is part of that trace; under a gradient tape,
    // its ops must be seen one by one (a replay submits steps the tape would not see).
    if (detail::t_recorder != nullptr || detail::t_tape != nullptr) {
      return std::apply(fn_, std::move(params));
    }
    if (!updates_.states().empty()) return call_updating(std::move(params));
    convert_layouts(params);
    std::array<detail::Step*, kArrays> inputs{};
    std::array<std::int64_t, kScalars> scalars{};
    std::array<bool, kScalars> symbolic{};
    std::array<bool, kScalars> floating{};
    collect(params, inputs, scalars, symbolic, floating);
    std::array<std::uint32_t, kArrays> aliases{};  // the first input that is the same array
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      while (inputs[aliases[i]] != inputs[i]) ++aliases[i];
    }

    thread_local std::vector<std::int64_t> env;
    const detail::Entry* hit = lookup(inputs, aliases, scalars, env);
    if (hit) {
      // Most programs return a few arrays: no vector for them.
      std::array<detail::Handle, 4> few;
      std::vector<detail::Handle> many;
      if (hit->output_count() > few.size()) many.resize(hit->output_count());
      const std::span<detail::Handle> out =
          many.empty() ? std::span<detail::Handle>(few.data(), hit->output_count())
                       : std::span<detail::Handle>(many);
      // The replay takes the parameters' handles: where the caller gave an array away
      // (std::move, a temporary), the replay's is then its last and the array may be donated.
      std::array<detail::Handle, kArrays> given;
      take_arrays(params, given);
      hit->replay(inputs, env, out, given);
      std::size_t at = 0;
      return detail::ResultTraits<Result>::rebuild(out, at);
    }
    return trace(std::move(params), inputs, scalars, symbolic, floating, {});
  }

  /// The number of cached entries.
  std::size_t cache_size() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->entries.size();
  }
  /// Calls that replayed an entry.
  std::size_t cache_hits() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->hits;
  }
  /// Calls that traced the function (whether or not the trace could be cached).
  std::size_t cache_misses() const {
    const std::lock_guard lock(cache_->mutex);
    return cache_->misses;
  }

  /// Each cached entry with its guards and the steps a replay submits, then the traces that
  /// were not cached and why.
  std::string explain() const {
    const std::lock_guard lock(cache_->mutex);
    std::string out = "program: " + std::to_string(cache_->entries.size()) + " entries, " +
                      std::to_string(cache_->hits) + " hits, " + std::to_string(cache_->misses) +
                      " misses (" + (mode_ == CacheMode::symbolic ? "symbolic" : "static_shapes") +
                      ")";
    for (std::size_t i = 0; i < cache_->entries.size(); ++i) {
      out += "\nentry " + std::to_string(i) + ":\n" + cache_->entries[i]->explain();
    }
    for (const std::string& r : cache_->refusals) out += "\nnot cached: " + r;
    return out;
  }

  /// The layout the program wants its array input `i` in (the layout it had when first
  /// traced); an input in another layout is converted before the program runs. Throws
  /// InvalidArgument before the first trace or for `i` out of range.
  Layout input_layout(std::size_t i) const {
    const std::lock_guard lock(cache_->mutex);
    if (!cache_->layouts) {
      detail::fail<InvalidArgument>("input_layout", "the program has not been traced yet");
    }
    if (i >= cache_->layouts->size()) {
      detail::fail<InvalidArgument>("input_layout", "input ", i, " of a program with ",
                                    cache_->layouts->size(), " array inputs");
    }
    return (*cache_->layouts)[i];
  }

 private:
  static constexpr std::size_t kMaxRefusals = 8;

  void convert_layouts(Params& params) const {
    const std::vector<Layout>* layouts = cache_->published_layouts.load(std::memory_order_acquire);
    if (layouts == nullptr || layouts->empty()) return;
    std::size_t i = 0;
    std::apply([&](auto&... p) { (convert_one(p, *layouts, i), ...); }, params);
  }

  template <class P>
  static void convert_one(P& p, const std::vector<Layout>& layouts, std::size_t& i) {
    if constexpr (detail::kIsArray<P>) {
      const Layout want = layouts[i++];
      if (detail::step_of("jit", p).layout() != want) p = to_layout(p, want);
    }
  }

  /// Moves each array parameter's handle into `given`, in order.
  static void take_arrays(Params& params, std::span<detail::Handle> given) {
    std::size_t a = 0;
    std::apply([&](auto&... p) {
      auto one = [&](auto& q) {
        if constexpr (detail::kIsArray<std::remove_cvref_t<decltype(q)>>) {
          given[a++] = detail::ArrayAccess::take(q);
        }
      };
      (one(p), ...);
    }, params);
  }

  static void collect(const Params& params, std::span<detail::Step*> inputs,
                      std::span<std::int64_t> scalars, std::span<bool> symbolic,
                      std::span<bool> floating) {
    std::size_t a = 0;
    std::size_t k = 0;
    std::apply(
        [&](const auto&... p) { (collect_one(p, inputs, scalars, symbolic, floating, a, k), ...); },
        params);
  }

  // A floating scalar travels as its double's bits (detail::float_word): the cache's keys and
  // guards compare words, so "the same value" is exact.
  template <class P>
  static void collect_one(const P& p, std::span<detail::Step*> inputs,
                          std::span<std::int64_t> scalars, std::span<bool> symbolic,
                          std::span<bool> floating, std::size_t& a, std::size_t& k) {
    if constexpr (detail::kIsArray<P>) {
      inputs[a++] = &detail::step_of("jit", p);
    } else if constexpr (std::is_same_v<P, SymInt>) {
      scalars[k] = detail::SymAccess::value(p);
      symbolic[k++] = true;
    } else if constexpr (std::is_same_v<P, SymFloat>) {
      scalars[k] = detail::float_word(detail::SymFloatAccess::value(p));
      floating[k] = true;
      symbolic[k++] = true;
    } else if constexpr (std::is_same_v<P, double> || std::is_same_v<P, float>) {
      scalars[k] = detail::float_word(static_cast<double>(p));
      floating[k] = true;
      symbolic[k++] = false;
    } else {
      static_assert(detail::kIsSymArg<P>, "ferry::jit: parameters are DeviceArrays, SymInts, "
                                          "SymFloats, integers, floats and doubles");
      scalars[k] = static_cast<std::int64_t>(p);
      symbolic[k++] = false;
    }
  }

  /// The cached entry a call with these inputs and scalars replays (its expressions' values in
  /// `env`), or null; counts the hit or miss.
  const detail::Entry* lookup(std::span<detail::Step* const> inputs,
                              std::span<const std::uint32_t> aliases,
                              std::span<const std::int64_t> scalars,
                              std::vector<std::int64_t>& env) const {
    thread_local std::vector<const Shape*> shapes;
    const detail::Entry* hit = nullptr;
    const std::lock_guard lock(cache_->mutex);
    const std::uint32_t at = cache_->index.find({inputs, aliases, scalars}, [&](std::uint32_t i) {
      return cache_->entries[i]->matches(inputs, scalars, env, shapes);
    });
    if (at != detail::CacheIndex::kNone) hit = cache_->entries[at].get();
    ++(hit ? cache_->hits : cache_->misses);
    if (!cache_->layouts && !hit) {
      cache_->layouts.emplace();
      for (std::size_t i = 0; i < kArrays; ++i) cache_->layouts->push_back(inputs[i]->layout());
      cache_->published_layouts.store(&*cache_->layouts, std::memory_order_release);
    }
    return hit;
  }

  void note_refusal(std::string reason) const {
    const std::lock_guard lock(cache_->mutex);
    if (cache_->refusals.size() == kMaxRefusals) cache_->refusals.erase(cache_->refusals.begin());
    cache_->refusals.push_back(std::move(reason));
  }

  /// A call of a program with Updates: the objects' arrays follow the parameters' as inputs
  /// (and the results as outputs), their host numbers the scalars as floating inputs.
  Result call_updating(Params params) const {
    const auto states = updates_.states();
    for (const auto& state : states) {
      if (!state->ready()) {
        {
          const std::lock_guard lock(cache_->mutex);
          ++cache_->misses;
        }
        note_refusal("a call ran untraced: it made " + state->name() +
                     "'s state (its first step); the next call traces");
        return std::apply(fn_, std::move(params));
      }
    }
    convert_layouts(params);
    std::vector<DeviceArray<float>*> arrays;
    std::vector<double> numbers;
    std::vector<std::size_t> first_number;  // where each state's numbers start
    for (const auto& state : states) {
      state->arrays(arrays);
      first_number.push_back(numbers.size());
      state->scalars(numbers);
    }
    {
      const std::lock_guard lock(cache_->mutex);
      if (!cache_->state_arrays) cache_->state_arrays = arrays.size();
      if (*cache_->state_arrays != arrays.size()) {
        detail::fail<InvalidArgument>("jit", "the objects it updates hold ", arrays.size(),
                                      " arrays, but ", *cache_->state_arrays,
                                      " when it was first traced");
      }
    }
    const std::size_t n_inputs = kArrays + arrays.size();
    const std::size_t n_scalars = kScalars + numbers.size();
    std::vector<detail::Step*> inputs(n_inputs);
    std::vector<std::int64_t> scalars(n_scalars);
    const std::unique_ptr<bool[]> symbolic(new bool[n_scalars]{});
    const std::unique_ptr<bool[]> floating(new bool[n_scalars]{});
    collect(params, std::span(inputs).first(kArrays), std::span(scalars).first(kScalars),
            std::span(symbolic.get(), kScalars), std::span(floating.get(), kScalars));
    for (std::size_t j = 0; j < arrays.size(); ++j) {
      inputs[kArrays + j] = &detail::step_of("jit", *arrays[j]);
    }
    for (std::size_t j = 0; j < numbers.size(); ++j) {
      scalars[kScalars + j] = detail::float_word(numbers[j]);
      symbolic[kScalars + j] = true;
      floating[kScalars + j] = true;
    }
    std::vector<std::uint32_t> aliases(n_inputs, 0);
    for (std::size_t i = 0; i < n_inputs; ++i) {
      while (inputs[aliases[i]] != inputs[i]) ++aliases[i];
    }

    thread_local std::vector<std::int64_t> env;
    const detail::Entry* hit = lookup(inputs, aliases, scalars, env);
    if (hit == nullptr) {
      const detail::StateBinding binding{states, arrays, first_number, kScalars, numbers.size()};
      return trace(std::move(params), inputs, scalars,
                   std::span<const bool>(symbolic.get(), n_scalars),
                   std::span<const bool>(floating.get(), n_scalars), binding);
    }
    std::vector<detail::Handle> out(hit->output_count());
    std::array<detail::Handle, kArrays> given;  // the objects' arrays stay theirs
    take_arrays(params, given);
    hit->replay(inputs, env, out, given);
    const std::size_t results = out.size() - arrays.size();
    std::size_t at = 0;
    Result result = detail::ResultTraits<Result>::rebuild(std::span(out).first(results), at);
    for (std::size_t j = 0; j < arrays.size(); ++j) {
      *arrays[j] = detail::ArrayAccess::wrap<float>(std::move(out[results + j]));
    }
    for (const auto& state : states) state->replayed();
    return result;
  }

  /// Traces a call. `binding` hands the objects the program updates their traced scalars while
  /// the function runs; their arrays are outputs after the results.
  Result trace(Params params, std::span<detail::Step* const> inputs,
               std::span<const std::int64_t> scalars, std::span<const bool> symbolic,
               std::span<const bool> floating, const detail::StateBinding& binding) const {
    detail::Trace t(mode_ == CacheMode::symbolic, inputs, scalars, symbolic, floating);
    std::optional<Result> result;
    std::string state_refusal;
    {
      detail::TraceScope scope(t);
      std::size_t k = 0;
      auto as_seen = [&](auto& p) {
        using P = std::remove_cvref_t<decltype(p)>;
        if constexpr (std::is_same_v<P, SymInt>) p = t.argument(k++);
        else if constexpr (std::is_same_v<P, SymFloat>) p = t.float_argument(k++);
        else if constexpr (!detail::kIsArray<P>) ++k;
      };
      std::apply([&](auto&... p) { (as_seen(p), ...); }, params);
      detail::BoundStates bound(binding, t);
      result.emplace(std::apply(fn_, std::move(params)));
      state_refusal = bound.end();
    }
    if (!state_refusal.empty()) t.refuse(std::move(state_refusal));
    std::vector<detail::Step*> out;
    detail::ResultTraits<Result>::flatten(*result, out);
    for (DeviceArray<float>* a : binding.arrays) {
      out.push_back(a->valid() ? &detail::step_of("jit", *a) : nullptr);
    }
    for (detail::Step* s : out) {
      if (s == nullptr)
        t.refuse("the function returned (or left an updated object with) an empty DeviceArray");
    }
    std::string reason = t.refusal();
    if (reason.empty()) {
      std::vector<std::uint32_t> values;
      for (detail::Step* s : out) values.push_back(t.value_of(*s));
      auto entry = std::make_unique<const detail::Entry>(t, std::move(values));
      const std::lock_guard lock(cache_->mutex);
      cache_->index.add(entry->key_schema(), entry->key(),
                        static_cast<std::uint32_t>(cache_->entries.size()));
      cache_->entries.push_back(std::move(entry));
    } else {
      note_refusal(std::move(reason));
    }
    return std::move(*result);
  }

  F fn_;
  CacheMode mode_;
  std::shared_ptr<detail::ProgramCache> cache_;
  Updates updates_;
};

/// Wraps `fn` as a Program: traced on its first call, replayed while the guards hold.
/// `fn` is a function object with one non-template call operator (a lambda without auto
/// parameters).
template <class F>
Program<std::decay_t<F>> jit(F&& fn, CacheMode mode = CacheMode::symbolic) {
  return Program<std::decay_t<F>>(std::forward<F>(fn), mode);
}

/// Wraps `fn` as a Program that also updates `updates`' objects in place: a training step,
/// `jit([&](X x, Y y) { ...; opt.step(model, grads); return loss; }, ferry::updates(model,
/// opt))`. Each call reads the objects' arrays (the model's parameters, the optimizer's state)
/// as inputs of the trace and puts the arrays the replay computed in their place; their host
/// numbers (the learning rate of the step count, a schedule's too) are floating inputs, so a
/// new rate replays the same entry. A call before the objects' state exists (an optimizer's
/// first step) runs the function untraced; so does every call of a function that steps an
/// optimizer it was not given, or steps one twice (explain() says why).
template <class F>
Program<std::decay_t<F>> jit(F&& fn, Updates updates, CacheMode mode = CacheMode::symbolic) {
  return Program<std::decay_t<F>>(std::forward<F>(fn), std::move(updates), mode);
}

}  // namespace ferry
