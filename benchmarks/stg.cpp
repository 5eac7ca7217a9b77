// Scheduler quality on the Standard Task Graph Set (Kasahara laboratory): the 50- and 100-task
// random graphs, each task a custom step with Cost::fixed(its processing time), on 2, 4, 8 and
// 16 compute units with no launch overhead, scheduled first-in first-out and by critical path.
// Prints the mean and worst ratio of the modeled makespan to the optimum; where the data gives
// only bounds (the optimum is not proven), to the best known schedule, the upper bound. The
// worst ratio to the lower bound is printed too: for the unproven graphs it is pessimistic.
//
// The data is read from the folder given as the first argument or in FERRY_STG_DIR (layout:
// 50/, 100/, optimal/CaseN_P_OPT.csv); without it the benchmark says so and does nothing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ferry/ferry.hpp>

namespace {

namespace fs = std::filesystem;

struct Task {
  long long time = 0;
  std::vector<int> preds;
};

/// A .stg file: a count n, then tasks 0..n+1 (0 and n+1 are zero-time entry and exit), each
/// "id time npred pred...", predecessors always before the task; '#' lines are comments.
std::vector<Task> read_stg(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::vector<Task> tasks;
  long long n = -1;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    if (n < 0) {
      fields >> n;
      tasks.reserve(static_cast<std::size_t>(n + 2));
      continue;
    }
    long long id = 0;
    long long count = 0;
    Task t;
    fields >> id >> t.time >> count;
    for (long long p = 0; p < count; ++p) {
      int pred = 0;
      fields >> pred;
      t.preds.push_back(pred);
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

struct Case {
  std::vector<Task> tasks;
  int processors = 0;
  long long optimum = 0;      // proven, or the best known schedule (the upper bound)
  long long lower_bound = 0;  // equal to optimum where it is proven
};

std::vector<Case> load(const fs::path& dir) {
  std::vector<Case> cases;
  std::map<std::string, std::vector<Task>> graphs;
  for (const auto& entry : fs::directory_iterator(dir / "optimal")) {
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string file;
      std::string field;
      std::getline(row, file, ',');
      Case c;
      std::getline(row, field, ',');
      c.processors = std::stoi(field);
      std::getline(row, field, ',');
      c.optimum = c.lower_bound = std::stoll(field);
      if (std::getline(row, field, ',') && !field.empty()) c.optimum = std::stoll(field);
      auto it = graphs.find(file);
      if (it == graphs.end()) it = graphs.emplace(file, read_stg(dir / file)).first;
      c.tasks = it->second;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

/// The modeled makespan of `tasks` on `processors` units, in the tasks' time unit.
long long schedule(const std::vector<Task>& tasks, int processors, ferry::SchedulePolicy policy) {
  constexpr std::chrono::microseconds kUnit(1);
  ferry::DeviceSpec spec = ferry::specs::tiny();
  spec.compute_units = processors;
  spec.launch_overhead = std::chrono::nanoseconds(0);
  spec.policy = policy;
  spec.trace_steps = 0;
  ferry::ManualExecutor manual;  // the kernels do nothing: run them on this thread
  ferry::Device dev = ferry::Device::modeled(spec, manual);
  std::vector<ferry::DeviceArray<float>> steps;
  steps.reserve(tasks.size());
  for (const Task& t : tasks) {
    std::vector<ferry::DeviceArray<float>> inputs;
    for (int p : t.preds) inputs.push_back(steps[static_cast<std::size_t>(p)]);
    steps.push_back(ferry::custom<float>(dev, "task", inputs, ferry::Shape{}, [](ferry::KernelArgs<float>) {},
                                         ferry::Cost::fixed(kUnit * t.time)));
  }
  ferry::wait(steps.back());
  return dev.stats().makespan / kUnit;
}

fs::path g_dir;
std::vector<Case> g_cases;

void stg(benchmark::State& state, ferry::SchedulePolicy policy) {
  const int processors = static_cast<int>(state.range(0));
  double sum = 0;
  double worst = 0;
  double worst_to_bound = 0;
  int graphs = 0;
  for (auto _ : state) {
    sum = worst = worst_to_bound = 0;
    graphs = 0;
    for (const Case& c : g_cases) {
      if (c.processors != processors) continue;
      const auto makespan = static_cast<double>(schedule(c.tasks, processors, policy));
      const double ratio = makespan / static_cast<double>(c.optimum);
      sum += ratio;
      worst = std::max(worst, ratio);
      worst_to_bound = std::max(worst_to_bound, makespan / static_cast<double>(c.lower_bound));
      ++graphs;
    }
  }
  state.counters["graphs"] = graphs;
  state.counters["mean_ratio"] = graphs == 0 ? 0 : sum / graphs;
  state.counters["worst_ratio"] = worst;
  state.counters["worst_to_lower_bound"] = worst_to_bound;
}

void fifo(benchmark::State& state) { stg(state, ferry::SchedulePolicy::fifo); }
void critical_path(benchmark::State& state) { stg(state, ferry::SchedulePolicy::critical_path); }

BENCHMARK(fifo)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(critical_path)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1) {
    g_dir = argv[1];
  } else if (const char* env = std::getenv("FERRY_STG_DIR")) {
    g_dir = env;
  }
  if (g_dir.empty() || !fs::exists(g_dir / "optimal")) {
    std::printf("stg: no Standard Task Graph Set given (pass its folder or set FERRY_STG_DIR); skipped\n");
    return 0;
  }
  g_cases = load(g_dir);
  std::printf("stg: %zu graph and processor-count cases from %s\n", g_cases.size(), g_dir.c_str());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
