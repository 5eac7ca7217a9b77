#pragma once
// Printing: Shape, HostArray and DeviceArray as text. An array prints as NumPy's repr does
// (NumPy 2.2's, which ends a summarized array with its shape), so it reads the same as the
// arrays it is compared with and pastes into Python:
//
//   array([[1. , 2.5],
//          [3. , 4. ]], dtype=float32)
//
// The text is built as a std::string with std::to_chars: no <sstream> or <iomanip> in a
// header every user parses, and no locale in the digits.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ios>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/number_text.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/host_array.hpp"

namespace ferry {

/// How arrays print: NumPy's print options of the same names, with its defaults. Passed to
/// to_string, or kept in a stream by the print_options manipulator.
struct PrintOptions {
  /// The most fractional digits of a floating element (of its mantissa in scientific form),
  /// fewer where fewer read back as the same value (NumPy's floatmode "maxprec"): at 3, 1/3
  /// prints as 0.333 and 0.5 as 0.5. From 0 to 100.
  int precision = 8;
  /// An array of more elements prints summarized: each axis longer than 2 * edgeitems shows
  /// its first and last edgeitems entries with "..." between, and the shape is given.
  std::int64_t threshold = 1000;
  /// The entries a summarized axis shows at each end.
  std::int64_t edgeitems = 3;
  /// The characters a line may take before the elements wrap onto the next one.
  std::int64_t linewidth = 75;
};

namespace detail {

inline constexpr int kMaxPrintPrecision = 100;

/// Throws InvalidArgument naming `op` for a negative option or a precision above 100.
inline void check_print_options(std::string_view op, const PrintOptions& o) {
  if (o.precision < 0 || o.precision > kMaxPrintPrecision) {
    fail<InvalidArgument>(op, "precision ", o.precision, " is outside [0, ", kMaxPrintPrecision,
                          "]");
  }
  const std::array<std::pair<const char*, std::int64_t>, 3> counts{
      {{"threshold", o.threshold}, {"edgeitems", o.edgeitems}, {"linewidth", o.linewidth}}};
  for (const auto& [name, value] : counts) {
    if (value < 0) fail<InvalidArgument>(op, name, " ", value, " is negative");
  }
}

/// The positions of one axis an array prints: all of them, or when summarized the first and
/// last `edge` (all of them for an edge of 0, as NumPy's _leading_trailing takes a[-0:]).
inline std::vector<std::int64_t> shown_positions(std::int64_t size, bool summarize,
                                                 std::int64_t edge) {
  std::vector<std::int64_t> at;
  const bool cut = summarize && edge > 0 && edge <= (size - 1) / 2;
  for (std::int64_t i = 0; i < size; ++i) {
    if (!cut || i < edge || i >= size - edge) at.push_back(i);
  }
  return at;
}

/// The elements an array prints, which alone decide the widths (NumPy formats the summary).
template <class T>
std::vector<T> shown_elements(const Shape& shape, std::span<const T> values, bool summarize,
                              std::int64_t edge) {
  const std::size_t rank = shape.rank();
  const Strides strides = row_major_strides(shape);
  std::array<std::vector<std::int64_t>, kMaxRank> at;
  for (std::size_t d = 0; d < rank; ++d) at[d] = shown_positions(shape.dims()[d], summarize, edge);
  std::vector<T> shown;
  std::array<std::size_t, kMaxRank> index{};
  while (true) {  // an odometer over the shown positions of every axis
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < rank; ++d) offset += at[d][index[d]] * strides[d];
    shown.push_back(values[static_cast<std::size_t>(offset)]);
    std::size_t d = rank;
    while (d > 0 && ++index[d - 1] == at[d - 1].size()) index[--d] = 0;
    if (d == 0) return shown;
  }
}

/// NumPy's _extendLine: `word` goes on `line`, or on a new line when it would pass `width`
/// (unless the line holds nothing yet but its indent, where wrapping would not help).
inline void extend_line(std::string& text, std::string& line, std::string_view word,
                        std::int64_t width, std::string_view indent) {
  if (line.size() > indent.size() && static_cast<std::int64_t>(line.size() + word.size()) > width) {
    line.erase(line.find_last_not_of(' ') + 1);
    text += line;
    text += '\n';
    line = indent;
  }
  line += word;
}

/// NumPy's _formatArray: the nested brackets, one row of the last axis per line (wrapped at
/// the line width), blank lines between blocks of higher axes, "..." where summarized.
template <class T, class Format>
class ArrayText {
 public:
  ArrayText(const Shape& shape, std::span<const T> values, const Format& format, bool summarize,
            std::int64_t edge)
      : shape_(shape), strides_(row_major_strides(shape)), values_(values), format_(format),
        summarize_(summarize), edge_(edge) {}

  /// The text of the sub-array at `axis` from element `offset`; rows after the first start
  /// with `indent`, and no line passes `width`.
  std::string nested(std::size_t axis, std::int64_t offset, const std::string& indent,
                     std::int64_t width) const {
    if (axis == shape_.rank()) return format_(values_[static_cast<std::size_t>(offset)]);
    const std::string inner_indent = indent + ' ';  // under the '[' this level adds
    const std::int64_t inner_width = width - 1;      // room for its ']'
    const std::int64_t size = shape_.dims()[axis];
    const bool summary = summarize_ && edge_ <= (size - 1) / 2;
    const std::int64_t leading = summary ? edge_ : 0;
    const std::int64_t trailing = summary ? edge_ : size;
    const std::int64_t stride = strides_[axis];
    auto item = [&](std::int64_t i) {
      return nested(axis + 1, offset + i * stride, inner_indent, inner_width);
    };
    std::string text;
    if (axis + 1 == shape_.rank()) {
      const std::int64_t item_width = width - 1;  // room for the ',' or ']' after it
      std::string line = indent;
      for (std::int64_t i = 0; i < leading; ++i) {
        extend_line(text, line, item(i), item_width, indent);
        line += ", ";
      }
      if (summary) {
        extend_line(text, line, "...", item_width, indent);
        line += ", ";
      }
      for (std::int64_t i = trailing; i > 1; --i) {
        extend_line(text, line, item(size - i), item_width, indent);
        line += ", ";
      }
      extend_line(text, line, item(size - 1), item_width, indent);
      text += line;
    } else {
      const std::string separator = "," + std::string(shape_.rank() - axis - 1, '\n');
      for (std::int64_t i = 0; i < leading; ++i) text += indent + item(i) + separator;
      if (summary) text += indent + "..." + separator;
      for (std::int64_t i = trailing; i > 1; --i) text += indent + item(size - i) + separator;
      text += indent + item(size - 1);
    }
    return "[" + text.substr(indent.size()) + "]";
  }

 private:
  const Shape& shape_;
  Strides strides_;
  std::span<const T> values_;
  const Format& format_;
  bool summarize_;
  std::int64_t edge_;
};

/// The format of the elements of an array, fitted to those it shows.
template <class T>
auto element_format(const Shape& shape, std::span<const T> values, bool summarize,
                    const PrintOptions& o) {
  if constexpr (std::is_same_v<T, bool>) {
    return BoolFormat(shape.rank() == 0);
  } else if constexpr (Floating<T>) {
    return FloatFormat<T>(shown_elements(shape, values, summarize, o.edgeitems), o.precision);
  } else {
    return IntegerFormat<T>(shown_elements(shape, values, summarize, o.edgeitems));
  }
}

/// "(2000,)": a shape as Python writes a tuple, which NumPy's repr shows.
inline std::string python_tuple(const Shape& shape) {
  std::string text = shape.to_string();
  if (shape.rank() == 1) text.insert(text.size() - 1, ",");
  return text;
}

/// NumPy's array_repr: "array(" + the elements + the shape where they do not show it (empty
/// arrays but (0,), summarized ones) + the dtype where it is not the default one (float64,
/// int64 and bool are; bfloat16, which NumPy lacks, is always named, as ml_dtypes does).
/// float16, int8, uint8 and int16 print as NumPy prints its own types of those names.
template <Element T>
std::string array_repr(const Shape& shape, std::span<const T> values, const PrintOptions& o) {
  constexpr std::string_view kPrefix = "array(";
  const std::int64_t n = shape.numel();
  const bool summarize = n > o.threshold;
  std::string text(kPrefix);
  if (n == 0) {
    text += "[]";
  } else {
    const auto format = element_format<T>(shape, values, summarize, o);
    const ArrayText<T, decltype(format)> layout(shape, values, format, summarize, o.edgeitems);
    // Later lines start under the first element; the last one leaves room for the ')'.
    text += layout.nested(0, 0, std::string(kPrefix.size() + 1, ' '), o.linewidth - 1);
  }
  std::string extras;
  if ((n == 0 && shape.rank() != 1) || summarize) extras = "shape=" + python_tuple(shape);
  constexpr DType kType = dtype_of<T>;
  if (n == 0 || (kType != DType::float64 && kType != DType::int64 && kType != DType::boolean)) {
    if (!extras.empty()) extras += ", ";
    extras += "dtype=";
    extras += name_of(kType);
  }
  if (extras.empty()) return text += ')';
  text += ',';
  const std::size_t last_line = text.size() - (text.rfind('\n') + 1);  // npos + 1 is 0
  const bool fits = static_cast<std::int64_t>(last_line + extras.size() + 2) <= o.linewidth;
  text += fits ? std::string(" ") : "\n" + std::string(kPrefix.size(), ' ');
  return text += extras += ')';
}

/// The stream slots (std::ios_base::xalloc) where print_options keeps its options: whether
/// any are set, then one a field.
inline const std::array<int, 5>& print_slots() {
  static const std::array<int, 5> slots{std::ios_base::xalloc(), std::ios_base::xalloc(),
                                        std::ios_base::xalloc(), std::ios_base::xalloc(),
                                        std::ios_base::xalloc()};
  return slots;
}

inline long to_slot(std::int64_t v) {
  return static_cast<long>(std::min<std::int64_t>(v, std::numeric_limits<long>::max()));
}

/// What print_options returns: writing it to a stream stores the options there.
struct PrintOptionsSetter {
  PrintOptions options;

  friend std::ostream& operator<<(std::ostream& os, const PrintOptionsSetter& s) {
    const std::array<int, 5>& slot = print_slots();
    os.iword(slot[0]) = 1;
    os.iword(slot[1]) = s.options.precision;
    os.iword(slot[2]) = to_slot(s.options.threshold);
    os.iword(slot[3]) = to_slot(s.options.edgeitems);
    os.iword(slot[4]) = to_slot(s.options.linewidth);
    return os;
  }
};

/// The options print_options left in `os`, else the defaults.
inline PrintOptions print_options_of(std::ios_base& os) {
  const std::array<int, 5>& slot = print_slots();
  PrintOptions o;
  if (os.iword(slot[0]) == 0) return o;
  o.precision = static_cast<int>(os.iword(slot[1]));
  o.threshold = os.iword(slot[2]);
  o.edgeitems = os.iword(slot[3]);
  o.linewidth = os.iword(slot[4]);
  return o;
}

}  // namespace detail

/// A stream manipulator: `os << ferry::print_options({.precision = 3}) << a` prints the
/// arrays written to `os` from then on with these options. They live in that stream (as
/// std::setprecision does), so threads printing to streams of their own do not interfere, and
/// nothing global changes. Throws InvalidArgument naming print_options for a negative option
/// or a precision above 100.
inline detail::PrintOptionsSetter print_options(const PrintOptions& options) {
  detail::check_print_options("print_options", options);
  return {options};
}

/// "(2, 3)", as Shape::to_string: a scalar's shape is "()". Throws nothing.
template <std::same_as<Shape> S>  // a template, so that `to_string(3)` makes no Shape
std::string to_string(const S& shape) {
  return shape.to_string();
}

/// Writes shape.to_string() to `os`.
template <std::same_as<Shape> S>
std::ostream& operator<<(std::ostream& os, const S& shape) {
  return os << shape.to_string();
}

/// The array as NumPy's repr writes it, with `options`: "array([1.5, 2. ], dtype=float32)",
/// "array([[1, 2],\n       [3, 4]], dtype=int32)", "array(True)", "array([], dtype=float32)",
/// "array([   0,    1,    2, ..., 1997, 1998, 1999],\n      shape=(2000,), dtype=int32)" (the
/// shape and dtype on a line of their own where they would pass 75 columns). Elements
/// follow NumPy's rules: floats with the fewest digits that read back as the same value, at
/// most `precision` after the point, one column for the points and scientific form for a wide
/// range of magnitudes; bfloat16 and float16 elements print with the digits their type needs
/// (0.1, not 0.10009765625). Throws InvalidArgument naming to_string for options print_options
/// refuses.
template <Element T>
std::string to_string(const HostArray<T>& a, const PrintOptions& options = {}) {
  detail::check_print_options("to_string", options);
  return detail::array_repr<T>(a.shape(), a.data(), options);
}

/// Export: waits for the values, copies them to the host and writes them as for a HostArray
/// (nothing names the device). Throws InvalidArgument naming to_string for bad options, and
/// what to_host throws: a failed step's error as it is (naming the op that failed),
/// ExportInsideStep naming to_string inside a kernel.
template <Element T>
std::string to_string(const DeviceArray<T>& a, const PrintOptions& options = {}) {
  detail::check_print_options("to_string", options);
  const HostArray<T> h = std::get<0>(detail::export_to_host("to_string", a));
  return detail::array_repr<T>(h.shape(), h.data(), options);
}

/// Writes to_string(a) to `os`, with the options print_options left in `os`.
template <Element T>
std::ostream& operator<<(std::ostream& os, const HostArray<T>& a) {
  return os << detail::array_repr<T>(a.shape(), a.data(), detail::print_options_of(os));
}

/// Export: blocks until the values are computed, copies them to the host and writes them as
/// for a HostArray, with the options print_options left in `os`. Throws what to_host throws:
/// a failed step's error as it is (naming the op that failed), ExportInsideStep naming
/// operator<< inside a kernel.
template <Element T>
std::ostream& operator<<(std::ostream& os, const DeviceArray<T>& a) {
  const HostArray<T> h = std::get<0>(detail::export_to_host("operator<<", a));
  return os << detail::array_repr<T>(h.shape(), h.data(), detail::print_options_of(os));
}

}  // namespace ferry
