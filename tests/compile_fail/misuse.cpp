// Misuse that must not compile. Each FERRY_CASE_* macro selects one; with none defined the
// file is the corrected program, which must compile (the compile_fail.control test).
// The entry header of arrays and their ops: the ops misused here, and every overload of them.
#include <ferry/arrays.hpp>

int main() {
  ferry::Device dev;
  auto f = ferry::zeros<float>(dev, ferry::Shape{2, 2});
  auto d = ferry::zeros<double>(dev, ferry::Shape{2, 2});
  auto i = ferry::zeros<std::int32_t>(dev, ferry::Shape{2, 2});
  auto mask = ferry::less(f, 1.0f);
#if defined(FERRY_CASE_add_mixed)
  auto r = f + d;
#elif defined(FERRY_CASE_add_float_int)
  auto r = f + i;
#elif defined(FERRY_CASE_int_times_double)
  auto r = i * 0.5;
#elif defined(FERRY_CASE_double_times_int)
  auto r = 0.5 * i;
#elif defined(FERRY_CASE_matmul_mixed)
  auto r = ferry::matmul(f, d);
#elif defined(FERRY_CASE_where_mixed)
  auto r = ferry::where(mask, f, d);
#elif defined(FERRY_CASE_update_slice_mixed)
  auto r = ferry::update_slice(f, d, 0, 0);
#elif defined(FERRY_CASE_index_update_mixed)
  auto r = ferry::index_update(f, {0}, ferry::zeros<double>(dev, ferry::Shape{2}));
#elif defined(FERRY_CASE_scatter_add_mixed)
  auto r = ferry::scatter_add(f, ferry::zeros<std::int32_t>(dev, ferry::Shape{1}),
                              ferry::zeros<double>(dev, ferry::Shape{1, 2}), 0);
#elif defined(FERRY_CASE_concat_mixed)
  auto r = ferry::concat({f, d}, 0);
#elif defined(FERRY_CASE_exp_of_int)
  auto r = ferry::exp(i);
#elif defined(FERRY_CASE_arithmetic_on_mask)
  auto r = mask + mask;
#else
  auto r = f + d.astype<float>() + ferry::matmul(f, d.astype<float>()) +
           ferry::where(mask, f, d.astype<float>()) + ferry::exp(i.astype<float>()) +
           (mask.astype<float>() + mask.astype<float>()) + (f + i.astype<float>()) +
           (i.astype<float>() * 0.5) + (0.5 * i.astype<float>()) + (i * 2).astype<float>() +
           ferry::update_slice(f, d.astype<float>(), 0, 0) +
           ferry::index_update(f, {0}, ferry::zeros<float>(dev, ferry::Shape{2})) +
           ferry::scatter_add(f, ferry::zeros<std::int32_t>(dev, ferry::Shape{1}),
                              ferry::zeros<float>(dev, ferry::Shape{1, 2}), 0);
#endif
  (void)r;
  (void)i;
  return 0;
}
