#!/usr/bin/env bash
# Instructions per query of the responder for every benchmark case, counted by callgrind
# (repeatable whatever else the machine is doing). Needs valgrind and a release build of
# the example: cargo build --release --example icount
# usage: bench/icount.sh [BINARY] [REPOSITORY-ROOT]
set -euo pipefail
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${1:-$root/target/release/examples/icount}
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$root" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for case in static nxdomain priority weighted weighted-sticky-ecs multivalue nested \
  geographic-ecs subnet-ecs performance-ecs groups-ecs zone-ecs weighted-load priority-load \
  performance-ecs-rum performance-ecs-rum-load; do
  a=$(count "$case" 1000)
  b=$(count "$case" 11000)
  echo "$case $(((b - a) / 10000))"
done
