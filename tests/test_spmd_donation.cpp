// Donation on a replay of jit(spmd(mesh, fn)): a MeshArray given away (std::move) lets each
// device's replay write the step that reads its shard last into that shard's buffer, as a
// one-device replay donates a moved array: the same memory, no new buffer, the model's peak
// one shard lower; values those of the untraced run and of a plain loop; a shard still held
// elsewhere, or viewed, or of another shape than the output keeps its buffer; every program
// gives its memory back and no schedule is shorter than its lower bound.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/memory.hpp"
#include "support/meshes.hpp"
#include "support/spmd_cases.hpp"

namespace test_spmd_donation {

namespace {

using ferry_test::buffer_of;
using ferry_test::values_of;

using ferry::DeviceArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::Shape;

/// Device i's shard of `shape`: element k = ((5i + 3k + salt) mod 17 - 8) / 4 (exact in float).
MeshArray<float> shards_of(const Mesh& mesh, const Shape& shape, std::int64_t salt) {
  std::vector<DeviceArray<float>> shards;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    std::vector<float> v;
    for (std::int64_t k = 0; k < shape.numel(); ++k) {
      v.push_back(static_cast<float>((5 * i + 3 * k + salt) % 17 - 8) * 0.25F);
    }
    shards.push_back(ferry::to_device(mesh.device(i), v, shape));
  }
  return MeshArray<float>::from_shards(mesh, std::move(shards));
}

std::vector<const std::byte*> buffers_of(const MeshArray<float>& a) {
  std::vector<const std::byte*> out;
  for (std::int64_t i = 0; i < a.size(); ++i) out.push_back(buffer_of(a.shard(i)));
  return out;
}

std::uint64_t donations(const ferry::Device& d) { return d.stats().donations; }

/// An SGD step per device: x - g / 2 (one fused kernel: the multiply and the subtraction).
struct SgdStep {
  DeviceArray<float> operator()(const DeviceArray<float>& x, const DeviceArray<float>& g) const {
    return x - g * 0.5F;
  }
};

/// A data-parallel step: x minus the mean of the devices' g along "i", by 4.
struct MeanStep {
  DeviceArray<float> operator()(const DeviceArray<float>& x, const DeviceArray<float>& g) const {
    return x - ferry::all_reduce(g, "i") * 0.0625F;
  }
};

class SpmdDonation : public ::testing::TestWithParam<int> {
 protected:
  Mesh ring4() const {
    return Mesh::modeled(ferry_test::ring4(), ferry_test::executor_for(GetParam()));
  }
};
INSTANTIATE_TEST_SUITE_P(Executors, SpmdDonation, ::testing::Values(0, 1, 2, 4),
                         ferry_test::executor_name);

TEST_P(SpmdDonation, AGivenArgumentHoldsTheResultAndThePeakDropsByOneShard) {
  // Shards of 256 x 4 floats: S = 4,096 bytes a device. Before the replay each device holds
  // its x and g (2 S). The replay's one step reads both and writes the result: into a new
  // buffer when x is kept (peak 3 S; x, g and the result held after: 3 S), into x's buffer
  // when x is given (peak 2 S; g and the result after: 2 S).
  constexpr std::uint64_t kShard = 256 * 4 * sizeof(float);
  const Shape shape{256, 4};
  for (const bool give : {false, true}) {
    SCOPED_TRACE(give ? "given" : "kept");
    Mesh mesh = ring4();
    ferry_test::expect_balanced_after(mesh, [&] {
      const auto program = ferry::jit(ferry::spmd(mesh, SgdStep{}));
      const auto g = shards_of(mesh, shape, 1);
      ferry::wait(program(shards_of(mesh, shape, 0), g));  // the trace: an untraced run
      auto x = shards_of(mesh, shape, 0);
      std::vector<std::vector<float>> want;
      {
        const auto expected = ferry::spmd(mesh, SgdStep{})(x, g);
        for (std::int64_t i = 0; i < 4; ++i) want.push_back(values_of(expected.shard(i)));
      }
      const std::vector<const std::byte*> inputs = buffers_of(x);
      ferry::wait(g);
      mesh.reset_stats();
      // The trace's run and `expected` are gone, but workers may still hold their last steps.
      const std::size_t level = ferry_test::settled_allocated_bytes();
      const auto r = give ? program(std::move(x), g) : program(x, g);
      ferry::wait(r);
      EXPECT_EQ(program.cache_hits(), 1U);
      const std::size_t grown = level + (give ? 0 : 4 * kShard);
      EXPECT_EQ(ferry_test::allocated_bytes_back_at(grown), grown)
          << "a result buffer a device, unless x was given";
      if (give) {
        EXPECT_FALSE(x.valid());  // NOLINT(bugprone-use-after-move): the call took it
      }
      for (std::int64_t i = 0; i < 4; ++i) {
        const ferry::DeviceStats s = mesh.device(i).stats();
        EXPECT_EQ(s.peak_dram_bytes, (give ? 2 : 3) * kShard) << mesh.device(i).name();
        EXPECT_EQ(s.dram_bytes_in_use, (give ? 2 : 3) * kShard) << mesh.device(i).name();
        EXPECT_EQ(s.donations, give ? 1U : 0U) << mesh.device(i).name();
        EXPECT_EQ(buffer_of(r.shard(i)) == inputs[static_cast<std::size_t>(i)], give)
            << mesh.device(i).name();
        EXPECT_EQ(values_of(r.shard(i)), want[static_cast<std::size_t>(i)]);
      }
    });
  }
}

TEST_P(SpmdDonation, ReplayedStepsThroughACollectiveKeepOneBufferAndMatchAPlainLoop) {
  // x = x - all_reduce(g) / 16 four times, x given each time: the first call traces (untraced
  // run, a new buffer), the three replays write into that buffer on every device.
  Mesh mesh = ring4();
  ferry_test::expect_balanced_after(mesh, [&] {
    const Shape shape{5, 3};
    const auto program = ferry::jit(ferry::spmd(mesh, MeanStep{}));
    auto x = shards_of(mesh, shape, 0);
    std::vector<std::vector<float>> want;
    for (std::int64_t i = 0; i < 4; ++i) want.push_back(values_of(x.shard(i)));
    std::vector<const std::byte*> buffers;  // the first call's result's, then every replay's
    for (std::int64_t step = 0; step < 4; ++step) {
      const auto g = shards_of(mesh, shape, 10 + step);
      std::vector<float> sum(static_cast<std::size_t>(shape.numel()), 0.0F);
      for (std::int64_t i = 0; i < 4; ++i) {
        const std::vector<float> gi = values_of(g.shard(i));
        for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += gi[k];
      }
      for (auto& w : want) {
        for (std::size_t k = 0; k < w.size(); ++k) w[k] -= sum[k] * 0.0625F;
      }
      x = program(std::move(x), g);
      if (step == 0) {
        buffers = buffers_of(x);
        mesh.reset_stats();  // the untraced run donates its temporaries: count the replays'
      } else {
        EXPECT_EQ(buffers_of(x), buffers) << "step " << step;
      }
    }
    EXPECT_EQ(program.cache_misses(), 1U);
    EXPECT_EQ(program.cache_hits(), 3U);
    for (std::int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(donations(mesh.device(i)), 3U) << mesh.device(i).name();
      EXPECT_EQ(values_of(x.shard(i)), want[static_cast<std::size_t>(i)]) << "device " << i;
    }
  });
}

TEST_P(SpmdDonation, AHeldCopyAViewOrAnotherShapeKeepsTheShard) {
  Mesh mesh = ring4();
  ferry_test::expect_balanced_after(mesh, [&] {
    const Shape shape{4, 3};
    const auto program = ferry::jit(ferry::spmd(mesh, SgdStep{}));
    const auto g = shards_of(mesh, shape, 1);
    ferry::wait(program(shards_of(mesh, shape, 0), g));
    const auto expected = ferry::spmd(mesh, SgdStep{})(shards_of(mesh, shape, 0), g);
    ferry::wait(expected);
    mesh.reset_stats();  // the untraced runs donate their temporaries: count the replays'

    // A copy of the MeshArray holds every shard: given, x is still not the last handle.
    auto x = shards_of(mesh, shape, 0);
    const auto copy = x;
    const std::vector<const std::byte*> inputs = buffers_of(x);
    const auto r = program(std::move(x), g);
    // A view of device 2's shard: only that device keeps its shard.
    auto y = shards_of(mesh, shape, 0);
    const auto view = ferry::reshape(y.shard(2), Shape{12});
    const std::vector<const std::byte*> y_inputs = buffers_of(y);
    const auto ry = program(std::move(y), g);
    for (std::int64_t i = 0; i < 4; ++i) {
      const auto at = static_cast<std::size_t>(i);
      EXPECT_NE(buffer_of(r.shard(i)), inputs[at]);
      EXPECT_EQ(values_of(r.shard(i)), values_of(expected.shard(i)));
      EXPECT_EQ(values_of(copy.shard(i)), values_of(shards_of(mesh, shape, 0).shard(i)));
      EXPECT_EQ(buffer_of(ry.shard(i)) == y_inputs[at], i != 2) << "device " << i;
      EXPECT_EQ(values_of(ry.shard(i)), values_of(expected.shard(i)));
      EXPECT_EQ(donations(mesh.device(i)), i != 2 ? 1U : 0U) << mesh.device(i).name();
    }
    EXPECT_EQ(values_of(view), values_of(shards_of(mesh, shape, 0).shard(2)));

    // A row given to a + row: the output has a's shape, not the row's: nothing to donate.
    const auto add = ferry::jit(ferry::spmd(mesh, [](const DeviceArray<float>& a,
                                                      const DeviceArray<float>& row) {
      return a + row;
    }));
    const auto a = shards_of(mesh, shape, 2);
    ferry::wait(add(a, shards_of(mesh, Shape{3}, 3)));
    const auto sum = add(a, shards_of(mesh, Shape{3}, 3));
    EXPECT_EQ(add.cache_hits(), 1U);
    for (std::int64_t i = 0; i < 4; ++i) {
      ferry::wait(sum.shard(i));
      EXPECT_EQ(donations(mesh.device(i)), i != 2 ? 1U : 0U) << mesh.device(i).name();
    }
  });
}

}  // namespace

}  // namespace test_spmd_donation
