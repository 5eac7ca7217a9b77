#pragma once
// Test fixtures that run a suite once per executor kind: the stepped ManualExecutor (nothing
// runs until an export drives it) and thread pools of 1, 2 and 4 workers.

#include <gtest/gtest.h>

#include <string>

#include <ferry/ferry.hpp>

namespace ferry_test {

/// The executor `threads` names: 0 is a ManualExecutor, else a pool of that many workers.
inline ferry::Executor executor_for(int threads) {
  if (threads == 0) return ferry::ManualExecutor();
  return ferry::Executor(static_cast<std::size_t>(threads));
}

/// A new modeled device on the executor `threads` names.
inline ferry::Device make_device(int threads) { return ferry::Device(executor_for(threads)); }

/// Fixture: `dev` is a fresh device on the executor of the current parameter.
class OnEachExecutor : public ::testing::TestWithParam<int> {
 protected:
  ferry::Device dev = make_device(GetParam());
};

/// Calls f(device) once for a fresh device on each executor kind: for typed tests, which
/// cannot also be value-parameterized.
template <class F>
void for_each_executor(F&& f) {
  for (int threads : {0, 1, 2, 4}) {
    SCOPED_TRACE(threads == 0 ? std::string("manual executor")
                              : std::to_string(threads) + " executor threads");
    f(make_device(threads));
  }
}

inline std::string executor_name(const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? std::string("manual") : std::to_string(info.param) + "_threads";
}

}  // namespace ferry_test

/// Instantiates a TEST_P suite derived from OnEachExecutor over every executor kind.
#define FERRY_SWEEP_EXECUTORS(Suite)                                                      \
  INSTANTIATE_TEST_SUITE_P(Executors, Suite, ::testing::Values(0, 1, 2, 4),              \
                           ::ferry_test::executor_name)
