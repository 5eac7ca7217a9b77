#pragma once
// Reading back what a test wrote (a trace, a checkpoint), and checking that a trace is strict
// JSON: one reader for every test, which fails loudly on a file it cannot read rather than
// handing back the empty text a missing trace would otherwise compare as.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "ferry/io/json.hpp"

namespace ferry_test {

/// The bytes of the file at `path`. Throws std::runtime_error naming it when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return text;
}

/// Fails, naming `what`, the reader's complaint and where it arose, unless `text` is one strict
/// JSON value (RFC 8259, surrounding white space aside).
inline void expect_strict_json(const std::string& what, const std::string& text) {
  try {
    static_cast<void>(ferry::detail::parse_json(text));
  } catch (const ferry::detail::JsonError& e) {
    ADD_FAILURE() << what << " is not strict JSON: " << e.what() << " at byte " << e.offset()
                  << ": " << text.substr(e.offset() > 40 ? e.offset() - 40 : 0, 80);
  }
}

}  // namespace ferry_test
