// 08 · A small transformer: train it, then decode from a KV cache, all on the device.
//
// A decoder-only transformer written with ferry's ops: a token embedding looked up with
// `take`, learned positions, pre-norm blocks (rms_norm, multi-head causal self-attention with
// scaled_dot_product_attention, an MLP with silu), residual adds and an output projection. Its
// parameters are an nn::Module on a modeled H100, trained with nn::value_and_grad and Adam.
// The task needs attention: each sequence repeats a random pattern of kPeriod tokens, so once
// the first period has gone by, the next token is the one kPeriod - 1 positions back, and only
// a model that looks back can know it. Then greedy decoding: each new token attends over a
// preallocated KV cache that update_slice writes in place, and its argmax becomes the next
// input without ever leaving the device; the tokens come back to the host in one export.
#include <ferry/ferry.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

namespace nn = ferry::nn;
using ferry::DeviceArray;
using ferry::Shape;

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

constexpr std::int64_t kVocab = 8;    // tokens 0..7
constexpr std::int64_t kPeriod = 4;   // each sequence repeats a random pattern of 4 tokens
constexpr std::int64_t kSeq = 16;     // positions the model sees (and the KV cache holds)
constexpr std::int64_t kBatch = 32;
constexpr std::int64_t kDim = 32;
constexpr std::int64_t kHeads = 2;
constexpr std::int64_t kHeadDim = kDim / kHeads;
constexpr std::int64_t kHidden = 4 * kDim;
constexpr std::int64_t kLayers = 2;

/// A decoder-only transformer. forward() takes embedded tokens (B, T, kDim) and returns logits
/// (B, T, kVocab); logits() embeds token ids first. decode_step() is the same computation for
/// one token, reading and writing a KV cache instead of attending over the whole sequence.
class TinyTransformer : public nn::Module {
 public:
  TinyTransformer(const ferry::Device& dev, std::uint64_t seed) {
    // Uniform in +-1/sqrt(fan_in), as nn::Linear initializes; norms start as the identity.
    auto matrix = [&](std::int64_t in, std::int64_t out) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      return nn::uniform(dev, Shape{in, out}, -bound, bound, seed++);
    };
    auto ones = [&] { return ferry::ones<float>(dev, Shape{kDim}); };
    tok_ = register_parameter("tok_emb", nn::uniform(dev, Shape{kVocab, kDim}, -1, 1, seed++));
    pos_ = register_parameter("pos_emb", nn::uniform(dev, Shape{kSeq, kDim}, -1, 1, seed++));
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const std::string p = "block" + std::to_string(l) + "_";
      Block& b = blocks_[l];
      b.norm1 = register_parameter(p + "norm1", ones());
      b.wq = register_parameter(p + "wq", matrix(kDim, kDim));
      b.wk = register_parameter(p + "wk", matrix(kDim, kDim));
      b.wv = register_parameter(p + "wv", matrix(kDim, kDim));
      b.wo = register_parameter(p + "wo", matrix(kDim, kDim));
      b.norm2 = register_parameter(p + "norm2", ones());
      b.w1 = register_parameter(p + "w1", matrix(kDim, kHidden));
      b.w2 = register_parameter(p + "w2", matrix(kHidden, kDim));
    }
    norm_f_ = register_parameter("norm_f", ones());
    head_ = register_parameter("head", matrix(kDim, kVocab));
  }

  std::string_view type_name() const override { return "TinyTransformer"; }

  /// Token ids (B, T) to logits (B, T, kVocab).
  DeviceArray<float> logits(const DeviceArray<std::int64_t>& ids) const {
    const std::int64_t t = ids.shape().dims()[1];
    // (B, T, D) + (T, D): the positions broadcast over the batch.
    return (*this)(ferry::take(p(tok_), ids, 0) + ferry::slice(p(pos_), 0, 0, t));
  }

  /// One token (1, 1) at position `pos` to logits (1, 1, kVocab), appending its keys and values
  /// to the caches (one (1, kHeads, kSeq, kHeadDim) pair per layer) in place.
  DeviceArray<float> decode_step(const DeviceArray<std::int64_t>& id, std::int64_t pos,
                                 std::vector<DeviceArray<float>>& k_cache,
                                 std::vector<DeviceArray<float>>& v_cache) const {
    DeviceArray<float> x = ferry::take(p(tok_), id, 0) + ferry::slice(p(pos_), 0, pos, pos + 1);
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const Block& b = blocks_[l];
      const auto h = ferry::rms_norm(x, {.weight = p(b.norm1)});
      // Moved in, the cache is the only reference to its buffer: update_slice writes the new
      // row where it belongs instead of copying kSeq rows.
      k_cache[l] =
          ferry::update_slice(std::move(k_cache[l]), heads(ferry::matmul(h, p(b.wk))), 2, pos);
      v_cache[l] =
          ferry::update_slice(std::move(v_cache[l]), heads(ferry::matmul(h, p(b.wv))), 2, pos);
      // The one query sees every key written so far, so no causal mask is needed.
      const auto att = ferry::scaled_dot_product_attention(
          heads(ferry::matmul(h, p(b.wq))), ferry::slice(k_cache[l], 2, 0, pos + 1),
          ferry::slice(v_cache[l], 2, 0, pos + 1));
      x = x + ferry::matmul(merge(att), p(b.wo));
      x = x + mlp(b, x);
    }
    return ferry::matmul(ferry::rms_norm(x, {.weight = p(norm_f_)}), p(head_));
  }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x0) const override {
    DeviceArray<float> x = x0;
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const Block& b = blocks_[l];
      // Pre-norm: each branch reads a normalized copy, the residual stream stays as it is.
      const auto h = ferry::rms_norm(x, {.weight = p(b.norm1)});
      const auto att = ferry::scaled_dot_product_attention(
          heads(ferry::matmul(h, p(b.wq))), heads(ferry::matmul(h, p(b.wk))),
          heads(ferry::matmul(h, p(b.wv))), {.causal = true});  // position t sees 0..t only
      x = x + ferry::matmul(merge(att), p(b.wo));
      x = x + mlp(b, x);
    }
    return ferry::matmul(ferry::rms_norm(x, {.weight = p(norm_f_)}), p(head_));
  }

 private:
  struct Block {
    std::size_t norm1, wq, wk, wv, wo, norm2, w1, w2;
  };

  const DeviceArray<float>& p(std::size_t i) const { return parameter(i); }

  DeviceArray<float> mlp(const Block& b, const DeviceArray<float>& x) const {
    const auto h = ferry::rms_norm(x, {.weight = p(b.norm2)});
    return ferry::matmul(ferry::silu(ferry::matmul(h, p(b.w1))), p(b.w2));
  }

  /// (B, T, kDim) -> (B, kHeads, T, kHeadDim): attention runs over the last two axes.
  static DeviceArray<float> heads(const DeviceArray<float>& x) {
    const std::int64_t bsz = x.shape().dims()[0];
    const std::int64_t t = x.shape().dims()[1];
    return ferry::permute(ferry::reshape(x, Shape{bsz, t, kHeads, kHeadDim}), {0, 2, 1, 3});
  }
  /// The inverse of heads().
  static DeviceArray<float> merge(const DeviceArray<float>& x) {
    const std::int64_t bsz = x.shape().dims()[0];
    const std::int64_t t = x.shape().dims()[2];
    return ferry::reshape(ferry::permute(x, {0, 2, 1, 3}), Shape{bsz, t, kDim});
  }

  std::size_t tok_ = 0, pos_ = 0, norm_f_ = 0, head_ = 0;
  Block blocks_[kLayers]{};
};

/// One line of the modeled timeline's figures.
void print_stats(const char* what, const ferry::DeviceStats& st) {
  const auto us = [](ferry::Duration d) { return static_cast<double>(d.count()) / 1000; };
  std::printf(
      "modeled %s on the H100: makespan %.1f us (critical path %.1f us), %llu steps, "
      "efficiency %.3f, host stalled %.1f us, %llu host syncs, %llu donations, "
      "peak DRAM %llu bytes\n",
      what, us(st.makespan), us(st.critical_path), static_cast<unsigned long long>(st.steps),
      st.efficiency(), us(st.host_stall), static_cast<unsigned long long>(st.host_syncs),
      static_cast<unsigned long long>(st.donations),
      static_cast<unsigned long long>(st.peak_dram_bytes));
}

/// `count` sequences of kSeq + 1 tokens, each a random pattern of kPeriod tokens repeated.
std::vector<std::int64_t> repeating_sequences(std::mt19937& rng, std::int64_t count) {
  std::uniform_int_distribution<std::int64_t> token(0, kVocab - 1);
  std::vector<std::int64_t> out;
  for (std::int64_t s = 0; s < count; ++s) {
    std::int64_t pattern[kPeriod];
    for (auto& t : pattern) t = token(rng);
    for (std::int64_t i = 0; i <= kSeq; ++i) out.push_back(pattern[i % kPeriod]);
  }
  return out;
}

}  // namespace

int main() {
  ferry::Device gpu = ferry::Device::modeled(ferry::specs::h100_sxm());
  TinyTransformer model(gpu, 1);
  std::printf("a %lld-layer transformer of %lld parameters on %s\n",
              static_cast<long long>(kLayers), static_cast<long long>(model.parameter_count()),
              gpu.name().c_str());

  // Inputs are tokens 0..kSeq-1 of each sequence, labels tokens 1..kSeq. Only labels from
  // kPeriod on are scored: before that the next token is a coin toss no model can learn.
  auto loss_fn = [&](const DeviceArray<std::int64_t>& ids,
                     const DeviceArray<std::int64_t>& labels) {
    const auto scored = ferry::slice(model.logits(ids), 1, kPeriod - 1, kSeq);
    return nn::cross_entropy(ferry::reshape(scored, Shape{kBatch * (kSeq - kPeriod + 1), kVocab}),
                             labels);
  };
  auto step = nn::value_and_grad(model, loss_fn);
  ferry::optim::Adam adam({.lr = 1e-2});

  std::mt19937 rng(7);
  constexpr int kSteps = 40;
  float first_loss = 0;
  float loss_now = 0;
  for (int s = 0; s < kSteps; ++s) {
    // A fresh batch each step, so the model must learn the rule, not the sequences.
    const std::vector<std::int64_t> seqs = repeating_sequences(rng, kBatch);
    std::vector<std::int64_t> ids;
    std::vector<std::int64_t> labels;
    for (std::int64_t b = 0; b < kBatch; ++b) {
      for (std::int64_t i = 0; i < kSeq; ++i) ids.push_back(seqs[b * (kSeq + 1) + i]);
      for (std::int64_t i = kPeriod; i <= kSeq; ++i) labels.push_back(seqs[b * (kSeq + 1) + i]);
    }
    auto [loss, grads] = step(ferry::to_device(gpu, ids, Shape{kBatch, kSeq}),
                              ferry::to_device(gpu, labels, Shape{kBatch * (kSeq - kPeriod + 1)}));
    adam.step(model, grads);  // every parameter overwritten in place
    if (s % 5 == 0 || s == kSteps - 1) {
      loss_now = loss.to_host().data()[0];  // the only wait of the step
      if (s == 0) first_loss = loss_now;
      std::printf("  step %3d  loss %.4f\n", s, static_cast<double>(loss_now));
    }
  }
  check(loss_now < 0.3F * first_loss, "the loss fell to under 30% of where it started");
  const ferry::DeviceStats train = gpu.stats();
  print_stats("training", train);
  // A model this small does almost no arithmetic per op: the modeled H100 spends its time
  // waiting for the host to launch thousands of tiny kernels, one after the other.
  const double launch_us = static_cast<double>(train.steps) *
                           static_cast<double>(ferry::specs::h100_sxm().launch_overhead.count()) /
                           1e3;
  std::printf("  %llu launches x %.1f us of host time each = %.0f us of the %.0f us makespan\n",
              static_cast<unsigned long long>(train.steps),
              static_cast<double>(ferry::specs::h100_sxm().launch_overhead.count()) / 1e3,
              launch_us, static_cast<double>(train.makespan.count()) / 1e3);
  check(launch_us > 0.8 * static_cast<double>(train.makespan.count()) / 1e3 &&
            train.critical_path < train.makespan / 10,
        "training is launch-bound: launches, not the kernels' dependencies, set the makespan");

  // Greedy decoding. The caches are allocated once, at full length, and written a row at a time.
  std::vector<DeviceArray<float>> k_cache;
  std::vector<DeviceArray<float>> v_cache;
  for (std::int64_t l = 0; l < kLayers; ++l) {
    k_cache.push_back(ferry::zeros<float>(gpu, Shape{1, kHeads, kSeq, kHeadDim}));
    v_cache.push_back(ferry::zeros<float>(gpu, Shape{1, kHeads, kSeq, kHeadDim}));
  }
  ferry::wait(k_cache[0]);  // (only to read its buffer's address for the check below)
  const std::byte* cache_buffer = ferry::detail::ArrayAccess::step(k_cache[0])->output().data();
  gpu.reset_stats();  // a new window: decoding alone
  const std::vector<std::int64_t> prompt{5, 2, 7, 1};  // one period; the model must repeat it
  std::vector<DeviceArray<std::int64_t>> generated;
  DeviceArray<std::int64_t> next;
  for (std::int64_t pos = 0; pos + 1 < kSeq; ++pos) {  // the last token needs no input
    // The prompt goes in token by token; after it, the model's own last argmax, still on the
    // device, is the next input: no export inside the loop.
    const auto id = pos < kPeriod
                        ? ferry::to_device(gpu, std::vector<std::int64_t>{prompt[pos]}, Shape{1, 1})
                        : next;
    next = ferry::argmax(model.decode_step(id, pos, k_cache, v_cache), 2);  // (1, 1)
    if (pos >= kPeriod - 1) generated.push_back(next);
  }
  const auto tokens = ferry::concat(generated, 1).to_host();  // one export for every token
  const ferry::DeviceStats decoded = gpu.stats();
  print_stats("decoding", decoded);
  std::printf("prompt    :");
  for (const std::int64_t t : prompt) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\ngenerated :");
  bool repeats = true;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(generated.size()); ++i) {
    const std::int64_t t = tokens.data()[i];
    std::printf(" %lld", static_cast<long long>(t));
    repeats = repeats && t == prompt[(kPeriod + i) % kPeriod];
  }
  std::printf("\n");
  check(repeats, "greedy decoding from the KV cache continues the prompt's pattern");
  check(decoded.host_syncs == 1, "decoding waited on the host once, at the end");
  ferry::wait(k_cache[0]);  // (a buffer is only known once its step has run)
  check(ferry::detail::ArrayAccess::step(k_cache[0])->output().data() == cache_buffer,
        "the KV cache still lives in the buffer zeros() gave it: every write was in place");

  // The cache is an optimization, not a different model: running the whole sequence through
  // the causal forward pass at once predicts the same tokens.
  std::vector<std::int64_t> sequence(prompt);
  for (std::int64_t i = 0; i + 1 < static_cast<std::int64_t>(generated.size()); ++i) {
    sequence.push_back(tokens.data()[i]);
  }
  const auto n = static_cast<std::int64_t>(sequence.size());
  const auto full =
      ferry::argmax(model.logits(ferry::to_device(gpu, sequence, Shape{1, n})), 2).to_host();
  bool same = true;
  for (std::int64_t i = kPeriod - 1; i < n; ++i)
    same = same && full.data()[i] == tokens.data()[i - kPeriod + 1];
  check(same, "the full causal forward pass over the decoded sequence predicts the same tokens");

  return 0;
}
