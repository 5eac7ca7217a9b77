#pragma once
// Writing JSON text: string literals and numbers. Everything ferry writes as JSON (traces,
// safetensors headers) goes through these two, so no writer can emit what a strict parser
// rejects: a raw quote or control character in a name, or a NaN or an infinity.

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

namespace ferry::detail {

/// Appends `s` (UTF-8) to `out` as a JSON string literal, quotes included.
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[static_cast<unsigned char>(c) >> 4];
          out += kHex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// Appends `v` to `out` as a JSON number in its shortest exact spelling; `null` when `v` is a
/// NaN or an infinity, which JSON cannot spell (and `-nan` would make the whole file unreadable).
inline void append_json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, v);
  out.append(text, r.ptr);
}

}  // namespace ferry::detail
