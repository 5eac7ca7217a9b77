// The model seam: every step the runtime submits reaches the device model, in submission
// order, carrying what a timing model needs (kind, op, bytes, flops, inputs, output), and every
// export reaches it as one host sync.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"

namespace test_model_seam {

namespace {

using ferry::Shape;
using ferry::detail::Step;
using ferry::detail::StepKind;

struct Record {
  std::uint64_t id;
  StepKind kind;
  std::string name;
  ferry::Cost cost;
  Shape shape;
  ferry::DType dtype;
  std::vector<std::uint64_t> inputs;
};

class Recorder final : public ferry::detail::StepObserver {
 public:
  explicit Recorder(std::vector<Record>* steps, std::vector<std::vector<std::uint64_t>>* syncs)
      : steps_(steps), syncs_(syncs) {}
  void submitted(Step& s) override {
    Record r{s.id(), s.info().kind, std::string(s.info().name), s.info().cost, s.shape(),
             s.dtype(), {}};
    for (std::size_t i = 0; i < s.input_count(); ++i) r.inputs.push_back(s.input(i).id());
    steps_->push_back(r);
  }
  void handles_gone(const Step& s) override { dropped_.push_back(s.id()); }
  void host_sync(std::span<Step* const> steps, std::span<std::exception_ptr>) override {
    std::vector<std::uint64_t> ids;
    for (const Step* s : steps) ids.push_back(s->id());
    syncs_->push_back(ids);
  }
  std::vector<std::uint64_t> dropped_;

 private:
  std::vector<Record>* steps_;
  std::vector<std::vector<std::uint64_t>>* syncs_;
};

class ModelSeam : public ::testing::TestWithParam<int> {
 protected:
  std::vector<Record> steps;
  std::vector<std::vector<std::uint64_t>> syncs;
  ferry::Device dev = ferry::detail::DeviceAccess::make(
      GetParam() == 0 ? ferry::Executor(ferry::ManualExecutor()) : ferry::Executor(GetParam()),
      std::make_unique<Recorder>(&steps, &syncs), "recording");
};
INSTANTIATE_TEST_SUITE_P(Executors, ModelSeam, ::testing::Values(0, 1, 2, 4),
                         ferry_test::executor_name);

TEST_P(ModelSeam, EveryStepCarriesKindCostInputsAndOutput) {
  auto x = ferry::to_device(dev, std::vector<float>(32 * 784, 1.0f), Shape{32, 784});
  auto w = ferry::zeros<float>(dev, Shape{784, 10});
  auto y = ferry::relu(ferry::matmul(x, w) + 1.0f);
  auto flat = ferry::reshape(y, Shape{320});
  const auto h = flat.to_host();
  EXPECT_EQ(h(0), 1.0f);

  ASSERT_EQ(steps.size(), 7u);
  for (std::size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].id, i) << "submission order";

  const double x_bytes = 32 * 784 * 4;
  const double w_bytes = 784 * 10 * 4;
  const double y_bytes = 32 * 10 * 4;
  EXPECT_EQ(steps[0].kind, StepKind::copy_in);
  EXPECT_EQ(steps[0].cost.bytes_written, x_bytes);
  EXPECT_TRUE(steps[0].inputs.empty());
  EXPECT_EQ(steps[1].name, "zeros");  // made on the device, written, not transferred
  EXPECT_EQ(steps[1].kind, StepKind::compute);
  EXPECT_EQ(steps[1].cost.bytes_written, w_bytes);
  EXPECT_EQ(steps[1].cost.bytes_read, 0);

  EXPECT_EQ(steps[2].name, "matmul");
  EXPECT_EQ(steps[2].cost.flops, 2.0 * 32 * 784 * 10);
  EXPECT_EQ(steps[2].cost.bytes_read, x_bytes + w_bytes);
  EXPECT_EQ(steps[2].cost.bytes_written, y_bytes);
  EXPECT_EQ(steps[2].inputs, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(steps[2].shape, (Shape{32, 10}));
  EXPECT_EQ(steps[2].dtype, ferry::DType::float32);

  EXPECT_EQ(steps[3].name, "add");
  EXPECT_EQ(steps[3].cost.flops, 320);
  EXPECT_EQ(steps[3].inputs, std::vector<std::uint64_t>{2});
  EXPECT_EQ(steps[4].name, "relu");
  EXPECT_EQ(steps[4].inputs, std::vector<std::uint64_t>{3});

  EXPECT_EQ(steps[5].kind, StepKind::view);
  EXPECT_EQ(steps[5].inputs, std::vector<std::uint64_t>{4});
  EXPECT_EQ(steps[5].cost.bytes_written, 0);

  EXPECT_EQ(steps[6].kind, StepKind::copy_out);
  EXPECT_EQ(steps[6].inputs, std::vector<std::uint64_t>{5});
  EXPECT_EQ(steps[6].cost.bytes_read, y_bytes);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0], std::vector<std::uint64_t>{6});
}

TEST_P(ModelSeam, ABatchedExportIsOneSyncAndWaitCopiesNothing) {
  auto a = ferry::ones<float>(dev, Shape{4});
  auto b = a * 2.0f;
  auto [ha, hb] = ferry::to_host(a, b);
  EXPECT_EQ(hb(3), 2.0f);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0], (std::vector<std::uint64_t>{2, 3}));  // the two copy_out steps
  ferry::wait(a, b);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[1], (std::vector<std::uint64_t>{0, 1}));  // the arrays themselves
  EXPECT_EQ(steps.size(), 4u);                               // wait submitted no step
}

}  // namespace

}  // namespace test_model_seam
