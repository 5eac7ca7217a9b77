// Random differentiable programs: each is a random recipe of smooth ops (elementwise with
// broadcasting, sin, silu, softplus, erf, matmul, sums and means over an axis, softmax,
// log_softmax, logsumexp, rms and layer norms, attention, transposes, swapaxes, flips, slices,
// concats, reshapes, layout changes, moves between two devices, where with a constant mask) over
// float64 arrays whose sizes include 0 and 1. The gradient value_and_grad gives for every input
// must match central finite differences of the same recipe within a relative 1e-6. Only smooth ops
// are drawn (no relu, abs, max: a difference straddling a kink would be meaningless).
//
// FERRY_FUZZ_ITERATIONS / 5 programs (100 by default).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

using ferry::Shape;
using D = ferry::DeviceArray<double>;

std::size_t programs() {
  const char* env = std::getenv("FERRY_FUZZ_ITERATIONS");
  const std::size_t n =
      env != nullptr ? static_cast<std::size_t>(std::strtoull(env, nullptr, 10)) : 500;
  return std::max<std::size_t>(1, n / 5);
}

enum class Op { add, sub, mul, div, tanh, exp_tanh, sigmoid, matmul, sum, mean, softmax,
                transpose, slice, concat, reshape, tile, move, where, sin, silu, softplus, erf,
                log_softmax, logsumexp, norm, swapaxes, flip, attention };
constexpr int kOps = 28;

/// One op of a recipe: its kind, the values it reads, and its parameters.
struct Instr {
  Op op;
  std::size_t a = 0;
  std::size_t b = 0;
  std::int64_t p = 0;
  std::int64_t q = 0;
};

/// A random recipe over `inputs` 2-D arrays, with the shape of every value it makes.
class Recipe {
 public:
  explicit Recipe(std::uint64_t seed) : rng_(seed) {
    const int inputs = 1 + pick(3);
    for (int i = 0; i < inputs; ++i) shapes_.push_back({dim(), dim()});
    inputs_ = shapes_.size();
    const int steps = 2 + pick(8);
    for (int s = 0; s < steps; ++s) add();
  }

  std::size_t inputs() const { return inputs_; }
  const Shape& shape(std::size_t v) const { return shapes_[v]; }

  /// The loss: the weighted sum of every value the recipe made (or of the inputs).
  D run(const std::vector<D>& in, const std::vector<ferry::Device>& devices) const {
    std::vector<D> v = in;
    for (const Instr& i : code_) v.push_back(apply(i, v, devices));
    D loss = ferry::sum(ferry::tanh(v[0]));
    for (std::size_t k = 1; k < v.size(); ++k) {
      D w = ferry::full(v[k].device(), v[k].shape(), 0.25 + 0.125 * static_cast<double>(k % 5));
      D term = ferry::sum(v[k] * w);
      loss = loss + term.to(v[0].device());
    }
    return loss;
  }

  std::string describe() const {
    std::string out;
    for (const Instr& i : code_) out += std::to_string(static_cast<int>(i.op)) + " ";
    return out;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::int64_t dim() {
    static constexpr std::int64_t kDims[] = {0, 1, 1, 2, 2, 3, 3, 4};
    return kDims[pick(8)];
  }

  void add() {
    const std::size_t a = static_cast<std::size_t>(pick(static_cast<int>(shapes_.size())));
    const std::int64_t r = shapes_[a].dims()[0];
    const std::int64_t c = shapes_[a].dims()[1];
    Instr in{static_cast<Op>(pick(kOps)), a};
    Shape out{r, c};
    switch (in.op) {
      case Op::add: case Op::sub: case Op::mul: case Op::div: case Op::where:
        // A partner of the same shape or broadcasting along rows or columns: the result has
        // the first operand's shape.
        in.b = partner(pick(3) == 0 ? 1 : r, pick(3) == 0 ? 1 : c);
        break;
      case Op::matmul:  // by a constant (c, n) matrix
        in.p = dim();
        out = Shape{r, in.p};
        break;
      case Op::sum: case Op::mean: case Op::softmax: case Op::log_softmax: case Op::logsumexp:
      case Op::flip: case Op::norm: case Op::attention:
        in.p = pick(2);
        // logsumexp over nothing is -inf, which no difference can check: a sum instead.
        if (in.op == Op::logsumexp && (in.p == 0 ? r : c) == 0) in.op = Op::sum;
        if (in.op == Op::sum || in.op == Op::mean || in.op == Op::logsumexp) {
          out = in.p == 0 ? Shape{1, c} : Shape{r, 1};
        }
        break;
      case Op::transpose: case Op::swapaxes: out = Shape{c, r}; break;
      case Op::slice: {
        in.p = pick(2);
        const std::int64_t n = in.p == 0 ? r : c;
        const std::int64_t begin = pick(static_cast<int>(n + 1));
        in.q = begin;
        in.b = static_cast<std::size_t>(begin + pick(static_cast<int>(n - begin + 1)));
        out = in.p == 0 ? Shape{static_cast<std::int64_t>(in.b) - begin, c}
                        : Shape{r, static_cast<std::int64_t>(in.b) - begin};
        break;
      }
      case Op::concat: {
        in.p = pick(2);
        in.b = in.p == 0 ? partner(dim(), c) : partner(r, dim());
        const Shape& o = shapes_[in.b];
        out = in.p == 0 ? Shape{r + o.dims()[0], c} : Shape{r, c + o.dims()[1]};
        break;
      }
      case Op::reshape: out = Shape{c, r}; break;
      default: break;
    }
    code_.push_back(in);
    shapes_.push_back(out);
  }

  /// A value of shape (r, c) already made, or one made now from any value: its sum over both
  /// axes broadcast to (r, c).
  std::size_t partner(std::int64_t r, std::int64_t c) {
    for (std::size_t v = 0; v < shapes_.size(); ++v) {
      if (shapes_[v] == (Shape{r, c}) && pick(2) == 0) return v;
    }
    const std::size_t from = static_cast<std::size_t>(pick(static_cast<int>(shapes_.size())));
    code_.push_back({Op::sum, from, 0, -1, r * 1000 + c});  // p = -1: to a (r, c) broadcast
    shapes_.push_back({r, c});
    return shapes_.size() - 1;
  }

  static D apply(const Instr& i, const std::vector<D>& v,
                 const std::vector<ferry::Device>& devices) {
    const D& a = v[i.a];
    auto same_device = [&](const D& x) { return x.device() == a.device() ? x : x.to(a.device()); };
    switch (i.op) {
      case Op::add: return a + same_device(v[i.b]);
      case Op::sub: return a - same_device(v[i.b]);
      case Op::mul: return a * same_device(v[i.b]);
      case Op::div: {
        const D b = same_device(v[i.b]);
        return a / (b * b + 1.0);
      }
      case Op::where: {
        const D b = same_device(v[i.b]);
        const Shape out = a.shape();
        std::vector<bool> mask(static_cast<std::size_t>(out.numel()));
        for (std::size_t k = 0; k < mask.size(); ++k) mask[k] = k % 3 != 1;
        return ferry::where(ferry::to_device(a.device(), mask, out), a, b);
      }
      case Op::tanh: return ferry::tanh(a);
      case Op::exp_tanh: return ferry::exp(ferry::tanh(a));
      case Op::sigmoid: return ferry::sigmoid(a);
      case Op::matmul: {
        const Shape s = a.shape();
        std::vector<double> w(static_cast<std::size_t>(s.dims()[1] * i.p));
        for (std::size_t k = 0; k < w.size(); ++k) w[k] = 0.5 - 0.25 * static_cast<double>(k % 4);
        return ferry::matmul(a, ferry::to_device(a.device(), w, Shape{s.dims()[1], i.p}));
      }
      case Op::sum:
        if (i.p < 0) {
          return ferry::broadcast_to(ferry::sum(a, {0, 1}, true), Shape{i.q / 1000, i.q % 1000});
        }
        return ferry::sum(a, {static_cast<int>(i.p)}, true);
      case Op::mean:
        return a.shape().dims()[static_cast<std::size_t>(i.p)] == 0
                   ? ferry::sum(a, {static_cast<int>(i.p)}, true)  // a mean of nothing is NaN
                   : ferry::mean(a, {static_cast<int>(i.p)}, true);
      case Op::softmax: return ferry::softmax(a, static_cast<int>(i.p));
      case Op::transpose: return ferry::transpose(a);
      case Op::slice:
        return ferry::slice(a, static_cast<int>(i.p), i.q, static_cast<std::int64_t>(i.b));
      case Op::concat: return ferry::concat({a, same_device(v[i.b])}, static_cast<int>(i.p));
      case Op::reshape: return ferry::reshape(a, Shape{a.shape().dims()[1], a.shape().dims()[0]});
      case Op::tile: {
        const bool tiled = a.layout().order == ferry::Order::row_major && a.shape().numel() != 0;
        return ferry::to_layout(
            a, {ferry::MemorySpace::dram, tiled ? ferry::Order::tiled : ferry::Order::row_major});
      }
      case Op::move: return a.to(devices[a.device() == devices[0] ? 1 : 0]);
      case Op::sin: return ferry::sin(a);
      case Op::silu: return ferry::silu(a);
      case Op::softplus: return ferry::softplus(a);
      case Op::erf: return ferry::erf(a);
      case Op::log_softmax: return ferry::log_softmax(a, static_cast<int>(i.p));
      case Op::logsumexp: return ferry::logsumexp(a, {static_cast<int>(i.p)}, true);
      // eps 0.5 keeps the norms smooth where a row's values are close (finite differences).
      case Op::norm:
        return i.p == 0 ? ferry::rms_norm(a, {.eps = 0.5}) : ferry::layer_norm(a, {.eps = 0.5});
      case Op::swapaxes: return ferry::swapaxes(a, 0, 1);
      case Op::flip: return ferry::flip(a, static_cast<int>(i.p));
      case Op::attention: return ferry::scaled_dot_product_attention(a, a, a, {.causal = i.p == 1});
    }
    return a;
  }

  std::mt19937_64 rng_;
  std::vector<Shape> shapes_;
  std::size_t inputs_ = 0;
  std::vector<Instr> code_;
};

std::string check_program(std::uint64_t seed, const std::vector<ferry::Device>& devices) {
  const Recipe recipe(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::vector<std::vector<double>> values(recipe.inputs());
  for (std::size_t k = 0; k < values.size(); ++k) {
    values[k].resize(static_cast<std::size_t>(recipe.shape(k).numel()));
    for (double& x : values[k]) x = u(rng);
  }
  auto arrays = [&] {
    std::vector<D> in;
    for (std::size_t k = 0; k < values.size(); ++k) {
      in.push_back(ferry::to_device(devices[0], values[k], recipe.shape(k)));
    }
    return in;
  };
  auto loss = [&] {
    const auto h = recipe.run(arrays(), devices).to_host();
    return h.data()[0];
  };
  // The gradient of every input at once: a function of a vector of arrays, wrapped for the
  // fixed arity value_and_grad takes.
  const std::vector<D> in = arrays();
  std::vector<D> grads;
  auto one = [&](std::size_t k) {
    return ferry::grad([&](const D& x) {
      std::vector<D> args = in;
      args[k] = x;
      return recipe.run(args, devices);
    })(in[k]);
  };
  for (std::size_t k = 0; k < in.size(); ++k) grads.push_back(one(k));
  const double h = 1e-5;
  for (std::size_t k = 0; k < values.size(); ++k) {
    const auto g = grads[k].to_host();
    for (std::size_t e = 0; e < values[k].size(); ++e) {
      const double x = values[k][e];
      values[k][e] = x + h;
      const double up = loss();
      values[k][e] = x - h;
      const double down = loss();
      values[k][e] = x;
      const double numeric = (up - down) / (2 * h);
      if (!(std::abs(g.data()[e] - numeric) <= 1e-6 * std::max(1.0, std::abs(numeric)))) {
        return "input " + std::to_string(k) + " element " + std::to_string(e) + ": gradient " +
               std::to_string(g.data()[e]) + ", differences " + std::to_string(numeric) +
               "; ops " + recipe.describe();
      }
    }
  }
  return {};
}

TEST(FuzzGrad, GradientsOfRandomProgramsMatchFiniteDifferences) {
  const std::vector<ferry::Device> devices{ferry::Device(), ferry::Device(ferry::Executor(2))};
  const std::size_t total = programs();
  std::size_t failed = 0;
  std::string first;
  for (std::size_t i = 0; i < total; ++i) {
    const std::string failure = check_program(7'000'000 + i, devices);
    if (!failure.empty() && failed++ == 0)
      first = "program " + std::to_string(7'000'000 + i) + ": " + failure;
  }
  EXPECT_EQ(failed, 0u) << first;
}

}  // namespace
