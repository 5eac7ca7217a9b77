#pragma once
// pad: an array surrounded by a constant, as a concat of filled blocks around it along each
// padded dimension, so that its trace rule and its gradient (a slice of the cotangent) are
// concat's.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/record.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry {

/// `a` with widths[i].first elements of `value` before and widths[i].second after it along each
/// dimension i, like `np.pad(a, widths, mode="constant", constant_values=value)` (PyTorch's
/// `F.pad` lists its widths from the last dimension backwards; this follows NumPy). Unlike
/// NumPy, there must be exactly one pair per dimension (NumPy also broadcasts a single pair),
/// and only constant padding exists. Widths may be symbolic in a traced program. One copy per
/// dimension with a non-zero width; `a` itself when every width is 0. Throws InvalidArgument
/// when the number of pairs is not the rank, for a negative width, a padded size or element count
/// that overflows int64, or an empty handle.
template <Element T>
DeviceArray<T> pad(const DeviceArray<T>& a, const std::vector<std::pair<SymInt, SymInt>>& widths,
                   std::type_identity_t<T> value = T{}) {
  constexpr std::string_view name = "pad";
  detail::Step& s = detail::step_of(name, a);
  const Shape& plain = s.shape();
  if (widths.size() != plain.rank()) {
    detail::fail<InvalidArgument>(name, widths.size(), " width pairs given for ", plain,
                                  " of rank ", plain.rank());
  }
  std::vector<std::int64_t> sizes(plain.dims().begin(), plain.dims().end());
  for (std::size_t i = 0; i < widths.size(); ++i) {
    const std::int64_t before = detail::SymAccess::value(widths[i].first);
    const std::int64_t after = detail::SymAccess::value(widths[i].second);
    if (before < 0 || after < 0) {
      detail::fail<InvalidArgument>(name, "negative width (", before, ", ", after, ") for axis ", i,
                                    " of ", plain);
    }
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (before > kMax - sizes[i] || after > kMax - sizes[i] - before) {
      detail::fail<InvalidArgument>(name, "axis ", i, " of ", plain, " padded by (", before, ", ",
                                    after, ") overflows int64");
    }
    sizes[i] += before + after;
  }
  std::int64_t count = 1;  // of the result, zeros left out as Shape counts
  for (const std::int64_t n : sizes) {
    if (n != 0 && count > std::numeric_limits<std::int64_t>::max() / n) {
      detail::fail<InvalidArgument>(name, "padding ", plain, " overflows the element count");
    }
    if (n != 0) count *= n;
  }

  const Device device = a.device();
  DeviceArray<T> out = a;
  Shape cur = detail::user_shape(s);
  for (std::size_t i = 0; i < widths.size(); ++i) {
    const auto& [before, after] = widths[i];
    const bool has_before = before != 0;
    const bool has_after = after != 0;
    if (!has_before && !has_after) continue;
    std::vector<DeviceArray<T>> parts;
    if (has_before)
      parts.push_back(detail::full<T>(name, device, detail::with_sym_dim(cur, i, before), value));
    parts.push_back(out);
    if (has_after)
      parts.push_back(detail::full<T>(name, device, detail::with_sym_dim(cur, i, after), value));
    out = detail::concat(name, parts, static_cast<int>(i));
    cur = detail::with_sym_dim(cur, i, before + cur[i] + after);
  }
  return out;
}

}  // namespace ferry
