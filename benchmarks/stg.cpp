// Scheduler quality on the Standard Task Graph Set (Kasahara laboratory): the 50- and 100-task
// random graphs, each task a custom step with Cost::fixed(its processing time), on 2, 4, 8 and
// 16 compute units with no launch overhead, scheduled first-in first-out and by critical path.
// Prints the mean and worst ratio of the modeled makespan to the optimum; where the data gives
// only bounds (the optimum is not proven), to the best known schedule, the upper bound. The
// worst ratio to the lower bound is printed too: for the unproven graphs it is pessimistic.
// Beside them, the same ratios for HLFET (highest static level first, a plain list scheduler
// written here), the number of graphs on which ferry's schedule is longer than HLFET's, and the
// graph of the worst ratio.
//
// The data is read from the folder given as the first argument or in FERRY_STG_DIR (layout:
// 50/, 100/, optimal/CaseN_P_OPT.csv); without it the benchmark says so and does nothing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <queue>
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
  std::string file;  // the graph's file, relative to the data folder
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
      c.file = file;
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
    steps.push_back(ferry::custom<float>(
        dev, "task", inputs, ferry::Shape{}, [](ferry::KernelArgs<float>) {},
        ferry::Cost::fixed(kUnit * t.time)));
  }
  ferry::wait(steps.back());
  return dev.stats().makespan / kUnit;
}

/// The makespan of HLFET (Adam, Chandy and Dickson, 1974), the baseline list scheduler: whenever
/// a unit is free, the ready task of highest static level (the longest path of times from it to
/// the exit) starts, the earlier task among equals. Plain loops, outside ferry.
long long hlfet(const std::vector<Task>& tasks, int processors) {
  const std::size_t n = tasks.size();
  std::vector<std::vector<std::size_t>> succs(n);
  std::vector<int> pending(n, 0);
  for (std::size_t t = 0; t < n; ++t) {
    for (int p : tasks[t].preds) {
      succs[static_cast<std::size_t>(p)].push_back(t);
      ++pending[t];
    }
  }
  std::vector<long long> level(n, 0);
  for (std::size_t t = n; t-- > 0;) {  // predecessors come first: a reverse topological order
    long long below = 0;
    for (std::size_t s : succs[t]) below = std::max(below, level[s]);
    level[t] = tasks[t].time + below;
  }
  const auto lower = [&](std::size_t a, std::size_t b) {
    return level[a] != level[b] ? level[a] < level[b] : a > b;
  };
  std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(lower)> ready(lower);
  using Finish = std::pair<long long, std::size_t>;  // (time, task)
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> running;
  ready.push(0);
  int idle = processors;
  long long now = 0;
  long long makespan = 0;
  while (!ready.empty() || !running.empty()) {
    while (idle > 0 && !ready.empty()) {
      const std::size_t t = ready.top();
      ready.pop();
      running.push({now + tasks[t].time, t});
      --idle;
    }
    now = running.top().first;  // everything ending now frees its unit and readies successors
    while (!running.empty() && running.top().first == now) {
      const std::size_t t = running.top().second;
      running.pop();
      ++idle;
      makespan = std::max(makespan, now);
      for (std::size_t s : succs[t]) {
        if (--pending[s] == 0) ready.push(s);
      }
    }
  }
  return makespan;
}

fs::path g_dir;
std::vector<Case> g_cases;

void stg(benchmark::State& state, ferry::SchedulePolicy policy) {
  const int processors = static_cast<int>(state.range(0));
  double sum = 0;
  double worst = 0;
  double worst_to_bound = 0;
  double hlfet_sum = 0;
  double hlfet_worst = 0;
  int graphs = 0;
  int worse_than_hlfet = 0;  // graphs on which ferry's makespan is longer than HLFET's
  std::string worst_graph;
  for (auto _ : state) {
    sum = worst = worst_to_bound = hlfet_sum = hlfet_worst = 0;
    graphs = worse_than_hlfet = 0;
    for (const Case& c : g_cases) {
      if (c.processors != processors) continue;
      const long long ours = schedule(c.tasks, processors, policy);
      const long long theirs = hlfet(c.tasks, processors);
      const auto makespan = static_cast<double>(ours);
      const double ratio = makespan / static_cast<double>(c.optimum);
      const double hlfet_ratio = static_cast<double>(theirs) / static_cast<double>(c.optimum);
      sum += ratio;
      hlfet_sum += hlfet_ratio;
      hlfet_worst = std::max(hlfet_worst, hlfet_ratio);
      if (ratio > worst) worst_graph = c.file;
      worst = std::max(worst, ratio);
      worst_to_bound = std::max(worst_to_bound, makespan / static_cast<double>(c.lower_bound));
      worse_than_hlfet += ours > theirs ? 1 : 0;
      ++graphs;
    }
  }
  state.counters["graphs"] = graphs;
  state.counters["mean_ratio"] = graphs == 0 ? 0 : sum / graphs;
  state.counters["worst_ratio"] = worst;
  state.counters["worst_to_lower_bound"] = worst_to_bound;
  state.counters["hlfet_mean"] = graphs == 0 ? 0 : hlfet_sum / graphs;
  state.counters["hlfet_worst"] = hlfet_worst;
  state.counters["worse_than_hlfet"] = worse_than_hlfet;
  state.SetLabel("worst: " + worst_graph);
}

void fifo(benchmark::State& state) { stg(state, ferry::SchedulePolicy::fifo); }
void critical_path(benchmark::State& state) { stg(state, ferry::SchedulePolicy::critical_path); }

BENCHMARK(fifo)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(critical_path)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1) {
    g_dir = argv[1];
  } else if (const char* env = std::getenv("FERRY_STG_DIR")) {
    g_dir = env;
  }
  if (g_dir.empty() || !fs::exists(g_dir / "optimal")) {
    std::printf(
        "stg: no Standard Task Graph Set given (pass its folder or set FERRY_STG_DIR); skipped\n");
    return 0;
  }
  g_cases = load(g_dir);
  std::printf("stg: %zu graph and processor-count cases from %s\n", g_cases.size(), g_dir.c_str());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
