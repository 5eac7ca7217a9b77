// The model seam: every step the runtime submits reaches the device model, in submission
// order, carrying what a timing model needs (kind, op, bytes, flops, inputs, output), and every
// export reaches it as one host sync.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ferry/ferry.hpp>
#include <ferry/model/names.hpp>
#include <ferry/model/shape_table.hpp>

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


// A step's op name (StepName): a binary op lends its literal, every other name is copied, inline
// up to 16 characters or on the heap; copies and moves keep the characters, a lent name stays
// lent, and the model interns a lent name by its address as it interns any other by its bytes.
TEST(StepNames, ALiteralIsLentAndAnyOtherNameCopied) {
  using ferry::detail::StepName;
  static constexpr std::string_view kLiteral = "add";
  const StepName lent = StepName::of_static(kLiteral);
  EXPECT_TRUE(lent.lent());
  EXPECT_EQ(lent.view().data(), kLiteral.data());
  const StepName lent_copy = lent;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(lent_copy.view().data(), kLiteral.data());

  std::string built = "to_layout";
  StepName short_name{std::string_view(built)};
  built[0] = 'X';  // the step's name is its own copy
  EXPECT_FALSE(short_name.lent());
  EXPECT_EQ(short_name, "to_layout");
  const std::string long_text = "to_layout for a name longer than sixteen";
  StepName long_name{long_text};
  EXPECT_FALSE(long_name.lent());
  EXPECT_NE(long_name.view().data(), long_text.data());

  StepName moved_short = std::move(short_name);
  StepName moved_long = std::move(long_name);
  EXPECT_EQ(moved_short, "to_layout");
  EXPECT_EQ(moved_long, long_text);
  const StepName copied_long = moved_long;
  EXPECT_EQ(copied_long, long_text);
  EXPECT_NE(copied_long.view().data(), moved_long.view().data());
  moved_short = copied_long;
  EXPECT_EQ(moved_short, long_text);
  moved_long = StepName::of_static(kLiteral);
  EXPECT_EQ(moved_long.view().data(), kLiteral.data());

  ferry::detail::NameTable names;
  const std::string add_text = "add";  // another address than the literal's
  const std::string_view by_bytes = names.intern(add_text);
  EXPECT_EQ(names.intern_static(kLiteral).data(), by_bytes.data());
  EXPECT_EQ(names.intern_static(kLiteral).data(), by_bytes.data());  // the address, remembered
  static constexpr std::string_view kOther = "multiply";
  EXPECT_EQ(names.intern_static(kOther), "multiply");
  EXPECT_EQ(names.intern_static(kLiteral).data(), by_bytes.data());
}

// A label's shape is the table's: one copy per distinct list of sizes, found again by its sizes
// alone (not by the Shape object it came from), whether the last few shapes still remember it
// or the set does; the copy is plain even when the label's shape carries a trace's symbols.
TEST(ShapeTables, OneCopyPerListOfSizesThatStaysPut) {
  ferry::detail::ShapeTable shapes;
  const Shape* matrix = shapes.intern(Shape{2, 3});
  EXPECT_EQ(*matrix, (Shape{2, 3}));
  EXPECT_EQ(shapes.intern(Shape{2, 3}), matrix);  // another Shape, the same sizes
  const Shape* transposed = shapes.intern(Shape{3, 2});
  const Shape* flat = shapes.intern(Shape{6});
  const Shape* scalar = shapes.intern(Shape{});
  EXPECT_NE(transposed, matrix);
  EXPECT_NE(flat, matrix);
  EXPECT_NE(scalar, flat);
  EXPECT_EQ(*scalar, Shape{});
  // Many more shapes than the recent ones kept: the first are found in the set, where they
  // have not moved.
  std::vector<const Shape*> more;
  for (std::int64_t n = 1; n <= 100; ++n) more.push_back(shapes.intern(Shape{n, 7}));
  EXPECT_EQ(shapes.intern(Shape{2, 3}), matrix);
  EXPECT_EQ(shapes.intern(Shape{3, 2}), transposed);
  EXPECT_EQ(shapes.intern(Shape{6}), flat);
  for (std::int64_t n = 1; n <= 100; ++n) {
    ASSERT_EQ(shapes.intern(Shape{n, 7}), more[static_cast<std::size_t>(n - 1)]) << n;
    EXPECT_EQ(*more[static_cast<std::size_t>(n - 1)], (Shape{n, 7}));
  }
  const std::uint32_t nodes[] = {1, 2};
  const Shape symbolic = ferry::detail::ShapeAccess::tag(Shape{4, 5}, 12345, nodes);
  const Shape* kept = shapes.intern(symbolic);
  EXPECT_FALSE(ferry::detail::ShapeAccess::tagged(*kept));
  EXPECT_EQ(shapes.intern(Shape{4, 5}), kept);
}

}  // namespace

}  // namespace test_model_seam
