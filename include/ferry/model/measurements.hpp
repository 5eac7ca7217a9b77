#pragma once
// Measurements: a table of primitives timed on a real device, which calibrate() fits a
// DeviceSpec to and predict() compares a spec with. The CSV format: lines starting with '#' are
// comments; then the header `op,dtype,m,k,n,elements,bytes,device_us,host_us`; then one row a
// line. Ops: h2d, d2h, d2d (copies of `bytes`), matmul (m x k by k x n), add and exp (of
// `elements`), sum_last, softmax_last and transpose (of an m x n array, reducing over n),
// small_op (one elementwise op on one element; host_us is the host's time per eager op).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/core/csv_text.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/text_file.hpp"

namespace ferry {

/// One measured primitive: what ran, and how long it took on the device (and on the host).
struct Measurement {
  std::string op;
  DType dtype = DType::float32;
  std::int64_t m = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  double device_us = 0;
  std::optional<double> host_us;
  std::size_t line = 0;  // in the file it was read from

  /// "matmul float32 1024x1024x1024", "h2d 4096 B", "add bfloat16 1048576": for tables.
  std::string label() const;
};

namespace detail {

/// The sizes a measured op reads, by field: m, k, n, elements, bytes.
struct MeasuredSizes {
  bool m = false, k = false, n = false, elements = false, bytes = false;
};

/// What a measured op's time depends on in a DeviceSpec: a host copy its link, a kernel (a d2d
/// copy is one) the kernel latency, DRAM and its class's rates (calibrate fits those).
enum class MeasuredPart : std::uint8_t { h2d, d2h, matmul, elementwise, reduction, layout };

/// A measured op: its name in a table, its sizes and what it measures.
struct MeasuredOp {
  std::string_view name;
  MeasuredSizes sizes;
  MeasuredPart part;
};

/// Every op a table may hold: the one list that read_csv, the checks, labels and calibrate
/// read (each op's cost on the model is calibration.hpp's step_of_row).
inline constexpr MeasuredOp kMeasuredOps[] = {
    {"h2d", {.bytes = true}, MeasuredPart::h2d},
    {"d2h", {.bytes = true}, MeasuredPart::d2h},
    {"d2d", {.bytes = true}, MeasuredPart::elementwise},
    {"matmul", {.m = true, .k = true, .n = true}, MeasuredPart::matmul},
    {"add", {.elements = true}, MeasuredPart::elementwise},
    {"exp", {.elements = true}, MeasuredPart::elementwise},
    {"small_op", {.elements = true}, MeasuredPart::elementwise},
    {"sum_last", {.m = true, .n = true}, MeasuredPart::reduction},
    {"softmax_last", {.m = true, .n = true}, MeasuredPart::reduction},
    {"transpose", {.m = true, .n = true}, MeasuredPart::layout},
};

/// The op named `op`, or null for one no table holds.
constexpr const MeasuredOp* measured_op(std::string_view op) noexcept {
  for (const MeasuredOp& o : kMeasuredOps) {
    if (o.name == op) return &o;
  }
  return nullptr;
}

/// Which sizes `op` has (copies: bytes; matmul: m, k, n; the row ops: m, n; the elementwise
/// ops: elements), or nothing for an op no table holds.
inline std::optional<MeasuredSizes> measured_sizes(std::string_view op) {
  if (const MeasuredOp* o = measured_op(op)) return o->sizes;
  return std::nullopt;
}

}  // namespace detail

inline std::string Measurement::label() const {
  std::string s = op;
  const detail::MeasuredOp* o = detail::measured_op(op);
  if (o != nullptr && o->sizes.bytes) return s + " " + std::to_string(bytes) + " B";
  s += " " + std::string(name_of(dtype)) + " ";
  if (o != nullptr && o->sizes.k)
    return s + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  if (m != 0) return s + std::to_string(m) + "x" + std::to_string(n);
  return s + std::to_string(elements);
}

namespace detail {

/// The largest size a row may have: 2^53, the sizes a double (the model's costs) holds exactly.
inline constexpr std::int64_t kLargestMeasuredSize = std::int64_t{1} << 53;

/// Throws InvalidArgument, calling `bad(why...)`, unless `r` is a row the model can run: a
/// known op, a dtype it computes in (a copy's is not read), each size the op has in
/// [1, 2^53] and the others 0, a positive device time and host time.
template <class Bad>
void check_measurement(const Measurement& r, Bad&& bad) {
  const std::optional<MeasuredSizes> has = measured_sizes(r.op);
  if (!has) bad("unknown op '", r.op, "'");
  const bool copy = has->bytes;
  if (!copy && r.dtype != DType::float32 && r.dtype != DType::bfloat16 &&
      r.dtype != DType::float64) {
    bad("dtype ", name_of(r.dtype), " is not float32, bfloat16 or float64");
  }
  const auto size = [&](std::int64_t v, bool needed, const char* field) {
    if (needed && (v < 1 || v > kLargestMeasuredSize)) {
      bad(field, " must be in [1, 2^53], got ", v);
    }
    if (!needed && v != 0) bad(field, " is not a size of ", r.op, ", got ", v);
  };
  size(r.m, has->m, "m");
  size(r.k, has->k, "k");
  size(r.n, has->n, "n");
  size(r.elements, has->elements, "elements");
  size(r.bytes, has->bytes, "bytes");
  if (!(r.device_us > 0) || !(r.device_us < 1e300)) {
    bad("device_us must be a positive number, got ", r.device_us);
  }
  if (r.host_us && (!(*r.host_us > 0) || !(*r.host_us < 1e300))) {
    bad("host_us must be a positive number, got ", *r.host_us);
  }
}

}  // namespace detail

/// The rows of a measurement table.
class Measurements {
 public:
  Measurements() = default;
  /// Rows built in code. Throws InvalidArgument naming the row (its index and label) for what
  /// read_csv refuses in a file: an unknown op, a dtype other than float32, bfloat16 and
  /// float64 for a kernel, a size the op has outside [1, 2^53] or one it does not have that is
  /// not 0, a device or host time that is not a positive number.
  explicit Measurements(std::vector<Measurement> rows) : rows_(std::move(rows)) {
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      detail::check_measurement(rows_[i], [&](const auto&... why) {
        detail::fail<InvalidArgument>("Measurements", "row ", i, " (", rows_[i].label(), "): ",
                                      why...);
      });
    }
  }

  /// Reads the CSV at `path`. Throws InvalidArgument when the file cannot be read, the header
  /// is not the one above, or a row is malformed (naming its line: a wrong number of fields, an
  /// unknown op or dtype, a size or time that is not a positive number, a size that is not a
  /// whole number in [1, 2^53], a size the op needs missing or one it does not have given).
  static Measurements read_csv(const std::string& path) {
    return parse(detail::read_file<InvalidArgument>(kReadOp, path), path, kReadOp);
  }

  /// Parses CSV text as read_csv does a file; messages name `source` where read_csv names the
  /// path. Throws InvalidArgument as read_csv does.
  static Measurements parse_csv(std::string_view text, const std::string& source = "<text>") {
    return parse(text, source, "Measurements::parse_csv");
  }

  const std::vector<Measurement>& rows() const noexcept { return rows_; }
  std::size_t size() const noexcept { return rows_.size(); }

 private:
  static constexpr std::string_view kReadOp = "Measurements::read_csv";
  static constexpr std::string_view kHeader = "op,dtype,m,k,n,elements,bytes,device_us,host_us";

  static Measurements parse(std::string_view all, const std::string& source,
                            std::string_view op) {
    Measurements out;  // each row checked as it is read
    detail::for_each_csv_row(all, kHeader, source, op,
                             [&](std::size_t line, const std::string& text) {
                               out.rows_.push_back(parse_row(op, source, line, text));
                             });
    return out;
  }

  static Measurement parse_row(std::string_view op, const std::string& source, std::size_t line,
                               const std::string& text) {
    const std::vector<std::string> f = detail::csv_fields(text);
    const auto bad = [&](const auto&... why) {
      detail::fail<InvalidArgument>(op, source, " line ", line, ": ", why..., " in '", text, "'");
    };
    if (f.size() != 9) bad("expected 9 fields, got ", f.size());
    Measurement r;
    r.line = line;
    r.op = f[0];
    const std::optional<detail::MeasuredSizes> has = detail::measured_sizes(r.op);
    if (!has) bad("unknown op '", r.op, "'");
    // A copy's dtype is not read, but one given must still be a dtype (check_measurement then
    // refuses a kernel's that it does not compute in).
    if (const std::optional<DType> t = dtype_named(f[1])) {
      r.dtype = *t;
    } else if (!(has->bytes && f[1].empty())) {
      bad("unknown dtype '", f[1], "'");
    }
    const auto number = [&](const std::string& s, const char* field) -> double {
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != s.size() || !(v > 0) || !(v < 1e300))
        bad(field, " is not a positive number: '", s, "'");
      return v;
    };
    // A size: a whole number in [1, 2^53] where the op has it (1e19 once became INT64_MIN, 0.5
    // a 0), empty where it does not.
    const auto size = [&](const std::string& s, bool needed, const char* field) -> std::int64_t {
      if (s.empty()) {
        if (needed) bad(field, " is missing");
        return 0;
      }
      if (!needed) bad(field, " is not a size of ", r.op);
      const double v = number(s, field);
      if (v != std::floor(v) || v > static_cast<double>(detail::kLargestMeasuredSize)) {
        bad(field, " is not a whole number in [1, 2^53]: '", s, "'");
      }
      return static_cast<std::int64_t>(v);
    };
    r.m = size(f[2], has->m, "m");
    r.k = size(f[3], has->k, "k");
    r.n = size(f[4], has->n, "n");
    r.elements = size(f[5], has->elements, "elements");
    r.bytes = size(f[6], has->bytes, "bytes");
    if (f[7].empty()) bad("device_us is missing");
    r.device_us = number(f[7], "device_us");
    if (!f[8].empty()) r.host_us = number(f[8], "host_us");
    detail::check_measurement(r, bad);  // what is left: the same rules as rows built in code
    return r;
  }

  std::vector<Measurement> rows_;
};

}  // namespace ferry
