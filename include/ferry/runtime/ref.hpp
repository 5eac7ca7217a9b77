#pragma once
// Ref<T>: an intrusive reference-counted pointer. Steps are counted in place (one allocation
// per step, and a handle is one pointer wide).

#include <atomic>
#include <cstdint>
#include <utility>

namespace ferry::detail {

/// Base of objects owned through Ref. Starts with one reference, which `Ref::adopt` takes.
class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;

  void retain() const noexcept { count_.fetch_add(1, std::memory_order_relaxed); }
  void release() const noexcept {
    if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  virtual ~RefCounted() = default;

 private:
  mutable std::atomic<std::uint32_t> count_{1};
};

template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  /// Takes over the reference `p` already holds (a freshly built object's first one).
  static Ref adopt(T* p) noexcept { return Ref(p); }
  /// Adds a reference to `p`.
  static Ref share(T* p) noexcept {
    if (p != nullptr) p->retain();
    return Ref(p);
  }

  Ref(const Ref& o) noexcept : p_(o.p_) {
    if (p_ != nullptr) p_->retain();
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Ref() {
    if (p_ != nullptr) p_->release();
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  /// Gives up the reference without releasing it.
  T* leak() noexcept { return std::exchange(p_, nullptr); }

 private:
  explicit Ref(T* p) noexcept : p_(p) {}
  T* p_ = nullptr;
};

}  // namespace ferry::detail
