#pragma once
// Checkpoints in the safetensors format: named arrays of mixed element types, and a string map
// of metadata, in one file other frameworks read too. Saving is an export (one host sync for
// every array); loading is an import (it never waits for the device).

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/any_array.hpp"
#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/io/json.hpp"
#include "ferry/io/safetensors_format.hpp"
#include "ferry/transfer.hpp"

namespace ferry {

namespace detail {

static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big,
              "ferry reads and writes safetensors on little- and big-endian hosts only");

/// The file's byte order is little-endian: on a big-endian host, reverses each element's bytes
/// (in place, both ways). Nothing to do on the usual hosts.
inline void swap_to_little_endian(std::span<std::byte> bytes, std::size_t element) noexcept {
  if constexpr (std::endian::native == std::endian::big) {
    if (element == 1) return;
    for (std::size_t at = 0; at + element <= bytes.size(); at += element) {
      std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                   bytes.begin() + static_cast<std::ptrdiff_t>(at + element));
    }
  } else {
    (void)bytes;
    (void)element;
  }
}

/// "No such file or directory": the system's reason for the last failed call, if it set one.
inline std::string system_reason(int error) {
  return error == 0 ? std::string("unknown reason") : std::generic_category().message(error);
}

/// A name for a temporary file beside `path`, unlikely to be taken: a hidden file with a random
/// suffix, so two processes saving the same checkpoint do not write into one temporary.
inline std::filesystem::path temporary_beside(const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device entropy;
  const std::uint64_t tag = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^
                            counter.fetch_add(1, std::memory_order_relaxed);
  std::filesystem::path tmp = path;
  tmp.replace_filename("." + path.filename().string() + "." + std::to_string(tag) + ".tmp");
  return tmp;
}

/// Removes the temporary file unless the save got as far as renaming it into place.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (!kept_) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
  }
  const std::filesystem::path& path() const noexcept { return path_; }
  void keep() noexcept { kept_ = true; }

 private:
  std::filesystem::path path_;
  bool kept_ = false;
};

/// Writes `header` and `data` as a safetensors file at `path`, through a temporary file in the
/// same directory renamed into place: a reader sees the old file or the new one, never half of
/// one. (The standard library cannot flush a file to the disk, so a power cut right after a
/// save may still lose it; a crash of the program cannot tear it.) Throws FileError.
inline void write_safetensors_file(std::string_view op, const std::string& path,
                                   std::string_view header, std::span<const std::byte> data) {
  TemporaryFile tmp(temporary_beside(std::filesystem::path(path)));
  {
    errno = 0;
    std::ofstream out(tmp.path(), std::ios::binary | std::ios::trunc);
    if (!out) {
      fail<FileError>(op, "cannot create '", tmp.path().string(), "' to write '", path,
                      "': ", system_reason(errno));
    }
    std::array<char, 8> length{};
    for (std::size_t i = 0; i < 8; ++i) {
      length[i] = static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * i)) & 0xff);
    }
    out.write(length.data(), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (!data.empty()) {
      out.write(reinterpret_cast<const char*>(data.data()),
                static_cast<std::streamsize>(data.size()));
    }
    out.close();
    if (!out) {
      fail<FileError>(op, "cannot write '", tmp.path().string(), "' (for '", path,
                      "'): ", system_reason(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp.path(), path, ec);
  if (ec)
    fail<FileError>(op, "cannot move the new file into place at '", path, "': ", ec.message());
  tmp.keep();
}

/// The step behind an array to save; InvalidArgument for an empty handle, UseAfterFree for a
/// freed one.
inline Step& step_to_save(std::string_view op, const std::string& name, const AnyDeviceArray& a) {
  Step* s = AnyArrayAccess::step(a);
  if (s == nullptr) fail<InvalidArgument>(op, "array '", name, "' is an empty handle");
  if (s->freed()) {
    fail<UseAfterFree>(op, "array '", name, "' was freed by deallocate(force)");
  }
  return *s;
}

/// Throws InvalidArgument for a name that cannot be a tensor's: empty, the metadata key, one
/// given twice, or not UTF-8 (the header is UTF-8 JSON).
inline void check_names(std::string_view op, const NamedArrays& arrays,
                        const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::string& name = arrays[i].first;
    if (name.empty()) fail<InvalidArgument>(op, "array ", i, " has an empty name");
    if (name == kSafetensorsMetadataKey) {
      fail<InvalidArgument>(op, "array ", i, " is named '", name,
                            "', the key the format keeps for metadata");
    }
    if (!valid_utf8(name)) fail<InvalidArgument>(op, "the name of array ", i, " is not UTF-8");
    if (!seen.insert(name).second) {
      fail<InvalidArgument>(op, "two arrays are named '", name, "'");
    }
  }
  for (const auto& [key, value] : metadata) {
    if (!valid_utf8(key) || !valid_utf8(value)) {
      fail<InvalidArgument>(op, "metadata entry '", key, "' is not UTF-8");
    }
  }
}

/// Calls `f(std::type_identity<T>{})` for the element type `t` stands for.
template <class F>
decltype(auto) with_element_type(DType t, F&& f) {
  switch (t) {
    case DType::float32: return f(std::type_identity<float>{});
    case DType::float64: return f(std::type_identity<double>{});
    case DType::int32: return f(std::type_identity<std::int32_t>{});
    case DType::int64: return f(std::type_identity<std::int64_t>{});
    case DType::bfloat16: return f(std::type_identity<bfloat16>{});
    case DType::float16: return f(std::type_identity<float16>{});
    case DType::int8: return f(std::type_identity<std::int8_t>{});
    case DType::uint8: return f(std::type_identity<std::uint8_t>{});
    case DType::int16: return f(std::type_identity<std::int16_t>{});
    case DType::boolean: break;
  }
  return f(std::type_identity<bool>{});
}

/// An open safetensors file: its size, header and data section, read and checked piece by
/// piece so that a corrupt length is caught before it is allocated.
class SafetensorsReader {
 public:
  /// Opens `path` and reads and checks its header. Throws FileError when the file cannot be
  /// opened or read, FormatError when the header is bad.
  SafetensorsReader(std::string_view op, const std::string& path) : op_(op), path_(path) {
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) fail<FileError>(op_, "cannot read '", path_, "': ", ec.message());
    errno = 0;
    in_.open(path, std::ios::binary);
    if (!in_) fail<FileError>(op_, "cannot open '", path_, "': ", system_reason(errno));
    if (size < 8) {
      bad_file(op_, path_, "the file has ", size, " bytes, too few for the 8-byte header length");
    }
    std::array<unsigned char, 8> raw{};
    read(raw.data(), 8);
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(raw[i]) << (8 * i);
    if (n > kMaxSafetensorsHeader) {
      bad_file(op_, path_, "the header length ", n, " exceeds the limit of ",
               kMaxSafetensorsHeader, " bytes");
    }
    if (n > size - 8) {
      bad_file(op_, path_, "the header length ", n, " exceeds the ", size - 8,
               " bytes that follow it");
    }
    std::string text(static_cast<std::size_t>(n), '\0');
    read(text.data(), text.size());
    header_ = parse_safetensors_header(op_, path_, text, size - 8 - n);
  }

  SafetensorsHeader& header() noexcept { return header_; }

  /// Reads the data section, tensor by tensor in data-offset order, into one buffer each.
  /// Throws FileError when the file cannot be read, FormatError for a bool byte that is not
  /// 0 or 1 (any other byte is not a bool a program may hold).
  std::vector<Buffer> read_data(BufferCache* cache) {
    std::vector<Buffer> buffers;
    buffers.reserve(header_.tensors.size());
    for (const SafetensorsEntry& e : header_.tensors) {
      const std::size_t bytes = checked_bytes(op_, e.shape, size_of(e.dtype));
      Buffer b = Buffer::allocate(bytes, cache, op_);
      read(b.data(), bytes);
      const std::span<std::byte> span(b.data(), bytes);
      if (e.dtype == DType::boolean) check_bools(e, span);
      swap_to_little_endian(span, size_of(e.dtype));
      buffers.push_back(std::move(b));
    }
    return buffers;
  }

 private:
  void read(void* into, std::size_t bytes) {
    if (bytes == 0) return;
    in_.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes));
    if (!in_) {
      fail<FileError>(op_, "cannot read '", path_, "': it ended early or failed (",
                      system_reason(errno), ")");
    }
  }

  void check_bools(const SafetensorsEntry& e, std::span<const std::byte> bytes) const {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const auto b = std::to_integer<unsigned>(bytes[i]);
      if (b > 1) {
        bad_file(op_, path_, "tensor '", e.name, "' of BOOL holds byte ", b, " at element ", i,
                 ", not 0 or 1");
      }
    }
  }

  std::string_view op_;
  const std::string& path_;
  std::ifstream in_;
  SafetensorsHeader header_;
};

}  // namespace detail

/// Saves `arrays` and `metadata` to `path` as a safetensors file, replacing any file there.
/// An export: waits for every array's values, with one host sync for all of them. The data is
/// laid out in the order given; `load_safetensors` gives the arrays back in that order. The
/// file appears whole or not at all (it is written beside `path` and renamed into place).
/// Throws InvalidArgument for an empty handle or a name that is empty, "__metadata__", given
/// twice or not UTF-8 (and for metadata that is not UTF-8), before anything is exported;
/// UseAfterFree for a freed array; the error of any step the arrays depend on that failed (as
/// to_host does), before the file is touched; OutOfHostMemory when the host has no room for the
/// values; FileError when the file cannot be written.
inline void save_safetensors(const std::string& path, const NamedArrays& arrays,
                             const std::map<std::string, std::string>& metadata = {}) {
  constexpr std::string_view op = "save_safetensors";
  detail::check_names(op, arrays, metadata);
  std::vector<detail::Step*> steps;
  std::vector<detail::SafetensorsEntry> entries;
  std::uint64_t offset = 0;
  for (const auto& [name, array] : arrays) {
    detail::Step& s = detail::step_to_save(op, name, array);
    const std::size_t bytes = detail::checked_bytes(op, s.shape(), size_of(s.dtype()));
    steps.push_back(&s);
    entries.push_back({name, s.dtype(), s.shape(), offset, offset + bytes});
    offset += bytes;
  }
  // One buffer for the whole data section: each array's export writes straight into its part.
  const detail::Buffer data =
      detail::Buffer::allocate(static_cast<std::size_t>(offset), nullptr, op);
  std::vector<std::span<std::byte>> targets;
  for (const detail::SafetensorsEntry& e : entries) {
    targets.emplace_back(data.data() + e.begin, static_cast<std::size_t>(e.end - e.begin));
  }
  if (!steps.empty()) detail::export_buffers(op, steps, targets);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    detail::swap_to_little_endian(targets[i], size_of(entries[i].dtype));
  }
  detail::write_safetensors_file(op, path, detail::safetensors_header(entries, metadata),
                                 std::span<const std::byte>(data.data(), data.bytes()));
}

/// Loads every tensor of the safetensors file at `path` onto `device`, in the order of their
/// data in the file (the order save_safetensors was given). An import: returns without waiting
/// for the device. The whole file is read and checked first, so nothing is imported from a bad
/// file. Throws FileError when the file cannot be opened or read; FormatError, naming the file
/// and the tensor, when it breaks the format: fewer than 8 bytes, a header length past the
/// file or past 100 MB, a header that is not a JSON object or does not begin with '{' (spaces
/// may pad only its end), an entry missing dtype, shape or data_offsets or with a value of the
/// wrong type, a dtype ferry does not have (U16, U32, U64, F8_*...) or that does not exist, a
/// negative size, more than kMaxRank dimensions, a size that overflows, data_offsets past the
/// data section or not matching the shape, tensors that overlap or bytes that belong to no
/// tensor, a BOOL byte other than 0 or 1; OutOfHostMemory when the host has no room for the
/// values.
inline NamedArrays load_safetensors(const std::string& path, const Device& device) {
  constexpr std::string_view op = "load_safetensors";
  detail::SafetensorsReader reader(op, path);
  std::vector<detail::Buffer> buffers =
      reader.read_data(&detail::DeviceAccess::state(device)->buffers());
  NamedArrays out;
  out.reserve(buffers.size());
  std::vector<detail::SafetensorsEntry>& tensors = reader.header().tensors;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    detail::SafetensorsEntry& e = tensors[i];
    AnyDeviceArray array = detail::with_element_type(e.dtype, [&](auto tag) -> AnyDeviceArray {
      using T = typename decltype(tag)::type;
      return detail::import_buffer<T>(device, e.shape, std::move(buffers[i]), Layout{}, op);
    });
    out.emplace_back(std::move(e.name), std::move(array));
  }
  return out;
}

/// The `__metadata__` of the safetensors file at `path` (empty if it has none). Reads and
/// checks the header as load_safetensors does, and throws as it does for a bad header; the
/// tensors' bytes are not read.
inline std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  detail::SafetensorsReader reader("load_safetensors_metadata", path);
  return std::move(reader.header().metadata);
}

}  // namespace ferry
