#!/bin/sh
# Page-granular model (NOT a dTLB measurement): valgrind's cache simulator with 4 KiB
# "lines" as a stand-in for the dTLBs: D1 = 64 entries 4-way (L1 dTLB), LL = 1536 entries
# 12-way (STLB). Misses = touches of a page not among the last ~64 / ~1536 pages used.
# Usage: run-tlb.sh <ideal|tollgate|governor|empty> <live|deny|insert> -> out/tlb/<s>-<sc>.cg
cd "$(dirname "$0")"
mkdir -p out/tlb
exec nice -n 19 valgrind --tool=callgrind --cache-sim=yes \
  --D1=262144,4,4096 --LL=6291456,12,4096 \
  --collect-atstart=no --dump-instr=yes --toggle-collect='counters_bench::timed*' \
  --callgrind-out-file=out/tlb/$1-$2.cg \
  ./target/release/counters-bench "$1" "$2" > out/tlb/$1-$2.log 2>&1
