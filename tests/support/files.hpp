#pragma once
// Reading back what a test wrote (a trace, a checkpoint), and checking that a trace is strict
// JSON: one reader for every test, which fails loudly on a file it cannot read rather than
// handing back the empty text a missing trace would otherwise compare as.

#include <gtest/gtest.h>

#include <string>

#include "ferry/core/text_file.hpp"
#include "ferry/io/json.hpp"

namespace ferry_test {

/// The bytes of the file at `path`. Throws ferry::Error naming it when it cannot be read.
inline std::string read_text(const std::string& path) {
  return ferry::detail::read_file<ferry::Error>("read_text", path);
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
