#pragma once
// A small JSON reader and string writer: enough for the headers of file formats (safetensors),
// so ferry needs no JSON library. The reader accepts exactly RFC 8259 JSON, because a header a
// strict reader would reject must not load here and then fail elsewhere: strings must be valid
// UTF-8 and their \u escapes may not leave a surrogate alone. It keeps object members in file
// order and refuses a key given twice (which reader's value would be meant?).

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <vector>

#include "ferry/core/json_text.hpp"

namespace ferry::detail {

/// A parsed JSON value. Numbers that are integers within int64 are `integer`; any other number
/// (a fraction, an exponent, a huge integer) is `number`, with its spelling in `text`: format
/// headers want integers, and say so when they get something else.
struct Json {
  enum class Kind : std::uint8_t { null, boolean, integer, number, string, array, object };

  Kind kind = Kind::null;
  bool boolean = false;
  std::int64_t integer = 0;
  std::string text;  // a string's value, a number's spelling
  // An array's elements, or an object's values in file order with their keys beside them
  // (keys[i] names items[i]): a vector of pairs holding Json would need Json complete here.
  std::vector<Json> items;
  std::vector<std::string> keys;

  /// The value of the member `key` of an object, or nullptr.
  const Json* find(std::string_view key) const noexcept {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &items[i];
    }
    return nullptr;
  }
};

/// "an integer", "a string"...: what a message says a value was.
constexpr std::string_view describe(Json::Kind k) noexcept {
  switch (k) {
    case Json::Kind::null: return "null";
    case Json::Kind::boolean: return "a boolean";
    case Json::Kind::integer: return "an integer";
    case Json::Kind::number: return "a number that is no int64";
    case Json::Kind::string: return "a string";
    case Json::Kind::array: return "an array";
    case Json::Kind::object: return "an object";
  }
  return "?";
}

/// Text that is not JSON: what is wrong, and the byte offset where the reader noticed.
class JsonError : public std::runtime_error {
 public:
  JsonError(const std::string& what, std::size_t offset)
      : std::runtime_error(what), offset_(offset) {}
  std::size_t offset() const noexcept { return offset_; }

 private:
  std::size_t offset_;
};

/// Whether `s` is well-formed UTF-8.
inline bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t at = 0; at < s.size();) {
    const std::size_t n = utf8_sequence(s, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

/// A recursive-descent reader. Recursion is bounded by kMaxDepth, so a hostile header of a
/// million '[' fails with a JsonError instead of overflowing the stack.
class JsonReader {
 public:
  static constexpr int kMaxDepth = 64;

  explicit JsonReader(std::string_view text) noexcept : text_(text) {}

  /// The one value `text` holds, with only whitespace around it. Throws JsonError.
  Json parse() {
    Json v = value(0);
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { throw JsonError(what, pos_); }

  bool at_end() const noexcept { return pos_ >= text_.size(); }
  // '\0' at the end: no caller looks for a NUL, so the end never matches what it wants.
  char peek() const noexcept { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() noexcept {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }

  void expect(char c, const char* context) {
    skip_space();
    if (peek() != c) error(std::string("expected '") + c + "' " + context);
    ++pos_;
  }

  Json value(int depth) {
    if (depth >= kMaxDepth) error("values nested deeper than " + std::to_string(kMaxDepth));
    skip_space();
    if (at_end()) error("expected a value, found the end of the text");
    Json v;
    switch (peek()) {
      case '{': object(v, depth); break;
      case '[': array(v, depth); break;
      case '"':
        v.kind = Json::Kind::string;
        v.text = string();
        break;
      case 't': literal("true", v, Json::Kind::boolean, true); break;
      case 'f': literal("false", v, Json::Kind::boolean, false); break;
      case 'n': literal("null", v, Json::Kind::null, false); break;
      default: number(v);
    }
    return v;
  }

  void literal(std::string_view word, Json& v, Json::Kind kind, bool b) {
    if (text_.substr(pos_, word.size()) != word) error("unexpected character");
    pos_ += word.size();
    v.kind = kind;
    v.boolean = b;
  }

  void object(Json& v, int depth) {
    v.kind = Json::Kind::object;
    ++pos_;  // '{'
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    // The keys seen so far, once there are more than a scan is cheap for: a header of n
    // tensors is one object of n keys, which a scan per key made quadratic.
    constexpr std::size_t kScanned = 16;
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_space();
      if (peek() != '"') error("expected a string as an object key");
      const std::size_t key_at = pos_;
      std::string key = string();
      if (v.keys.size() == kScanned) seen.insert(v.keys.begin(), v.keys.end());
      if (v.keys.size() < kScanned ? v.find(key) != nullptr : seen.count(key) != 0) {
        throw JsonError("the key \"" + key + "\" appears twice in one object", key_at);
      }
      expect(':', "after an object key");
      v.items.push_back(value(depth + 1));
      if (v.keys.size() >= kScanned) seen.insert(key);
      v.keys.push_back(std::move(key));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "or ',' in an object");
      return;
    }
  }

  void array(Json& v, int depth) {
    v.kind = Json::Kind::array;
    ++pos_;  // '['
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "or ',' in an array");
      return;
    }
  }

  unsigned hex4() {
    if (text_.size() - pos_ < 4) error("a \\u escape needs four hex digits");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9') {
        code |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        code |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        code |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        --pos_;
        error("a \\u escape needs four hex digits");
      }
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    const auto put = [&](unsigned bits) { out += static_cast<char>(bits); };
    if (code < 0x80) {
      put(code);
    } else if (code < 0x800) {
      put(0xc0 | (code >> 6));
      put(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      put(0xe0 | (code >> 12));
      put(0x80 | ((code >> 6) & 0x3f));
      put(0x80 | (code & 0x3f));
    } else {
      put(0xf0 | (code >> 18));
      put(0x80 | ((code >> 12) & 0x3f));
      put(0x80 | ((code >> 6) & 0x3f));
      put(0x80 | (code & 0x3f));
    }
  }

  // A \u escape, the backslash and 'u' already read; a high surrogate must pair with a low one.
  void unicode_escape(std::string& out) {
    unsigned code = hex4();
    if (code >= 0xdc00 && code <= 0xdfff) error("a \\u escape holds a lone low surrogate");
    if (code >= 0xd800 && code <= 0xdbff) {
      if (text_.substr(pos_, 2) != "\\u") error("a high surrogate is not followed by a low one");
      pos_ += 2;
      const unsigned low = hex4();
      if (low < 0xdc00 || low > 0xdfff) error("a high surrogate is not followed by a low one");
      code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
    }
    append_utf8(out, code);
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_end()) error("a string is not closed");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error("a control character inside a string");
      if (c == '\\') {
        ++pos_;
        if (at_end()) error("a string is not closed");
        const char e = text_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': unicode_escape(out); break;
          default: --pos_; error(std::string("unknown escape '\\") + e + "'");
        }
        continue;
      }
      const std::size_t n = utf8_sequence(text_, pos_);
      if (n == 0) error("a string is not valid UTF-8");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  // RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void number(Json& v) {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      pos_ = start;
      error("unexpected character");
    }
    bool integral = true;
    if (peek() == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) error("a number needs digits after its '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      integral = false;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) error("a number needs digits in its exponent");
    }
    v.text = std::string(text_.substr(start, pos_ - start));
    v.kind = Json::Kind::number;
    if (integral) {
      const char* first = v.text.data();
      const char* last = first + v.text.size();
      const std::from_chars_result r = std::from_chars(first, last, v.integer);
      if (r.ec == std::errc() && r.ptr == last) v.kind = Json::Kind::integer;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

/// The JSON value `text` holds. Throws JsonError (with the byte offset) for anything that is
/// not exactly one JSON value with optional whitespace around it.
inline Json parse_json(std::string_view text) { return JsonReader(text).parse(); }

}  // namespace ferry::detail
