#!/usr/bin/env bash
# bench/profile_details.sh — what `GET /api/v1/profiles/{name}` (one profile's details, as
# the status page shows them) costs for a profile of N endpoints.
#
# For each N: a configuration with one weighted profile `big` of N always_serve endpoints
# (and the one-zone setup of bench/gen_profiles.py), served by BINARY on 127.0.0.1; after
# the first answer, CALLS calls with curl, and the median, minimum and size of the answer.
#
# Requirements: curl, python3. Usage:
#   bench/profile_details.sh [-b BINARY] [-n CALLS] N...
# Default: -b target/release/steerdns -n 21, N = 1000 3000 10000.
set -euo pipefail

BINARY=target/release/steerdns
CALLS=21
while getopts "b:n:" opt; do
  case $opt in
    b) BINARY=$OPTARG ;;
    n) CALLS=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1000 3000 10000)

work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

printf '| endpoints | median | min | bytes |\n| --- | --- | --- | --- |\n'
for n in "${SIZES[@]}"; do
  dir=$work/n$n
  python3 "$(dirname "$0")/gen_profiles.py" 1 "$dir" --port 5460 --admin-port 5461 > /dev/null
  rm -f "$dir"/profiles/*
  python3 - "$n" > "$dir/profiles/big.yaml" <<'EOF'
import sys
n = int(sys.argv[1])
print("name: big\nrouting: weighted\nendpoints:")
for i in range(n):
    print(f"  - {{ name: e{i}, target: 10.{i >> 16}.{(i >> 8) & 255}.{i & 255}, always_serve: true }}")
EOF
  "$BINARY" serve -c "$dir/steerdns.yaml" > "$dir/log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null http://127.0.0.1:5461/api/v1/profiles/big.scale.test. && break
    sleep 0.1
  done
  times=()
  for _ in $(seq "$CALLS"); do
    times+=("$(curl -sf -o "$dir/out" -w '%{time_total}' http://127.0.0.1:5461/api/v1/profiles/big.scale.test.)")
  done
  bytes=$(stat -c %s "$dir/out")
  sorted=($(printf '%s\n' "${times[@]}" | sort -g))
  median=${sorted[$((CALLS / 2))]}
  printf '| %s | %.1f ms | %.1f ms | %s |\n' "$n" "$(echo "$median * 1000" | bc -l)" \
    "$(echo "${sorted[0]} * 1000" | bc -l)" "$bytes"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
done
