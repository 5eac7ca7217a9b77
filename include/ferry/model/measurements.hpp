#pragma once
// Measurements: a table of primitives timed on a real device, which calibrate() fits a
// DeviceSpec to and predict() compares a spec with. The CSV format: lines starting with '#' are
// comments; then the header `op,dtype,m,k,n,elements,bytes,device_us,host_us`; then one row a
// line. Ops: h2d, d2h, d2d (copies of `bytes`), matmul (m x k by k x n), add and exp (of
// `elements`), sum_last, softmax_last and transpose (of an m x n array, reducing over n),
// small_op (one elementwise op on one element; host_us is the host's time per eager op).

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"

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

  /// "matmul float32 1024x1024x1024", "h2d 4096 bytes", "add bfloat16 1048576": for tables.
  std::string label() const {
    std::string s = op;
    if (op == "h2d" || op == "d2h" || op == "d2d") return s + " " + std::to_string(bytes) + " B";
    s += " " + std::string(name_of(dtype)) + " ";
    if (op == "matmul")
      return s + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    if (m != 0) return s + std::to_string(m) + "x" + std::to_string(n);
    return s + std::to_string(elements);
  }
};

/// The rows of a measurement table.
class Measurements {
 public:
  Measurements() = default;
  explicit Measurements(std::vector<Measurement> rows) : rows_(std::move(rows)) {}

  /// Reads the CSV at `path`. Throws InvalidArgument when the file cannot be read, the header
  /// is not the one above, or a row is malformed (naming its line: a wrong number of fields, an
  /// unknown op or dtype, a size or time that is not a positive number, a size the op needs
  /// missing).
  static Measurements read_csv(const std::string& path) {
    constexpr std::string_view op = "Measurements::read_csv";
    std::ifstream in(path);
    if (!in) detail::fail<InvalidArgument>(op, "cannot read '", path, "'");
    std::vector<Measurement> rows;
    std::string text;
    std::size_t line = 0;
    bool header = false;
    while (std::getline(in, text)) {
      ++line;
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (text.empty() || text[0] == '#') continue;
      if (!header) {
        if (text != "op,dtype,m,k,n,elements,bytes,device_us,host_us") {
          detail::fail<InvalidArgument>(op, path, " line ", line,
                                        ": expected the header "
                                        "'op,dtype,m,k,n,elements,bytes,device_us,host_us', got '",
                                        text, "'");
        }
        header = true;
        continue;
      }
      rows.push_back(parse_row(path, line, text));
    }
    if (!header) detail::fail<InvalidArgument>(op, path, ": no header line");
    return Measurements(std::move(rows));
  }

  const std::vector<Measurement>& rows() const noexcept { return rows_; }
  std::size_t size() const noexcept { return rows_.size(); }

 private:
  static Measurement parse_row(const std::string& path, std::size_t line, const std::string& text) {
    constexpr std::string_view op = "Measurements::read_csv";
    std::vector<std::string> f;
    std::stringstream ss(text);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (!text.empty() && text.back() == ',') f.emplace_back();
    const auto bad = [&](const auto&... why) {
      detail::fail<InvalidArgument>(op, path, " line ", line, ": ", why..., " in '", text, "'");
    };
    if (f.size() != 9) bad("expected 9 fields, got ", f.size());
    Measurement r;
    r.line = line;
    r.op = f[0];
    static const char* const kOps[] = {"h2d", "d2h", "d2d", "matmul", "add", "exp",
                                       "sum_last", "softmax_last", "transpose", "small_op"};
    bool known = false;
    for (const char* o : kOps) known = known || r.op == o;
    if (!known) bad("unknown op '", r.op, "'");
    const bool copy = r.op == "h2d" || r.op == "d2h" || r.op == "d2d";
    if (!copy) {
      if (f[1] == "float32") {
        r.dtype = DType::float32;
      } else if (f[1] == "bfloat16") {
        r.dtype = DType::bfloat16;
      } else if (f[1] == "float64") {
        r.dtype = DType::float64;
      } else {
        bad("unknown dtype '", f[1], "'");
      }
    }
    const auto number = [&](const std::string& s, const char* field, bool required) -> double {
      if (s.empty()) {
        if (required) bad(field, " is missing");
        return 0;
      }
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
    const bool mkn = r.op == "matmul";
    const bool mn = r.op == "sum_last" || r.op == "softmax_last" || r.op == "transpose";
    const bool elems = r.op == "add" || r.op == "exp" || r.op == "small_op";
    r.m = static_cast<std::int64_t>(number(f[2], "m", mkn || mn));
    r.k = static_cast<std::int64_t>(number(f[3], "k", mkn));
    r.n = static_cast<std::int64_t>(number(f[4], "n", mkn || mn));
    r.elements = static_cast<std::int64_t>(number(f[5], "elements", elems));
    r.bytes = static_cast<std::int64_t>(number(f[6], "bytes", copy));
    r.device_us = number(f[7], "device_us", true);
    if (!f[8].empty()) r.host_us = number(f[8], "host_us", true);
    return r;
  }

  std::vector<Measurement> rows_;
};

}  // namespace ferry
