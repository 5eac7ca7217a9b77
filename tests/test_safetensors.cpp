// Checkpoints: AnyDeviceArray, save_safetensors / load_safetensors round trips of every element
// type, a file whose bytes the test writes itself, and every way a file can be bad.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace test_safetensors {

namespace {

namespace fs = std::filesystem;
using ferry::AnyDeviceArray;
using ferry::NamedArrays;
using ferry::Shape;
using ferry_test::OnEachExecutor;

/// A scratch directory of this file's tests.
struct TempDir : ferry_test::TempDir {
  TempDir() : ferry_test::TempDir("ferry_safetensors") {}
};

using Bytes = std::vector<unsigned char>;

void put_le(Bytes& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(value >> (8 * i)));
}

/// A safetensors file from its parts, the header length included: nothing from ferry's writer.
Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  Bytes out;
  put_le(out, header.size(), 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

Bytes read_bytes(const std::string& path) {
  const std::string text = ferry_test::read_text(path);
  return Bytes(text.begin(), text.end());
}

template <class T>
std::vector<T> values_of(const AnyDeviceArray& a) {
  const ferry::HostArray<T> h = a.as<T>().to_host();
  return std::vector<T>(h.data().begin(), h.data().end());
}

std::vector<std::string> names_of(const NamedArrays& arrays) {
  std::vector<std::string> names;
  for (const auto& [name, array] : arrays) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------------------------------------
// AnyDeviceArray

TEST(AnyDeviceArray, HoldsAnyElementTypeAndGivesTheTypedArrayBack) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto x = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, Shape{2, 3});
  const AnyDeviceArray any = x;
  EXPECT_TRUE(any.valid());
  EXPECT_EQ(any.dtype(), ferry::DType::float32);
  EXPECT_EQ(any.shape(), (Shape{2, 3}));
  EXPECT_EQ(any.device().name(), dev.name());
  const ferry::DeviceArray<float> back = any.as<float>();
  EXPECT_EQ(back.to_host(), x.to_host());

  const AnyDeviceArray mask = ferry::to_device(dev, std::vector<bool>{true, false}, Shape{2});
  EXPECT_EQ(mask.dtype(), ferry::DType::boolean);
  EXPECT_EQ(values_of<bool>(mask), (std::vector<bool>{true, false}));
}

TEST(AnyDeviceArray, AsTheWrongTypeThrowsNamingBothTypes) {
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const AnyDeviceArray any = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  EXPECT_THROW((void)any.as<std::int64_t>(), ferry::InvalidArgument);
  EXPECT_THROW((void)any.as<ferry::bfloat16>(), ferry::InvalidArgument);
  try {
    (void)any.as<std::int64_t>();
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[as]"), std::string::npos) << what;
    EXPECT_NE(what.find("float32"), std::string::npos) << what;
    EXPECT_NE(what.find("int64"), std::string::npos) << what;
  }
}

TEST(AnyDeviceArray, AnEmptyHandleThrowsOnUse) {
  const AnyDeviceArray empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW((void)empty.as<float>(), ferry::InvalidArgument);
  EXPECT_THROW((void)empty.dtype(), ferry::InvalidArgument);
  EXPECT_THROW((void)empty.shape(), ferry::InvalidArgument);
  EXPECT_THROW((void)empty.device(), ferry::InvalidArgument);
  const AnyDeviceArray from_empty = ferry::DeviceArray<float>();
  EXPECT_FALSE(from_empty.valid());
}

// ---------------------------------------------------------------------------------------------
// Round trips

class Safetensors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Safetensors);

TEST_P(Safetensors, EveryElementTypeRoundTripsInOrder) {
  const TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const auto f32 = ferry::to_device(dev, {1.5f, -2.0f, 3.25f, 0.0f, 1e30f, -1e-30f}, Shape{2, 3});
  const auto f64 = ferry::to_device(dev, {1.0 / 3.0, -2.5e300, 4.0}, Shape{3});
  const auto bf16 = ferry::to_device(
      dev, {ferry::bfloat16(1.0f), ferry::bfloat16(-2.0f), ferry::bfloat16(3.140625f),
            ferry::bfloat16::from_bits(0x7f80)},
      Shape{2, 2});
  const auto i32 = ferry::to_device(
      dev, {std::int32_t{7}, std::int32_t{-8}, std::int32_t{2147483647}}, Shape{3, 1});
  const auto i64 = ferry::to_device(dev, {std::int64_t{-9000000000}, std::int64_t{42}}, Shape{2});
  const auto mask =
      ferry::to_device(dev, std::vector<bool>{true, false, false, true, true}, Shape{5});
  const auto scalar = ferry::to_device(dev, {42.0f}, Shape{});
  const auto empty = ferry::to_device(dev, std::vector<float>{}, Shape{0, 3});
  const auto empty_int = ferry::to_device(dev, std::vector<std::int64_t>{}, Shape{2, 0, 4});
  const auto computed = f32 * 2.0f;  // the save waits for it
  const NamedArrays saved{{"f32", f32},      {"f64", f64},       {"bf16", bf16},
                          {"i32", i32},      {"i64", i64},       {"mask", mask},
                          {"scalar", scalar}, {"empty", empty},  {"empty_int", empty_int},
                          {"layer.0/w\xc3\xa9ight \"q\"", computed}};
  ferry::save_safetensors(path, saved);

  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  EXPECT_EQ(names_of(loaded), names_of(saved));
  ASSERT_EQ(loaded.size(), saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    SCOPED_TRACE(saved[i].first);
    EXPECT_EQ(loaded[i].second.dtype(), saved[i].second.dtype());
    EXPECT_EQ(loaded[i].second.shape(), saved[i].second.shape());
    EXPECT_EQ(loaded[i].second.device().name(), dev.name());
  }
  EXPECT_EQ(loaded[0].second.as<float>().to_host(), f32.to_host());
  EXPECT_EQ(loaded[1].second.as<double>().to_host(), f64.to_host());
  const auto bits = loaded[2].second.as<ferry::bfloat16>().to_host();
  const auto want_bits = bf16.to_host();
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(bits.data()[i].bits, want_bits.data()[i].bits);
  EXPECT_EQ(loaded[3].second.as<std::int32_t>().to_host(), i32.to_host());
  EXPECT_EQ(loaded[4].second.as<std::int64_t>().to_host(), i64.to_host());
  EXPECT_EQ(loaded[5].second.as<bool>().to_host(), mask.to_host());
  EXPECT_EQ(loaded[6].second.as<float>().to_host()(), 42.0f);
  EXPECT_TRUE(loaded[7].second.as<float>().to_host().data().empty());
  EXPECT_EQ(loaded[8].second.shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(values_of<float>(loaded[9].second),
            (std::vector<float>{3.0f, -4.0f, 6.5f, 0.0f, 2e30f, -2e-30f}));
  // Loaded arrays are ordinary arrays: ops take them.
  EXPECT_EQ(ferry::sum(loaded[4].second.as<std::int64_t>()).to_host()(), -9000000000 + 42);
}

TEST_P(Safetensors, TheSixteenAndEightBitTypesRoundTripBitForBit) {
  const TempDir dir;
  const std::string path = dir.file("narrow.safetensors");
  const auto f16 = ferry::to_device(
      dev,
      {ferry::float16(1.0f), ferry::float16(-65504.0f), ferry::float16::from_bits(0x0001),
       ferry::float16::from_bits(0x7e00), ferry::float16::from_bits(0xfc00), ferry::float16(0.1f)},
      Shape{2, 3});
  const auto i8 = ferry::to_device(dev, std::vector<std::int8_t>{-128, -1, 0, 127}, Shape{4});
  const auto u8 = ferry::to_device(dev, std::vector<std::uint8_t>{0, 1, 128, 255}, Shape{2, 2});
  const auto i16 =
      ferry::to_device(dev, std::vector<std::int16_t>{-32768, -2, 300, 32767}, Shape{4, 1});
  ferry::save_safetensors(path, {{"f16", f16}, {"i8", i8}, {"u8", u8}, {"i16", i16}});
  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  ASSERT_EQ(names_of(loaded), (std::vector<std::string>{"f16", "i8", "u8", "i16"}));
  EXPECT_EQ(loaded.at("f16").dtype(), ferry::DType::float16);
  EXPECT_EQ(loaded.at("i8").dtype(), ferry::DType::int8);
  EXPECT_EQ(loaded.at("u8").dtype(), ferry::DType::uint8);
  EXPECT_EQ(loaded.at("i16").dtype(), ferry::DType::int16);
  const auto got = values_of<ferry::float16>(loaded.at("f16"));
  const auto want = values_of<ferry::float16>(f16);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].bits, want[i].bits) << i;
  EXPECT_EQ(values_of<std::int8_t>(loaded.at("i8")), values_of<std::int8_t>(i8));
  EXPECT_EQ(values_of<std::uint8_t>(loaded.at("u8")), values_of<std::uint8_t>(u8));
  EXPECT_EQ(values_of<std::int16_t>(loaded.at("i16")), values_of<std::int16_t>(i16));
  EXPECT_EQ(loaded.at("u8").shape(), (Shape{2, 2}));
  // The header names them as the format does, and the bytes are the values' 2 and 1 each.
  const Bytes file = read_bytes(path);
  const std::string text(file.begin(), file.end());
  for (const char* dtype : {"\"dtype\":\"F16\"", "\"dtype\":\"I8\"", "\"dtype\":\"U8\"",
                            "\"dtype\":\"I16\""}) {
    EXPECT_NE(text.find(dtype), std::string::npos) << dtype;
  }
  EXPECT_NE(text.find("\"data_offsets\":[12,16]"), std::string::npos);  // i8 after 6 halves
  EXPECT_NE(text.find("\"data_offsets\":[20,28]"), std::string::npos);  // i16 after 4 + 4 bytes
}

TEST_P(Safetensors, TheFileHasTheFormatsLayout) {
  const TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  const auto w = ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{3});
  const auto n = ferry::to_device(dev, {std::int64_t{5}}, Shape{1});
  ferry::save_safetensors(path, {{"w", w}, {"n", n}}, {{"format", "pt"}});
  const Bytes file = read_bytes(path);
  ASSERT_GE(file.size(), 8u);
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i)
    header |= static_cast<std::uint64_t>(file[static_cast<std::size_t>(i)]) << (8 * i);
  EXPECT_EQ((8 + header) % 8, 0u) << "the data section starts 8-byte aligned";
  EXPECT_EQ(file.size(), 8 + header + 12 + 8);
  const std::string text(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(header));
  EXPECT_EQ(text.substr(0, text.find_last_not_of(' ') + 1),
            "{\"__metadata__\":{\"format\":\"pt\"},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
            "\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}");
  // The data, little-endian: 1.0f is 00 00 80 3f, then the int64 5.
  const std::size_t data = 8 + static_cast<std::size_t>(header);
  EXPECT_EQ(file[data + 2], 0x80);
  EXPECT_EQ(file[data + 3], 0x3f);
  EXPECT_EQ(file[data + 12], 5);
  EXPECT_EQ(file[data + 19], 0);
}

TEST_P(Safetensors, MetadataRoundTrips) {
  const TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const std::map<std::string, std::string> metadata{
      {"format", "pt"},
      {"escapes", "quote \" backslash \\ newline \n tab \t control \x01 slash /"},
      {"unicode", "caf\xc3\xa9 \xf0\x9f\x98\x80"},
      {"", "an empty key is a key"}};
  ferry::save_safetensors(path, {{"x", ferry::to_device(dev, {1.0f}, Shape{1})}}, metadata);
  EXPECT_EQ(ferry::load_safetensors_metadata(path), metadata);
  // A file with no metadata has an empty map.
  const std::string bare = dir.file("bare.safetensors");
  ferry::save_safetensors(bare, {{"x", ferry::to_device(dev, {1.0f}, Shape{1})}});
  EXPECT_TRUE(ferry::load_safetensors_metadata(bare).empty());
}

TEST_P(Safetensors, AFileWithNoArraysRoundTrips) {
  const TempDir dir;
  const std::string path = dir.file("nothing.safetensors");
  ferry::save_safetensors(path, {});
  EXPECT_EQ(read_bytes(path), safetensors_bytes("{}      ", {}));  // what the reference writes
  EXPECT_TRUE(ferry::load_safetensors(path, dev).empty());
  ferry::save_safetensors(path, {}, {{"k", "v"}});
  EXPECT_EQ(ferry::load_safetensors_metadata(path),
            (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST_P(Safetensors, TiledArraysAreSavedRowMajor) {
  const TempDir dir;
  const std::string path = dir.file("tiled.safetensors");
  std::vector<float> values(40 * 33);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const auto tiled = ferry::to_device(dev, std::span<const float>(values), Shape{40, 33},
                                      ferry::Layout{ferry::MemorySpace::dram, ferry::Order::tiled});
  ferry::save_safetensors(path, {{"t", tiled}});
  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  EXPECT_EQ(values_of<float>(loaded.at(0).second), values);
}

TEST(SafetensorsExport, SavingIsOneHostSync) {
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto a = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2}) + 1.0f;
  const auto b = ferry::to_device(dev, {std::int64_t{3}}, Shape{1}) * std::int64_t{2};
  const auto c = ferry::to_device(dev, {1.0, 2.0}, Shape{2}) * 3.0;
  const std::uint64_t before = dev.stats().host_syncs;
  ferry::save_safetensors(dir.file("one_sync.safetensors"), {{"a", a}, {"b", b}, {"c", c}});
  EXPECT_EQ(dev.stats().host_syncs, before + 1);
}

TEST(SafetensorsExport, ArraysOfTwoDevicesSaveTogether) {
  const TempDir dir;
  ferry::Device one = ferry::Device::modeled(ferry::specs::tiny());
  ferry::Device two = ferry::Device::modeled(ferry::specs::tiny());
  const std::string path = dir.file("two.safetensors");
  ferry::save_safetensors(path, {{"a", ferry::to_device(one, {1.0f}, Shape{1})},
                                 {"b", ferry::to_device(two, {2.0f}, Shape{1})}});
  const NamedArrays loaded = ferry::load_safetensors(path, two);
  EXPECT_EQ(values_of<float>(loaded.at(0).second), std::vector<float>{1.0f});
  EXPECT_EQ(values_of<float>(loaded.at(1).second), std::vector<float>{2.0f});
}

/// A load's imports are steps of load_safetensors: a device too small for the checkpoint says
/// so naming the function called, where it named an internal step (to_device).
TEST(SafetensorsExport, ALoadThatDoesNotFitNamesLoadSafetensors) {
  const TempDir dir;
  const std::string path = dir.file("big.safetensors");
  ferry::save_safetensors(
      path, {{"big", ferry::to_device(ferry::Device::cpu(), std::vector<float>(1 << 20, 1.0f),
                                      Shape{1 << 20})}});
  const ferry::Device tiny = ferry::Device::modeled(ferry::specs::tiny());  // 1 MiB of DRAM
  const NamedArrays loaded = ferry::load_safetensors(path, tiny);
  try {
    (void)loaded.at(0).second.as<float>().to_host();
    FAIL() << "no error";
  } catch (const ferry::OutOfDeviceMemory& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[load_safetensors] step 0 on ", 0), 0u) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// A file written by hand

std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

TEST(SafetensorsFile, AHandWrittenHalfAndByteFileLoadsValueByValue) {
  // An fp16 checkpoint as PyTorch writes one (F16), with the byte types beside it.
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const std::string header =
      "{\"h\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
      " \"b\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [8, 11]},"
      " \"u\": {\"dtype\": \"U8\", \"shape\": [1, 2], \"data_offsets\": [11, 13]},"
      " \"s\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [13, 17]}}";
  Bytes data;
  // 1, -2, 65504, the smallest subnormal 2^-24.
  for (const std::uint16_t b : {0x3c00, 0xc000, 0x7bff, 0x0001}) put_le(data, b, 2);
  for (const int b : {0xff, 0x80, 0x7f}) {  // -1, -128, 127
    data.push_back(static_cast<unsigned char>(b));
  }
  for (const int b : {0x00, 0xfe}) data.push_back(static_cast<unsigned char>(b));  // 0, 254
  for (const std::uint16_t b : {0x8000, 0x0102}) put_le(data, b, 2);  // -32768, 258
  const std::string path = dir.file("half.safetensors");
  write_bytes(path, safetensors_bytes(header, data));
  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  const auto h = values_of<ferry::float16>(loaded.at("h"));
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(static_cast<float>(h[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(h[1]), -2.0f);
  EXPECT_EQ(static_cast<float>(h[2]), 65504.0f);
  EXPECT_EQ(static_cast<float>(h[3]), 0x1p-24f);
  EXPECT_EQ(values_of<std::int8_t>(loaded.at("b")), (std::vector<std::int8_t>{-1, -128, 127}));
  EXPECT_EQ(values_of<std::uint8_t>(loaded.at("u")), (std::vector<std::uint8_t>{0, 254}));
  EXPECT_EQ(values_of<std::int16_t>(loaded.at("s")), (std::vector<std::int16_t>{-32768, 258}));
  // A module loads an fp16 checkpoint into its float32 parameters, as load_state_dict does.
  ferry::nn::Linear layer(2, 1, dev);
  const std::string weights = dir.file("linear_fp16.safetensors");
  const auto w16 =
      ferry::to_device(dev, {ferry::float16(0.5f), ferry::float16(-1.5f)}, Shape{1, 2});
  const auto b16 = ferry::to_device(dev, {ferry::float16(0.1f)}, Shape{1});
  ferry::save_safetensors(weights, {{"weight", w16}, {"bias", b16}});
  layer.load(weights);
  const auto params = layer.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].second.to_host().data()[1], -1.5f);
  EXPECT_EQ(params[1].second.to_host().data()[0], static_cast<float>(ferry::float16(0.1f)));
}

TEST(SafetensorsFile, AFileWrittenByHandLoadsValueByValue) {
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  // The header lists the tensors out of data order, with spaces and escapes, and its length is
  // not a multiple of 8: a reader must take all of that.
  const std::string header =
      "{ \"step\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [22, 30]},\n"
      "  \"__metadata__\": {\"fr\\u00e9quence\": \"\\ud83d\\ude00\", \"k\": \"a\\/b\"},\n"
      "  \"w\": {\"data_offsets\": [0, 16], \"shape\": [2, 2], \"dtype\": \"F32\"},\n"
      "  \"h\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22]} }";
  Bytes data;
  for (const float f : {1.0f, -2.5f, 0.15625f, 1e20f}) put_le(data, float_bits(f), 4);
  for (const std::uint16_t b : {0x3f80, 0xc000, 0x4049}) put_le(data, b, 2);  // 1, -2, 3.140625
  put_le(data, static_cast<std::uint64_t>(std::int64_t{-1234567890123}), 8);
  const std::string path = dir.file("by_hand.safetensors");
  write_bytes(path, safetensors_bytes(header, data));

  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  EXPECT_EQ(names_of(loaded), (std::vector<std::string>{"w", "h", "step"}));  // data order
  const ferry::HostArray<float> w = loaded[0].second.as<float>().to_host();
  EXPECT_EQ(w.shape(), (Shape{2, 2}));
  EXPECT_EQ(w(0, 0), 1.0f);
  EXPECT_EQ(w(0, 1), -2.5f);
  EXPECT_EQ(w(1, 0), 0.15625f);
  EXPECT_EQ(w(1, 1), 1e20f);
  const ferry::HostArray<ferry::bfloat16> h = loaded[1].second.as<ferry::bfloat16>().to_host();
  EXPECT_EQ(h.shape(), (Shape{3}));
  EXPECT_EQ(h(0).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(h(1)), -2.0f);
  EXPECT_EQ(static_cast<float>(h(2)), 3.140625f);
  const ferry::HostArray<std::int64_t> step = loaded[2].second.as<std::int64_t>().to_host();
  EXPECT_EQ(step.shape().rank(), 0u);
  EXPECT_EQ(step(), -1234567890123);
  EXPECT_EQ(
      ferry::load_safetensors_metadata(path),
      (std::map<std::string, std::string>{{"fr\xc3\xa9quence", "\xf0\x9f\x98\x80"}, {"k", "a/b"}}));
}

// ---------------------------------------------------------------------------------------------
// Bad files

/// Fixture for bad files: `load` expects a FormatError and returns its message.
class BadFile : public ::testing::Test {
 protected:
  /// A file of `bytes`; its path.
  std::string file(const Bytes& bytes) {
    const std::string path = dir.file("bad" + std::to_string(count++) + ".safetensors");
    write_bytes(path, bytes);
    return path;
  }
  std::string file(const std::string& header, const Bytes& data) {
    return file(safetensors_bytes(header, data));
  }

  /// The message of the FormatError that loading `path` throws (load_safetensors_metadata
  /// throws it too, unless only the tensors' bytes are bad), and that nothing was imported.
  std::string format_error(const std::string& path, bool header_bad = true) {
    std::string message;
    const std::uint64_t steps = dev.stats().steps;
    EXPECT_THROW(
        {
          try {
            (void)ferry::load_safetensors(path, dev);
          } catch (const ferry::FormatError& e) {
            message = e.what();
            throw;
          }
        },
        ferry::FormatError);
    EXPECT_EQ(dev.stats().steps, steps) << "a bad file imports nothing";
    if (header_bad) {
      EXPECT_THROW((void)ferry::load_safetensors_metadata(path), ferry::FormatError);
    }
    EXPECT_NE(message.find("[load_safetensors]"), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    return message;
  }

  /// A header of one tensor `name` with `entry` as its JSON, and `data`.
  std::string tensor(const std::string& entry, const Bytes& data = Bytes(8, 0)) {
    return file("{\"t\":" + entry + "}", data);
  }

  TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  int count = 0;
};

#define EXPECT_MENTIONS(message, text)               \
  EXPECT_NE((message).find(text), std::string::npos) \
      << "'" << (message) << "' lacks '" << (text) << "'"

TEST_F(BadFile, ShorterThanTheHeaderLength) {
  EXPECT_MENTIONS(format_error(file(Bytes{})), "0 bytes");
  EXPECT_MENTIONS(format_error(file(Bytes{8, 0, 0, 0, 0})), "5 bytes");
}

TEST_F(BadFile, HeaderLengthPastTheFileOrTheLimit) {
  Bytes past;
  put_le(past, 100, 8);
  past.push_back('{');
  past.push_back('}');
  EXPECT_MENTIONS(format_error(file(past)), "header length 100");
  Bytes huge;
  put_le(huge, 100'000'001, 8);
  huge.push_back('{');
  EXPECT_MENTIONS(format_error(file(huge)), "limit");
  Bytes wrapped;  // 8 + N wraps around in 64 bits
  put_le(wrapped, ~std::uint64_t{0}, 8);
  (void)format_error(file(wrapped));
}

TEST_F(BadFile, MalformedJson) {
  for (const std::string& header : std::vector<std::string>{
           "{\"t\": {", "", "{} x", "{\"t\": {\"dtype\": \"F32\",}}", "{'t': 1}", "{\"a\": 01}",
        "{\"a\": \"\\x\"}", "{\"a\": \"\\ud800\"}", "{\"a\": \"\\udc00\"}", "{\"a\": \"\xff\"}",
        "{\"a\": \"\xc0\xaf\"}", "{\"a\": \"tab\there\"}", "{\"a\": tru}", "{\"a\": -}",
        "{\"a\": 1.}", std::string(10000, '[')}) {
    SCOPED_TRACE(header.substr(0, 40));
    EXPECT_MENTIONS(format_error(file(header, {})), "not valid JSON");
  }
  EXPECT_MENTIONS(format_error(file("{\"t\": 1, \"t\": 2}", {})), "appears twice");
  EXPECT_MENTIONS(format_error(file("[]", {})), "not a JSON object");
  // Valid JSON, but the format (and its reference reader) has the header begin with '{'.
  EXPECT_MENTIONS(format_error(file(" {}", {})), "begins with whitespace");
  EXPECT_MENTIONS(format_error(file("\n{}", {})), "begin with '{'");
}

/// Past the few keys a scan serves, a set finds a key given twice: the same error, wherever in
/// the object the two lie.
TEST_F(BadFile, AKeyGivenTwiceInALongHeader) {
  std::string header = "{";
  for (int i = 0; i < 40; ++i) header += "\"k" + std::to_string(i) + "\": 0, ";
  for (const std::string again : {"k3", "k16", "k39"}) {
    SCOPED_TRACE(again);
    const std::string message = format_error(file(header + "\"" + again + "\": 0}", {}));
    EXPECT_MENTIONS(message, "the key \"" + again + "\" appears twice in one object at byte " +
                                 std::to_string(header.size()));
  }
}

TEST_F(BadFile, EntryMissingAField) {
  const std::string no_dtype = format_error(tensor(R"({"shape": [2], "data_offsets": [0, 8]})"));
  EXPECT_MENTIONS(no_dtype, "tensor 't'");
  EXPECT_MENTIONS(no_dtype, "\"dtype\"");
  EXPECT_MENTIONS(format_error(tensor(R"({"dtype": "F32", "data_offsets": [0, 8]})")), "\"shape\"");
  EXPECT_MENTIONS(format_error(tensor(R"({"dtype": "F32", "shape": [2]})")), "\"data_offsets\"");
}

TEST_F(BadFile, EntryWithWrongJsonTypes) {
  for (const std::string entry :
       {R"(42)", R"({"dtype": 32, "shape": [2], "data_offsets": [0, 8]})",
        R"({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]})",
        R"({"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]})",
        R"({"dtype": "F32", "shape": [[2]], "data_offsets": [0, 8]})",
        R"({"dtype": "F32", "shape": [18446744073709551616], "data_offsets": [0, 8]})",
        R"({"dtype": "F32", "shape": [2], "data_offsets": {"begin": 0}})",
        R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})",
        R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 16]})",
        R"({"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]})",
        R"({"dtype": "F32", "shape": [2], "data_offsets": [-8, 8]})"}) {
    SCOPED_TRACE(entry);
    EXPECT_MENTIONS(format_error(tensor(entry)), "tensor 't'");
  }
  EXPECT_MENTIONS(format_error(file("{\"__metadata__\": [1]}", {})), "__metadata__");
  EXPECT_MENTIONS(format_error(file("{\"__metadata__\": {\"epoch\": 3}}", {})), "'epoch'");
}

TEST_F(BadFile, UnknownAndForeignDtypes) {
  const std::string unknown =
      format_error(tensor(R"({"dtype": "F33", "shape": [2], "data_offsets": [0, 8]})"));
  EXPECT_MENTIONS(unknown, "unknown dtype \"F33\"");
  EXPECT_MENTIONS(unknown, "tensor 't'");
  for (const std::string dtype : {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F4", "C64"}) {
    SCOPED_TRACE(dtype);
    const std::string message = format_error(
        tensor(R"({"dtype": ")" + dtype + R"(", "shape": [0], "data_offsets": [0, 0]})", {}));
    EXPECT_MENTIONS(message, "dtype " + dtype + ", which safetensors allows but ferry has no");
    EXPECT_MENTIONS(message, "(ferry reads F32, F64, F16, BF16, I8, U8, I16, I32, I64 and BOOL)");
  }
  // Case matters: "f32" is no dtype at all.
  EXPECT_MENTIONS(format_error(tensor(R"({"dtype": "f32", "shape": [2], "data_offsets": [0, 8]})")),
                  "unknown dtype");
}

TEST_F(BadFile, NegativeOverflowingOrTooManyDims) {
  EXPECT_MENTIONS(
      format_error(tensor(R"({"dtype": "F32", "shape": [2, -2], "data_offsets": [0, 8]})")),
      "shape[1] is negative (-2)");
  EXPECT_MENTIONS(
      format_error(
          tensor(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]})")),
      "more elements than fit");
  // The elements fit in int64, their bytes do not; a wrapped product would be 0 here.
  EXPECT_MENTIONS(
      format_error(
          tensor(R"({"dtype": "I64", "shape": [2305843009213693952], "data_offsets": [0, 8]})")),
      "more bytes than fit");
  // A zero elsewhere does not excuse the overflow (Shape's rule).
  (void)format_error(tensor(
      R"({"dtype": "F32", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]})", {}));
  EXPECT_MENTIONS(format_error(tensor(
                      R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,2], "data_offsets": [0, 8]})")),
                  "rank 9");
}

TEST_F(BadFile, DataOffsetsThatDoNotFit) {
  EXPECT_MENTIONS(format_error(tensor(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 0]})")),
                  "end before they begin");
  EXPECT_MENTIONS(
      format_error(tensor(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})")),
      "past the data section of 8 bytes");
  const std::string mismatch =
      format_error(tensor(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})"));
  EXPECT_MENTIONS(mismatch, "tensor 't'");
  EXPECT_MENTIONS(mismatch, "needs 12");
}

TEST_F(BadFile, OverlapsAndUncoveredBytes) {
  const std::string overlap = format_error(file(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      Bytes(12, 0)));
  EXPECT_MENTIONS(overlap, "tensor 'b'");
  EXPECT_MENTIONS(overlap, "overlaps tensor 'a'");
  EXPECT_MENTIONS(format_error(file(
                      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                      Bytes(12, 0))),
                  "bytes [4, 8) of the data section, before tensor 'b', belong to no tensor");
  EXPECT_MENTIONS(format_error(tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})")),
                  "bytes [4, 8) at the end");
  EXPECT_MENTIONS(format_error(file("{}", Bytes(3, 0))), "belong to no tensor");
}

TEST_F(BadFile, ABoolThatIsNeitherZeroNorOne) {
  const std::string path = tensor(R"({"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]})",
                                  Bytes{1, 0, 2});
  const std::string message = format_error(path, /*header_bad=*/false);
  EXPECT_MENTIONS(message, "tensor 't'");
  EXPECT_MENTIONS(message, "byte 2 at element 2");
}

TEST_F(BadFile, NothingIsImportedWhenALaterTensorIsBad) {
  // "a" is fine and comes first in the data; "b" is not.
  const std::string path = file(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "b": {"dtype": "BOOL", "shape": [1], "data_offsets": [4, 5]}})",
      Bytes{0, 0, 128, 63, 7});
  EXPECT_MENTIONS(format_error(path, /*header_bad=*/false), "tensor 'b'");  // checks the steps
  // The control: the steps counted are the imports a good file makes.
  const std::uint64_t before = dev.stats().steps;
  (void)ferry::load_safetensors(
      file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
           Bytes{0, 0, 128, 63}),
      dev);
  EXPECT_EQ(dev.stats().steps, before + 1);
}

TEST_F(BadFile, FilesThatCannotBeRead) {
  EXPECT_THROW((void)ferry::load_safetensors(dir.file("missing.safetensors"), dev),
               ferry::FileError);
  EXPECT_THROW((void)ferry::load_safetensors_metadata(dir.file("missing.safetensors")),
               ferry::FileError);
  fs::create_directory(dir.file("a_directory"));
  EXPECT_THROW((void)ferry::load_safetensors(dir.file("a_directory"), dev), ferry::FileError);
  try {
    (void)ferry::load_safetensors(dir.file("missing.safetensors"), dev);
  } catch (const ferry::FileError& e) {
    EXPECT_MENTIONS(std::string(e.what()), "missing.safetensors");
  }
}

// ---------------------------------------------------------------------------------------------
// Saves that fail

TEST(SafetensorsSave, BadNamesAndHandlesAreRefusedBeforeAnythingRuns) {
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto x = ferry::to_device(dev, {1.0f}, Shape{1});
  const std::string path = dir.file("refused.safetensors");
  EXPECT_THROW(ferry::save_safetensors(path, {{"x", x}, {"x", x}}), ferry::InvalidArgument);
  EXPECT_THROW(ferry::save_safetensors(path, {{"", x}}), ferry::InvalidArgument);
  EXPECT_THROW(ferry::save_safetensors(path, {{"__metadata__", x}}), ferry::InvalidArgument);
  EXPECT_THROW(ferry::save_safetensors(path, {{"bad\xff", x}}), ferry::InvalidArgument);
  EXPECT_THROW(ferry::save_safetensors(path, {{"x", x}}, {{"k", "\xc0"}}), ferry::InvalidArgument);
  EXPECT_THROW(ferry::save_safetensors(path, {{"x", x}, {"empty", AnyDeviceArray()}}),
               ferry::InvalidArgument);
  try {
    ferry::save_safetensors(path, {{"x", x}, {"x", x}});
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_MENTIONS(std::string(e.what()), "'x'");
  }
  auto freed = ferry::to_device(dev, {1.0f}, Shape{1});
  ferry::deallocate(freed, ferry::force);
  EXPECT_THROW(ferry::save_safetensors(path, {{"freed", freed}}), ferry::UseAfterFree);
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsSave, AFileThatCannotBeWrittenIsAFileErrorAndLeavesNothing) {
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const auto x = ferry::to_device(dev, {1.0f}, Shape{1});
  EXPECT_THROW(ferry::save_safetensors(dir.file("no_such_dir/x.safetensors"), {{"x", x}}),
               ferry::FileError);
  // A directory where the file should go: the temporary is written, the rename fails.
  fs::create_directory(dir.file("taken"));
  fs::create_directory(dir.file("taken/inside"));
  EXPECT_THROW(ferry::save_safetensors(dir.file("taken"), {{"x", x}}), ferry::FileError);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"taken"}));
}

TEST(SafetensorsSave, AFailedExportLeavesTheOldCheckpoint) {
  const TempDir dir;
  ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  const std::string path = dir.file("ckpt.safetensors");
  ferry::save_safetensors(path, {{"x", ferry::to_device(dev, {1.0f}, Shape{1})}});
  const Bytes before = read_bytes(path);
  auto bad = ferry::custom<float>(dev, "bad", {}, Shape{2}, [](ferry::KernelArgs<float>) {
    throw std::runtime_error("custom kernel failed");
  }, ferry::Cost{});
  EXPECT_THROW(ferry::save_safetensors(path, {{"x", ferry::to_device(dev, {2.0f}, Shape{1})},
                                              {"bad", bad * 2.0f}}),
               std::runtime_error);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"ckpt.safetensors"}));
  // A good save replaces it whole.
  ferry::save_safetensors(path, {{"y", ferry::to_device(dev, {3.0, 4.0}, Shape{2})}});
  const NamedArrays loaded = ferry::load_safetensors(path, dev);
  EXPECT_EQ(names_of(loaded), std::vector<std::string>{"y"});
  EXPECT_EQ(values_of<double>(loaded[0].second), (std::vector<double>{3.0, 4.0}));
}

}  // namespace

}  // namespace test_safetensors
