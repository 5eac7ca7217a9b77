// Training state: an optimizer's state_dict saved with the model resumes a run bit for bit; a
// bad state is refused whole; learning-rate schedules give PyTorch's values and drive an
// optimizer as set_lr would; a traced training step (jit with ferry::updates) replays with its
// schedule's rate as an input, bit for bit the eager run; clip_grad_norm matches a plain loop;
// a checkpoint's arrays are found by name. Once a traced step's models, optimizers and program
// are gone, their memory is too.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/memory.hpp"
#include "support/temp_dir.hpp"

namespace test_training_state {

namespace {

using ferry_test::values_of;

namespace nn = ferry::nn;
namespace optim = ferry::optim;
using ferry::DeviceArray;
using ferry::NamedArrays;
using ferry::Shape;
using ferry_test::expect_error;

/// A scratch directory of this file's tests.
struct TempDir : ferry_test::TempDir {
  TempDir() : ferry_test::TempDir("ferry_training_state") {}
};

/// The bits of every element: equal only when the values are identical, bit for bit.
std::vector<std::uint32_t> bits_of(const DeviceArray<float>& a) {
  std::vector<std::uint32_t> out;
  for (float v : values_of(a)) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

nn::Sequential make_model(const ferry::Device& dev, std::uint64_t seed) {
  return nn::Sequential(nn::Linear(3, 5, dev, {.seed = seed}), nn::Tanh(),
                        nn::Linear(5, 2, dev, {.seed = seed + 1}));
}

constexpr std::int64_t kBatch = 8;

/// The batch of step `t` (counting from 0): each step sees other inputs.
std::pair<DeviceArray<float>, DeviceArray<float>> batch(const ferry::Device& dev, int t) {
  std::vector<float> x(kBatch * 3);
  std::vector<float> y(kBatch * 2);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i) + 0.91f * static_cast<float>(t));
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = std::cos(0.53f * static_cast<float>(i) - 0.29f * static_cast<float>(t));
  return {ferry::to_device(dev, x, Shape{kBatch, 3}), ferry::to_device(dev, y, Shape{kBatch, 2})};
}

/// Steps t in [from, to) of a training run: forward, backward and update, nothing exported.
void train(const ferry::Device& dev, nn::Sequential& model, optim::Optimizer& opt, int from,
           int to) {
  for (int t = from; t < to; ++t) {
    const auto [x, y] = batch(dev, t);
    const DeviceArray<float>& target =
        y;  // a lambda may not capture a structured binding (clang 14)
    auto [loss, grads] = nn::value_and_grad(model, [&](const DeviceArray<float>& xs) {
      return nn::mse_loss(model(xs), target);
    })(x);
    opt.step(model, grads);
  }
}

void expect_same_parameters(const nn::Module& a, const nn::Module& b) {
  const nn::NamedParameters pa = a.named_parameters();
  const nn::NamedParameters pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(bits_of(pa[i].second), bits_of(pb[i].second)) << pa[i].first;
  }
}

std::vector<std::string> names_of(const NamedArrays& arrays) {
  std::vector<std::string> names;
  for (const auto& [name, array] : arrays) names.push_back(name);
  return names;
}

class TrainingState : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(TrainingState);

// ---- resuming a run ----

/// 20 steps straight against 10 steps, a save of model and optimizer, a load of both into
/// fresh objects (the optimizer's state onto `load_device`), and 10 more.
template <class Opt, class Options>
void check_resume(const ferry::Device& dev, const Options& options,
                  const ferry::Device& load_device) {
  nn::Sequential straight = make_model(dev, 1);
  Opt straight_opt(options);
  train(dev, straight, straight_opt, 0, 20);

  TempDir dir;
  {
    nn::Sequential first = make_model(dev, 1);
    Opt first_opt(options);
    train(dev, first, first_opt, 0, 10);
    first.save(dir.file("model.safetensors"));
    ferry::save_safetensors(dir.file("optimizer.safetensors"), first_opt.state_dict());
  }  // the first half's objects are gone: only the files remain
  nn::Sequential resumed = make_model(dev, 77);  // other weights, all overwritten by the load
  Opt resumed_opt(options);
  resumed.load(dir.file("model.safetensors"));
  resumed_opt.load_state_dict(
      ferry::load_safetensors(dir.file("optimizer.safetensors"), load_device));
  EXPECT_EQ(resumed_opt.steps(), 10);
  train(dev, resumed, resumed_opt, 10, 20);

  expect_same_parameters(straight, resumed);
  EXPECT_EQ(resumed_opt.steps(), 20);
  const NamedArrays a = straight_opt.state_dict();
  const NamedArrays b = resumed_opt.state_dict();
  ASSERT_EQ(names_of(a), names_of(b));
  for (std::size_t i = 0; i + 1 < a.size(); ++i) {
    EXPECT_EQ(bits_of(a[i].second.as<float>()), bits_of(b[i].second.as<float>())) << a[i].first;
    EXPECT_EQ(b[i].second.device(), dev) << a[i].first << ": the state followed its parameter";
  }
  EXPECT_EQ(b.at("step").as<std::int64_t>().to_host()(), 20);
}

TEST_P(TrainingState, SgdWithMomentumResumesBitIdentically) {
  check_resume<optim::SGD>(
      dev, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}, dev);
  check_resume<optim::SGD>(dev, optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true},
                           dev);
  check_resume<optim::SGD>(dev, optim::SGDOptions{.lr = 0.1}, dev);  // no state but the step count
}

TEST_P(TrainingState, AdamResumesBitIdentically) {
  check_resume<optim::Adam>(dev, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01}, dev);
  // The state loaded onto the host moves to the parameters' device at the next step.
  check_resume<optim::Adam>(dev, optim::AdamOptions{.lr = 0.02, .betas = {0.8, 0.99}},
                            ferry::Device::cpu());
}

TEST_P(TrainingState, AdamWResumesBitIdenticallyWithItsScheduleAtTheRestoredStep) {
  check_resume<optim::AdamW>(dev, optim::AdamWOptions{.lr = 0.01}, dev);
  // The schedule picks up at step 10: a resumed run that restarted it would differ.
  check_resume<optim::AdamW>(
      dev,
      optim::AdamWOptions{.lr = optim::linear_warmup(4, optim::cosine_decay(0.05, 12, 0.001)),
                          .weight_decay = 0.1},
      dev);
}

TEST_P(TrainingState, TheStateDictNamesEachParametersStateAndTheStepCount) {
  nn::Sequential model = make_model(dev, 3);
  optim::Adam adam({.lr = 0.01});
  NamedArrays fresh = adam.state_dict();
  ASSERT_EQ(names_of(fresh), std::vector<std::string>{"step"});
  EXPECT_EQ(fresh.at("step").dtype(), ferry::DType::int64);
  EXPECT_EQ(fresh.at("step").shape(), Shape{});
  EXPECT_EQ(fresh.at("step").as<std::int64_t>().to_host()(), 0);

  train(dev, model, adam, 0, 3);
  const NamedArrays state = adam.state_dict();
  EXPECT_EQ(names_of(state), (std::vector<std::string>{
                                 "0.weight.exp_avg", "0.weight.exp_avg_sq", "0.bias.exp_avg",
                                 "0.bias.exp_avg_sq", "2.weight.exp_avg", "2.weight.exp_avg_sq",
                                 "2.bias.exp_avg", "2.bias.exp_avg_sq", "step"}));
  EXPECT_EQ(state.at("2.weight.exp_avg_sq").shape(), (Shape{2, 5}));
  EXPECT_EQ(state.at("2.weight.exp_avg_sq").dtype(), ferry::DType::float32);
  EXPECT_EQ(state.at("step").as<std::int64_t>().to_host()(), 3);
  // The same buffers state() hands out, under the parameters' positions there.
  EXPECT_EQ(bits_of(state.at("0.bias.exp_avg").as<float>()), bits_of(adam.state()[2].second));
  EXPECT_EQ(adam.state()[2].first, "1.exp_avg");

  optim::SGD heavy({.lr = 0.1, .momentum = 0.9});
  optim::SGD plain({.lr = 0.1});
  nn::Sequential other = make_model(dev, 4);
  train(dev, other, heavy, 0, 2);
  train(dev, other, plain, 0, 2);
  EXPECT_EQ(
      names_of(heavy.state_dict()),
      (std::vector<std::string>{"0.weight.momentum_buffer", "0.bias.momentum_buffer",
                                "2.weight.momentum_buffer", "2.bias.momentum_buffer", "step"}));
  EXPECT_EQ(names_of(plain.state_dict()), std::vector<std::string>{"step"});

  // Stepped by position, the parameters are named by position.
  std::vector<DeviceArray<float>> params{ferry::ones<float>(dev, Shape{2})};
  std::vector<DeviceArray<float>> grads{ferry::ones<float>(dev, Shape{2})};
  optim::SGD positional({.lr = 0.1, .momentum = 0.5});
  positional.step(params, grads);
  EXPECT_EQ(names_of(positional.state_dict()),
            (std::vector<std::string>{"0.momentum_buffer", "step"}));
}

// ---- a bad state changes nothing ----

/// `opt` and `twin` were stepped alike; a bad load of `opt` must leave them alike: the same
/// step count, and the same parameters after one more step each.
template <class Opt>
void expect_unchanged(const ferry::Device& dev, Opt& opt, nn::Sequential& model, Opt& twin,
                      nn::Sequential& twin_model, std::int64_t steps) {
  EXPECT_EQ(opt.steps(), steps);
  train(dev, model, opt, static_cast<int>(steps), static_cast<int>(steps) + 1);
  train(dev, twin_model, twin, static_cast<int>(steps), static_cast<int>(steps) + 1);
  expect_same_parameters(model, twin_model);
}

/// `state` without the entries `drop` names, and with `replace` in place of its namesakes.
NamedArrays edited(const NamedArrays& state, const std::vector<std::string>& drop,
                   const NamedArrays& replace = {}) {
  NamedArrays out;
  for (const auto& [name, array] : state) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    out.emplace_back(name, replace.contains(name) ? replace.at(name) : array);
  }
  return out;
}

TEST_P(TrainingState, ABadStateIsATypedErrorNamingTheParameterAndChangesNothing) {
  nn::Sequential model = make_model(dev, 5);
  nn::Sequential twin_model = make_model(dev, 5);
  optim::Adam adam({.lr = 0.01});
  optim::Adam twin({.lr = 0.01});
  train(dev, model, adam, 0, 3);
  train(dev, twin_model, twin, 0, 3);
  {
    const NamedArrays good = adam.state_dict();
    const auto load = [&](const NamedArrays& s) { return [&adam, s] { adam.load_state_dict(s); }; };
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {"2.bias.exp_avg", "2.bias.exp_avg_sq"})),
        "[Adam::load_state_dict] the state has no '2.bias.exp_avg' for parameter '2.bias'");
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {"0.weight.exp_avg_sq"})),
        "[Adam::load_state_dict] the state has no '0.weight.exp_avg_sq' for parameter '0.weight'");
    expect_error<ferry::ShapeError>(
        load(edited(good, {}, {{"0.weight.exp_avg", ferry::zeros<float>(dev, Shape{3, 5})}})),
        "[Adam::load_state_dict] '0.weight.exp_avg' has shape (3, 5), parameter '0.weight' (5, 3)");
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {}, {{"2.bias.exp_avg_sq", ferry::zeros<double>(dev, Shape{2})}})),
        "[Adam::load_state_dict] '2.bias.exp_avg_sq' holds float64, not float32");
    expect_error<ferry::InvalidArgument>(load(edited(good, {"step"})),
                                         "[Adam::load_state_dict] the state has no 'step'");
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {}, {{"step", ferry::zeros<float>(dev, Shape{})}})),
        "[Adam::load_state_dict] 'step' holds float32, not int64");
    expect_error<ferry::ShapeError>(
        load(edited(good, {}, {{"step", ferry::zeros<std::int64_t>(dev, Shape{1})}})),
        "[Adam::load_state_dict] 'step' has shape (1), not () (a scalar)");
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {}, {{"step", ferry::full<std::int64_t>(dev, Shape{}, -4)}})),
        "[Adam::load_state_dict] 'step' is -4: it must not be negative");
    NamedArrays extra = good;
    extra.emplace_back("4.weight.exp_avg", ferry::zeros<float>(dev, Shape{2}));
    extra.emplace_back("4.weight.exp_avg_sq", ferry::zeros<float>(dev, Shape{2}));
    expect_error<ferry::InvalidArgument>(load(extra),
                                         "[Adam::load_state_dict] the state is for a parameter "
                                         "'4.weight', which Adam does not step");
    NamedArrays foreign = good;
    foreign.emplace_back("0.weight.momentum_buffer", ferry::zeros<float>(dev, Shape{5, 3}));
    expect_error<ferry::InvalidArgument>(
        load(foreign),
        "[Adam::load_state_dict] '0.weight.momentum_buffer' is no entry of Adam's state, "
        "which holds '<parameter>.exp_avg', '<parameter>.exp_avg_sq' and 'step'");
    NamedArrays twice = good;
    twice.emplace_back("step", ferry::zeros<std::int64_t>(dev, Shape{}));
    expect_error<ferry::InvalidArgument>(load(twice),
                                         "[Adam::load_state_dict] 'step' is given twice");
    expect_error<ferry::InvalidArgument>(
        load(edited(good, {}, {{"0.bias.exp_avg", ferry::AnyDeviceArray()}})),
        "[Adam::load_state_dict] '0.bias.exp_avg' is an empty array");
  }  // no handle to the state is left: the next step updates in place again
  expect_unchanged(dev, adam, model, twin, twin_model, 3);

  // SGD without momentum has no state but the step count.
  optim::SGD plain({.lr = 0.1});
  expect_error<ferry::InvalidArgument>(
      [&] {
        plain.load_state_dict({{"0.weight.momentum_buffer", ferry::zeros<float>(dev, Shape{5, 3})},
                               {"step", ferry::zeros<std::int64_t>(dev, Shape{})}});
      },
      "[SGD::load_state_dict] '0.weight.momentum_buffer' is no entry of SGD's state, which holds "
      "'step' only");
  EXPECT_EQ(plain.steps(), 0);
}

TEST_P(TrainingState, AFreshOptimizerTakesItsParametersFromTheStateAndItsNextStepChecksThem) {
  nn::Linear lin(3, 2, dev, {.seed = 2});
  optim::Adam source({.lr = 0.01});
  for (int t = 0; t < 2; ++t)
    source.step(lin, {{"weight", lin.weight() * 0.5f}, {"bias", lin.bias() - 1.0f}});
  const NamedArrays good = source.state_dict();

  // Half a parameter's state: refused, and the optimizer stays fresh.
  optim::Adam fresh({.lr = 0.01});
  expect_error<ferry::InvalidArgument>(
      [&] { fresh.load_state_dict(edited(good, {"bias.exp_avg_sq"})); },
      "[Adam::load_state_dict] the state has no 'bias.exp_avg_sq' for parameter 'bias'");
  expect_error<ferry::ShapeError>(
      [&] {
        fresh.load_state_dict(
            edited(good, {}, {{"bias.exp_avg_sq", ferry::zeros<float>(dev, Shape{3})}}));
      },
      "[Adam::load_state_dict] 'bias.exp_avg_sq' has shape (3), parameter 'bias' (2)");
  EXPECT_EQ(fresh.steps(), 0);
  EXPECT_TRUE(fresh.state().empty());

  // A state for other names: the load cannot know, the next step refuses it before submitting.
  NamedArrays renamed;
  for (const auto& [name, array] : good)
    renamed.emplace_back(name == "step" ? name : "x." + name, array);
  fresh.load_state_dict(renamed);
  EXPECT_EQ(fresh.steps(), 2);
  const ferry::detail::Step* weight = ferry::detail::ArrayAccess::step(lin.weight());
  expect_error<ferry::InvalidArgument>(
      [&] { fresh.step(lin, {{"weight", lin.weight() * 0.5f}, {"bias", lin.bias() - 1.0f}}); },
      "[Adam] parameter 0 is 'weight', but its state is for 'x.weight'");
  EXPECT_EQ(ferry::detail::ArrayAccess::step(lin.weight()), weight);
  EXPECT_EQ(fresh.steps(), 2);
  // An optimizer that knows its parameters refuses a state for others.
  expect_error<ferry::InvalidArgument>(
      [&] { fresh.load_state_dict(good); },
      "[Adam::load_state_dict] the state has no 'x.weight.exp_avg' for parameter 'x.weight'");
}

// ---- learning-rate schedules ----

TEST(Schedules, StepDecayIsPyTorchsStepLR) {
  const optim::LearningRate lr = optim::step_decay(0.1, 3, 0.5);
  EXPECT_TRUE(lr.is_schedule());
  EXPECT_DOUBLE_EQ(lr(0), 0.1);
  EXPECT_DOUBLE_EQ(lr(2), 0.1);
  EXPECT_DOUBLE_EQ(lr(3), 0.05);
  EXPECT_DOUBLE_EQ(lr(5), 0.05);
  EXPECT_DOUBLE_EQ(lr(6), 0.025);
  EXPECT_DOUBLE_EQ(lr(10), 0.0125);
  EXPECT_DOUBLE_EQ(optim::step_decay(2.0, 1, 0.1)(3), 0.002);
}

TEST(Schedules, CosineDecayIsPyTorchsCosineAnnealingAndThenStays) {
  const optim::LearningRate lr = optim::cosine_decay(1.0, 4, 0.0);
  EXPECT_DOUBLE_EQ(lr(0), 1.0);
  EXPECT_DOUBLE_EQ(lr(1), (1 + std::sqrt(0.5)) / 2);  // cos(pi / 4) = sqrt(1/2)
  EXPECT_DOUBLE_EQ(lr(2), 0.5);
  EXPECT_DOUBLE_EQ(lr(3), (1 - std::sqrt(0.5)) / 2);
  EXPECT_DOUBLE_EQ(lr(4), 0.0);
  EXPECT_DOUBLE_EQ(lr(9), 0.0);
  const optim::LearningRate to_floor = optim::cosine_decay(0.5, 10, 0.1);
  EXPECT_DOUBLE_EQ(to_floor(0), 0.5);
  EXPECT_DOUBLE_EQ(to_floor(5), 0.3);  // 0.1 + 0.4 * (1 + cos(pi / 2)) / 2
  EXPECT_DOUBLE_EQ(to_floor(10), 0.1);
  EXPECT_DOUBLE_EQ(to_floor(1000), 0.1);
}

TEST(Schedules, LinearWarmupRisesToTheScheduleThenHandsItOver) {
  const optim::LearningRate flat = optim::linear_warmup(4, 0.8);
  EXPECT_DOUBLE_EQ(flat(0), 0.2);
  EXPECT_DOUBLE_EQ(flat(1), 0.4);
  EXPECT_DOUBLE_EQ(flat(2), 0.6);
  EXPECT_DOUBLE_EQ(flat(3), 0.8);
  EXPECT_DOUBLE_EQ(flat(4), 0.8);
  EXPECT_DOUBLE_EQ(flat(100), 0.8);
  // The schedule after it runs from its own step 0.
  const optim::LearningRate decayed = optim::linear_warmup(2, optim::step_decay(1.0, 2, 0.1));
  EXPECT_DOUBLE_EQ(decayed(0), 0.5);
  EXPECT_DOUBLE_EQ(decayed(1), 1.0);
  EXPECT_DOUBLE_EQ(decayed(2), 1.0);
  EXPECT_DOUBLE_EQ(decayed(3), 1.0);
  EXPECT_DOUBLE_EQ(decayed(4), 0.1);
  EXPECT_DOUBLE_EQ(decayed(6), 0.01);
  const optim::LearningRate cosine = optim::linear_warmup(10, optim::cosine_decay(1e-3, 1000, 0));
  EXPECT_DOUBLE_EQ(cosine(4), 5e-4);
  EXPECT_DOUBLE_EQ(cosine(510), 5e-4);  // half way through the cosine
  const optim::LearningRate none = optim::linear_warmup(0, 0.3);
  EXPECT_DOUBLE_EQ(none(0), 0.3);
}

TEST(Schedules, ANumberOrAnyCallableIsALearningRate) {
  const optim::SGDOptions number{.lr = 0.05};
  EXPECT_FALSE(number.lr.is_schedule());
  EXPECT_EQ(number.lr, 0.05);  // reads as the number it is
  EXPECT_DOUBLE_EQ(number.lr(123), 0.05);
  const optim::AdamOptions integer{.lr = 1};
  EXPECT_EQ(integer.lr(7), 1.0);
  const optim::AdamWOptions callable{
      .lr = [](std::int64_t t) { return 1.0 / static_cast<double>(t + 1); }};
  EXPECT_TRUE(callable.lr.is_schedule());
  EXPECT_DOUBLE_EQ(callable.lr(3), 0.25);
  EXPECT_EQ(static_cast<double>(callable.lr), 1.0);  // a schedule reads as its first rate
  const optim::Adam adam({.lr = optim::cosine_decay(1e-3, 1000, 0)});
  EXPECT_DOUBLE_EQ(adam.lr(), 1e-3);
  EXPECT_TRUE(adam.options().lr.is_schedule());
}

TEST(Schedules, BadArgumentsThrowInvalidArgumentNamingTheSchedule) {
  expect_error<ferry::InvalidArgument>(
      [] { return optim::step_decay(0.1, 0, 0.5); },
      "[optim::step_decay] invalid step_size 0: it must be at least 1");
  expect_error<ferry::InvalidArgument>(
      [] { return optim::step_decay(0.1, 2, -0.5); },
      "[optim::step_decay] invalid gamma -0.5: it must be finite and not negative");
  expect_error<ferry::InvalidArgument>(
      [] { return optim::step_decay(-1, 2, 0.5); },
      "[optim::step_decay] invalid lr -1: it must be finite and not negative");
  expect_error<ferry::InvalidArgument>(
      [] { return optim::cosine_decay(0.1, 0, 0); },
      "[optim::cosine_decay] invalid steps 0: it must be at least 1");
  expect_error<ferry::InvalidArgument>(
      [] { return optim::cosine_decay(0.1, 10, std::nan("")); },
      "[optim::cosine_decay] invalid final_lr nan: it must be finite and not negative");
  expect_error<ferry::InvalidArgument>(
      [] { return optim::linear_warmup(-1, 0.1); },
      "[optim::linear_warmup] invalid steps -1: it must not be negative");
}

/// Steps `scheduled` (given a schedule) and `driven` (given set_lr(schedule(t)) before each
/// step t) alike for 12 steps: the parameters must be identical.
template <class Opt>
void check_schedule_drives(const ferry::Device& dev, Opt scheduled, Opt driven,
                           const optim::LearningRate& schedule) {
  nn::Sequential a = make_model(dev, 11);
  nn::Sequential b = make_model(dev, 11);
  for (int t = 0; t < 12; ++t) {
    EXPECT_DOUBLE_EQ(scheduled.lr(), schedule(t));
    train(dev, a, scheduled, t, t + 1);
    driven.set_lr(schedule(t));
    train(dev, b, driven, t, t + 1);
  }
  expect_same_parameters(a, b);
}

TEST_P(TrainingState, AnOptimizerWithAScheduleStepsAsOneDrivenBySetLr) {
  const optim::LearningRate s = optim::linear_warmup(3, optim::step_decay(0.05, 4, 0.5));
  check_schedule_drives(dev, optim::SGD({.lr = s, .momentum = 0.9}),
                        optim::SGD({.lr = 1.0, .momentum = 0.9}), s);
  check_schedule_drives(dev, optim::Adam({.lr = s}), optim::Adam({.lr = 1.0}), s);
  const optim::LearningRate c = optim::cosine_decay(0.02, 8, 0.002);
  check_schedule_drives(dev, optim::AdamW({.lr = c, .weight_decay = 0.1}),
                        optim::AdamW({.lr = 1.0, .weight_decay = 0.1}), c);

  // set_lr takes a schedule too, which runs on from the step count.
  optim::SGD sgd({.lr = 0.1});
  nn::Sequential m = make_model(dev, 2);
  train(dev, m, sgd, 0, 2);
  sgd.set_lr(optim::step_decay(1.0, 1, 0.5));
  EXPECT_DOUBLE_EQ(sgd.lr(), 0.25);
  EXPECT_TRUE(sgd.options().lr.is_schedule());
}

TEST_P(TrainingState, AScheduleValueThatIsNotARateIsRefusedAtItsStep) {
  nn::Sequential model = make_model(dev, 4);
  optim::SGD sgd({.lr = [](std::int64_t t) { return t < 2 ? 0.1 : -1.0; }});
  train(dev, model, sgd, 0, 2);
  const auto before = model.named_parameters();
  expect_error<ferry::InvalidArgument>(
      [&] { train(dev, model, sgd, 2, 3); },
      "[SGD] invalid lr -1 from the schedule at step 2: it must be finite and not negative");
  EXPECT_EQ(sgd.steps(), 2);
  const auto after = model.named_parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(ferry::detail::ArrayAccess::step(after[i].second),
              ferry::detail::ArrayAccess::step(before[i].second));
  }
  expect_error<ferry::InvalidArgument>([&] { sgd.set_lr(-0.5); },
                                       "[SGD] invalid lr -0.5: it must be finite and not negative");
}

// ---- clip_grad_norm ----

struct Reference {
  double norm;
  std::vector<std::vector<double>> clipped;
};

/// clip_grad_norm written out as a plain loop over the values, in double.
Reference clip_reference(const std::vector<std::vector<float>>& grads, double max_norm) {
  double squares = 0;
  for (const auto& g : grads) {
    for (float v : g) squares += static_cast<double>(v) * v;
  }
  Reference r{std::sqrt(squares), {}};
  const double factor = std::min(1.0, max_norm / (r.norm + 1e-6));
  for (const auto& g : grads) {
    std::vector<double> c;
    for (float v : g) c.push_back(v * factor);
    r.clipped.push_back(c);
  }
  return r;
}

TEST_P(TrainingState, ClipGradNormMatchesAPlainLoopWhenItClipsAndWhenItDoesNot) {
  const std::vector<std::vector<float>> values{{1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 1.0f},
                                               {-4.0f, 0.75f, 2.5f, -1.25f}};
  const nn::NamedParameters grads{{"0.weight", ferry::to_device(dev, values[0], Shape{2, 3})},
                                  {"0.bias", ferry::to_device(dev, values[1], Shape{4})}};
  for (double max_norm : {1.0, 6.0, 100.0}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    const Reference want = clip_reference(values, max_norm);
    const std::uint64_t exported = dev.stats().bytes_d2h;
    auto [clipped, norm] = nn::clip_grad_norm(grads, max_norm);
    EXPECT_EQ(dev.stats().bytes_d2h, exported);  // nothing left the device
    EXPECT_EQ(norm.shape(), Shape{});
    EXPECT_EQ(norm.device(), dev);
    EXPECT_NEAR(norm.to_host()(), want.norm, 1e-6 * want.norm);
    ASSERT_EQ(clipped.size(), 2u);
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(clipped[k].first, grads[k].first);
      EXPECT_EQ(clipped[k].second.shape(), grads[k].second.shape());
      const std::vector<float> got = values_of(clipped[k].second);
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want.clipped[k][i], 1e-6 * std::abs(want.clipped[k][i]))
            << k << ", " << i;
      }
      if (max_norm > want.norm) {
        EXPECT_EQ(got, values[k]) << "under the limit, the values are untouched";
      }
    }
    EXPECT_EQ(values_of(grads[0].second), values[0]) << "the given gradients are not changed";
  }
  // By position, and given away.
  std::vector<DeviceArray<float>> by_position{ferry::to_device(dev, values[0], Shape{6}),
                                              ferry::to_device(dev, values[1], Shape{4})};
  auto [clipped, norm] = nn::clip_grad_norm(std::move(by_position), 2.0);
  const Reference want = clip_reference(values, 2.0);
  EXPECT_NEAR(norm.to_host()(), want.norm, 1e-6 * want.norm);
  ASSERT_EQ(clipped.size(), 2u);
  const std::vector<float> got = values_of(clipped[1]);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want.clipped[1][i], 1e-6 * std::abs(want.clipped[1][i]));
}

TEST_P(TrainingState, ClipGradNormThrowsBeforeSubmittingAnything) {
  const auto g = ferry::ones<float>(dev, Shape{3});
  expect_error<ferry::InvalidArgument>(
      [&] {
        return nn::clip_grad_norm(nn::NamedParameters{{"w", g}}, -1);
      },
      "[nn::clip_grad_norm] invalid max_norm -1: it must be finite and not negative");
  expect_error<ferry::InvalidArgument>(
      [&] { return nn::clip_grad_norm(nn::NamedParameters{}, 1); },
      "[nn::clip_grad_norm] no gradients were given, so there is no device for the norm");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return nn::clip_grad_norm(nn::NamedParameters{{"w", g}, {"b", DeviceArray<float>()}}, 1);
      },
      "[nn::clip_grad_norm] gradient 'b' is an empty array");
  const ferry::Device other = ferry_test::make_device(GetParam());
  expect_error<ferry::DeviceMismatch>(
      [&] {
        return nn::clip_grad_norm(
            std::vector<DeviceArray<float>>{g, ferry::ones<float>(other, Shape{3})}, 1);
      },
      "[nn::clip_grad_norm] gradient 1 lives on " + other.name() + ", gradient 0 on " + dev.name());
}

// ---- checkpoints by name ----

TEST_P(TrainingState, ALoadedCheckpointIsAddressableByNameInTheSavedOrder) {
  TempDir dir;
  const auto w = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{2, 2});
  const auto step = ferry::full<std::int64_t>(dev, Shape{}, 42);
  ferry::save_safetensors(dir.file("ckpt.safetensors"),
                          {{"w", w}, {"step", step}, {"a", w * 2.0f}});
  NamedArrays ckpt = ferry::load_safetensors(dir.file("ckpt.safetensors"), dev);
  EXPECT_EQ(names_of(ckpt), (std::vector<std::string>{"w", "step", "a"}));
  EXPECT_EQ(values_of(ckpt.at("w").as<float>()), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  EXPECT_EQ(values_of(ckpt.at("a").as<float>()), (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
  EXPECT_EQ(ckpt.at("step").as<std::int64_t>().to_host()(), 42);
  EXPECT_EQ(ckpt.at(1).first, "step");  // by position, as a vector
  EXPECT_TRUE(ckpt.contains("a"));
  EXPECT_FALSE(ckpt.contains("b"));
  expect_error<ferry::InvalidArgument>([&] { return ckpt.at("b"); },
                                       "[NamedArrays::at] no array is named 'b' (of 3 arrays)");
  ckpt.at("w") = w * 10.0f;  // a reference into the list
  EXPECT_EQ(values_of(ckpt[0].second.as<float>()),
            (std::vector<float>{10.0f, 20.0f, 30.0f, 40.0f}));
  // A plain vector of pairs still goes where NamedArrays is wanted.
  const std::vector<std::pair<std::string, ferry::AnyDeviceArray>> plain{{"only", w}};
  ferry::save_safetensors(dir.file("plain.safetensors"), plain);
  EXPECT_EQ(names_of(ferry::load_safetensors(dir.file("plain.safetensors"), dev)),
            std::vector<std::string>{"only"});
}

// ---- a traced training step ----

/// Runs `body`, which makes its own models, optimizers and programs on `dev` and drops them, and
/// expects nothing of them left behind: a replay writes new arrays into the model and the
/// optimizer, and a program that kept the old ones (or a trace's intermediates) would hold
/// memory for as long as it lives. The real bytes ferry's buffers hold and the device's modeled
/// memory come back where they were, and no schedule is shorter than its lower bound.
template <class Body>
void expect_device_back_after(const ferry::Device& dev, Body&& body) {
  const std::size_t real =
      ferry_test::allocated_bytes_back_at(ferry::detail::Buffer::allocated_bytes());
  const ferry::DeviceStats before = dev.stats();
  body();
  // A ManualExecutor runs a step only when an export needs it: the last update's steps, which
  // nothing exported, are still queued and hold their inputs' bytes until they run (as they do
  // once the device is unreachable). Run them, as a pool's threads would have: what is still
  // held after that is held by nothing that can ever let go.
  auto& executor = ferry::detail::DeviceAccess::state(dev)->executor();
  if (auto* manual = dynamic_cast<ferry::detail::ManualExecutor*>(&executor)) manual->run_all();
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(real), real) << "bytes ferry's buffers hold";
  const ferry::DeviceStats after = dev.stats();
  EXPECT_EQ(after.dram_bytes_in_use, before.dram_bytes_in_use) << dev.name();
  EXPECT_EQ(after.l1_bytes_in_use, before.l1_bytes_in_use) << dev.name();
  EXPECT_LE(after.lower_bound, after.makespan) << dev.name();
}

/// One training step of `model` by `opt` on batch `t`, as a function a program traces: the
/// batch is its input, the loss its result, the model and the optimizer what it updates.
auto step_function(nn::Sequential& model, optim::Optimizer& opt) {
  return [&model, &opt](DeviceArray<float> x, DeviceArray<float> y) {
    auto [loss, grads] = nn::value_and_grad(model, [&](const DeviceArray<float>& xs) {
      return nn::mse_loss(model(xs), y);
    })(x);
    opt.step(model, grads);
    return loss;
  };
}

/// `steps` traced steps against as many eager ones, from the same weights: the losses, the
/// parameters and the optimizer's state are the same bits, and the program traced once.
template <class Opt, class Options>
void check_traced_step(const ferry::Device& dev, const Options& options) {
  constexpr int kSteps = 8;
  expect_device_back_after(dev, [&] {
    nn::Sequential traced_model = make_model(dev, 3);
    nn::Sequential eager_model = make_model(dev, 3);
    Opt traced_opt(options);
    Opt eager_opt(options);
    auto program = ferry::jit(step_function(traced_model, traced_opt),
                              ferry::updates(traced_model, traced_opt));
    auto eager = step_function(eager_model, eager_opt);
    for (int t = 0; t < kSteps; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      const auto [x, y] = batch(dev, t);
      EXPECT_EQ(bits_of(program(x, y)), bits_of(eager(x, y)));
      EXPECT_EQ(traced_opt.steps(), t + 1);
    }
    expect_same_parameters(traced_model, eager_model);
    const NamedArrays a = traced_opt.state_dict();
    const NamedArrays b = eager_opt.state_dict();
    ASSERT_EQ(names_of(a), names_of(b));
    for (std::size_t i = 0; i + 1 < a.size(); ++i) {
      EXPECT_EQ(bits_of(a[i].second.as<float>()), bits_of(b[i].second.as<float>())) << a[i].first;
    }
    EXPECT_EQ(a.at("step").as<std::int64_t>().to_host()(), kSteps);
    // The first call made the optimizer's state untraced, the second traced, the rest replayed,
    // each with its own rate from the schedule.
    EXPECT_EQ(program.cache_size(), 1u) << program.explain();
    EXPECT_EQ(program.cache_misses(), 2u);
    EXPECT_EQ(program.cache_hits(), static_cast<std::size_t>(kSteps - 2));
    EXPECT_NE(program.explain().find("a call ran untraced: it made "), std::string::npos)
        << program.explain();
  });
}

TEST_P(TrainingState, ATracedSgdStepWithAScheduleReplaysAsTheEagerStepsDo) {
  check_traced_step<optim::SGD>(dev, optim::SGDOptions{.lr = optim::step_decay(0.1, 2, 0.5),
                                                       .momentum = 0.9, .weight_decay = 0.01});
}

TEST_P(TrainingState, ATracedAdamStepReplaysWithItsBiasCorrectionsAsInputs) {
  check_traced_step<optim::Adam>(dev, optim::AdamOptions{.lr = optim::cosine_decay(0.05, 6, 0.001),
                                                         .weight_decay = 0.01});
}

TEST_P(TrainingState, ATracedAdamWStepWithAWarmupReplaysAsTheEagerStepsDo) {
  check_traced_step<optim::AdamW>(
      dev, optim::AdamWOptions{.lr = optim::linear_warmup(3, optim::cosine_decay(0.02, 8, 0)),
                               .weight_decay = 0.1});
}

TEST_P(TrainingState, ATracedStepFollowsSetLrAndAResumedOptimizerWithoutRetracing) {
  TempDir dir;
  expect_device_back_after(dev, [&] {
    nn::Sequential model = make_model(dev, 5);
    optim::Adam opt({.lr = 0.01});
    train(dev, model, opt, 0, 3);
    ferry::save_safetensors(dir.file("opt.safetensors"), opt.state_dict());
    model.save(dir.file("model.safetensors"));

    // A resumed optimizer has its state: the first call traces.
    nn::Sequential resumed = make_model(dev, 50);
    resumed.load(dir.file("model.safetensors"));
    optim::Adam resumed_opt({.lr = 0.01});
    resumed_opt.load_state_dict(ferry::load_safetensors(dir.file("opt.safetensors"), dev));
    auto program =
        ferry::jit(step_function(resumed, resumed_opt), ferry::updates(resumed, resumed_opt));
    for (int t = 3; t < 7; ++t) {
      if (t == 5) {
        opt.set_lr(0.5);
        resumed_opt.set_lr(0.5);
      }
      const auto [x, y] = batch(dev, t);
      program(x, y);
      train(dev, model, opt, t, t + 1);
    }
    expect_same_parameters(model, resumed);
    EXPECT_EQ(resumed_opt.steps(), 7);
    EXPECT_EQ(program.cache_size(), 1u) << program.explain();
    EXPECT_EQ(program.cache_misses(), 1u);
  });
}

/// Runs `calls` calls of a program stepping with `step` and checks it never cached a trace,
/// said `why`, and trained as the eager function does.
template <class Step>
void check_untraced(const ferry::Device& dev, Step make_step, bool give_model,
                    const std::string& why) {
  expect_device_back_after(dev, [&] {
    nn::Sequential model = make_model(dev, 8);
    nn::Sequential twin = make_model(dev, 8);
    optim::SGD opt({.lr = 0.05, .momentum = 0.5});
    optim::SGD twin_opt({.lr = 0.05, .momentum = 0.5});
    auto program = give_model ? ferry::jit(make_step(model, opt), ferry::updates(model, opt))
                              : ferry::jit(make_step(model, opt), ferry::updates(opt));
    auto eager = make_step(twin, twin_opt);
    for (int t = 0; t < 4; ++t) {
      const auto [x, y] = batch(dev, t);
      EXPECT_EQ(bits_of(program(x, y)), bits_of(eager(x, y)));
    }
    expect_same_parameters(model, twin);
    EXPECT_EQ(opt.steps(), twin_opt.steps());
    EXPECT_EQ(program.cache_size(), 0u);
    EXPECT_NE(program.explain().find(why), std::string::npos) << program.explain();
  });
}

TEST_P(TrainingState, AStepThatAReplayCouldNotRepeatRunsUntracedAndSaysWhy) {
  // The module's parameters are not given: a replay would leave them as they were.
  check_untraced(dev, step_function, false,
                 "SGD stepped parameters the program does not update: give their module to "
                 "ferry::updates too");
  // Two steps in one call, and no step at all.
  auto twice = [](nn::Sequential& model, optim::Optimizer& opt) {
    return [&model, &opt](DeviceArray<float> x, DeviceArray<float> y) {
      DeviceArray<float> loss;
      for (int k = 0; k < 2; ++k) {
        auto [l, grads] = nn::value_and_grad(model, [&](const DeviceArray<float>& xs) {
          return nn::mse_loss(model(xs), y);
        })(x);
        opt.step(model, grads);
        loss = l;
      }
      return loss;
    };
  };
  check_untraced(
      dev, twice, true,
      "the function stepped SGD more than once in one call: a traced call steps an optimizer once");
  auto never = [](nn::Sequential& model, optim::Optimizer& opt) {
    return [&model, &opt](DeviceArray<float> x, DeviceArray<float> y) {
      // Steps only when the optimizer has no state yet, as the first call finds it.
      auto [loss, grads] = nn::value_and_grad(model, [&](const DeviceArray<float>& xs) {
        return nn::mse_loss(model(xs), y);
      })(x);
      if (opt.steps() == 0) opt.step(model, grads);
      return loss;
    };
  };
  expect_device_back_after(dev, [&] {
    nn::Sequential model = make_model(dev, 9);
    optim::SGD opt({.lr = 0.05});
    auto program = ferry::jit(never(model, opt), ferry::updates(model, opt));
    for (int t = 0; t < 3; ++t) {
      const auto [x, y] = batch(dev, t);
      program(x, y);
    }
    EXPECT_EQ(opt.steps(), 1);
    EXPECT_EQ(program.cache_size(), 0u);
    EXPECT_NE(program.explain().find("the function did not step SGD, which the program updates"),
              std::string::npos)
        << program.explain();
  });
}

TEST_P(TrainingState, ATracedStepWhoseScheduleGivesABadRateThrowsAtTheCallAndChangesNothing) {
  // The call that throws leaves nothing behind either.
  expect_device_back_after(dev, [&] {
    nn::Sequential model = make_model(dev, 4);
    optim::SGD opt({.lr = [](std::int64_t step) { return step < 3 ? 0.1 : -1.0; }});
    auto program = ferry::jit(step_function(model, opt), ferry::updates(model, opt));
    for (int t = 0; t < 3; ++t) {
      const auto [x, y] = batch(dev, t);
      program(x, y);
    }
    EXPECT_EQ(program.cache_hits(), 1u);
    const std::vector<std::uint32_t> before = bits_of(model.parameters()[0]);
    const auto next =
        batch(dev, 3);  // not a structured binding: clang 14's lambdas cannot capture one
    expect_error<ferry::InvalidArgument>(
        [&] { return program(next.first, next.second); },
        "[SGD] invalid lr -1 from the schedule at step 3: it must be finite and not negative");
    EXPECT_EQ(opt.steps(), 3);
    EXPECT_EQ(bits_of(model.parameters()[0]), before);
  });
}

}  // namespace

}  // namespace test_training_state
