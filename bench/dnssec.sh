#!/usr/bin/env bash
# bench/dnssec.sh — the cost of online DNSSEC signing, measured with dnsperf over loopback
# against `examples/dnssec_bench.rs serve` (a server whose zone is signed with fresh keys).
#
#   1. signatures per second on one core, each algorithm (dnssec_bench sign-rate)
#   2. the mixed workload of bench/dnsperf.sh (weighted lb, priority www, multivalue pool,
#      static A/TXT) at a fixed rate, without EDNS, with EDNS and with DO (dnsperf -D):
#      server CPU µs per answered query from /proc/PID/stat, for P-256 and Ed25519
#   3. a flood of queries with DO for random names that do not exist (compact denial, never
#      cached): answered, lost (dropped by the signing budget), CPU, and the server's
#      steerdns_dnssec_* counters
#   4. when knotd is installed: Knot DNS with mod-onlinesign (P-256) on the same names as a
#      plain zone (lb, www, pool as fixed A records), the mixed workload and the flood
#
# Requirements (Debian): dnsperf, curl, python3, cargo; knot optional.
# Usage: bench/dnssec.sh [-l SECONDS] [-Q QPS] [-r ROUNDS]   (default -l 10 -Q 20000 -r 3)
set -euo pipefail

DURATION=10
RATE=20000
ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    -l) DURATION=$2; shift 2 ;;
    -Q) RATE=$2; shift 2 ;;
    -r) ROUNDS=$2; shift 2 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 1 ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
(cd "$REPO" && cargo build --release --example dnssec_bench >/dev/null)
BENCH="$TARGET/release/examples/dnssec_bench"
WORK=$(mktemp -d)
SERVER=
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=5450
ADMIN=5451

mkdir -p "$WORK/profiles"
cat >"$WORK/steerdns.yaml" <<EOF
listen:
  dns: ["127.0.0.1:$PORT"]
  admin: "127.0.0.1:$ADMIN"
zones:
  - origin: bench.test.
    ns: [ns1.bench.test.]
    soa: { rname: hostmaster.bench.test. }
    ttl: 3600
    records:
      - "ns1 A 127.0.0.1"
      - "s1 A 192.0.2.1"
      - "s2 A 192.0.2.2"
      - "s3 A 192.0.2.3"
      - 'info TXT "v=spf1 -all"'
      - 'txt2 TXT "a second text record"'
profiles: profiles/
EOF
cat >"$WORK/profiles/mixed.yaml" <<EOF
name: lb
routing: weighted
endpoints:
  - { name: a, target: 192.0.2.10, weight: 3, always_serve: true }
  - { name: b, target: 192.0.2.11, weight: 2, always_serve: true }
  - { name: c, target: 192.0.2.12, weight: 1, always_serve: true }
---
name: www
routing: priority
endpoints:
  - { name: one, target: 192.0.2.20, priority: 1, always_serve: true }
  - { name: two, target: 192.0.2.21, priority: 2, always_serve: true }
---
name: pool
routing: multivalue
max_return: 3
endpoints:
  - { name: a, target: 192.0.2.41, always_serve: true }
  - { name: b, target: 192.0.2.42, always_serve: true }
  - { name: c, target: 192.0.2.43, always_serve: true }
  - { name: d, target: 192.0.2.44, always_serve: true }
EOF
shuffle() { awk 'BEGIN { srand(42) } { print rand() "\t" $0 }' | sort -k1,1 | cut -f2- ; }
{
  for i in $(seq 25); do echo "lb.bench.test A"; done
  for i in $(seq 15); do echo "www.bench.test A"; done
  for i in $(seq 15); do echo "pool.bench.test A"; done
  for n in s1 s2 s3; do for i in $(seq 10); do echo "$n.bench.test A"; done; done
  for i in $(seq 5); do echo "ns1.bench.test A"; done
  for i in $(seq 6); do echo "info.bench.test TXT"; done
  for i in $(seq 4); do echo "txt2.bench.test TXT"; done
} | shuffle >"$WORK/mixed.txt"
python3 -c "
import random
random.seed(7)
for _ in range(200000):
    print('%016x.bench.test A' % random.getrandbits(64))" >"$WORK/random.txt"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# run NAME FILE [dnsperf options...]: prints qps, lost and server CPU µs per answered query.
run() {
  local name=$1 file=$2; shift 2
  local before after out answered lost qps
  before=$(cpu_ticks "$SERVER")
  out=$(dnsperf -s 127.0.0.1 -p $PORT -d "$file" -l "$DURATION" -c 8 -q 100 -Q "$RATE" "$@" 2>&1)
  after=$(cpu_ticks "$SERVER")
  answered=$(awk '/Queries completed:/ { print $3 }' <<<"$out")
  lost=$(awk '/Queries lost:/ { print $3 }' <<<"$out")
  qps=$(awk '/Queries per second:/ { print $4 }' <<<"$out")
  awk -v n="$name" -v a="$answered" -v l="$lost" -v q="$qps" -v t=$((after - before)) -v hz="$HZ" \
    'BEGIN { printf "%-22s qps %9.0f  answered %8d  lost %7d  cpu %6.2f µs/answer\n", n, q, a, l, t * 1e6 / hz / (a > 0 ? a : 1) }'
}

start() {
  "$BENCH" serve "$WORK/steerdns.yaml" "$@" >"$WORK/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do
    grep -q serving "$WORK/server.log" && curl -s "127.0.0.1:$ADMIN/metrics" | grep -q 'steerdns_dnssec_presigned [1-9]' && return
    sleep 0.1
  done
  echo "server did not start or pre-sign:" >&2; cat "$WORK/server.log" >&2; exit 1
}

echo "== signatures per second, one core"
"$BENCH" sign-rate 3
for alg in p256 ed25519; do
  echo "== mixed workload at $RATE qps, $DURATION s, $ROUNDS rounds ($alg)"
  if [[ $alg == ed25519 ]]; then start --ed25519; else start; fi
  dnsperf -s 127.0.0.1 -p $PORT -d "$WORK/mixed.txt" -l 2 -D >/dev/null 2>&1   # warm up
  for r in $(seq "$ROUNDS"); do
    run "unsigned (no EDNS)" "$WORK/mixed.txt"
    run "unsigned (EDNS, -e)" "$WORK/mixed.txt" -e
    run "signed (-D)" "$WORK/mixed.txt" -D
  done
  if [[ $alg == p256 ]]; then
    echo "== random-name flood with DO at $RATE qps, $DURATION s (compact denial, never cached)"
    # Many outstanding queries and a short timeout: dropped queries must not throttle dnsperf.
    run "random names (-D)" "$WORK/random.txt" -D -q 20000 -t 1
    curl -s "127.0.0.1:$ADMIN/metrics" | grep '^steerdns_dnssec'
  fi
  kill $SERVER; wait $SERVER 2>/dev/null || true
done

if command -v knotd >/dev/null; then
  echo "== Knot DNS $(knotd -V | awk '{ print $NF }') with mod-onlinesign (P-256), same rate"
  mkdir -p "$WORK/knot"
  cat >"$WORK/knot/bench.test.zone" <<EOF
\$ORIGIN bench.test.
\$TTL 3600
@ SOA ns1 hostmaster 1 3600 600 604800 30
@ NS ns1
ns1 A 127.0.0.1
s1 A 192.0.2.1
s2 A 192.0.2.2
s3 A 192.0.2.3
info TXT "v=spf1 -all"
txt2 TXT "a second text record"
lb 30 A 192.0.2.10
www 30 A 192.0.2.20
pool 30 A 192.0.2.41
pool 30 A 192.0.2.42
pool 30 A 192.0.2.43
EOF
  KNOT_PORT=$((PORT + 2))
  cat >"$WORK/knot/knot.conf" <<EOF
server:
  listen: 127.0.0.1@$KNOT_PORT
  rundir: $WORK/knot
  udp-workers: 2
  tcp-workers: 1
log:
  - target: stderr
    any: warning
database:
  storage: $WORK/knot
template:
  - id: default
    storage: $WORK/knot
zone:
  - domain: bench.test
    file: bench.test.zone
    module: mod-onlinesign
EOF
  knotd -c "$WORK/knot/knot.conf" 2>"$WORK/knot/log" &
  SERVER=$!
  for _ in $(seq 100); do
    dnsperf -s 127.0.0.1 -p $KNOT_PORT -d "$WORK/mixed.txt" -n 1 2>/dev/null |
      grep -q 'Queries completed: *[1-9]' && break
    sleep 0.1
  done
  MAIN_PORT=$PORT; PORT=$KNOT_PORT
  dnsperf -s 127.0.0.1 -p $PORT -d "$WORK/mixed.txt" -l 2 -D >/dev/null 2>&1   # warm up
  for r in $(seq "$ROUNDS"); do
    run "knot unsigned" "$WORK/mixed.txt"
    run "knot signed (-D)" "$WORK/mixed.txt" -D
  done
  run "knot random (-D)" "$WORK/random.txt" -D -q 20000 -t 1
  PORT=$MAIN_PORT
  kill $SERVER; wait $SERVER 2>/dev/null || true
fi
