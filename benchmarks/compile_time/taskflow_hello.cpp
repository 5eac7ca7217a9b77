// The baseline the issue measured: Taskflow's hello world, two tasks, one before the other.
// Used only when taskflow/taskflow.hpp is found (TASKFLOW_INCLUDE, or the compiler's paths).
#include <taskflow/taskflow.hpp>

#include <cstdio>

int main() {
  tf::Executor executor;
  tf::Taskflow taskflow;
  auto [a, b] = taskflow.emplace([] { std::printf("hello "); }, [] { std::printf("world\n"); });
  a.precede(b);
  executor.run(taskflow).wait();
  return 0;
}
