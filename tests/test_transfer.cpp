// Import and export: every to_device overload, to_host (single, batched), wait, ready, and the
// rule that only exports block.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/memory.hpp"

namespace test_transfer {

namespace {

using ferry::Shape;
using ferry_test::OnEachExecutor;

class Transfer : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Transfer);

TEST_P(Transfer, SpanImportCopiesAtTheCall) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  auto x = ferry::to_device(dev, std::span<const float>(v), Shape{2, 3});
  v.assign(6, -1.0f);  // the caller may reuse its buffer as soon as the import returns
  const ferry::HostArray<float> h = x.to_host();
  EXPECT_EQ(h.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(h(1, 2), 6.0f);
}

TEST_P(Transfer, VectorImportTakesOwnershipWithoutCopying) {
  std::vector<std::int64_t> v{7, 8, 9};
  const std::int64_t* storage = v.data();
  auto x = ferry::to_device(dev, std::move(v), Shape{3});
  // The export copies out, so compare values; the pointer check shows the import did not copy.
  EXPECT_EQ(x.to_host().data()[2], 9);
  EXPECT_EQ(ferry::reshape(x, Shape{3, 1}).to_host()(0, 0), 7);
  (void)storage;
}

TEST_P(Transfer, ListVectorAndHostArrayImports) {
  auto a = ferry::to_device(dev, {1.5, 2.5}, Shape{2});
  const std::vector<std::int32_t> kept{4, 5, 6, 7};
  auto b = ferry::to_device(dev, kept, Shape{2, 2});
  const ferry::HostArray<bool> mask(Shape{3}, std::vector<bool>{true, false, true});
  auto c = ferry::to_device(dev, mask);
  const std::vector<bool> bits{false, true};
  auto d = ferry::to_device(dev, bits, Shape{2});
  EXPECT_EQ(a.to_host()(1), 2.5);
  EXPECT_EQ(b.to_host()(1, 0), 6);
  EXPECT_EQ(c.to_host(), mask);
  EXPECT_TRUE(d.to_host()(1));
  EXPECT_EQ(kept.size(), 4u);
}

TEST_P(Transfer, ScalarAndEmptyArrays) {
  auto s = ferry::to_device(dev, {42.0f}, Shape{});
  EXPECT_EQ(s.shape().rank(), 0u);
  EXPECT_EQ(s.to_host()(), 42.0f);
  auto e = ferry::to_device(dev, std::vector<float>{}, Shape{0, 5});
  const auto h = e.to_host();
  EXPECT_EQ(h.shape(), (Shape{0, 5}));
  EXPECT_TRUE(h.data().empty());
}

TEST_P(Transfer, BatchedExportReturnsEachArrayInOrder) {
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto y = x * 10.0f;
  auto z = ferry::arange<std::int64_t>(dev, 3);
  auto [hx, hy, hz] = ferry::to_host(x, y, z);
  EXPECT_EQ(hx(1), 2.0f);
  EXPECT_EQ(hy(1), 20.0f);
  EXPECT_EQ(hz(2), 2);
}

TEST_P(Transfer, ExportIntoTheCallersMemoryWritesStraightIntoIt) {
  auto x = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, Shape{2, 3});
  std::vector<float> out(6, -1.0f);
  const std::size_t in_use = ferry_test::settled_allocated_bytes();
  (x * 2.0f).to_host(std::span<float>(out));
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8, 10, 12}));
  // A tiled array comes back row-major, as with to_host().
  std::vector<float> rows(6);
  ferry::to_layout(x, {ferry::MemorySpace::dram, ferry::Order::tiled})
      .to_host(rows);  // a vector converts
  EXPECT_EQ(rows, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // An empty array fills an empty span; no host buffer was left behind by any of this.
  std::vector<float> none;
  ferry::to_device(dev, std::vector<float>{}, Shape{0, 3}).to_host(std::span<float>(none));
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(in_use), in_use);
}

TEST_P(Transfer, BatchedExportIntoTheCallersMemory) {
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto z = ferry::arange<std::int64_t>(dev, 3);
  float xs[2] = {};
  std::vector<std::int64_t> zs(3);
  ferry::to_host(ferry::into(x * 10.0f, std::span<float>(xs)),
                 ferry::into(z, std::span<std::int64_t>(zs)));
  EXPECT_EQ(xs[0], 10.0f);
  EXPECT_EQ(xs[1], 20.0f);
  EXPECT_EQ(zs, (std::vector<std::int64_t>{0, 1, 2}));
  // The vector form: a split's parts into the rows of one host matrix.
  const auto parts = ferry::split(ferry::arange<float>(dev, 6), {2, 4}, 0);
  std::vector<float> matrix(6);
  const std::vector<ferry::Into<float>> targets{
      ferry::into(parts[0], std::span<float>(matrix).first(2)),
      ferry::into(parts[1], std::span<float>(matrix).subspan(2))};
  ferry::to_host(targets);
  EXPECT_EQ(matrix, (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST_P(Transfer, ExportIntoMemoryRethrowsAsTheOtherExportsDo) {
  auto bad = ferry::to_device(dev, {1, 0}, Shape{2});
  auto quotient = ferry::to_device(dev, {4, 4}, Shape{2}) / bad;  // integer division by zero
  std::vector<int> out(2);
  EXPECT_THROW(quotient.to_host(std::span<int>(out)), ferry::InvalidArgument);
  auto fine = ferry::to_device(dev, {7, 8}, Shape{2});
  std::vector<int> other(2);
  EXPECT_THROW(ferry::to_host(ferry::into(fine, std::span<int>(other)),
                              ferry::into(quotient, std::span<int>(out))),
               ferry::InvalidArgument);
  fine.to_host(std::span<int>(other));  // an export that does not depend on it is unharmed
  EXPECT_EQ(other, (std::vector<int>{7, 8}));
}

TEST_P(Transfer, WaitMakesArraysReady) {
  auto x = ferry::to_device(dev, {1.0f}, Shape{1});
  EXPECT_TRUE(x.ready());  // an import's values are on the device when it returns
  auto y = ferry::exp(x);
  auto z = y + 1.0f;
  ferry::wait(y, z);
  EXPECT_TRUE(y.ready());
  EXPECT_TRUE(z.ready());
  const std::vector<ferry::DeviceArray<float>> parts =
      ferry::split(ferry::arange<float>(dev, 4), {1, 3}, 0);
  ferry::wait(parts);
  EXPECT_TRUE(parts[0].ready() && parts[1].ready());
}

TEST(TransferManual, NothingRunsBeforeAnExportDrivesIt) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  auto x = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  auto y = ferry::relu(x * 2.0f - 3.0f);
  EXPECT_FALSE(y.ready());
  EXPECT_EQ(manual.ready_count(), 1u);  // only the multiply: its input is the finished import
  EXPECT_TRUE(manual.run_one());
  EXPECT_FALSE(y.ready());
  EXPECT_EQ(manual.ready_count(), 1u);  // the subtract became ready, and did not run
  const auto h = y.to_host();           // the export runs what is left, on this thread
  EXPECT_TRUE(y.ready());
  EXPECT_EQ(h(0), 0.0f);
  EXPECT_EQ(h(1), 1.0f);
  EXPECT_EQ(manual.run_all(), 0u);
}

TEST(TransferManual, OpsReturnMetadataAtOnce) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  auto x = ferry::zeros<float>(dev, Shape{32, 784});
  auto w = ferry::ones<float>(dev, Shape{784, 10});
  auto y = ferry::softmax(ferry::matmul(x, w), -1);
  EXPECT_EQ(y.shape(), (Shape{32, 10}));
  EXPECT_EQ(y.dtype(), ferry::DType::float32);
  EXPECT_EQ(y.device(), dev);
  EXPECT_FALSE(y.ready());
  EXPECT_EQ(ferry::argmax(y, 1).dtype(), ferry::DType::int64);
}

// A moved-from host array is an empty one, as HostArray() is: its shape once stayed behind
// with no buffer under it, and reading, printing, copying or importing it crashed.
TEST(HostArrays, AMovedFromArrayIsEmpty) {
  ferry::HostArray<float> h(Shape{2, 2}, {1, 2, 3, 4});
  const ferry::HostArray<float> g = std::move(h);
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_EQ(g(1, 1), 4.0f);
  EXPECT_EQ(h.shape(), (Shape{0}));  // NOLINT(bugprone-use-after-move): what is tested
  EXPECT_TRUE(h.data().empty());
  const ferry::HostArray<float> copy = h;
  EXPECT_EQ(copy.shape(), (Shape{0}));
  const ferry::Device dev = ferry::Device::cpu();
  EXPECT_EQ(ferry::to_device(dev, h).shape(), (Shape{0}));
  ferry::HostArray<float> k(Shape{3}, {5, 6, 7});
  h = std::move(k);
  EXPECT_EQ(h(2), 7.0f);
  EXPECT_EQ(k.shape(), (Shape{0}));  // NOLINT(bugprone-use-after-move)
}

TEST(TransferErrors, ImportSizeMustMatchTheShape) {
  ferry::Device dev;
  const std::vector<float> v(6);
  try {
    (void)ferry::to_device(dev, std::span<const float>(v), Shape{2, 4});
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[to_device] 6 values for shape (2, 4) of 8 elements");
  }
  EXPECT_THROW((void)ferry::to_device(dev, std::vector<float>(3), Shape{4}),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::to_device(dev, {1, 2, 3}, Shape{2}), ferry::InvalidArgument);
}

TEST(TransferErrors, EmptyHandlesAreRejected) {
  ferry::DeviceArray<float> empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW((void)empty.to_host(), ferry::InvalidArgument);
  EXPECT_THROW((void)empty.shape(), ferry::InvalidArgument);
  EXPECT_THROW(ferry::wait(empty), ferry::InvalidArgument);
  ferry::Device dev;
  auto x = ferry::zeros<float>(dev, Shape{2});
  auto moved = std::move(x);
  EXPECT_THROW((void)(x + moved), ferry::InvalidArgument);  // NOLINT: use after move on purpose
}

TEST(TransferErrors, ExportIntoASpanOfTheWrongSizeNamesBothSizes) {
  ferry::Device dev;
  auto x = ferry::zeros<float>(dev, Shape{2, 3});
  std::vector<float> small(5, -1.0f);
  try {
    x.to_host(std::span<float>(small));
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "[to_host] a span of 5 elements cannot hold the 6 elements of shape (2, 3)");
  }
  EXPECT_EQ(small, std::vector<float>(5, -1.0f));  // nothing was written
  std::vector<float> big(7);
  std::vector<float> right(6);
  EXPECT_THROW(ferry::to_host(ferry::into(x, std::span<float>(right)),
                              ferry::into(x, std::span<float>(big))),
               ferry::InvalidArgument);
  ferry::DeviceArray<float> empty;
  EXPECT_THROW(empty.to_host(std::span<float>(right)), ferry::InvalidArgument);
  ferry::deallocate(x, ferry::force);
  EXPECT_THROW(x.to_host(std::span<float>(right)), ferry::UseAfterFree);
}

TEST(TransferDevices, TheCpuIsOneDevice) {
  EXPECT_EQ(ferry::Device::cpu(), ferry::Device::cpu());
  EXPECT_TRUE(ferry::Device::cpu().is_cpu());
  EXPECT_EQ(ferry::Device::cpu().name(), "cpu");
  ferry::Device a;
  ferry::Device b;
  EXPECT_NE(a, b);
  EXPECT_FALSE(a.is_cpu());
  EXPECT_EQ(a.executor(), ferry::Executor::shared());
  auto x = ferry::to_device(ferry::Device::cpu(), {1.0f, 2.0f}, Shape{2});
  EXPECT_EQ((x + x).to_host()(1), 4.0f);
}

}  // namespace

}  // namespace test_transfer
