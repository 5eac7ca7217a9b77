// 10 · Meshes: eight chips on one interconnect, collectives as futures, and what they cost.
//
// A T3000 is a 2x4 mesh of Wormhole chips joined by Ethernet links. Each chip holds a shard of
// an activation; an all-gather gives every chip the whole of it, and a reduce-scatter sums the
// chips' partial results and leaves each chip its part, the two collectives of a tensor-parallel
// layer. Then the overlap a training step relies on: one layer's gradients are all-reduced while
// the chips compute the layer before, and the mesh's stats say how much of the communication the
// compute hid. The trace shows each chip's tracks and each link's messages.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(bool ok, const char* claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim);
  if (!ok) std::exit(1);
}

/// One shard a chip: chip i holds `rows` x `cols` of the value i + 1.
ferry::MeshArray<float> shards(const ferry::Mesh& mesh, std::int64_t rows, std::int64_t cols) {
  std::vector<ferry::DeviceArray<float>> parts;
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    parts.push_back(
        ferry::full<float>(mesh.device(i), ferry::Shape{rows, cols}, static_cast<float>(i + 1)));
  }
  return ferry::MeshArray<float>::from_shards(mesh, std::move(parts));
}

double us(ferry::Duration d) { return static_cast<double>(d.count()) / 1000; }

}  // namespace

int main() {
  const ferry::Mesh mesh = ferry::Mesh::modeled(ferry::specs::t3000());
  std::printf("A %s mesh of %lld chips (%s)\n", mesh.shape().to_string().c_str(),
              static_cast<long long>(mesh.size()), mesh.spec().name.c_str());

  std::puts("1. All-gather: every chip gets every chip's 256 rows.");
  const auto activation = shards(mesh, 256, 1024);
  const auto gathered = ferry::all_gather(activation, 0);  // returns at once: futures
  const ferry::HostArray<float> g5 = gathered.shard(5).to_host();
  std::printf("  chip 5 holds %s; row 256 * 3 came from chip 3: %g\n",
              g5.shape().to_string().c_str(), static_cast<double>(g5(256 * 3, 0)));
  check(g5.shape() == ferry::Shape{256 * 8, 1024} && g5(256 * 3, 0) == 4.0f,
        "chip 5 holds all 8 shards in order");

  std::puts("2. Reduce-scatter: partial sums summed, each chip keeping its eighth.");
  const auto summed = ferry::reduce_scatter(activation, 0);
  const ferry::HostArray<float> s2 = summed.shard(2).to_host();
  std::printf("  chip 2 holds %s, every element 1 + 2 + ... + 8 = %g\n",
              s2.shape().to_string().c_str(), static_cast<double>(s2(0, 0)));
  check(s2.shape() == ferry::Shape{32, 1024} && s2(31, 1023) == 36.0f,
        "each chip keeps 1/8 of the sum");
  const ferry::MeshStats collectives = mesh.stats();
  std::printf("  so far: makespan %.1f us, links busy %.1f us\n", us(collectives.makespan),
              us(collectives.communication_time));

  std::puts("3. A gradient all-reduce overlapping the backward pass of the layer before.");
  ferry::Mesh fresh = ferry::Mesh::modeled(ferry::specs::t3000());
  const auto grads = shards(fresh, 1024, 1024);  // this layer's weight gradients, per chip
  const auto acts = shards(fresh, 512, 1024);    // the layer before: its activations
  const auto weights = shards(fresh, 1024, 1024);
  ferry::wait(grads);
  ferry::wait(acts);
  ferry::wait(weights);
  fresh.reset_stats();
  const auto reduced = ferry::all_reduce(grads, ferry::ReduceOp::mean);  // on the links...
  std::vector<ferry::DeviceArray<float>> backward;  // ...while the chips compute
  for (std::int64_t i = 0; i < fresh.size(); ++i) {
    backward.push_back(
        ferry::matmul(ferry::matmul(acts.shard(i), weights.shard(i)), weights.shard(i)));
  }
  ferry::wait(reduced);
  ferry::wait(backward);
  const ferry::MeshStats step = fresh.stats();
  std::printf(
      "  makespan %.1f us; links busy %.1f us, of which %.1f us under compute (%.0f%% hidden)\n",
      us(step.makespan), us(step.communication_time), us(step.communication_overlap),
      100.0 * us(step.communication_overlap) / us(step.communication_time));
  check(step.communication_overlap > ferry::Duration::zero(),
        "the all-reduce ran while the chips computed");
  check(reduced.shard(7).to_host()(0, 0) == 4.5f,
        "the mean gradient is (1 + ... + 8) / 8 on every chip");
  check(step.lower_bound <= step.makespan, "no schedule beats the lower bound");

  fresh.write_trace("mesh_trace.json");
  std::puts(
      "Wrote mesh_trace.json: open it in ui.perfetto.dev (a process per chip, one for the links).");
  return 0;
}
