#!/bin/sh
# In-process A/B of the keyed table: this tree (with its uncommitted changes) against BASE
# (a commit; default HEAD), both linked into one binary, rounds interleaved with rotating order.
#   benches/ab/run.sh [BASE] -- MODE [ROUNDS]
# MODE: ab (A and B, with and without check_at; PRESIZE=1 presizes B), bat (B check_at only;
# KEYS=n, PRESIZE=1, AA=1 for new vs new), c (5M inserts into a growing table), churn, full.
# Compare ratios within one run only; quote medians with min-max and the machine's load.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
base=${1:-HEAD}
[ "${1:-}" = "--" ] && base=HEAD
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
[ $# -gt 0 ] && shift
rm -rf "$here/base" && mkdir -p "$here/base"
git -C "$here/../.." archive "$base" Cargo.toml src | tar -x -C "$here/base"
# The base as a plain library named tollgate_base: package, features, dependencies, lints.
awk '
  /^\[/ { keep = ($0 ~ /^\[(package|features|dependencies|target\..*|lints\..*)\]$/) }
  keep { if ($0 ~ /^name = "tollgate"$/) print "name = \"tollgate_base\""; else print }
' "$here/base/Cargo.toml" > "$here/base/Cargo.toml.new"
mv "$here/base/Cargo.toml.new" "$here/base/Cargo.toml"
cargo build --release --manifest-path "$here/Cargo.toml"
exec "$here/target/release/ab" "$@"
