#!/usr/bin/env bash
# bench/capacity.sh — capacity per core of steerdns (sockets and AF_XDP) against gdnsd and
# Knot (sockets and XDP), with kxdpgun as the load generator across a veth pair.
#
# The bed: two network namespaces joined by a veth pair in the benchmarking range
# 198.18.0.0/15 (server 198.18.0.1, generator 198.18.0.2). Each server runs pinned to CPU
# $SERVER_CPU with one worker (one UDP socket, or one AF_XDP queue); kxdpgun runs pinned to
# CPU $GEN_CPU in the other namespace.
#
# Capacity: the highest offered rate (kxdpgun -Q) of which at least 98 % is answered,
# found by bisection between 0 and the generator's own ceiling, per server and name set
# (static: A records; routed: a weighted name — for Knot, which has no routing, the same
# name as a static record), in ROUNDS rounds whose server order rotates. Reported: median
# and range. The generator's ceiling is measured first against a server that drops
# everything (an XDP program that answers nothing does not exist here, so: the rate
# kxdpgun reaches with -r, replies dropped); a capacity within 5 % of that ceiling is
# reported as "≥ ceiling (generator-bound)", not as a capacity.
#
# CPU per answered query, from /proc/stat per CPU during a run at 90 % of the capacity:
# all busy time of the server's CPU (user+nice+system+irq+softirq) plus the softirq time of
# the generator's CPU, over the answers. On veth the receive softirq of the server side
# runs on the sending CPU, so counting only the server's CPU would flatter the socket paths
# (their kernel work is billed to the generator's core); the generator's own user and
# system time stay out.
#
# Requirements (Debian): knot knot-dnsutils (kxdpgun, kdig) gdnsd iproute2, root, 2+ CPUs.
# Usage: bench/capacity.sh [-r ROUNDS] [-t SECONDS] [--servers LIST] [--names LIST]
#                          [--no-build] [--keep]
# STEERDNS_BIN=PATH runs that binary instead of the release build (nothing is built then).
# Default: -r 3 -t 5 --servers sd-sock,sd-xdp,gdnsd,knot-sock,knot-xdp --names static,routed
set -euo pipefail

ROUNDS=3
DURATION=5
SERVERS=sd-sock,sd-xdp,gdnsd,knot-sock,knot-xdp
NAMES=static,routed
SERVER_CPU=0
GEN_CPU=1
BUILD=1
KEEP=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -t) DURATION=$2; shift 2 ;;
    --servers) SERVERS=$2; shift 2 ;;
    --names) NAMES=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) usage 1 >&2 ;;
  esac
done

need kxdpgun knotd gdnsd kdig ip taskset
need_root
steerdns_binary "$ROOT" "$BUILD"
BD=$STEERDNS
work_dir capacity
NS_S=capsrv$$ NS_G=capgen$$ IF_S=caps$$ IF_G=capg$$
SRV=198.18.0.1 GEN=198.18.0.2
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  veth_bed_remove "$NS_S" "$NS_G"
  (( KEEP )) || rm -rf "$WORK"
}
trap cleanup EXIT

# 1. The bed. One queue each way, so one worker serves everything.
veth_bed "$NS_S" "$IF_S" $SRV "$NS_G" "$IF_G" $GEN
in_s() { ip netns exec "$NS_S" "$@"; }
in_g() { ip netns exec "$NS_G" "$@"; }

# 2. The same names everywhere: static A records and one weighted name.
STATIC='www A 192.0.2.21
api A 192.0.2.22
ns1 A 198.18.0.1'
mkdir -p "$WORK/sd/profiles"
for mode in sock xdp; do
  { echo "listen:"
    echo "  dns: [\"$SRV:53\"]"
    echo "  udp_threads: 1"
    [[ $mode == xdp ]] && echo "  xdp: { interface: $IF_S, queues: [0], addresses: [$SRV] }"
    echo "zones:"
    echo "  - origin: bench.test."
    echo "    ns: [ns1.bench.test.]"
    echo "    soa: { rname: hostmaster.bench.test. }"
    echo "    records:"
    sed 's/.*/      - "&"/' <<<"$STATIC"
    echo "profiles: profiles/"
  } >"$WORK/sd/$mode.yaml"
done
cat >"$WORK/sd/profiles/lb.yaml" <<'EOF'
name: lb
routing: weighted
ttl: 30
endpoints:
  - { name: e1, target: 192.0.2.11, weight: 3, always_serve: true }
  - { name: e2, target: 192.0.2.12, weight: 2, always_serve: true }
  - { name: e3, target: 192.0.2.13, weight: 1, always_serve: true }
EOF
mkdir -p "$WORK/gd/zones" "$WORK/gd/run" "$WORK/gd/state"
cat >"$WORK/gd/config" <<EOF
options => { listen => [ $SRV:53 ], udp_threads => 1, run_dir => "$WORK/gd/run", state_dir => "$WORK/gd/state" }
plugins => { weighted => { service_types => up, lb => { e1 = [ 192.0.2.11, 3 ], e2 = [ 192.0.2.12, 2 ], e3 = [ 192.0.2.13, 1 ] } } }
EOF
{ echo "\$TTL 3600"; echo "@ SOA ns1 hostmaster ( 1 3600 600 604800 30 )"; echo "@ NS ns1"
  echo "$STATIC"; echo "lb 30 DYNA weighted!lb"; } >"$WORK/gd/zones/bench.test"
mkdir -p "$WORK/kn/run" "$WORK/kn/db" "$WORK/kn/zones"
{ echo "\$ORIGIN bench.test."; echo "\$TTL 3600"
  echo "@ SOA ns1 hostmaster 1 3600 600 604800 30"; echo "@ NS ns1"
  echo "$STATIC"; echo "lb 30 A 192.0.2.11"; } >"$WORK/kn/zones/bench.test.zone"
for mode in sock xdp; do
  listen="listen: $SRV@53"
  [[ $mode == xdp ]] && listen="listen: $SRV@53
xdp:
    listen: $IF_S@53
    udp: on"
  cat >"$WORK/kn/$mode.conf" <<EOF
server:
    rundir: "$WORK/kn/run"
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
    $(head -1 <<<"$listen")
$(tail -n +2 <<<"$listen")
database:
    storage: "$WORK/kn/db"
log:
  - target: stderr
    any: warning
template:
  - id: default
    storage: "$WORK/kn/zones"
    zonefile-sync: -1
    journal-content: none
zone:
  - domain: bench.test
    file: bench.test.zone
EOF
done
printf 'www.bench.test. A\napi.bench.test. A\n' >"$WORK/static.q"
printf 'lb.bench.test. A\n' >"$WORK/routed.q"

# 3. Servers.
SERVER_PID=
start() {  # start SERVER
  local cmd
  case "$1" in
    sd-sock) cmd=("$BD" serve -c "$WORK/sd/sock.yaml") ;;
    sd-xdp) cmd=("$BD" serve -c "$WORK/sd/xdp.yaml") ;;
    gdnsd) cmd=(gdnsd -c "$WORK/gd" -f start) ;;
    knot-sock) cmd=(knotd -c "$WORK/kn/sock.conf") ;;
    knot-xdp) cmd=(knotd -c "$WORK/kn/xdp.conf") ;;
  esac
  in_s taskset -c "$SERVER_CPU" "${cmd[@]}" >"$WORK/$1.log" 2>&1 &
  SERVER_PID=$!; PIDS+=("$SERVER_PID")
  wait_until 100 0.1 "$SERVER_PID" "$WORK/$1.log" answers
}
answers() {  # the server answers www.bench.test from the generator's namespace
  in_g kdig +short +timeout=1 +retry=0 @$SRV www.bench.test A 2>/dev/null | grep -q 192.0.2.21
}
stop_server() { stop_pid "$SERVER_PID"; }

# 4. One run: offered rate -> answered share (percent) and answers per second.
gun() {  # gun RATE QUERYFILE [extra kxdpgun args] -> "answered_pct replies_per_s"
  local out
  out=$(in_g taskset -c "$GEN_CPU" kxdpgun -t "$DURATION" -Q "$1" -i "$2" -I "$IF_G" \
        -F "${GEN_CPU}s1" "${@:3}" $SRV 2>&1) || true
  echo "$out" >>"$WORK/gun.log"
  awk '/total replies:/ { gsub(/[()%]/, ""); r = $3; p = $(NF) }
       /total queries:/ { q = $3 }
       END { if (q > 0) printf "%.2f %d\n", 100 * r / q, r / '"$DURATION"'; else print "0 0" }' <<<"$out"
}

# The generator's ceiling: the rate it reaches offering far more than it can, replies
# dropped unread.
ceiling() {
  local out
  out=$(in_g taskset -c "$GEN_CPU" kxdpgun -t "$DURATION" -Q 100000000 -r -i "$WORK/static.q" \
        -I "$IF_G" -F "${GEN_CPU}s1" $SRV 2>&1) || true
  awk '/total queries:/ { print int($3 / '"$DURATION"') }' <<<"$out"
}

capacity() {  # capacity QUERYFILE CEILING -> highest rate with >= 98 % answered
  local lo=0 hi=$2 mid pct
  while (( hi - lo > hi / 50 + 1000 )); do
    mid=$(( (lo + hi) / 2 ))
    read -r pct _ < <(gun "$mid" "$1")
    if awk -v p="$pct" 'BEGIN { exit !(p >= 98) }'; then lo=$mid; else hi=$mid; fi
  done
  echo "$lo"
}

busy() {  # busy CPU -> busy ticks (user nice system irq softirq) of that CPU
  awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 }' /proc/stat
}
softirq() {  # softirq CPU -> softirq ticks of that CPU
  awk -v c="cpu$1" '$1 == c { print $8 }' /proc/stat
}

start sd-sock
CEIL=$(ceiling)
stop_server
echo "generator ceiling: $CEIL queries/s (kxdpgun, one core, replies dropped)"

IFS=, read -ra SV <<<"$SERVERS"
IFS=, read -ra NM <<<"$NAMES"
RESULTS=$WORK/results.tsv
for ((round = 0; round < ROUNDS; round++)); do
  n=${#SV[@]}
  for ((k = 0; k < n; k++)); do
    s=${SV[$(( (k + round) % n ))]}
    start "$s"
    for name in "${NM[@]}"; do
      cap=$(capacity "$WORK/$name.q" "$CEIL")
      rate=$(( cap * 9 / 10 ))
      b0s=$(busy $SERVER_CPU); b0g=$(softirq $GEN_CPU)
      read -r _ replies < <(gun "$rate" "$WORK/$name.q")
      b1s=$(busy $SERVER_CPU); b1g=$(softirq $GEN_CPU)
      hz=$(getconf CLK_TCK)
      # µs of CPU per answer: the server's core and the generator core's softirq.
      us=$(awk -v a=$((b1s - b0s + b1g - b0g)) -v r="$replies" -v t="$DURATION" -v hz="$hz" \
           'BEGIN { if (r > 0) printf "%.2f", a / hz * 1e6 / (r * t); else print "-" }')
      printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$s" "$name" "$cap" "$us" | tee -a "$RESULTS"
    done
    stop_server
  done
done

echo
echo "server  names  capacity(median)  range  cpu_us_per_answer(median)"
for s in "${SV[@]}"; do
  for name in "${NM[@]}"; do
    caps=$(awk -F'\t' -v s="$s" -v n="$name" '$2 == s && $3 == n { print $4 }' "$RESULTS" | sort -n)
    cost=$(awk -F'\t' -v s="$s" -v n="$name" '$2 == s && $3 == n { print $5 }' "$RESULTS" | sort -n)
    [[ -n $caps ]] || continue
    med() { awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    m=$(med <<<"$caps"); lo=$(head -1 <<<"$caps"); hi=$(tail -1 <<<"$caps")
    tag=; (( m * 100 >= CEIL * 95 )) && tag=" (generator-bound: not a capacity)"
    printf '%-10s %-7s %10d  %d-%d  %s%s\n' "$s" "$name" "$m" "$lo" "$hi" "$(med <<<"$cost")" "$tag"
  done
done
