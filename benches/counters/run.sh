#!/bin/sh
# Simulated per-check counters (valgrind callgrind: instructions, D1/LL misses, branch
# mispredicts) for tollgate, governor and the ideal; BENCHMARKS.md, "where a check's time goes".
# This machine's VM has no PMU, so `perf stat` cannot count them.
#   benches/counters/run.sh                      # build, all twenty runs (~4 min), the tables
#   benches/counters/run.sh <ideal|tollgate|tollgate-at|presized|governor|empty> <live|deny|hot|hotdeny|insert>
#   COUNTERS_KEYS=10000 benches/counters/run.sh tollgate live   # 10,000 keys: out/tollgate-live-10000.cg
#   benches/counters/run.sh evicting full; benches/counters/run.sh empty full  # F: new keys evicting
#   python3 summarize.py live-10000
#   python3 benches/counters/attribute.py out/tollgate-live.cg 200000 D1mr DLmr Bcm
# Writes out/<subject>-<scenario>[-<keys>].cg (callgrind) and .log. Needs valgrind.
set -eu
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)"; exit 2; }
cargo build --release -q
mkdir -p out
tag=${COUNTERS_KEYS:+-$COUNTERS_KEYS}
one() {
  nice -n 19 valgrind --tool=callgrind \
    --cache-sim=yes --branch-sim=yes \
    --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 \
    --collect-atstart=no --dump-instr=yes --toggle-collect='counters_bench::timed*' \
    --callgrind-out-file="out/$1-$2$tag.cg" \
    ./target/release/counters-bench "$1" "$2" >"out/$1-$2$tag.log" 2>&1
}
if [ $# -eq 2 ]; then one "$1" "$2"; exit; fi
for sc in live deny hot hotdeny insert; do
  for s in ideal tollgate governor empty; do one "$s" "$sc"; done
done
python3 summarize.py
