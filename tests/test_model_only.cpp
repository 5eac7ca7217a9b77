// Model-only devices and meshes: the same timeline as computing ones, byte for byte, with no
// values and no host memory for outputs; exports refused with NoValues naming the op and the
// device; wait, stats and traces working; programs far too large to compute modeled at once.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace test_model_only {

namespace {

using ferry::Device;
using ferry::DeviceArray;
using ferry::Shape;
using ferry_test::expect_error;

using ferry_test::read_text;

/// A program touching every kind of step: imports (row-major and tiled), kernels, a donation,
/// a layout conversion, a copy to a second device of the same kind, a view, a reduction, and
/// gradients; waited for, not exported.
void program(const Device& dev, const Device& other) {
  const auto a = ferry::to_device(dev, std::vector<float>(64 * 64, 0.5f), Shape{64, 64});
  const auto w = ferry::to_device(dev, std::vector<float>(64 * 64, 0.25f), Shape{64, 64},
                                  {.order = ferry::Order::tiled});
  auto h = ferry::relu(ferry::matmul(a, w) + 1.0f);
  h = std::move(h) * 2.0f;  // donated
  const auto moved = h.to(other);
  const auto r = ferry::reshape(moved, Shape{4096});
  const auto [loss, grad] = ferry::value_and_grad(
      [](const DeviceArray<float>& x) { return ferry::sum(ferry::softmax(x, -1)); })(a);
  ferry::wait(r, loss, grad, ferry::mean(r));
}

TEST(ModelOnly, TheTimelineIsTheComputingDevicesByteForByte) {
  ferry_test::TempDir dir("ferry_test_model_only");
  const auto spec = ferry::specs::h100_sxm();
  const Device real = Device::modeled(spec);
  const Device real_other = Device::modeled(spec);
  const Device fake = Device::modeled(spec, ferry::model_only);
  const Device fake_other = Device::modeled(spec, ferry::model_only);
  EXPECT_FALSE(real.is_model_only());
  EXPECT_TRUE(fake.is_model_only());
  program(real, real_other);
  program(fake, fake_other);
  real.write_trace(dir.file("real.json"));
  fake.write_trace(dir.file("fake.json"));
  EXPECT_EQ(read_text(dir.file("real.json")), read_text(dir.file("fake.json")));
  real_other.write_trace(dir.file("real_other.json"));
  fake_other.write_trace(dir.file("fake_other.json"));
  EXPECT_EQ(read_text(dir.file("real_other.json")), read_text(dir.file("fake_other.json")));
  EXPECT_EQ(real.stats().makespan, fake.stats().makespan);
  EXPECT_EQ(real.stats().steps, fake.stats().steps);
  EXPECT_EQ(real.stats().peak_dram_bytes, fake.stats().peak_dram_bytes);
  EXPECT_EQ(fake.timeline_text(), real.timeline_text());
  EXPECT_EQ(fake.stats().dram_bytes_in_use, 0u);  // the model's memory is back
}

TEST(ModelOnly, ExportsThrowNoValuesNamingTheOpAndTheDevice) {
  const Device fake = Device::modeled(ferry::specs::tiny(), ferry::model_only);
  const auto a = ferry::full<float>(fake, Shape{3}, 1.0f);
  const auto s = ferry::sum(a);
  const std::string why = " has no values: the device is model-only";
  expect_error<ferry::NoValues>([&] { return s.to_host(); },
                                "[to_host] the array sum made on " + fake.name() + why);
  expect_error<ferry::NoValues>([&] { return s.item(); },
                                "[item] the array sum made on " + fake.name() + why);
  expect_error<ferry::NoValues>([&] { return ferry::to_host(a, s); },
                                "[to_host] the array full made on " + fake.name() + why);
  expect_error<ferry::NoValues>([&] { return ferry::to_host_async(a); },
                                "[to_host_async] the array full made on " + fake.name() + why);
  expect_error<ferry::NoValues>([&] { return a.to(Device::cpu()); },
                                "[to] the array full made on " + fake.name() +
                                    " has no values to send to cpu: the device is model-only");
  // Between model-only devices a copy is fine; waiting, stats and the trace work.
  const Device other = Device::modeled(ferry::specs::tiny(), ferry::model_only);
  EXPECT_NO_THROW(ferry::wait(a.to(other), s));
  EXPECT_GT(fake.stats().makespan.count(), 0);
  EXPECT_NE(fake.timeline_text().find("compute"), std::string::npos);
}

TEST(ModelOnly, AProgramFarTooLargeToComputeIsModeledAtOnce) {
  // Three 16 GiB float matrices: more than this machine's memory, within an H100's 80 GB.
  const Device big = Device::modeled(ferry::specs::h100_sxm(), ferry::model_only);
  const auto x = ferry::full<float>(big, Shape{65536, 65536}, 1.0f);
  const auto y = ferry::matmul(x, x);
  const auto z = ferry::exp(y);
  ferry::wait(z);
  const ferry::DeviceStats s = big.stats();
  EXPECT_EQ(s.peak_dram_bytes, 3 * (std::uint64_t{1} << 34));
  // 2 * 65536^3 flops: seconds on an H100's float32 units.
  EXPECT_GT(s.makespan, std::chrono::seconds(5));
  EXPECT_EQ(s.cached_bytes, 0u);  // no host buffer was ever made
}

TEST(ModelOnly, AModelOnlyMeshRunsCollectivesOnTheSameTimeline) {
  ferry_test::TempDir dir("ferry_test_model_only_mesh");
  const auto run = [](const ferry::Mesh& mesh) {
    std::vector<DeviceArray<float>> parts;
    for (const Device& d : mesh.devices())
      parts.push_back(ferry::full<float>(d, Shape{256, 64}, 1.0f));
    const auto a = ferry::MeshArray<float>::from_shards(mesh, parts);
    ferry::wait(ferry::all_gather(ferry::reduce_scatter(a, 0), 0));
    ferry::wait(ferry::all_reduce(a, ferry::ReduceOp::sum, 1));
  };
  const ferry::Mesh real = ferry::Mesh::modeled(ferry::specs::t3000());
  const ferry::Mesh fake = ferry::Mesh::modeled(ferry::specs::t3000(), ferry::model_only);
  run(real);
  run(fake);
  EXPECT_EQ(real.stats().makespan, fake.stats().makespan);
  EXPECT_EQ(real.stats().communication_time, fake.stats().communication_time);
  for (std::int64_t i = 0; i < 8; ++i) {
    real.device(i).write_trace(dir.file("real.json"));
    fake.device(i).write_trace(dir.file("fake.json"));
    EXPECT_EQ(read_text(dir.file("real.json")), read_text(dir.file("fake.json"))) << "device " << i;
    EXPECT_TRUE(fake.device(i).is_model_only());
  }
  // The mesh's own trace and text too, byte for byte: they name a device by the spec and its
  // coordinate, not by its name (which counts the meshes made before: "t3000:1(0, 0)").
  real.write_trace(dir.file("real_mesh.json"));
  fake.write_trace(dir.file("fake_mesh.json"));
  EXPECT_EQ(read_text(dir.file("real_mesh.json")), read_text(dir.file("fake_mesh.json")));
  EXPECT_NE(read_text(dir.file("fake_mesh.json")).find("\"name\":\"t3000(0, 3)\""),
            std::string::npos);
  EXPECT_EQ(real.timeline_text(), fake.timeline_text());
  // 256 MiB a chip: modeled, never allocated.
  std::vector<DeviceArray<float>> huge;
  for (const Device& d : fake.devices())
    huge.push_back(ferry::full<float>(d, Shape{1 << 26}, 1.0f));
  const auto summed = ferry::all_reduce(ferry::MeshArray<float>::from_shards(fake, huge));
  ferry::wait(summed);
  EXPECT_GT(fake.stats().communication_time, std::chrono::milliseconds(2));
  EXPECT_THROW(summed.shard(0).to_host(), ferry::NoValues);
  // The export of a global array names itself, not the copy to the host it would make.
  const ferry::MeshArray<float> global =
      ferry::exp(ferry::distribute(ferry::HostArray<float>(Shape{8, 3}), fake,
                                   {ferry::Shard{0}, ferry::Replicate{}}));
  expect_error<ferry::NoValues>([&] { return ferry::to_host(global); },
                                "[to_host] the array exp made on " + fake.device(0).name() +
                                    " has no values: the device is model-only");
}

}  // namespace

}  // namespace test_model_only
