#pragma once
// Writing JSON text: string literals and numbers. Everything ferry writes as JSON (traces,
// safetensors headers) goes through these two, so no writer can emit what a strict parser
// rejects: a raw quote or control character in a name, or a NaN or an infinity.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::detail {

/// The length of the well-formed UTF-8 sequence starting at `s[at]`, or 0 if there is none
/// (an overlong form, a surrogate, a code point past U+10FFFF, a truncated sequence).
inline std::size_t utf8_sequence(std::string_view s, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(at);
  if (b0 < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;  // the range the second byte must fall in
  unsigned char high = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    length = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    length = 3;
    if (b0 == 0xe0) low = 0xa0;   // no overlong three-byte forms
    if (b0 == 0xed) high = 0x9f;  // no UTF-16 surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    length = 4;
    if (b0 == 0xf0) low = 0x90;   // no overlong four-byte forms
    if (b0 == 0xf4) high = 0x8f;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - at < length) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return 0;
  }
  return length;
}

/// Appends `s` to `out` as a JSON string literal, quotes included. JSON text is UTF-8
/// (RFC 8259): a byte of `s` that starts no well-formed UTF-8 sequence (a Latin-1 name, a cut
/// sequence) is written as U+FFFD, the replacement character.
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t at = 0; at < s.size(); ++at) {
    const char c = s[at];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const std::size_t n = utf8_sequence(s, at);
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(s.substr(at, n));
        at += n - 1;
      }
      continue;
    }
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
