#pragma once
// Blocks<T>: an array whose elements never move and are built only when first covered. The
// simulator's commands and the trace's slices live in it: both are large (hundreds of bytes,
// with lists inside), and a growing array moved every one of them at each doubling.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ferry::detail {

/// An array of T whose elements never move: it grows by whole blocks, and finds an element
/// through a table of addresses (one load, where a block index would take a shift, a mask and
/// a multiply by sizeof(T)). A block is raw memory, each element built when first covered: a
/// new device's model used to build (and zero) a whole block of commands, 115 KiB, to use a
/// few of them.
template <class T>
class Blocks {
 public:
  static constexpr std::size_t kBlock = 256;

  Blocks() = default;
  Blocks(const Blocks&) = delete;
  Blocks& operator=(const Blocks&) = delete;
  ~Blocks() {
    for (T* e : at_) e->~T();
  }

  T& operator[](std::uint64_t i) noexcept { return *at_[i]; }
  const T& operator[](std::uint64_t i) const noexcept { return *at_[i]; }
  std::size_t size() const noexcept { return at_.size(); }
  /// Makes elements [0, n) exist (default-made when new).
  void cover(std::size_t n) {
    while (at_.size() < n) {
      const std::size_t in_block = at_.size() % kBlock;
      if (in_block == 0) {
        std::unique_ptr<std::byte, Release> block(static_cast<std::byte*>(
            ::operator new(kBlock * sizeof(T), std::align_val_t{alignof(T)})));
        blocks_.push_back(std::move(block));
      }
      at_.push_back(::new (blocks_.back().get() + in_block * sizeof(T)) T);
    }
  }

 private:
  /// Gives a block back with the alignment it was taken with (T's: a command keeps its fields
  /// on the cache lines its layout puts them on).
  struct Release {
    void operator()(std::byte* p) const noexcept {
      ::operator delete(p, std::align_val_t{alignof(T)});
    }
  };
  std::vector<std::unique_ptr<std::byte, Release>> blocks_;
  std::vector<T*> at_;  // the address of each element
};

}  // namespace ferry::detail
