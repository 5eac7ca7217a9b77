#pragma once
// The safetensors header: its dtype names, the checks a header must pass before any tensor is
// read, and the header ferry writes. No files and no arrays here (see io/safetensors.hpp).
//
// The format: 8 bytes holding N (little-endian uint64), N bytes of UTF-8 JSON, then the data
// section. The JSON maps each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets into the data section) and may hold "__metadata__", an object of strings.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/core/config.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/io/json.hpp"

namespace ferry::detail {

/// The largest header the reference reader accepts: a header of gigabytes is a corrupt length,
/// not a real checkpoint, and must not make the reader allocate it.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

/// The key of the file's string-to-string metadata; no tensor may have this name.
inline constexpr std::string_view kSafetensorsMetadataKey = "__metadata__";

/// The safetensors name of `t`: "F32", "F16", "BF16", "U8", "BOOL"...
constexpr std::string_view safetensors_name(DType t) noexcept {
  switch (t) {
    case DType::float32: return "F32";
    case DType::float64: return "F64";
    case DType::int32: return "I32";
    case DType::int64: return "I64";
    case DType::bfloat16: return "BF16";
    case DType::boolean: return "BOOL";
    case DType::float16: return "F16";
    case DType::int8: return "I8";
    case DType::uint8: return "U8";
    case DType::int16: return "I16";
  }
  return "?";
}

/// The element type a safetensors dtype name stands for, if ferry has it.
inline std::optional<DType> dtype_from_safetensors(std::string_view name) noexcept {
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64, DType::bfloat16,
                  DType::boolean, DType::float16, DType::int8, DType::uint8, DType::int16}) {
    if (safetensors_name(t) == name) return t;
  }
  return std::nullopt;
}

/// Whether `name` is a dtype the safetensors format defines that ferry has no element type for:
/// such a file is valid, and the message should say that ferry, not the file, is the limit.
inline bool foreign_safetensors_dtype(std::string_view name) noexcept {
  static constexpr std::string_view kForeign[] = {"U16",     "U32",     "U64", "F4",
                                                  "F6_E2M3", "F6_E3M2", "C64"};
  return name.starts_with("F8_") ||
         std::find(std::begin(kForeign), std::end(kForeign), name) != std::end(kForeign);
}

/// One tensor of a checked header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
};

/// A checked header: the tensors in data-offset order, and the metadata.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

/// Throws FormatError from `op`, naming the file first.
template <class... Parts>
[[noreturn]] void bad_file(std::string_view op, const std::string& path, const Parts&... parts) {
  fail<FormatError>(op, "'", path, "': ", parts...);
}

/// "[2, 3]": dims as the file spelled them, for values no Shape can hold.
inline std::string dims_text(std::span<const std::int64_t> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

/// The checks of one header entry, in the order a reader meets its fields.
class SafetensorsEntryReader {
 public:
  SafetensorsEntryReader(std::string_view op, const std::string& path, const std::string& name,
                         std::uint64_t data_bytes)
      : op_(op), path_(path), name_(name), data_bytes_(data_bytes) {}

  /// The entry `v` describes. Throws FormatError for any field that is missing, of the wrong
  /// JSON type, or inconsistent with the others or with the data section.
  SafetensorsEntry read(const Json& v) const {
    if (v.kind != Json::Kind::object) bad(" is ", describe(v.kind), ", not an object");
    SafetensorsEntry e;
    e.name = name_;
    e.dtype = dtype(field(v, "dtype", Json::Kind::string));
    const std::vector<std::int64_t> dims = shape(field(v, "shape", Json::Kind::array));
    const std::uint64_t bytes = byte_size(dims, size_of(e.dtype));
    e.shape = Shape(std::span<const std::int64_t>(dims));
    offsets(field(v, "data_offsets", Json::Kind::array), e);
    if (e.end - e.begin != bytes) {
      bad(": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
          " bytes, but shape ", dims_text(dims), " of ", safetensors_name(e.dtype), " needs ",
          bytes);
    }
    return e;
  }

 private:
  template <class... Parts>
  [[noreturn]] void bad(const Parts&... parts) const {
    bad_file(op_, path_, "tensor '", name_, "'", parts...);
  }

  const Json& field(const Json& v, std::string_view key, Json::Kind kind) const {
    const Json* f = v.find(key);
    if (f == nullptr) bad(" has no \"", key, "\"");
    if (f->kind != kind) bad(": \"", key, "\" is ", describe(f->kind), ", not ", describe(kind));
    return *f;
  }

  DType dtype(const Json& f) const {
    if (const std::optional<DType> t = dtype_from_safetensors(f.text)) return *t;
    if (foreign_safetensors_dtype(f.text)) {
      bad(" has dtype ", f.text, ", which safetensors allows but ferry has no element type for "
          "(ferry reads F32, F64, F16, BF16, I8, U8, I16, I32, I64 and BOOL)");
    }
    bad(" has an unknown dtype \"", f.text, "\"");
  }

  std::vector<std::int64_t> shape(const Json& f) const {
    if (f.items.size() > kMaxRank) {
      bad(": rank ", f.items.size(), " exceeds ferry's maximum of ", kMaxRank);
    }
    std::vector<std::int64_t> dims;
    for (std::size_t i = 0; i < f.items.size(); ++i) {
      const Json& d = f.items[i];
      if (d.kind == Json::Kind::number) bad(": shape[", i, "] is ", d.text, ", not an integer");
      if (d.kind != Json::Kind::integer)
        bad(": shape[", i, "] is ", describe(d.kind), ", not an integer");
      if (d.integer < 0) bad(": shape[", i, "] is negative (", d.integer, ")");
      dims.push_back(d.integer);
    }
    return dims;
  }

  // Shape's own rule, that the product of the non-zero sizes fits in int64, and then that the
  // bytes do: an overflowing product would otherwise wrap around into a small, plausible size.
  std::uint64_t byte_size(std::span<const std::int64_t> dims, std::size_t element) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    std::int64_t nonzero = 1;
    bool zero = false;
    for (const std::int64_t d : dims) {
      if (d == 0) {
        zero = true;
      } else if (nonzero > kMax / d) {
        bad(": shape ", dims_text(dims), " has more elements than fit in 64 bits");
      }
      if (d != 0) nonzero *= d;
    }
    if (zero) return 0;
    if (nonzero > kMax / static_cast<std::int64_t>(element)) {
      bad(": shape ", dims_text(dims), " takes more bytes than fit in 64 bits");
    }
    return static_cast<std::uint64_t>(nonzero) * element;
  }

  void offsets(const Json& f, SafetensorsEntry& e) const {
    if (f.items.size() != 2) {
      bad(": data_offsets has ", f.items.size(), " values, not 2 ([begin, end])");
    }
    for (const Json& o : f.items) {
      if (o.kind != Json::Kind::integer || o.integer < 0) {
        bad(": data_offsets must be two non-negative integers, got ",
            o.kind == Json::Kind::integer  ? std::to_string(o.integer)
            : o.kind == Json::Kind::number ? o.text
                                           : std::string(describe(o.kind)));
      }
    }
    e.begin = static_cast<std::uint64_t>(f.items[0].integer);
    e.end = static_cast<std::uint64_t>(f.items[1].integer);
    if (e.begin > e.end) bad(": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > data_bytes_) {
      bad(": data_offsets [", e.begin, ", ", e.end, "] reach past the data section of ",
          data_bytes_, " bytes");
    }
  }

  std::string_view op_;
  const std::string& path_;
  const std::string& name_;
  std::uint64_t data_bytes_;
};

/// The metadata object: strings to strings.
inline std::map<std::string, std::string> read_safetensors_metadata(std::string_view op,
                                                                    const std::string& path,
                                                                    const Json& v) {
  if (v.kind != Json::Kind::object) {
    bad_file(op, path, "\"__metadata__\" is ", describe(v.kind), ", not an object of strings");
  }
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < v.keys.size(); ++i) {
    if (v.items[i].kind != Json::Kind::string) {
      bad_file(op, path, "\"__metadata__\" entry '", v.keys[i], "' is ",
               describe(v.items[i].kind), ", not a string");
    }
    out.emplace(v.keys[i], v.items[i].text);
  }
  return out;
}

/// The tensors must tile the data section exactly, as the reference reader demands: an overlap
/// means two tensors share bytes, a gap means bytes that belong to nothing (a sign of a corrupt
/// or hand-edited file). `tensors` comes sorted by offsets.
inline void check_tiling(std::string_view op, const std::string& path,
                         std::span<const SafetensorsEntry> tensors, std::uint64_t data_bytes) {
  std::uint64_t covered = 0;
  const SafetensorsEntry* last = nullptr;
  for (const SafetensorsEntry& e : tensors) {
    if (e.begin < covered) {
      bad_file(op, path, "tensor '", e.name, "' (bytes [", e.begin, ", ", e.end,
               ")) overlaps tensor '", last->name, "' (bytes [", last->begin, ", ", last->end,
               "))");
    }
    if (e.begin > covered) {
      bad_file(op, path, "bytes [", covered, ", ", e.begin,
               ") of the data section, before tensor '", e.name, "', belong to no tensor");
    }
    covered = e.end;
    last = &e;
  }
  if (covered != data_bytes) {
    bad_file(op, path, "bytes [", covered, ", ", data_bytes, ") at the end of the data section "
             "belong to no tensor");
  }
}

/// Parses and checks `header` against a data section of `data_bytes` bytes: every tensor
/// entry, the metadata, and that the tensors tile the data section. Throws FormatError naming
/// `op`, the file and, where there is one, the tensor.
FERRY_DECL SafetensorsHeader parse_safetensors_header(std::string_view op, const std::string& path,
                                                      std::string_view header,
                                                      std::uint64_t data_bytes);
#if FERRY_DEFINES_DECLS
FERRY_DECL SafetensorsHeader parse_safetensors_header(std::string_view op, const std::string& path,
                                                      std::string_view header,
                                                      std::uint64_t data_bytes) {
  Json root;
  try {
    root = parse_json(header);
  } catch (const JsonError& e) {
    bad_file(op, path, "the header is not valid JSON: ", e.what(), " at byte ", e.offset(),
             " of the header");
  }
  if (root.kind != Json::Kind::object) {
    bad_file(op, path, "the header is ", describe(root.kind), ", not a JSON object");
  }
  // The format pads a header at its end only; the reference reader refuses any other start.
  if (header.front() != '{') {
    bad_file(op, path, "the header begins with whitespace: the format has it begin with '{' "
             "(spaces may pad only its end)");
  }
  SafetensorsHeader out;
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    if (root.keys[i] == kSafetensorsMetadataKey) {
      out.metadata = read_safetensors_metadata(op, path, root.items[i]);
    } else {
      out.tensors.push_back(
          SafetensorsEntryReader(op, path, root.keys[i], data_bytes).read(root.items[i]));
    }
  }
  // Stable: empty tensors at one offset keep the header's order.
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  check_tiling(op, path, out.tensors, data_bytes);
  return out;
}
#endif

/// The header ferry writes for `tensors` (offsets already laid out) and `metadata`: compact
/// JSON, metadata first as the reference writer puts it, padded with spaces to a multiple of 8
/// bytes so that the data section starts 8-byte aligned.
inline std::string safetensors_header(std::span<const SafetensorsEntry> tensors,
                                      const std::map<std::string, std::string>& metadata) {
  std::string out = "{";
  if (!metadata.empty()) {
    append_json_string(out, kSafetensorsMetadataKey);
    out += ":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += '}';
  }
  for (const SafetensorsEntry& e : tensors) {
    if (out.size() > 1) out += ',';
    append_json_string(out, e.name);
    out += ":{\"dtype\":\"";
    out += safetensors_name(e.dtype);
    out += "\",\"shape\":[";
    const std::span<const std::int64_t> dims = e.shape.dims();
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(dims[i]);
    }
    out += "],\"data_offsets\":[";
    out += std::to_string(e.begin);
    out += ',';
    out += std::to_string(e.end);
    out += "]}";
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');
  return out;
}

}  // namespace ferry::detail
