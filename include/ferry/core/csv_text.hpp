#pragma once
// The CSV the measurement tables are written in (Measurements, CollectiveMeasurements): one
// header line, then rows of comma-separated fields, with '#' comments and blank lines anywhere
// and Windows line ends allowed. No quoting: no field of theirs holds a comma.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/core/error.hpp"

namespace ferry::detail {

/// Calls `row(line, text)` for each row of `all`: each line after the header that is neither
/// blank nor a comment, `line` its 1-based number, `text` without its line end. Throws
/// InvalidArgument naming `op` and `source` when the first such line is not `header`, or when
/// there is none.
template <class Row>
void for_each_csv_row(std::string_view all, std::string_view header, const std::string& source,
                      std::string_view op, Row&& row) {
  std::size_t line = 0;
  bool seen_header = false;
  while (!all.empty()) {
    const std::size_t end = all.find('\n');
    std::string text(all.substr(0, end));
    all.remove_prefix(end == std::string_view::npos ? all.size() : end + 1);
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty() || text[0] == '#') continue;
    if (seen_header) {
      row(line, text);
      continue;
    }
    if (text != header) {
      fail<InvalidArgument>(op, source, " line ", line, ": expected the header '", header,
                            "', got '", text, "'");
    }
    seen_header = true;
  }
  if (!seen_header) fail<InvalidArgument>(op, source, ": no header line");
}

/// The comma-separated fields of a row: n commas make n + 1 fields, empty ones included.
inline std::vector<std::string> csv_fields(std::string_view text) {
  std::vector<std::string> fields;
  for (std::size_t comma = text.find(','); comma != std::string_view::npos;
       comma = text.find(',')) {
    fields.emplace_back(text.substr(0, comma));
    text.remove_prefix(comma + 1);
  }
  fields.emplace_back(text);
  return fields;
}

}  // namespace ferry::detail
