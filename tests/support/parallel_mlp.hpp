#pragma once
// Megatron's MLP (ColumnParallelLinear, gelu, RowParallelLinear) of the tensor-parallel tests,
// its sizes and seeds, and the host arrays they build it and its one-device twin from.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

namespace ferry_test::mlp {

// A hidden size that does not divide by 4 or 2 devices: array_split's shards (3, 3, 2, 2).
constexpr std::int64_t kBatch = 3, kIn = 6, kHidden = 10, kOut = 5;
constexpr std::uint64_t kSeed1 = 21, kSeed2 = 22;

/// A rows x cols array of smooth values, different for each `salt`.
inline ferry::HostArray<float> data(std::int64_t rows, std::int64_t cols, int salt) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + salt));
  }
  return ferry::HostArray<float>(ferry::Shape{rows, cols}, v);
}

/// The transpose of a 2-D host array (nn::Linear keeps its weight (out, in)).
inline ferry::HostArray<float> transposed(const ferry::HostArray<float>& a) {
  const std::int64_t r = a.shape().dims()[0];
  const std::int64_t c = a.shape().dims()[1];
  ferry::HostArray<float> t(ferry::Shape{c, r});
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) {
      t.data()[static_cast<std::size_t>(j * r + i)] = a.data()[static_cast<std::size_t>(i * c + j)];
    }
  }
  return t;
}

/// Megatron's MLP along mesh axis `axis`: column-parallel, gelu, row-parallel; it starts as
/// nn::Linear(kIn, kHidden) and nn::Linear(kHidden, kOut) with seeds kSeed1 and kSeed2 do.
struct ParallelMlp {
  ferry::nn::ColumnParallelLinear fc1;
  ferry::nn::RowParallelLinear fc2;

  ParallelMlp(const ferry::Mesh& mesh, int axis)
      : fc1(kIn, kHidden, mesh, axis, {.seed = kSeed1}),
        fc2(kHidden, kOut, mesh, axis, {.seed = kSeed2}) {}

  ferry::MeshArray<float> operator()(const ferry::MeshArray<float>& x) const {
    return fc2(ferry::gelu(fc1(x)));
  }

  /// fc1's parameters, then fc2's (new handles: what nn::value_and_grad differentiates).
  std::vector<ferry::MeshArray<float>> parameters() const {
    std::vector<ferry::MeshArray<float>> out = fc1.parameters();
    for (ferry::MeshArray<float>& p : fc2.parameters()) out.push_back(std::move(p));
    return out;
  }
  /// The layers' own arrays, in parameters() order: what an optimizer steps in place.
  std::vector<ferry::MeshArray<float>*> parameter_slots() {
    std::vector<ferry::MeshArray<float>*> out = fc1.parameter_slots();
    for (ferry::MeshArray<float>* p : fc2.parameter_slots()) out.push_back(p);
    return out;
  }
};

}  // namespace ferry_test::mlp
