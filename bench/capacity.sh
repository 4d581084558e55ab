#!/usr/bin/env bash
# bench/capacity.sh — capacity per core of steerdns (sockets and AF_XDP) against gdnsd and
# Knot (sockets and XDP), with kxdpgun as the load generator across a veth pair.
#
# The bed: two network namespaces joined by a veth pair in the benchmarking range
# 198.18.0.0/15 (server 198.18.0.1, generator 198.18.0.2). Each server runs pinned to CPU
# $SERVER_CPU with one worker (one UDP socket, or one AF_XDP queue); kxdpgun runs pinned to
# CPU $GEN_CPU in the other namespace.
#
# The kernel's work goes to the core of the side it serves: veth receives through NAPI
# only with GRO on, and then in the sender's softirq unless NAPI is threaded; here each
# side's NAPI thread is pinned to its own core at real-time priority (as a NIC's softirq
# would be), so the server core pays for the server's receive, stack and send work and
# the generator core for the generator's. Knot leaves its XDP program attached when it
# stops: it is detached after every server, and an XDP server whose own program did not
# take the interface (a fallback to sockets) stops the run.
#
# Capacity: the highest offered rate (kxdpgun -Q) of which at least 98 % is answered,
# found by bisection between 0 and the generator's ceiling (kxdpgun offering far more than
# it can, replies dropped), per server and name set (static: A records; routed: a weighted
# name — for Knot, which has no routing, the same name as a static record), in ROUNDS
# rounds whose server order rotates. Reported: median and range. When the lowest failing
# rate failed because kxdpgun sent less than 97 % of it, or because most of the missing
# answers were replies the generator's side of the veth pair had no room for (its receive
# ring full: the server's interface counts them as dropped on sending), the generator's
# core was the limit: the figure is marked as a floor, not a capacity.
#
# Answers are counted as the frames the server side sent during the run (and half a
# second after it, for queries still queued), while kxdpgun drops the replies unread
# (-r). Reading them would cost the generator's core more for a socket server's replies
# (socket buffers, taken through generic XDP) than for an XDP server's (XDP frames): with
# it, the generator rather than the server stopped the socket servers near 150k/s. Every
# server must answer www.bench.test correctly (checked with kdig) before it is measured.
#
# Cost: µs of the server core per answer at one fixed rate for every server
# (--cost-rate, default 150000), from /proc/stat over a window inside the run, answers
# counted as frames the server side sent; 1e6 / cost is the rate one core could answer
# were it the only limit. Unlike capacity, it does not depend on the generator keeping up.
#
# Requirements (Debian): knot knot-dnsutils (kxdpgun, kdig) gdnsd iproute2 ethtool, root,
# 2+ CPUs.
# Usage: bench/capacity.sh [-r ROUNDS] [-t SECONDS] [--servers LIST] [--names LIST]
#                          [--cost-rate QPS] [--cost-only] [--no-build] [--keep]
# STEERDNS_BIN=PATH runs that binary instead of target/release/steerdns (with --no-build).
# Default: -r 3 -t 5 --servers sd-sock,sd-xdp,gdnsd,gdnsd-buf,knot-sock,knot-xdp --names static,routed
set -euo pipefail

ROUNDS=3
DURATION=5
SERVERS=sd-sock,sd-xdp,gdnsd,gdnsd-buf,knot-sock,knot-xdp
NAMES=static,routed
SERVER_CPU=0
GEN_CPU=1
BUILD=1
KEEP=0
COST_RATE=150000
COST_ONLY=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -t) DURATION=$2; shift 2 ;;
    --cost-rate) COST_RATE=$2; shift 2 ;;
    --cost-only) COST_ONLY=1; shift ;;
    --servers) SERVERS=$2; shift 2 ;;
    --names) NAMES=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) usage 1 >&2 ;;
  esac
done

need kxdpgun knotd gdnsd kdig ip taskset ethtool chrt
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
# Each side's receive work on its own core. Without NAPI, veth runs the receiving side's
# network stack in the sender's softirq, so the generator's core would do the server's
# kernel work (and the socket servers would look as fast as the XDP ones). With GRO on,
# veth receives through NAPI; threaded NAPI puts that in a kernel thread, pinned here to
# the receiving side's core.
for x in "$NS_S:$IF_S:$SERVER_CPU" "$NS_G:$IF_G:$GEN_CPU"; do
  IFS=: read -r ns ifname cpu <<<"$x"
  ip netns exec "$ns" ethtool -K "$ifname" gro on >/dev/null
  ip netns exec "$ns" sh -c "echo 1 >/sys/class/net/$ifname/threaded"
  # Real-time priority, as a NIC's softirq has over user code: without it kxdpgun's busy
  # sending starves its own receive thread and the 256-frame veth ring overflows.
  for pid in $(pgrep "^napi/$ifname-"); do
    taskset -pc "$cpu" "$pid" >/dev/null; chrt -f -p 50 "$pid"
  done
  [[ -n $(pgrep "^napi/$ifname-") ]] || { echo "no NAPI thread for $ifname" >&2; exit 2; }
done
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
# gdnsd-buf: gdnsd with the largest receive buffer it takes (udp_rcvbuf, 1 MiB; it leaves
# the system's default, 208 KiB, otherwise), to show how much of a capacity is the buffer.
cp -r "$WORK/gd" "$WORK/gdb"
sed -i "s|udp_threads => 1, run_dir => \"$WORK/gd/run\", state_dir => \"$WORK/gd/state\"|udp_threads => 1, udp_rcvbuf => 1048576, run_dir => \"$WORK/gdb/run\", state_dir => \"$WORK/gdb/state\"|" "$WORK/gdb/config"
grep -q 'udp_rcvbuf => 1048576' "$WORK/gdb/config" || { echo "gdnsd-buf: config not written" >&2; exit 2; }
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
    gdnsd-buf) cmd=(gdnsd -c "$WORK/gdb" -f start) ;;
    knot-sock) cmd=(knotd -c "$WORK/kn/sock.conf") ;;
    knot-xdp) cmd=(knotd -c "$WORK/kn/xdp.conf") ;;
  esac
  # Not through `in_s`: a function in the background is a subshell, and $! would be that
  # shell rather than the server (which would then outlive stop_server).
  ip netns exec "$NS_S" taskset -c "$SERVER_CPU" "${cmd[@]}" >"$WORK/$1.log" 2>&1 &
  SERVER_PID=$!; PIDS+=("$SERVER_PID")
  wait_until 100 0.1 "$SERVER_PID" "$WORK/$1.log" answers
}
answers() {  # the server answers www.bench.test from the generator's namespace
  in_g kdig +short +timeout=1 +retry=0 @$SRV www.bench.test A 2>/dev/null | grep -q 192.0.2.21
}
# start SERVER, then check that an XDP server's own program took the interface (a server
# that fell back to sockets would be measured as the wrong thing).
start_checked() {
  start "$1"
  local prog
  prog=$(xdp_prog)
  case "$1:$prog" in
    sd-xdp:steerdns*|knot-xdp:xdp_redirect*|sd-sock:|gdnsd:|gdnsd-buf:|knot-sock:) ;;
    *) echo "$1: unexpected XDP program on $IF_S: '${prog}'; log:" >&2; cat "$WORK/$1.log" >&2; exit 1 ;;
  esac
}
# Which XDP program is attached to the server's interface ("" for none).
xdp_prog() { in_s ip -o link show dev "$IF_S" | sed -n 's/.*prog\/xdp id [0-9]* name \([^ ]*\).*/\1/p'; }
stop_server() {
  stop_pid "$SERVER_PID"
  # Knot leaves its XDP program attached when it stops (it takes it over on a restart);
  # left there, it would tax every later server and make steerdns fall back to sockets.
  in_s ip link set dev "$IF_S" xdp off
  if in_g kdig +short +timeout=1 +retry=0 @$SRV www.bench.test A 2>/dev/null | grep -q .; then
    echo "something still answers after stopping the server" >&2; exit 1
  fi
}

# 4. One run: offered rate -> answered share (percent), answers and queries sent per second.
# The fourth figure: replies the server's interface dropped because the generator's
# receive ring was full, in percent of the queries.
gun() {  # gun RATE QUERYFILE [extra kxdpgun args] -> "answered_pct replies_per_s sent_per_s peer_drop_pct"
  local out a0 a1 d0 d1
  a0=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_packets")
  d0=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_dropped")
  out=$(in_g taskset -c "$GEN_CPU" kxdpgun -t "$DURATION" -Q "$1" -i "$2" -I "$IF_G" -r \
        -F "${GEN_CPU}s1" "${@:3}" $SRV 2>&1) || true
  sleep 0.5
  a1=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_packets")
  d1=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_dropped")
  echo "$out" >>"$WORK/gun.log"
  awk -v r=$((a1 - a0)) -v d=$((d1 - d0)) '/total queries:/ { q = $3 }
       END { if (q > 0) printf "%.2f %d %d %.2f\n", 100 * r / q, r / '"$DURATION"', q / '"$DURATION"', 100 * d / q
             else print "0 0 0 0" }' <<<"$out"
}

# The generator's ceiling: the rate it reaches offering far more than it can, replies
# dropped unread.
ceiling() {
  local out
  out=$(in_g taskset -c "$GEN_CPU" kxdpgun -t "$DURATION" -Q 100000000 -r -i "$WORK/static.q" \
        -I "$IF_G" -F "${GEN_CPU}s1" $SRV 2>&1) || true
  awk '/total queries:/ { print int($3 / '"$DURATION"') }' <<<"$out"
}

# capacity QUERYFILE CEILING -> "RATE BOUND": the highest rate with >= 98 % answered, and
# whether the bisection's lowest failing rate failed for the generator's core rather than
# the server: 1 when the generator could not send it (sent < 97 % of offered), 2 when at
# least half of the missing answers were replies its receive ring had no room for.
capacity() {
  local lo=0 hi=$2 mid pct sent drop bound=1
  while (( hi - lo > hi / 50 + 1000 )); do
    mid=$(( (lo + hi) / 2 ))
    read -r pct _ sent drop < <(gun "$mid" "$1")
    echo "capacity step: rate $mid answered ${pct}% sent $sent/s peer drops ${drop}%" >>"$WORK/gun.log"
    if awk -v p="$pct" -v s="$sent" -v m="$mid" 'BEGIN { exit !(p >= 98 && s >= m * 0.97) }'; then
      lo=$mid
    else
      hi=$mid
      bound=$(awk -v s="$sent" -v m="$mid" -v p="$pct" -v d="$drop" \
        'BEGIN { print (s < m * 0.97) ? 1 : (d >= (100 - p) / 2) ? 2 : 0 }')
    fi
  done
  echo "$lo $bound"
}

ticks() {  # ticks CPU -> "busy total": busy (user nice system irq softirq) and all ticks
  awk -v c="cpu$1" '$1 == c { b = $2 + $3 + $4 + $7 + $8; t = 0
    for (i = 2; i <= NF; i++) t += $i; print b, t }' /proc/stat
}

# cost RATE QUERYFILE -> "US BUSY": µs of the server core per answer at RATE (everything
# the server side costs: its threads and, through the pinned NAPI thread, its kernel
# receive and send work), and that core's busy percent. Read over a window inside the
# run (kxdpgun's start and stop stay out), answers counted as frames the server side sent.
cost() {
  local s0 s1 a0 a1 hz pid window=$DURATION
  in_g taskset -c "$GEN_CPU" kxdpgun -t $((window + 2)) -Q "$1" -i "$2" -I "$IF_G" -r \
    -F "${GEN_CPU}s1" $SRV >>"$WORK/gun.log" 2>&1 &
  pid=$!
  sleep 1
  s0=$(ticks $SERVER_CPU); a0=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_packets")
  sleep "$window"
  s1=$(ticks $SERVER_CPU); a1=$(in_s cat "/sys/class/net/$IF_S/statistics/tx_packets")
  wait "$pid" || true
  hz=$(getconf CLK_TCK)
  awk -v a="$s0" -v b="$s1" -v n=$((a1 - a0)) -v hz="$hz" 'BEGIN {
    split(a, x, " "); split(b, y, " "); busy = y[1] - x[1]
    if (n > 0) printf "%.2f %.0f\n", busy / hz * 1e6 / n, 100 * busy / (y[2] - x[2])
    else print "- 0" }'
}

start sd-sock
CEIL=$(ceiling)
stop_server
echo "generator ceiling: $CEIL queries/s (kxdpgun, one core, replies dropped)"
echo "cost measured at $COST_RATE queries/s"

IFS=, read -ra SV <<<"$SERVERS"
IFS=, read -ra NM <<<"$NAMES"
RESULTS=$WORK/results.tsv
echo -e "round\tserver\tnames\tcapacity\tgenerator_bound\tus_per_answer\tserver_busy_pct"
for ((round = 0; round < ROUNDS; round++)); do
  n=${#SV[@]}
  for ((k = 0; k < n; k++)); do
    s=${SV[$(( (k + round) % n ))]}
    start_checked "$s"
    for name in "${NM[@]}"; do
      cap=0 bound=0
      (( COST_ONLY )) || read -r cap bound < <(capacity "$WORK/$name.q" "$CEIL")
      read -r us busy < <(cost "$COST_RATE" "$WORK/$name.q")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$s" "$name" "$cap" "$bound" "$us" "$busy" |
        tee -a "$RESULTS"
    done
    stop_server
  done
done

echo
printf '%-10s %-7s %10s  %-15s %8s %14s\n' server names capacity range "us/ans" "1e6/(us/ans)"
med() { awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for s in "${SV[@]}"; do
  for name in "${NM[@]}"; do
    caps=$(awk -F'\t' -v s="$s" -v n="$name" '$2 == s && $3 == n { print $4 }' "$RESULTS" | sort -n)
    [[ -n $caps ]] || continue
    costs=$(awk -F'\t' -v s="$s" -v n="$name" '$2 == s && $3 == n { print $6 }' "$RESULTS" | sort -n)
    bounds=$(awk -F'\t' -v s="$s" -v n="$name" '$2 == s && $3 == n && $5 > 0 { b++ } END { print b + 0 }' "$RESULTS")
    m=$(med <<<"$caps"); c=$(med <<<"$costs")
    tag=; (( bounds > 0 )) && tag="  (generator-bound in $bounds round(s): a floor, not a capacity)"
    printf '%-10s %-7s %10d  %-15s %8s %14s%s\n' "$s" "$name" "$m" \
      "$(head -1 <<<"$caps")-$(tail -1 <<<"$caps")" "$c" \
      "$(awk -v c="$c" 'BEGIN { if (c > 0) printf "%d", 1e6 / c; else print "-" }')" "$tag"
  done
done
