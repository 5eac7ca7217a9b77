#!/bin/sh
# Instructions per step of the dispatch workloads (benchmarks/dispatch_count.cpp), counted by
# callgrind over all threads: the difference between a run of N steps and one of 2N, over N,
# so that start-up, the trace of a program and the export cancel out. Each ferry figure is
# printed beside its baseline from the same run (oneTBB's flow graph for the chain and the
# fan-out, the eager step for a replayed one, one cache entry for 100) with their ratio.
#   usage: benchmarks/dispatch_count.sh path/to/dispatch_count [workdir]
set -eu
bin=$1
dir=${2:-$(mktemp -d)}

# instructions WORKLOAD N: the total count of one run under callgrind
instructions() {
  out="$dir/cg.$1.$2"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" "$2" 2>/dev/null
  sed -n 's/^summary: *//p;s/^totals: *//p' "$out" | head -n 1
}

# per_step WORKLOAD N: (instructions at 2N - instructions at N) / N
per_step() {
  a=$(instructions "$1" "$2")
  b=$(instructions "$1" $(($2 * 2)))
  echo $(((b - a) / $2))
}

row() {  # row NAME FERRY BASELINE_NAME BASELINE
  awk -v n="$1" -v f="$2" -v bn="$3" -v b="$4" \
    'BEGIN { printf "%-22s %8d   %-22s %8d   %.2fx\n", n, f, bn, b, (b > 0 ? f / b : 0) }'
}

printf '%-22s %8s   %-22s %8s   %s\n' "ferry" "Ir/step" "baseline" "Ir/step" "ratio"
tbb_chain=$(per_step chain_tbb 10000 2>/dev/null || echo 0)
row "chain 10k->20k" "$(per_step chain 10000)" "tbb chain" "$tbb_chain"
for n in 1000 10000 50000; do
  row "fanout $((n * 2 / 1000))k (wait)" "$(per_step fanout $n)" \
      "tbb fanout $((n * 2 / 1000))k" "$(per_step fanout_tbb $n 2>/dev/null || echo 0)"
done
row "replayed 8x8 matmul" "$(per_step replay_mm 10000)" \
    "eager 8x8 matmul" "$(per_step eager_mm 10000)"
row "lookup, 100 entries" "$(per_step lookup100 10000)" \
    "lookup, 1 entry" "$(per_step lookup1 10000)"
