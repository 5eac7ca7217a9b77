// Printing: Shape, HostArray and DeviceArray as text. Arrays print as NumPy's repr does; every
// expected string below is NumPy's for the same values and options (produced with NumPy, plus
// the rule of NumPy 2.2 that a summarized array's repr ends with its shape): digits, column
// padding, wrapping at 75 characters, summaries past 1,000 elements. bfloat16, which NumPy
// lacks, follows the same rules with the digits a bfloat16 needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/errors.hpp"

namespace test_printing {

namespace {

using ferry::bfloat16;
using ferry::HostArray;
using ferry::Shape;
using ferry_test::expect_error;

template <class T>
HostArray<T> host(Shape shape, std::vector<T> values) {
  return HostArray<T>(shape, values);
}

// 0, step, 2 step, ... as T: n values.
template <class T>
std::vector<T> ramp(std::int64_t n, double step = 1.0) {
  std::vector<T> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(static_cast<double>(i) * step));
  return v;
}

template <class X>
std::string streamed(const X& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Shapes.

TEST(PrintShape, AsItsToString) {
  EXPECT_EQ(ferry::to_string(Shape{2, 3}), "(2, 3)");
  EXPECT_EQ(ferry::to_string(Shape{}), "()");
  EXPECT_EQ(streamed(Shape{32, 784}), "(32, 784)");
  EXPECT_EQ(streamed(Shape{5}), Shape{5}.to_string());
}

// ---------------------------------------------------------------------------------------------
// Host arrays, rank by rank.

TEST(PrintHost, RankZero) {
  EXPECT_EQ(ferry::to_string(host<float>(Shape{}, {1.5f})), "array(1.5, dtype=float32)");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{}, {3.0})), "array(3.)");
  EXPECT_EQ(ferry::to_string(host<std::int64_t>(Shape{}, {7})), "array(7)");
  EXPECT_EQ(ferry::to_string(host<std::int32_t>(Shape{}, {-2})), "array(-2, dtype=int32)");
  EXPECT_EQ(ferry::to_string(host<bool>(Shape{}, {true})), "array(True)");  // no pad at rank 0
}

TEST(PrintHost, RankOne) {
  EXPECT_EQ(ferry::to_string(host<float>(Shape{3}, {1.0f, 2.5f, -3.0f})),
            "array([ 1. ,  2.5, -3. ], dtype=float32)");
  // float32 elements get float32's shortest digits, not double's.
  EXPECT_EQ(ferry::to_string(host<float>(Shape{3}, {1.0f / 3, 2.0f / 3, 1.0f})),
            "array([0.33333334, 0.6666667 , 1.        ], dtype=float32)");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{3}, {1.0 / 3, 2.0 / 3, 1.0})),
            "array([0.33333333, 0.66666667, 1.        ])");
}

TEST(PrintHost, RankTwo) {
  EXPECT_EQ(ferry::to_string(host<float>(Shape{2, 2}, {1, 2, 3, 4})),
            "array([[1., 2.],\n"
            "       [3., 4.]], dtype=float32)");
}

TEST(PrintHost, RankThreeSeparatesBlocksWithABlankLine) {
  EXPECT_EQ(ferry::to_string(host<std::int32_t>(Shape{2, 3, 4}, ramp<std::int32_t>(24))),
            "array([[[ 0,  1,  2,  3],\n"
            "        [ 4,  5,  6,  7],\n"
            "        [ 8,  9, 10, 11]],\n"
            "\n"
            "       [[12, 13, 14, 15],\n"
            "        [16, 17, 18, 19],\n"
            "        [20, 21, 22, 23]]], dtype=int32)");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2, 3, 4}, ramp<double>(24, 0.25))),
            "array([[[0.  , 0.25, 0.5 , 0.75],\n"
            "        [1.  , 1.25, 1.5 , 1.75],\n"
            "        [2.  , 2.25, 2.5 , 2.75]],\n"
            "\n"
            "       [[3.  , 3.25, 3.5 , 3.75],\n"
            "        [4.  , 4.25, 4.5 , 4.75],\n"
            "        [5.  , 5.25, 5.5 , 5.75]]])");
}

TEST(PrintHost, EmptyArraysNameTheirTypeAndShape) {
  EXPECT_EQ(ferry::to_string(HostArray<float>(Shape{0})), "array([], dtype=float32)");
  EXPECT_EQ(ferry::to_string(HostArray<double>(Shape{0})), "array([], dtype=float64)");
  EXPECT_EQ(ferry::to_string(HostArray<float>(Shape{2, 0})),
            "array([], shape=(2, 0), dtype=float32)");
  EXPECT_EQ(ferry::to_string(HostArray<bool>(Shape{0, 3})), "array([], shape=(0, 3), dtype=bool)");
  // What does not fit on the line goes on the next.
  EXPECT_EQ(ferry::to_string(HostArray<float>(Shape{2, 0}), {.linewidth = 30}),
            "array([],\n"
            "      shape=(2, 0), dtype=float32)");
}

TEST(PrintHost, Bools) {
  EXPECT_EQ(ferry::to_string(host<bool>(Shape{3}, {true, false, true})),
            "array([ True, False,  True])");
  EXPECT_EQ(ferry::to_string(host<bool>(Shape{2, 1}, {true, true})),
            "array([[ True],\n"
            "       [ True]])");
}

TEST(PrintHost, IntegersAlignRight) {
  EXPECT_EQ(ferry::to_string(host<std::int32_t>(Shape{3}, {1, -10, 100})),
            "array([  1, -10, 100], dtype=int32)");
  EXPECT_EQ(ferry::to_string(host<std::int64_t>(Shape{3}, {1, -10, 100})),
            "array([  1, -10, 100])");
  EXPECT_EQ(
      ferry::to_string(host<std::int64_t>(Shape{2}, {std::numeric_limits<std::int64_t>::min(), 0})),
      "array([-9223372036854775808,                    0])");
}

TEST(PrintHost, Bfloat16WithTheDigitsABfloat16Needs) {
  // 0.1 is 0.10009765625 as a bfloat16, and "0.1" reads back as it.
  EXPECT_EQ(ferry::to_string(host<bfloat16>(Shape{4}, {0.1f, 1.5f, -2.0f, 100.0f})),
            "array([  0.1,   1.5,  -2. , 100. ], dtype=bfloat16)");
  EXPECT_EQ(ferry::to_string(host<bfloat16>(Shape{2}, {1e-5f, 3.0f})),
            "array([1.e-05, 3.e+00], dtype=bfloat16)");
  // The integer part in full, as NumPy prints a float32's: 1234 rounds to the bfloat16 1232.
  EXPECT_EQ(ferry::to_string(host<bfloat16>(Shape{}, {1234.0f})), "array(1232., dtype=bfloat16)");
}

TEST(PrintHost, Float16AndTheByteTypesPrintAsNumPysOwn) {
  using ferry::float16;
  // 0.1 is 0.0999755859375 as a float16; "0.1" reads back as it. 1/3 needs four digits.
  EXPECT_EQ(ferry::to_string(host<float16>(Shape{4}, {0.1f, 1.5f, -2.0f, 100.0f})),
            "array([  0.1,   1.5,  -2. , 100. ], dtype=float16)");
  EXPECT_EQ(ferry::to_string(host<float16>(Shape{2}, {1e-5f, 3.0f})),
            "array([1.e-05, 3.e+00], dtype=float16)");
  EXPECT_EQ(ferry::to_string(host<float16>(Shape{}, {1.0f / 3.0f})),
            "array(0.3333, dtype=float16)");
  EXPECT_EQ(ferry::to_string(host<float16>(Shape{}, {65504.0f})), "array(65504., dtype=float16)");
  EXPECT_EQ(ferry::to_string(host<float16>(Shape{3}, {INFINITY, NAN, 1.0f})),
            "array([inf, nan,  1.], dtype=float16)");
  // Integers as numbers, never as characters.
  EXPECT_EQ(ferry::to_string(host<std::int8_t>(Shape{3}, {-128, 0, 127})),
            "array([-128,    0,  127], dtype=int8)");
  EXPECT_EQ(ferry::to_string(host<std::uint8_t>(Shape{2}, {0, 255})),
            "array([  0, 255], dtype=uint8)");
  EXPECT_EQ(ferry::to_string(host<std::int16_t>(Shape{2}, {-32768, 1})),
            "array([-32768,      1], dtype=int16)");
}

TEST(PrintHost, FloatsFollowNumPysRules) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ferry::to_string(host<double>(Shape{3}, {nan, -inf, 1.5})),
            "array([ nan, -inf,  1.5])");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2}, {nan, inf})), "array([nan, inf])");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2}, {-0.0, 0.0})), "array([-0.,  0.])");
  // Scientific when the magnitudes span more than 1000 or leave [1e-4, 1e8); mantissas share
  // their digit count, exponents theirs.
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2}, {1e-5, 1.5e-5})), "array([1.0e-05, 1.5e-05])");
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2}, {1e-100, 1e5})), "array([1.e-100, 1.e+005])");
  // Rounded half to even on the exact value, as NumPy's Dragon4.
  EXPECT_EQ(ferry::to_string(host<double>(Shape{2}, {0.125, 0.375}), {.precision = 2}),
            "array([0.12, 0.38])");
  EXPECT_EQ(ferry::to_string(host<float>(Shape{1}, {99999904.0f})),
            "array([99999904.], dtype=float32)");
}

TEST(PrintHost, LongRowsWrapAtSeventyFiveCharacters) {
  EXPECT_EQ(ferry::to_string(host<double>(Shape{30}, ramp<double>(30))),
            "array([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,\n"
            "       13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25.,\n"
            "       26., 27., 28., 29.])");
}

// ---------------------------------------------------------------------------------------------
// Summaries: past 1,000 elements, 3 at each end of every long axis, and the shape.

TEST(PrintHost, OneThousandElementsPrintInFull) {
  const std::string text =
      ferry::to_string(host<std::int64_t>(Shape{1000}, ramp<std::int64_t>(1000)));
  EXPECT_EQ(text.find("..."), std::string::npos);
  EXPECT_TRUE(text.starts_with("array([  0,   1,   2,")) << text;
  EXPECT_TRUE(text.ends_with("997, 998, 999])")) << text;
}

TEST(PrintHost, PastOneThousandElementsTheyAreSummarized) {
  EXPECT_EQ(ferry::to_string(host<std::int64_t>(Shape{1001}, ramp<std::int64_t>(1001))),
            "array([   0,    1,    2, ...,  998,  999, 1000], shape=(1001,))");
  EXPECT_EQ(ferry::to_string(host<float>(Shape{1001}, ramp<float>(1001, 0.5))),
            "array([  0. ,   0.5,   1. , ..., 499. , 499.5, 500. ],\n"
            "      shape=(1001,), dtype=float32)");
  // The reference's example: 48 columns of values and 27 of extras pass 75, as NumPy wraps.
  EXPECT_EQ(ferry::to_string(host<std::int32_t>(Shape{2000}, ramp<std::int32_t>(2000))),
            "array([   0,    1,    2, ..., 1997, 1998, 1999],\n"
            "      shape=(2000,), dtype=int32)");
  EXPECT_EQ(ferry::to_string(host<std::int32_t>(Shape{40, 50}, ramp<std::int32_t>(2000))),
            "array([[   0,    1,    2, ...,   47,   48,   49],\n"
            "       [  50,   51,   52, ...,   97,   98,   99],\n"
            "       [ 100,  101,  102, ...,  147,  148,  149],\n"
            "       ...,\n"
            "       [1850, 1851, 1852, ..., 1897, 1898, 1899],\n"
            "       [1900, 1901, 1902, ..., 1947, 1948, 1949],\n"
            "       [1950, 1951, 1952, ..., 1997, 1998, 1999]],\n"
            "      shape=(40, 50), dtype=int32)");
  // An axis of 2 * edgeitems or fewer is shown whole.
  EXPECT_EQ(ferry::to_string(host<std::int64_t>(Shape{3, 4, 500}, ramp<std::int64_t>(6000))),
            "array([[[   0,    1,    2, ...,  497,  498,  499],\n"
            "        [ 500,  501,  502, ...,  997,  998,  999],\n"
            "        [1000, 1001, 1002, ..., 1497, 1498, 1499],\n"
            "        [1500, 1501, 1502, ..., 1997, 1998, 1999]],\n"
            "\n"
            "       [[2000, 2001, 2002, ..., 2497, 2498, 2499],\n"
            "        [2500, 2501, 2502, ..., 2997, 2998, 2999],\n"
            "        [3000, 3001, 3002, ..., 3497, 3498, 3499],\n"
            "        [3500, 3501, 3502, ..., 3997, 3998, 3999]],\n"
            "\n"
            "       [[4000, 4001, 4002, ..., 4497, 4498, 4499],\n"
            "        [4500, 4501, 4502, ..., 4997, 4998, 4999],\n"
            "        [5000, 5001, 5002, ..., 5497, 5498, 5499],\n"
            "        [5500, 5501, 5502, ..., 5997, 5998, 5999]]], shape=(3, 4, 500))");
}

TEST(PrintHost, SummariesOfHigherAxesGetTheirOwnLine) {
  const std::string text = ferry::to_string(
      host<std::int32_t>(Shape{7, 8, 9}, ramp<std::int32_t>(504)), {.threshold = 100});
  EXPECT_NE(text.find("        [207, 208, 209, ..., 213, 214, 215]],\n"
                      "\n"
                      "       ...,\n"
                      "\n"
                      "       [[288, 289, 290, ..., 294, 295, 296],\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.substr(text.size() - 74),
            "[495, 496, 497, ..., 501, 502, 503]]],\n"
            "      shape=(7, 8, 9), dtype=int32)");
}

// ---------------------------------------------------------------------------------------------
// Options: to_string(a, options), or kept in a stream by print_options.

TEST(PrintOptions, PrecisionThresholdEdgeitemsAndLinewidth) {
  const auto thirds = host<double>(Shape{3}, {1.0 / 3, 2.0 / 3, 1.0});
  EXPECT_EQ(ferry::to_string(thirds, {.precision = 3}), "array([0.333, 0.667, 1.   ])");
  EXPECT_EQ(ferry::to_string(host<float>(Shape{1001}, ramp<float>(1001, 0.5)),
                             {.precision = 3, .threshold = 10, .edgeitems = 2, .linewidth = 40}),
            "array([  0. ,   0.5, ..., 499.5, 500. ],\n"
            "      shape=(1001,), dtype=float32)");
}

TEST(PrintOptions, AManipulatorSetsThemForOneStream) {
  const auto thirds = host<double>(Shape{3}, {1.0 / 3, 2.0 / 3, 1.0});
  std::ostringstream three;
  std::ostringstream plain;
  three << ferry::print_options({.precision = 3}) << thirds << '\n' << thirds;
  plain << thirds;
  EXPECT_EQ(three.str(), "array([0.333, 0.667, 1.   ])\narray([0.333, 0.667, 1.   ])");
  EXPECT_EQ(plain.str(), "array([0.33333333, 0.66666667, 1.        ])");
  // Streams of their own on other threads, each with its own options.
  std::vector<std::string> out(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::ostringstream os;
      os << ferry::print_options({.precision = t + 1});
      for (int i = 0; i < 100; ++i) {
        os.str("");
        os << thirds;
      }
      out[static_cast<std::size_t>(t)] = os.str();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(out[0], "array([0.3, 0.7, 1. ])");
  EXPECT_EQ(out[3], "array([0.3333, 0.6667, 1.    ])");
}

TEST(PrintOptions, BadOptionsAreRefused) {
  const auto x = host<float>(Shape{1}, {1.0f});
  expect_error<ferry::InvalidArgument>([&] { return ferry::to_string(x, {.precision = -1}); },
                                       "[to_string] precision -1 is outside [0, 100]");
  expect_error<ferry::InvalidArgument>([&] { return ferry::to_string(x, {.precision = 101}); },
                                       "[to_string] precision 101 is outside [0, 100]");
  expect_error<ferry::InvalidArgument>([] { return ferry::print_options({.edgeitems = -1}); },
                                       "[print_options] edgeitems -1 is negative");
  expect_error<ferry::InvalidArgument>([] { return ferry::print_options({.threshold = -5}); },
                                       "[print_options] threshold -5 is negative");
}

// ---------------------------------------------------------------------------------------------
// Device arrays: printing is an export, and the text does not depend on the device.

class PrintDevice : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(PrintDevice);

TEST_P(PrintDevice, AsTheHostCopyOnEveryDevice) {
  const auto a = ferry::to_device(dev, {0.5f, 1.0f, 1.5f, 2.0f}, Shape{2, 2}) * 2.0f;  // pending
  const std::string expected =
      "array([[1., 2.],\n"
      "       [3., 4.]], dtype=float32)";
  EXPECT_EQ(ferry::to_string(a), expected);
  EXPECT_EQ(streamed(a), expected);
  EXPECT_EQ(ferry::to_string(a.to_host()), expected);
  EXPECT_EQ(ferry::to_string(a.to(ferry::Device::cpu())), expected);
  const auto mask = a > 2.0f;
  EXPECT_EQ(ferry::to_string(mask, {.linewidth = 20}),
            "array([[False,\n"
            "        False],\n"
            "       [ True,\n"
            "         True]])");
}

TEST_P(PrintDevice, ItIsAnExport) {
  const auto a = ferry::to_device(dev, {1.0, 2.0}, Shape{2}) + 1.0;
  const std::uint64_t syncs = dev.stats().host_syncs;
  EXPECT_EQ(streamed(a), "array([2., 3.])");
  EXPECT_EQ(dev.stats().host_syncs, syncs + 1);
  EXPECT_TRUE(a.ready());
}

TEST_P(PrintDevice, AnEmptyHandleIsRefusedNamingTheCall) {
  const ferry::DeviceArray<float> empty;
  const std::string why =
      " got an empty DeviceArray (default-constructed, moved from or deallocated)";
  expect_error<ferry::InvalidArgument>([&] { return ferry::to_string(empty); },
                                       "[to_string]" + why);
  expect_error<ferry::InvalidArgument>([&] { return streamed(empty); }, "[operator<<]" + why);
}

TEST_P(PrintDevice, AFailedStepReachesThePrint) {
  const auto zero = ferry::to_device(dev, {1, 0}, Shape{2});
  const auto q = ferry::to_device(dev, {4, 4}, Shape{2}) / zero;
  expect_error<ferry::InvalidArgument>([&] { return streamed(q); },
                                       "[divide] integer division by zero");
}

}  // namespace

}  // namespace test_printing
