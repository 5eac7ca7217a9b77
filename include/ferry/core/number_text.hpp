#pragma once
// The text of one element as NumPy's repr writes it: floats with the fewest digits that read
// back as the same value, cut at a precision and padded into columns (NumPy's FloatingFormat,
// floatmode "maxprec"), integers and bools padded to a common width. Built with std::to_chars,
// so the text is the same in every locale.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "ferry/core/bfloat16.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/float16.hpp"

namespace ferry::detail {

/// The type a floating element is examined in: float for bfloat16 and float16 (exactly its
/// value).
template <class T>
using print_compute_t = std::conditional_t<HalfFloating<T>, float, T>;

/// A decimal d.ddd x 10^exponent: the digits without trailing zeros ("0" for zero).
struct Decimal {
  bool negative = false;
  std::string digits;
  int exponent = 0;
};

/// Reads std::to_chars' scientific text ("-1.25e-05").
inline Decimal parse_scientific(std::string_view text) {
  Decimal d;
  std::size_t i = 0;
  if (text[i] == '-') {
    d.negative = true;
    ++i;
  }
  for (; i < text.size() && text[i] != 'e'; ++i) {
    if (text[i] != '.') d.digits += text[i];
  }
  i += text[i + 1] == '+' ? 2U : 1U;  // past 'e' and a '+', which from_chars refuses
  std::from_chars(text.data() + i, text.data() + text.size(), d.exponent);
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  return d;
}

/// `x` (float or double) written by std::to_chars in `format`, with `precision` digits.
template <class C>
std::string chars_of(C x, std::chars_format format, int precision) {
  // Positional text is only asked for values below 1e8 (NumPy's rule), but a double may
  // have 309 integer digits, so the buffer holds any.
  std::string text(static_cast<std::size_t>(precision) + 340, '\0');
  const std::to_chars_result r =
      std::to_chars(text.data(), text.data() + text.size(), x, format, precision);
  text.resize(static_cast<std::size_t>(r.ptr - text.data()));
  return text;
}

/// The shortest decimal that reads back as `x` (std::to_chars' shortest form).
template <class C>
Decimal shortest_decimal(C x) {
  char text[64];
  const std::to_chars_result r =
      std::to_chars(text, text + sizeof text, x, std::chars_format::scientific);
  return parse_scientific({text, r.ptr});
}

/// For bfloat16 and float16, the fewest digits that, read as a float and rounded to the
/// 16-bit type, give `x` again: "0.1" rather than the "0.10009765625" that the float it stands
/// for would need (NumPy's float16 repr prints the same digits).
template <HalfFloating H>
Decimal shortest_decimal(H x) {
  const float f = x;
  for (int precision = 0; precision < std::numeric_limits<float>::max_digits10; ++precision) {
    const std::string text = chars_of(f, std::chars_format::scientific, precision);
    float back = 0;
    const std::from_chars_result r = std::from_chars(text.data(), text.data() + text.size(), back);
    if (r.ec == std::errc() && H(back).bits == x.bits) return parse_scientific(text);
  }
  return shortest_decimal(f);
}

/// An element as text in two parts: before the point (with its sign) and after it.
struct NumberParts {
  std::string whole;
  std::string fraction;
  int exponent = 0;  // scientific form only
};

/// Positional parts of `d`, which has fractional digits: 1.25e+01 is "12" and "5", 1.25e-02
/// is "0" and "0125".
inline NumberParts positional_parts(const Decimal& d) {
  NumberParts p;
  if (d.negative) p.whole = "-";
  if (d.exponent < 0) {
    p.whole += '0';
    p.fraction.assign(static_cast<std::size_t>(-d.exponent - 1), '0');
    p.fraction += d.digits;
  } else {
    const auto point = static_cast<std::size_t>(d.exponent + 1);
    p.whole.append(d.digits, 0, point);
    p.fraction = d.digits.substr(point);
  }
  return p;
}

inline void trim_zeros(std::string& fraction) {
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
}

/// NumPy's positional text of an element `x` (dragon4_positional, unique, min_digits 0, trim
/// '.'): the shortest digits when they need at most `precision` fractional digits, else the
/// value rounded to that many, trailing zeros dropped; the integer part always in full, so the
/// float32 99999904 is "99999904.", not the "99999900." of its shortest digits.
template <class T>
NumberParts positional(T x, int precision) {
  const Decimal d = shortest_decimal(x);
  const int fraction = static_cast<int>(d.digits.size()) - 1 - d.exponent;
  if (fraction > 0 && fraction <= precision) return positional_parts(d);
  const std::string text = chars_of(print_compute_t<T>(x), std::chars_format::fixed,
                                    fraction > 0 ? precision : 0);
  const std::size_t point = text.find('.');
  NumberParts p;
  p.whole = text.substr(0, point);
  if (point != std::string::npos) p.fraction = text.substr(point + 1);
  trim_zeros(p.fraction);
  return p;
}

/// NumPy's scientific text of `x` (dragon4_scientific, unique, trim '.'): as positional, for
/// the mantissa's fractional digits.
template <class T>
NumberParts scientific(T x, int precision) {
  Decimal d = shortest_decimal(x);
  if (static_cast<int>(d.digits.size()) - 1 > precision) {
    d = parse_scientific(chars_of(print_compute_t<T>(x), std::chars_format::scientific, precision));
  }
  NumberParts p;
  if (d.negative) p.whole = "-";
  p.whole += d.digits.front();
  p.fraction = d.digits.substr(1);
  p.exponent = d.exponent;
  return p;
}

/// The scientific text of `x` rounded to exactly `precision` fractional digits of its
/// mantissa, zeros kept: NumPy's second pass (min_digits), which prints the value's own
/// digits past the shortest ones, not zeros.
template <class T>
NumberParts scientific_exact(T x, int precision) {
  const std::string text =
      chars_of(print_compute_t<T>(x), std::chars_format::scientific, precision);
  const std::size_t e = text.find('e');
  const std::size_t point = std::min(text.find('.'), e);
  NumberParts p;
  p.whole = text.substr(0, point);
  if (point < e) p.fraction = text.substr(point + 1, e - point - 1);
  p.exponent = parse_scientific(text).exponent;
  return p;
}

inline std::string pad_left(std::string_view s, std::size_t width) {
  std::string out(width > s.size() ? width - s.size() : 0, ' ');
  return out += s;
}

/// NumPy's FloatingFormat with floatmode "maxprec" and sign '-': every element of an array
/// written with the point in one column. Scientific form when the largest magnitude is 1e8 or
/// more, the smallest non-zero one below 1e-4, or their ratio above 1000 (compared in the
/// element's own type, as NumPy 2 does); the digits of the elements shown decide the widths.
template <class T>
class FloatFormat {
 public:
  FloatFormat(std::span<const T> shown, int precision) : precision_(precision) {
    using C = print_compute_t<T>;
    bool any_nonzero = false;
    bool non_finite = false;
    bool negative_inf = false;
    C largest = 0;
    C smallest = 0;
    for (const T& e : shown) {
      const C v = e;
      if (!std::isfinite(v)) {
        non_finite = true;
        negative_inf = negative_inf || (std::isinf(v) && v < 0);
        continue;
      }
      if (v == 0) continue;
      const C m = std::abs(v);
      largest = any_nonzero ? std::max(largest, m) : m;
      smallest = any_nonzero ? std::min(smallest, m) : m;
      any_nonzero = true;
    }
    // The ratio as NumPy divides it: in the element's type, so a 16-bit float's rounds to 16
    // bits (float16 100 / 0.0999755859375 is 1000.24, which is 1000 as a float16: positional).
    C ratio = any_nonzero ? largest / smallest : C(0);
    if constexpr (!std::is_same_v<C, T>) ratio = static_cast<C>(T(ratio));
    scientific_ = any_nonzero && (largest >= C(1e8) || smallest < C(0.0001) || ratio > C(1000));
    std::size_t exponent_text = 0;
    for (const T& e : shown) {
      if (!std::isfinite(print_compute_t<T>(e))) continue;
      const NumberParts p = scientific_ ? scientific(e, precision_) : positional(e, precision_);
      whole_ = std::max(whole_, p.whole.size());
      fraction_ = std::max(fraction_, p.fraction.size());
      exponent_text = std::max(exponent_text, std::to_string(std::abs(p.exponent)).size());
    }
    if (scientific_) {
      // Every mantissa gets as many digits as the longest needs (its own, past the shortest
      // ones), and every exponent as many.
      precision_ = static_cast<int>(fraction_);
      exponent_digits_ = std::max<std::size_t>(2, exponent_text);
      fraction_ = exponent_digits_ + 2 + fraction_;  // the width nan and inf are aligned to
    }
    if (non_finite) {
      const std::size_t right = fraction_ + 1;  // and the point
      const std::size_t inf_text = negative_inf ? 4 : 3;
      whole_ = std::max(whole_, inf_text > right ? inf_text - right : 0);
    }
  }

  std::string operator()(T x) const {
    const print_compute_t<T> v = x;
    if (std::isnan(v)) return pad_left("nan", whole_ + fraction_ + 1);
    if (std::isinf(v)) return pad_left(v < 0 ? "-inf" : "inf", whole_ + fraction_ + 1);
    if (scientific_) {
      const NumberParts p = scientific_exact(x, precision_);
      std::string out = pad_left(p.whole, whole_) + '.' + p.fraction;
      out += p.exponent < 0 ? "e-" : "e+";
      const std::string digits = std::to_string(std::abs(p.exponent));
      out.append(exponent_digits_ > digits.size() ? exponent_digits_ - digits.size() : 0, '0');
      return out += digits;
    }
    const NumberParts p = positional(x, precision_);
    std::string out = pad_left(p.whole, whole_) + '.' + p.fraction;
    return out.append(fraction_ - p.fraction.size(), ' ');
  }

 private:
  int precision_;
  bool scientific_ = false;
  std::size_t whole_ = 0;     // characters before the point
  std::size_t fraction_ = 0;  // after it
  std::size_t exponent_digits_ = 0;
};

/// NumPy's IntegerFormat: right-aligned to the widest of the elements shown.
template <class T>
class IntegerFormat {
 public:
  explicit IntegerFormat(std::span<const T> shown) {
    for (const T& e : shown) width_ = std::max(width_, std::to_string(e).size());
  }
  std::string operator()(T x) const { return pad_left(std::to_string(x), width_); }

 private:
  std::size_t width_ = 0;
};

/// NumPy's BoolFormat: " True" lines up with "False", except in a rank-0 array.
class BoolFormat {
 public:
  explicit BoolFormat(bool scalar) : true_(scalar ? "True" : " True") {}
  std::string operator()(bool x) const { return x ? true_ : "False"; }

 private:
  const char* true_;
};

}  // namespace ferry::detail
