#pragma once
// Writing a whole file: what a trace writer needs. C's stdio, not <fstream> or <filesystem>,
// which would add a few tenths of a second to every unit that includes ferry.

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

}  // namespace ferry::detail
