#!/usr/bin/env bash
# bench/dnsperf.sh — UDP throughput / CPU-per-query comparison of steerdns and gdnsd.
#
# Both servers serve the same zone `bench.test.` on loopback:
#   lb.bench.test.    weighted 3:2:1 over three IPv4 endpoints (one A per answer)
#   www.bench.test.   priority / failover, primary answers (all endpoints always up)
#   pool.bench.test.  multivalue: all three IPv4 endpoints in every answer
#   ns1, s1, s2, s3   static A;  info, txt2   static TXT
# dnsperf is run against each server in turn for several rounds; per round we record
# qps, lost queries, server CPU time per answered query (from /proc/PID/stat), dnsperf's
# average/max latency, the server's RSS, dnsperf's own CPU use and the load average.
#
# Requirements (Debian): apt-get install -y dnsperf gdnsd dnsutils   (dig is optional:
# without it readiness is probed with dnsperf), plus a Rust toolchain (cargo) for the build.
#
# Usage: bench/dnsperf.sh [-r ROUNDS] [-l SECONDS] [-w WARMUP] [-c CLIENTS] [-T THREADS]
#                         [-q OUTSTANDING] [--steerdns-port P] [--gdnsd-port P]
#                         [--src DIR] [--no-build] [--keep]
# Honours CARGO_TARGET_DIR (and any target-dir set in .cargo/config) for the build.
# --src builds another source tree than this checkout, e.g. a clean export of one commit
# while the working tree is being edited:  git archive HEAD | tar -x -C /tmp/sd-head
# --keep leaves the temp dir (configs, logs, raw dnsperf output) in place.
set -euo pipefail

ROUNDS=3          # measured rounds; each round runs every server once
DURATION=10       # seconds per dnsperf run (-l)
WARMUP=2          # seconds of unmeasured load per server before round 1 (page faults, caches)
CLIENTS=8         # dnsperf -c: distinct source ports, so SO_REUSEPORT spreads them over sockets
THREADS=1         # dnsperf -T
OUTSTANDING=100   # dnsperf -q (its default); no -Q, i.e. no qps limit
SD_PORT=5400
GD_PORT=5401
BUILD=1
KEEP=0
SRC=

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -r|--rounds) ROUNDS=$2; shift 2 ;;
    -l|--duration) DURATION=$2; shift 2 ;;
    -w|--warmup) WARMUP=$2; shift 2 ;;
    -c|--clients) CLIENTS=$2; shift 2 ;;
    -T|--threads) THREADS=$2; shift 2 ;;
    -q|--outstanding) OUTSTANDING=$2; shift 2 ;;
    --steerdns-port) SD_PORT=$2; shift 2 ;;
    --gdnsd-port) GD_PORT=$2; shift 2 ;;
    --src) SRC=$(cd "$2" && pwd); shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${SRC:-$REPO}   # the tree that is built and benchmarked
for tool in cargo dnsperf gdnsd getconf awk; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done
HAVE_DIG=0; command -v dig >/dev/null && HAVE_DIG=1
CLK_TCK=$(getconf CLK_TCK)   # units of utime/stime in /proc/PID/stat

# ---------------------------------------------------------------------------------------
# 1. Build. `cargo metadata` tells where the binary lands, whatever CARGO_TARGET_DIR or a
#    .cargo/config target-dir says, so we never guess the path.
TARGET_DIR=$(cd "$SRC" && cargo metadata --format-version 1 --no-deps \
  | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
STEERDNS=$TARGET_DIR/release/steerdns
if [[ $BUILD == 1 ]]; then
  echo "== building steerdns (release) from $SRC into $TARGET_DIR"
  (cd "$SRC" && cargo build --release --quiet)
fi
[[ -x $STEERDNS ]] || { echo "no binary at $STEERDNS (drop --no-build?)" >&2; exit 1; }
# Versions of what is measured (gdnsd has no -V: its usage text carries the version).
rev=$(git -C "$SRC" describe --always --dirty 2>/dev/null || echo "not a git checkout")
echo "   $("$STEERDNS" --version) from $SRC ($rev)"
echo "   $(gdnsd -h 2>&1 | grep -m1 'gdnsd version'); dnsperf $(dnsperf -h 2>&1 | awk '/^Version/ { print $2 }')"
echo "   kernel $(uname -r); $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"

# ---------------------------------------------------------------------------------------
# Temp dir and clean-up: servers are stopped with SIGTERM (both exit cleanly on it), then
# SIGKILL after 5 s if one hangs, whatever way the script ends.
WORK=$(mktemp -d /tmp/steerdns-bench.XXXXXX)
SD_PID= GD_PID=
stop_server() {  # stop_server PID NAME
  local pid=$1 name=$2 i
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "warning: $name ($pid) ignored SIGTERM, killing" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_server "$SD_PID" steerdns
  stop_server "$GD_PID" gdnsd
  if [[ $KEEP == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # run the EXIT trap on Ctrl-C too

# ---------------------------------------------------------------------------------------
# 2. Configurations. Same names, addresses and TTLs on both sides; dynamic answers TTL 30,
#    static ones 3600. No health checks anywhere: always_serve in steerdns, the built-in
#    always-UP service type `up` in gdnsd, so neither server spends time probing.
mkdir -p "$WORK/steerdns/profiles" "$WORK/gdnsd/zones" "$WORK/gdnsd/run" "$WORK/gdnsd/state"

cat >"$WORK/steerdns/steerdns.yaml" <<EOF
listen:
  dns: ["127.0.0.1:$SD_PORT"]
zones:
  - origin: bench.test.
    ns: [ns1.bench.test.]
    soa: { rname: hostmaster.bench.test., refresh: 3600, retry: 600, expire: 604800, minimum: 30 }
    ttl: 3600
    records:
      - "ns1 A 127.0.0.1"
      - "s1 A 192.0.2.101"
      - "s2 A 192.0.2.102"
      - "s3 A 192.0.2.103"
      - "info TXT \"steerdns benchmark zone\""
      - "txt2 TXT \"v=spf1 -all\""
profiles: profiles/
EOF

cat >"$WORK/steerdns/profiles/bench.yaml" <<'EOF'
name: lb
routing: weighted
ttl: 30
endpoints:
  - { name: e1, target: 192.0.2.11, weight: 3, always_serve: true }
  - { name: e2, target: 192.0.2.12, weight: 2, always_serve: true }
  - { name: e3, target: 192.0.2.13, weight: 1, always_serve: true }
---
name: www
routing: priority
ttl: 30
endpoints:
  - { name: primary, target: 192.0.2.21, priority: 1, always_serve: true }
  - { name: secondary, target: 198.51.100.21, priority: 2, always_serve: true }
---
name: pool
routing: multivalue
ttl: 30
max_return: 3
endpoints:
  - { name: a, target: 192.0.2.31, always_serve: true }
  - { name: b, target: 192.0.2.32, always_serve: true }
  - { name: c, target: 192.0.2.33, always_serve: true }
EOF

# gdnsd 3.x: `config` + `zones/<origin>`. run_dir/state_dir point into the temp dir so no
# root-owned /run/gdnsd or /var/lib/gdnsd is needed. udp_threads is gdnsd's default (2),
# matching steerdns (one UDP socket+thread per core, here 2).
#   weighted (multi=false): one address, odds 3:2:1        == steerdns weighted
#   metafo: first datacenter whose address is up           == steerdns priority
#   multifo: every up address (gdnsd rotates the RRset)    == steerdns multivalue, max_return 3
cat >"$WORK/gdnsd/config" <<EOF
options => {
  listen => [ 127.0.0.1:$GD_PORT ]
  udp_threads => 2
  run_dir => "$WORK/gdnsd/run"
  state_dir => "$WORK/gdnsd/state"
}
plugins => {
  weighted => {
    service_types => up
    lb => {
      e1 = [ 192.0.2.11, 3 ]
      e2 = [ 192.0.2.12, 2 ]
      e3 = [ 192.0.2.13, 1 ]
    }
  }
  metafo => {
    resources => {
      www => {
        service_types => up
        datacenters => [ primary, secondary ]
        dcmap => { primary => 192.0.2.21, secondary => 198.51.100.21 }
      }
    }
  }
  multifo => {
    pool => { service_types => up, a => 192.0.2.31, b => 192.0.2.32, c => 192.0.2.33 }
  }
}
EOF

# gdnsd warns at start that the SOA TTL is clamped to the ncache value (30) and that the
# zone has a single NS; neither touches the benchmarked answers.
cat >"$WORK/gdnsd/zones/bench.test" <<'EOF'
$TTL 3600
@     SOA ns1 hostmaster ( 1 3600 600 604800 30 )
@     NS   ns1
ns1   A    127.0.0.1
s1    A    192.0.2.101
s2    A    192.0.2.102
s3    A    192.0.2.103
info  TXT  "steerdns benchmark zone"
txt2  TXT  "v=spf1 -all"
lb    30   DYNA weighted!lb
www   30   DYNA metafo!www
pool  30   DYNA multifo!pool
EOF

echo "== validating configurations"
"$STEERDNS" check -c "$WORK/steerdns/steerdns.yaml"
gdnsd -c "$WORK/gdnsd" checkconf >"$WORK/gdnsd-checkconf.log" 2>&1 \
  || { cat "$WORK/gdnsd-checkconf.log" >&2; exit 1; }
echo "gdnsd checkconf: ok"

# ---------------------------------------------------------------------------------------
# 3. Query file: 100 lines, 90 % A. Shuffled once with a fixed seed so consecutive queries
#    are not all for one name, and identical for both servers and all runs.
{
  for i in $(seq 25); do echo "lb.bench.test A"; done
  for i in $(seq 15); do echo "www.bench.test A"; done
  for i in $(seq 15); do echo "pool.bench.test A"; done
  for n in s1 s2 s3; do for i in $(seq 10); do echo "$n.bench.test A"; done; done
  for i in $(seq 5); do echo "ns1.bench.test A"; done
  for i in $(seq 6); do echo "info.bench.test TXT"; done
  for i in $(seq 4); do echo "txt2.bench.test TXT"; done
} | awk 'BEGIN { srand(42) } { print rand() "\t" $0 }' | sort -k1,1 | cut -f2- >"$WORK/queries.txt"
echo "== query mix ($(wc -l <"$WORK/queries.txt") lines, looped by dnsperf):"
sort "$WORK/queries.txt" | uniq -c | sort -rn | sed 's/^/   /'

# ---------------------------------------------------------------------------------------
# 4. Start both servers (foreground processes, logs to files) and wait until they answer.
RUST_LOG=${RUST_LOG:-warn} "$STEERDNS" serve -c "$WORK/steerdns/steerdns.yaml" \
  2>"$WORK/steerdns.log" &
SD_PID=$!
gdnsd -c "$WORK/gdnsd" start >"$WORK/gdnsd.log" 2>&1 &
GD_PID=$!

answers() {  # answers PORT: true when the server answers ns1.bench.test A
  if [[ $HAVE_DIG == 1 ]]; then
    [[ $(dig +short +time=1 +tries=1 @127.0.0.1 -p "$1" ns1.bench.test A 2>/dev/null) == 127.0.0.1 ]]
  else
    echo "ns1.bench.test A" | dnsperf -s 127.0.0.1 -p "$1" -n 1 -t 1 2>/dev/null \
      | grep -q 'Queries completed: *1 '
  fi
}
wait_ready() {  # wait_ready PORT PID NAME LOG
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$2" 2>/dev/null || { echo "$3 exited:" >&2; cat "$4" >&2; exit 1; }
    answers "$1" && return 0
    sleep 0.1
  done
  echo "$3 does not answer on port $1:" >&2; cat "$4" >&2; exit 1
}
wait_ready "$SD_PORT" "$SD_PID" steerdns "$WORK/steerdns.log"
wait_ready "$GD_PORT" "$GD_PID" gdnsd "$WORK/gdnsd.log"
echo "== servers up: steerdns pid $SD_PID port $SD_PORT, gdnsd pid $GD_PID port $GD_PORT"

if [[ $HAVE_DIG == 1 ]]; then
  echo "== answers (dig +short), to check both serve the same data:"
  printf '   %-22s %-32s %s\n' "query" "steerdns" "gdnsd"
  for q in "lb A" "www A" "pool A" "s1 A" "ns1 A" "info TXT" "txt2 TXT"; do
    set -- $q
    a=$(dig +short @127.0.0.1 -p "$SD_PORT" "$1.bench.test" "$2" | sort | paste -sd' ')
    b=$(dig +short @127.0.0.1 -p "$GD_PORT" "$1.bench.test" "$2" | sort | paste -sd' ')
    printf '   %-22s %-32s %s\n' "$1.bench.test $2" "$a" "$b"
  done
  for p in "$SD_PORT:steerdns" "$GD_PORT:gdnsd"; do
    echo "== full answer from ${p#*:}: dig @127.0.0.1 -p ${p%%:*} lb.bench.test"
    dig @127.0.0.1 -p "${p%%:*}" lb.bench.test | sed -n '/->>HEADER<<-/,/^;; Query time/p' | sed 's/^/   /'
  done
fi

# ---------------------------------------------------------------------------------------
# 5. Measurement helpers.
cpu_ticks() {  # "utime stime" of all threads of PID, in clock ticks: fields 14 and 15 of
  # /proc/PID/stat, counted after the ")" closing the command name (which may hold spaces).
  local s; s=$(<"/proc/$1/stat"); s=${s##*) }
  awk '{ print $12, $13 }' <<<"$s"
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

run_dnsperf() {  # run_dnsperf PORT SECONDS OUTFILE; dnsperf's own CPU goes to OUTFILE.time
  local TIMEFORMAT='%U %S %R'
  { time dnsperf -s 127.0.0.1 -p "$1" -d "$WORK/queries.txt" -c "$CLIENTS" -T "$THREADS" \
      -q "$OUTSTANDING" -l "$2" >"$3" 2>&1; } 2>"$3.time"
}

RESULTS=$WORK/results.tsv
: >"$RESULTS"
measure() {  # measure ROUND NAME PORT PID
  local round=$1 name=$2 port=$3 pid=$4 out="$WORK/dnsperf-$2-$1.txt"
  local load c0 c1 rss u0 s0 u1 s1
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  read -r u0 s0 < <(cpu_ticks "$pid")
  run_dnsperf "$port" "$DURATION" "$out"
  read -r u1 s1 < <(cpu_ticks "$pid")
  rss=$(rss_kb "$pid")
  kill -0 "$pid" 2>/dev/null || { echo "$name died during round $round" >&2; exit 1; }
  # dnsperf 2.x summary lines:  "Queries completed:    123 (99.9%)", "Queries lost: 0 (0.00%)",
  # "Queries per second:   12345.6", "Average Latency (s):  0.000123 (min 0.000010, max 0.0042)".
  awk -v round="$round" -v name="$name" -v dt=$((u1 - u0 + s1 - s0)) -v du=$((u1 - u0)) -v hz="$CLK_TCK" \
      -v rss="$rss" -v load="$load" -v tfile="$out.time" '
    /Queries completed:/    { done = $3 }
    /Queries lost:/         { lost = $3 }
    /Queries per second:/   { qps = $4 }
    /Average Latency \(s\):/ { avg = $4; max = $NF; sub(/\)/, "", max) }
    /Run time \(s\):/       { wall = $4 }
    END {
      getline t < tfile; split(t, tt, " ")        # dnsperf user, sys, real seconds
      if (done == 0) { print "no queries completed for " name > "/dev/stderr"; exit 1 }
      split(load, l, " ")
      printf "%d\t%s\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.3f\t%.3f\t%.1f\t%.0f\t%s\t%s\t%s\n",
        round, name, qps, lost, dt / hz * 1e6 / done, du / hz * 1e6 / done, 100 * dt / hz / wall,
        avg * 1000, max * 1000, rss / 1024, 100 * (tt[1] + tt[2]) / tt[3], l[1], l[2], l[3]
    }' "$out" >>"$RESULTS"
}

COLS="round\tserver\tqps\tlost\tcpu_us/q\tusr_us/q\tsrv_cpu%\tavg_ms\tmax_ms\trss_MB\tdnsperf_cpu%\tload1\tload5\tload15"
print_rows() { { echo -e "$COLS"; cat; } | column -t -s $'\t' | sed 's/^/   /'; }

echo "== dnsperf: -c $CLIENTS -T $THREADS -q $OUTSTANDING -l $DURATION, no -Q (unlimited);" \
     "$ROUNDS rounds; $(nproc) cores; CLK_TCK=$CLK_TCK"
echo "   cpu_us/q = server (utime+stime) delta / completed queries, usr_us/q its utime part"
echo "   (the rest is kernel time, mostly the UDP socket calls); srv_cpu% and dnsperf_cpu%"
echo "   are % of one core over the run (200% = both cores); load = /proc/loadavg before the run"
if [[ $WARMUP -gt 0 ]]; then
  run_dnsperf "$SD_PORT" "$WARMUP" "$WORK/warmup-steerdns.txt"
  run_dnsperf "$GD_PORT" "$WARMUP" "$WORK/warmup-gdnsd.txt"
fi

# 6. Rounds. The order flips every round (A B, B A, A B, ...) so neither server always
#    runs first or second after the other's load, background noise being what it is.
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order="steerdns gdnsd"; else order="gdnsd steerdns"; fi
  for s in $order; do
    if [[ $s == steerdns ]]; then measure "$r" steerdns "$SD_PORT" "$SD_PID"
    else measure "$r" gdnsd "$GD_PORT" "$GD_PID"; fi
  done
  echo "-- round $r"
  awk -F'\t' -v r="$r" '$1 == r' "$RESULTS" | print_rows
done

# Same work on both sides? Response codes and average reply size of the last round.
echo "== replies in round $ROUNDS (should match between servers):"
for s in steerdns gdnsd; do
  grep -h -E 'Response codes|packet size' "$WORK/dnsperf-$s-$ROUNDS.txt" \
    | sed "s/^ */   $s: /"
done

# ---------------------------------------------------------------------------------------
# 7. Medians per server and column (robust to one noisy round), then the ratios.
median() {  # median SERVER COLUMN
  awk -F'\t' -v s="$1" -v c="$2" '$2 == s { print $c }' "$RESULTS" | sort -g \
    | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "== medians over $ROUNDS rounds"
for s in steerdns gdnsd; do
  row="median\t$s"
  for c in $(seq 3 14); do row+="\t$(median "$s" "$c")"; done
  echo -e "$row"
done | print_rows

echo "== ratios steerdns / gdnsd (medians)"
awk -v q1="$(median steerdns 3)" -v q2="$(median gdnsd 3)" \
    -v c1="$(median steerdns 5)" -v c2="$(median gdnsd 5)" \
    -v u1="$(median steerdns 6)" -v u2="$(median gdnsd 6)" 'BEGIN {
  printf "   qps:          %.3f  (>1: steerdns answers more per second)\n", q1 / q2
  printf "   cpu us/query: %.3f  (<1: steerdns spends less CPU per answer)\n", c1 / c2
  printf "   (user-space part only: %.3f)\n", u1 / u2
}'
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
