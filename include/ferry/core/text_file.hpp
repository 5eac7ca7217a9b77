#pragma once
// Reading and writing a whole file: what a trace writer and the CSV readers need. C's stdio,
// not <fstream> or <filesystem>, which would add a few tenths of a second to every unit that
// includes ferry.

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "ferry/core/error.hpp"

namespace ferry::detail {

/// Writes `text` to the file at `path`, replacing it. Throws ferry::Error naming `op` and the
/// path when the file cannot be opened or written.
inline void write_file(std::string_view op, const std::string& path, std::string_view text) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) fail<Error>(op, "cannot write ", path);
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  if (std::fclose(out) != 0 || !written) fail<Error>(op, "cannot write ", path);
}

/// The contents of the file at `path`. Throws E naming `op` and the path when it cannot be
/// opened or read (a directory opens, and fails on the first read).
template <class E>
std::string read_file(std::string_view op, const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) fail<E>(op, "cannot read '", path, "'");
  std::string text;
  char chunk[4096];
  std::size_t got = 0;
  try {
    while ((got = std::fread(chunk, 1, sizeof chunk, in)) > 0) text.append(chunk, got);
  } catch (...) {
    std::fclose(in);
    throw;
  }
  const bool failed = std::ferror(in) != 0;
  std::fclose(in);
  if (failed) fail<E>(op, "cannot read '", path, "'");
  return text;
}

}  // namespace ferry::detail
