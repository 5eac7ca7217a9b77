#pragma once
// nn::Embedding: a table of vectors looked up by integer ids, laid out, named and initialized as
// PyTorch's nn.Embedding, so its "weight" loads from a PyTorch checkpoint as it is.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/indexing.hpp"
#include "ferry/transfer.hpp"

namespace ferry::nn {

/// How an Embedding is made besides its sizes and device.
struct EmbeddingOptions {
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// A lookup table: ids of any shape (...) to vectors (..., embedding_dim), row `id` of "weight"
/// (num_embeddings, embedding_dim), which starts standard normal as PyTorch's. Called with
/// int32 or int64 ids: `emb(ids)`. A float input, which the Module interface would pass it
/// (inside a Sequential), is refused: give it the ids instead. PyTorch's padding_idx, max_norm
/// and sparse gradients are not offered.
class Embedding : public Module {
 public:
  /// A table on `device` (the host CPU device unless given). Throws InvalidArgument for a
  /// negative size, and what to_device throws.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
            const Device& device = Device::cpu(), EmbeddingOptions options = {})
      : num_(num_embeddings), dim_(embedding_dim) {
    if (num_embeddings < 0 || embedding_dim < 0) {
      ferry::detail::fail<InvalidArgument>("Embedding",
                                           "sizes must not be negative, got num_embeddings ",
                                           num_embeddings, " and embedding_dim ", embedding_dim);
    }
    detail::SplitMix64 gen(options.seed ? *options.seed : next_seed());
    std::vector<float> w;
    detail::append_normal(w, static_cast<std::size_t>(num_embeddings * embedding_dim), 0.0, 1.0,
                          gen);
    weight_ = register_parameter(
        "weight", to_device(device, std::move(w), Shape{num_embeddings, embedding_dim}));
  }

  std::string_view type_name() const override { return "Embedding"; }

  /// The sizes; never throw.
  std::int64_t num_embeddings() const noexcept { return num_; }
  std::int64_t embedding_dim() const noexcept { return dim_; }

  /// The table, (num_embeddings, embedding_dim): the module's own handle. Never throws.
  const DeviceArray<float>& weight() const { return parameter(weight_); }

  /// The rows of the table at `ids`: (..., embedding_dim) for ids (...), a take() whose
  /// gradient scatter-adds into the table. Throws InvalidArgument for an empty handle and
  /// DeviceMismatch naming Embedding for ids on another device, before anything is submitted;
  /// an id outside [-num_embeddings, num_embeddings) fails the step (InvalidArgument naming
  /// take at the export; a negative id counts from the end, as take does).
  template <IndexElement I>
  DeviceArray<float> operator()(const DeviceArray<I>& ids) const {
    check_input(ids);
    return take(weight(), ids, 0);
  }

 protected:
  /// Throws InvalidArgument: an embedding takes integer ids, not floats.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    ferry::detail::fail<InvalidArgument>(
        "Embedding", "takes int32 or int64 ids, got a float32 array of shape ", x.shape());
  }

 private:
  std::int64_t num_;
  std::int64_t dim_;
  std::size_t weight_ = 0;
};

}  // namespace ferry::nn
