#!/usr/bin/env bash
# bench/dnsperf.sh — throughput and server CPU per query of steerdns against gdnsd (and Knot
# for static names), measured with dnsperf over loopback.
#
# Workloads (-W, comma-separated, or `all`):
#   mixed       weighted 3:2:1 (lb), priority (www), multivalue of 3 (pool), static A/TXT;
#               steerdns vs gdnsd over UDP; case `mixed-geo-ecs` adds the geographic name
#               (20 %) and ECS from a random /24 on every query (workload 1)
#   static      the static A/TXT names only: steerdns vs gdnsd vs Knot
#   ecs         a geographic name, every query with EDNS Client Subnet from a random client /24
#               (a different /24 on every query of a 200k-query file); the database is a
#               synthetic 100k-network GeoIP2-City file covering all IPv4 unicast space, read by
#               both steerdns (geographic) and gdnsd (plugin_geoip with an equivalent map)
#   ecs-sample  the same against the shipped sample database (geo-data/sample-city.csv, built
#               with `steerdns geo build`): half the /24s inside its nine IPv4 /24s, half
#               random /24s that miss it (-> WORLD / gdnsd's default)
#   methods     steerdns alone: each routing method on its own name (priority, weighted,
#               geographic, subnet with 100k ranges, performance, multivalue with 8 answers,
#               groups with 4 dialled groups, nested 3 deep), CPU per query against static
#               A names (with and without ECS; client-dependent methods get ECS on every query)
#   tcp         the mixed names and the static names over TCP (dnsperf -m tcp, one connection
#               per client): steerdns vs gdnsd (vs Knot on static)
#   latency     the mixed names at a fixed rate (-Q) of a share of the lower of the two
#               servers' maximum, dnsperf -v: p50/p99/p99.9 latency of every answer
#   scale       steerdns with N generated profiles (bench/gen_profiles.py, default 100000):
#               `steerdns check` time and peak RSS, time from start until the port answers,
#               RSS, reload time (admin API), then qps / CPU per query over all N names
# Each workload starts fresh servers, warms them up, runs ROUNDS rounds (servers alternate,
# the order rotating every round) and stops them. Per round: qps, lost, server CPU µs per
# answered query (utime+stime from /proc/PID/stat), dnsperf's avg/max latency, p50/p99 where
# measured, the server's RSS, average response size, dnsperf's CPU and the load average.
# At the end: medians per workload, case and server, and the ratios.
#
# Requirements (Debian): apt-get install -y dnsperf gdnsd knot dnsutils time python3 curl
# (knot is optional: without knotd its rows are skipped; dig optional: readiness is then
# probed with dnsperf; curl only for the scale workload's reload time), plus cargo.
#
# Usage: bench/dnsperf.sh [-W WORKLOADS] [-r ROUNDS] [-l SECONDS] [-w WARMUP] [-c CLIENTS]
#                         [-T THREADS] [-q OUTSTANDING] [-Q QPS] [--profiles N]
#                         [--latency-share PCT]
#                         [--steerdns-port P] [--gdnsd-port P] [--knot-port P]
#                         [--udp-threads N]
#                         [--src DIR] [--no-build] [--keep]
# Default: -W mixed -r 3 -l 10 -w 2 -c 8 -T 1 -q 100 --profiles 100000 --latency-share 50.
# --udp-threads N sets steerdns' listen.udp_threads and gdnsd's udp_threads to N (default:
# one per core for steerdns, gdnsd's default 2; both 2 on the 2-core benchmark machine).
# -Q QPS offers a fixed rate (dnsperf -Q) in every run but the latency workload's own: at the
# same offered load, CPU per query compares servers of different speed in the same regime
# (unlimited runs let each server settle in its own batching pattern; see RESULTS.md).
# Ports: steerdns 5400, gdnsd 5401, Knot 5402; the ecs-sample pair, the methods and the
# scale servers use steerdns-port + 10, 11, 20, 30 (+31 admin API).
# Honours CARGO_TARGET_DIR (and any target-dir set in .cargo/config) for the build.
# --src builds another source tree than this checkout, e.g. a clean export of one commit
# while the working tree is being edited:  git archive HEAD | tar -x -C /tmp/sd-head
# --keep leaves the temp dir (configs, logs, raw dnsperf output, results.tsv) in place.
set -euo pipefail

WORKLOADS=mixed
ROUNDS=3          # measured rounds; each round runs every server once
DURATION=10       # seconds per dnsperf run (-l)
WARMUP=2          # seconds of unmeasured load per server and workload (page faults, caches)
CLIENTS=8         # dnsperf -c: distinct source ports, so SO_REUSEPORT spreads them over sockets
THREADS=1         # dnsperf -T
OUTSTANDING=100   # dnsperf -q (its default)
RATE=             # dnsperf -Q for every run (empty: no limit); `latency` sets its own
SCALE_N=100000    # profiles of the scale workload
LAT_SHARE=50      # latency workload: offered rate, % of the lower maximum qps
UDP_THREADS=      # --udp-threads: UDP threads per address for steerdns and gdnsd
SD_PORT=5400
GD_PORT=5401
KN_PORT=5402
BUILD=1
KEEP=0
SRC=
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/bench
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    -W|--workloads) WORKLOADS=$2; shift 2 ;;
    -r|--rounds) ROUNDS=$2; shift 2 ;;
    -l|--duration) DURATION=$2; shift 2 ;;
    -w|--warmup) WARMUP=$2; shift 2 ;;
    -c|--clients) CLIENTS=$2; shift 2 ;;
    -T|--threads) THREADS=$2; shift 2 ;;
    -q|--outstanding) OUTSTANDING=$2; shift 2 ;;
    -Q|--rate) RATE=$2; shift 2 ;;
    --profiles) SCALE_N=$2; shift 2 ;;
    --latency-share) LAT_SHARE=$2; shift 2 ;;
    --steerdns-port) SD_PORT=$2; shift 2 ;;
    --gdnsd-port) GD_PORT=$2; shift 2 ;;
    --knot-port) KN_PORT=$2; shift 2 ;;
    --udp-threads) UDP_THREADS=$2; shift 2 ;;
    --src) SRC=$(cd "$2" && pwd); shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
ALL_WORKLOADS="mixed static ecs ecs-sample methods tcp latency scale"
[[ $WORKLOADS == all ]] && WORKLOADS=$ALL_WORKLOADS
WORKLOADS=${WORKLOADS//,/ }
for w in $WORKLOADS; do
  [[ " $ALL_WORKLOADS " == *" $w "* ]] || { echo "unknown workload: $w" >&2; usage 2; }
done
wants() { [[ " $WORKLOADS " == *" $1 "* ]]; }

SRC=${SRC:-$REPO}   # the tree that is built and benchmarked
need dnsperf gdnsd getconf awk python3
HAVE_DIG=0; command -v dig >/dev/null && HAVE_DIG=1
HAVE_KNOT=0; command -v knotd >/dev/null && HAVE_KNOT=1
CLK_TCK=$(getconf CLK_TCK)   # units of utime/stime in /proc/PID/stat

# ---------------------------------------------------------------------------------------
# 1. Build (bench/lib.sh: the release binary wherever cargo puts it).
steerdns_binary "$SRC" "$BUILD"
# Versions of what is measured (gdnsd has no -V: its usage text carries the version).
rev=$(git -C "$SRC" describe --always --dirty 2>/dev/null || echo "not a git checkout")
echo "   $("$STEERDNS" --version) from $SRC ($rev)"
# With --no-build the binary may be older than the tree: say when it was built.
echo "   binary $STEERDNS built $(date -u -r "$STEERDNS" '+%F %T UTC')"
echo "   $(gdnsd -h 2>&1 | grep -m1 'gdnsd version'); dnsperf $(dnsperf -h 2>&1 | awk '/^Version/ { print $2 }')"
if [[ $HAVE_KNOT == 1 ]]; then echo "   $(knotd --version)"; else echo "   knotd not installed: no Knot rows"; fi
echo "   kernel $(uname -r); $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "   workloads: $WORKLOADS"
echo "   UDP threads per address: ${UDP_THREADS:-steerdns one per core, gdnsd 2}"

# ---------------------------------------------------------------------------------------
# 2. Server instances. Each has a kind (steerdns, gdnsd, knot), a port, a config, a log and,
#    while running, a PID. Servers are stopped with SIGTERM (all three exit cleanly on it),
#    then SIGKILL after 5 s if one hangs, whatever way the script ends.
work_dir steerdns-bench
mkdir -p "$WORK/out"
declare -A KIND PORT CONF PID READY
define() {  # define INSTANCE KIND PORT CONFIG READY_NAME  (READY_NAME must answer 127.0.0.1)
  KIND[$1]=$2; PORT[$1]=$3; CONF[$1]=$4; READY[$1]=$5; PID[$1]=
}
define sd steerdns "$SD_PORT" "$WORK/sd/steerdns.yaml" ns1.bench.test
define gd gdnsd "$GD_PORT" "$WORK/gd" ns1.bench.test
define kn knot "$KN_PORT" "$WORK/kn/knot.conf" ns1.bench.test
define sd-sample steerdns $((SD_PORT + 10)) "$WORK/sd-sample/steerdns.yaml" ns1.bench.test
define gd-sample gdnsd $((SD_PORT + 11)) "$WORK/gd-sample" ns1.bench.test
define sd-methods steerdns $((SD_PORT + 20)) "$WORK/sd-methods/steerdns.yaml" ns1.bench.test
define sd-scale steerdns $((SD_PORT + 30)) "$WORK/scale/steerdns.yaml" ns1.scale.test
SCALE_ADMIN=$((SD_PORT + 31))

stop() {  # stop INSTANCE
  local pid=${PID[$1]}
  PID[$1]=
  stop_pid "$pid" "$1"
}
cleanup() {
  local i
  for i in "${!PID[@]}"; do stop "$i"; done
  if [[ $KEEP == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # run the EXIT trap on Ctrl-C too

answers() {  # answers PORT NAME: true when the server answers NAME A with 127.0.0.1
  if [[ $HAVE_DIG == 1 ]]; then
    [[ $(dig +short +time=1 +tries=1 @127.0.0.1 -p "$1" "$2" A 2>/dev/null) == 127.0.0.1 ]]
  else
    echo "$2 A" | dnsperf -s 127.0.0.1 -p "$1" -n 1 -t 1 2>/dev/null \
      | grep -q 'Queries completed: *1 '
  fi
}
start() {  # start INSTANCE [TIMEOUT_S]: launch in the foreground, wait until it answers
  local i=$1 limit=$((${2:-10} * 20)) log="$WORK/${1}.log"
  case ${KIND[$i]} in
    steerdns) RUST_LOG=${RUST_LOG:-warn} "$STEERDNS" serve -c "${CONF[$i]}" 2>"$log" & ;;
    gdnsd) gdnsd -c "${CONF[$i]}" start >"$log" 2>&1 & ;;
    knot) knotd -c "${CONF[$i]}" >"$log" 2>&1 & ;;
  esac
  PID[$i]=$!
  wait_until "$limit" 0.05 "${PID[$i]}" "$log" answers "${PORT[$i]}" "${READY[$i]}"
}

# ---------------------------------------------------------------------------------------
# 3. Data: geo databases, query files, big profiles (bench/benchdata.py, fixed seeds).
#    Both servers read the very same .mmdb files, written by `steerdns geo build`.
BD="python3 $BENCH/benchdata.py"
mkdir -p "$WORK/geo" "$WORK/q"
# Everything but the scale workload uses the servers below, and they read these databases.
MAIN=0; [[ $WORKLOADS != scale ]] && MAIN=1
if [[ $MAIN == 1 ]]; then
  echo "== geo databases (steerdns geo build)"
  $BD geo-csv "$WORK/geo/large.csv" 2>/dev/null
  "$STEERDNS" geo build "$WORK/geo/large.csv" -o "$WORK/geo/large.mmdb" | sed 's/^/   /'
  "$STEERDNS" geo build "$REPO/geo-data/sample-city.csv" -o "$WORK/geo/sample.mmdb" | sed 's/^/   /'
fi

# Text query files (dnsperf's "NAME TYPE" lines), shuffled once with a fixed seed so
# consecutive queries are not all for one name, and identical for every server and run.
shuffle() { awk 'BEGIN { srand(42) } { print rand() "\t" $0 }' | sort -k1,1 | cut -f2- ; }
static_lines() {  # the static part of the mixed file, in the same proportions
  for n in s1 s2 s3; do for i in $(seq 10); do echo "$n.bench.test A"; done; done
  for i in $(seq 5); do echo "ns1.bench.test A"; done
  for i in $(seq 6); do echo "info.bench.test TXT"; done
  for i in $(seq 4); do echo "txt2.bench.test TXT"; done
}
{ # mixed: 100 lines, 90 % A
  for i in $(seq 25); do echo "lb.bench.test A"; done
  for i in $(seq 15); do echo "www.bench.test A"; done
  for i in $(seq 15); do echo "pool.bench.test A"; done
  static_lines
} | shuffle >"$WORK/q/mixed.txt"
static_lines | shuffle >"$WORK/q/static.txt"

# Binary query files (dnsperf -B): dnsperf's -E would put one fixed ECS option on every
# query, so queries that each carry their own client /24 are written out in wire format.
Q=200000   # queries per file; dnsperf loops over the file
$BD queries "$WORK/q/ecs.bin" geo.bench.test --ecs random24 --count $Q
# the performance targets workload 1: the mixed names plus the geographic one, ECS on every query.
$BD queries "$WORK/q/mixed-geo-ecs.bin" lb.bench.test:A:25 www.bench.test:A:15 \
  pool.bench.test:A:15 geo.bench.test:A:20 s1.bench.test:A:5 s2.bench.test:A:5 \
  s3.bench.test:A:5 ns1.bench.test:A:3 info.bench.test:TXT:4 txt2.bench.test:TXT:3 \
  --ecs random24 --count $Q
$BD queries "$WORK/q/ecs-sample.bin" geo.bench.test --ecs random24 --ecs-nets sample \
  --ecs-nets-share 0.5 --count $Q

# ---------------------------------------------------------------------------------------
# 4. Configurations. Same names, addresses and TTLs on every server; dynamic answers TTL 30,
#    static ones 3600. No health checks anywhere: always_serve in steerdns, the built-in
#    always-UP service type `up` in gdnsd, so no server spends time probing.
STATIC_RECORDS='ns1 A 127.0.0.1
s1 A 192.0.2.101
s2 A 192.0.2.102
s3 A 192.0.2.103
info TXT "steerdns benchmark zone"
txt2 TXT "v=spf1 -all"'

steerdns_config() {  # steerdns_config DIR PORT GEO_DB [extra top-level YAML]
  mkdir -p "$1/profiles"
  {
    echo "listen:"
    echo "  dns: [\"127.0.0.1:$2\"]"
    if [[ -n $UDP_THREADS ]]; then echo "  udp_threads: $UDP_THREADS"; fi
    echo "zones:"
    echo "  - origin: bench.test."
    echo "    ns: [ns1.bench.test.]"
    echo "    soa: { rname: hostmaster.bench.test., refresh: 3600, retry: 600, expire: 604800, minimum: 30 }"
    echo "    ttl: 3600"
    echo "    records:"
    sed 's/"/\\"/g; s/.*/      - "&"/' <<<"$STATIC_RECORDS"
    echo "geo:"
    echo "  database: $3"
    [[ -n ${4:-} ]] && echo "$4"
    echo "profiles: profiles/"
  } >"$1/steerdns.yaml"
}

# The mixed names (lb, www, pool) and the geographic name (geo) for steerdns.
MIXED_PROFILES='name: lb
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
  - { name: c, target: 192.0.2.33, always_serve: true }'
for d in sd sd-sample; do
  db=$WORK/geo/large.mmdb; [[ $d == sd-sample ]] && db=$WORK/geo/sample.mmdb
  steerdns_config "$WORK/$d" "${PORT[$d]}" "$db"
  echo "$MIXED_PROFILES" >"$WORK/$d/profiles/bench.yaml"
  # geographic: eu-1 <- GEO-EU/ME/AF, us-west <- US-CA/WA/OR, us <- GEO-NA/SA,
  # asia <- GEO-AS/AP, rest <- WORLD (profiles/geographic.yaml of the repo)
  $BD geo-profile geo >"$WORK/$d/profiles/geo.yaml"
done

# gdnsd 3.x: `config` + `zones/<origin>`. run_dir/state_dir point into the temp dir so no
# root-owned /run/gdnsd or /var/lib/gdnsd is needed. udp_threads is gdnsd's default (2),
# matching steerdns (one UDP socket+thread per core, here 2; --udp-threads sets both); TCP listens on the same address.
#   weighted (multi=false): one address, odds 3:2:1        == steerdns weighted
#   metafo: first datacenter whose address is up           == steerdns priority
#   multifo: every up address (gdnsd rotates the RRset)    == steerdns multivalue, max_return 3
#   geoip: map continent -> country -> subdivision to the datacenter that steerdns's
#          geographic profile answers for that place (generated by benchdata.py from one
#          table, and checked below by sending the same ECS queries to both servers)
gdnsd_config() {  # gdnsd_config DIR PORT GEO_DB
  mkdir -p "$1/zones" "$1/run" "$1/state"
  cat >"$1/config" <<EOF
options => {
  listen => [ 127.0.0.1:$2 ]
  udp_threads => ${UDP_THREADS:-2}
  run_dir => "$1/run"
  state_dir => "$1/state"
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
  geoip => {
    maps => {
      geo => {
        geoip2_db => $3
        datacenters => [ eu-1, us-west, us, asia, rest ]
$($BD gdnsd-geo-map | sed 's/^/        /')
      }
    }
    resources => {
      geo => {
        map => geo
        service_types => up
        dcmap => {
          eu-1 => 192.0.2.61, us-west => 198.51.100.61, us => 198.51.100.62,
          asia => 203.0.113.61, rest => 203.0.113.62
        }
      }
    }
  }
}
EOF
  # gdnsd warns at start that the SOA TTL is clamped to the ncache value (30) and that the
  # zone has a single NS; neither touches the benchmarked answers.
  { echo "\$TTL 3600"
    echo "@     SOA  ns1 hostmaster ( 1 3600 600 604800 30 )"
    echo "@     NS   ns1"
    echo "$STATIC_RECORDS"
    echo "lb    30   DYNA weighted!lb"
    echo "www   30   DYNA metafo!www"
    echo "pool  30   DYNA multifo!pool"
    echo "geo   30   DYNA geoip!geo"
  } >"$1/zones/bench.test"
}
gdnsd_config "$WORK/gd" "$GD_PORT" "$WORK/geo/large.mmdb"
gdnsd_config "$WORK/gd-sample" "${PORT[gd-sample]}" "$WORK/geo/sample.mmdb"

# Knot: only the static part of the zone (it has no traffic steering). Two UDP and two TCP
# workers like the others; zone file never written back, no journal.
mkdir -p "$WORK/kn/run" "$WORK/kn/db" "$WORK/kn/zones"
cat >"$WORK/kn/knot.conf" <<EOF
server:
    rundir: "$WORK/kn/run"
    listen: 127.0.0.1@$KN_PORT
    udp-workers: 2
    tcp-workers: 2
    background-workers: 1
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
{ echo "\$ORIGIN bench.test."
  echo "\$TTL 3600"
  echo "@     SOA  ns1 hostmaster 1 3600 600 604800 30"
  echo "@     NS   ns1"
  echo "$STATIC_RECORDS"
} >"$WORK/kn/zones/bench.test.zone"

# steerdns with one profile per routing method (workload 3), the large geo database
# and the repo's sample latency table. Names: prio weighted geo subnet perf mv8 groups4 n0.
if wants methods; then
  d=$WORK/sd-methods
  steerdns_config "$d" "${PORT[sd-methods]}" "$WORK/geo/large.mmdb" "latency:
  table: $REPO/geo-data/latency.yaml"
  $BD geo-profile geo >"$d/profiles/geo.yaml"
  $BD subnet-profile subnet 100000 "$d/profiles/subnet.yaml" "$WORK/q/subnet-nets.txt"
  cat >"$d/profiles/methods.yaml" <<'EOF'
name: prio
routing: priority
endpoints:
  - { name: primary, target: 192.0.2.21, priority: 1, always_serve: true }
  - { name: secondary, target: 198.51.100.21, priority: 2, always_serve: true }
---
name: weighted
routing: weighted
endpoints:
  - { name: e1, target: 192.0.2.11, weight: 3, always_serve: true }
  - { name: e2, target: 192.0.2.12, weight: 2, always_serve: true }
  - { name: e3, target: 192.0.2.13, weight: 1, always_serve: true }
---
# the repo's profiles/performance.yaml: one endpoint per region of the latency table
name: perf
routing: performance
endpoints:
  - { name: dublin, target: 192.0.2.81, location: eu-west, always_serve: true }
  - { name: virginia, target: 192.0.2.82, location: us-east, always_serve: true }
  - { name: oregon, target: 192.0.2.83, location: us-west, always_serve: true }
  - { name: beijing, target: 198.51.100.81, location: cn-beijing, always_serve: true }
  - { name: shanghai, target: 198.51.100.82, location: cn-shanghai, always_serve: true }
  - { name: singapore, target: 203.0.113.81, location: ap-southeast, always_serve: true }
---
name: mv8
routing: multivalue
max_return: 8
endpoints:
  - { name: a, target: 192.0.2.41, always_serve: true }
  - { name: b, target: 192.0.2.42, always_serve: true }
  - { name: c, target: 192.0.2.43, always_serve: true }
  - { name: d, target: 192.0.2.44, always_serve: true }
  - { name: e, target: 192.0.2.45, always_serve: true }
  - { name: f, target: 192.0.2.46, always_serve: true }
  - { name: g, target: 192.0.2.47, always_serve: true }
  - { name: h, target: 192.0.2.48, always_serve: true }
---
# four groups, every dial below 100 so the dial walk runs to the end on every query
name: groups4
routing: groups
groups:
  - name: eu
    location: eu-west
    traffic_dial: 60
    endpoints:
      - { name: eu-1, target: 192.0.2.91, weight: 128, always_serve: true }
      - { name: eu-2, target: 192.0.2.92, weight: 64, always_serve: true }
  - name: use
    location: us-east
    traffic_dial: 50
    endpoints:
      - { name: use-1, target: 192.0.2.93, always_serve: true }
      - { name: use-2, target: 192.0.2.94, always_serve: true }
  - name: usw
    location: us-west
    traffic_dial: 40
    endpoints:
      - { name: usw-1, target: 192.0.2.95, always_serve: true }
      - { name: usw-2, target: 192.0.2.96, always_serve: true }
  - name: ap
    location: ap-southeast
    traffic_dial: 30
    endpoints:
      - { name: ap-1, target: 192.0.2.97, always_serve: true }
      - { name: ap-2, target: 192.0.2.98, always_serve: true }
---
# nested 3 deep: n0 -> n1 -> n2 -> n3 (as benches/core.rs), each level with an address
# endpoint behind the nested one
name: n0
routing: priority
endpoints:
  - { name: child, profile: n1, priority: 1 }
  - { name: last, target: 198.51.100.70, priority: 2, always_serve: true }
---
name: n1
routing: weighted
endpoints:
  - { name: child, profile: n2, weight: 1000 }
  - { name: spare, target: 198.51.100.71, weight: 0, always_serve: true }
---
name: n2
routing: priority
endpoints:
  - { name: child, profile: n3, priority: 1 }
  - { name: last, target: 198.51.100.72, priority: 2, always_serve: true }
---
name: n3
routing: weighted
endpoints:
  - { name: a, target: 192.0.2.1, always_serve: true }
  - { name: b, target: 192.0.2.2, always_serve: true }
EOF
  # One query file per case. Client-independent methods get no EDNS (like the static
  # baseline); the client-dependent ones get ECS from a random /24 on every query, and
  # `static-ecs` is the baseline for them (same ECS parsing and echo, no routing).
  STATIC_A="s1.bench.test:A ns1.bench.test:A s2.bench.test:A s3.bench.test:A"
  $BD queries "$WORK/q/m-static.bin" $STATIC_A --count $Q
  $BD queries "$WORK/q/m-static-ecs.bin" $STATIC_A --ecs random24 --count $Q
  for c in prio weighted mv8 n0; do $BD queries "$WORK/q/m-$c.bin" "$c.bench.test" --count $Q; done
  for c in geo perf groups4; do
    $BD queries "$WORK/q/m-$c.bin" "$c.bench.test" --ecs random24 --count $Q
  done
  # subnet: 80 % of the client /24s inside the 100k ranges, 20 % elsewhere (-> fallback)
  $BD queries "$WORK/q/m-subnet.bin" subnet.bench.test --ecs random24 \
    --ecs-nets "$WORK/q/subnet-nets.txt" --ecs-nets-share 0.8 --count $Q
fi

if [[ $MAIN == 1 ]]; then
  echo "== validating configurations"
  for i in sd sd-sample; do "$STEERDNS" check -c "${CONF[$i]}" | sed "s/^/   $i: /"; done
  if wants methods; then "$STEERDNS" check -c "${CONF[sd-methods]}" | sed "s/^/   sd-methods: /"; fi
  for i in gd gd-sample; do
    gdnsd -c "${CONF[$i]}" checkconf >"$WORK/$i-checkconf.log" 2>&1 \
      || { cat "$WORK/$i-checkconf.log" >&2; exit 1; }
    echo "   $i: gdnsd checkconf ok"
  done
  if [[ $HAVE_KNOT == 1 ]]; then
    knotc -c "${CONF[kn]}" conf-check >/dev/null && echo "   kn: knotc conf-check ok"
  fi
fi

# ---------------------------------------------------------------------------------------
# 5. Measurement.
cpu_ticks() {  # "utime stime" of all threads of PID, in clock ticks: fields 14 and 15 of
  # /proc/PID/stat, counted after the ")" closing the command name (which may hold spaces).
  local s; s=$(<"/proc/$1/stat"); s=${s##*) }
  awk '{ print $12, $13 }' <<<"$s"
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

run_dnsperf() {  # run_dnsperf PORT SECONDS OUTFILE QUERYFILE [dnsperf args]
  # A query file ending in .bin is wire format (-B). dnsperf's own CPU goes to OUTFILE.time.
  local port=$1 secs=$2 out=$3 qf=$4 TIMEFORMAT='%U %S %R'; shift 4
  local fmt=(); [[ $qf == *.bin ]] && fmt=(-B)
  # A -Q among the arguments (latency workload) wins over the global --rate.
  [[ -n $RATE && " $* " != *" -Q "* ]] && fmt+=(-Q "$RATE")
  { time dnsperf -s 127.0.0.1 -p "$port" -d "$qf" "${fmt[@]}" -c "$CLIENTS" -T "$THREADS" \
      -q "$OUTSTANDING" -l "$secs" "$@" >"$out" 2>&1; } 2>"$out.time"
}

RESULTS=$WORK/results.tsv
: >"$RESULTS"
COLS="workload\tcase\tround\tserver\tqps\tlost\tcpu_us/q\tusr_us/q\tsrv_cpu%\tavg_ms\tmax_ms\tp50_ms\tp99_ms\tp999_ms\trss_MB\tresp_B\tdnsperf_cpu%\tload1"
NCOLS=18
measure() {  # measure WORKLOAD CASE ROUND INSTANCE QUERYFILE [dnsperf args]
  local wl=$1 case=$2 round=$3 inst=$4 qf=$5; shift 5
  local pid=${PID[$inst]} server=${KIND[$inst]}
  local out="$WORK/out/$wl-$case-$server-$round.txt" load u0 s0 u1 s1 rss pct="- - -"
  load=$(cut -d' ' -f1 /proc/loadavg)
  read -r u0 s0 < <(cpu_ticks "$pid")
  run_dnsperf "${PORT[$inst]}" "$DURATION" "$out" "$qf" "$@"
  read -r u1 s1 < <(cpu_ticks "$pid")
  rss=$(rss_kb "$pid")
  kill -0 "$pid" 2>/dev/null || { echo "$inst died during $wl round $round" >&2; exit 1; }
  if grep -q '^> ' "$out"; then
    # dnsperf -v: one "> RCODE NAME TYPE SECONDS" line per answered query (timeouts are
    # "> T ..." without a latency). Nearest-rank percentiles, then drop the lines (large).
    pct=$(awk '/^> / && $2 != "T" { print $NF }' "$out" | sort -g | awk '
      { v[NR] = $1 }
      END { n = NR; printf "%.3f %.3f %.3f", v[int(n * 0.5 + 0.999)] * 1000,
                  v[int(n * 0.99 + 0.999)] * 1000, v[int(n * 0.999 + 0.999)] * 1000 }')
    grep -v '^> ' "$out" >"$out.tmp" && mv "$out.tmp" "$out"
  fi
  # dnsperf 2.x summary lines:  "Queries completed:    123 (99.9%)", "Queries lost: 0 (0.00%)",
  # "Queries per second:   12345.6", "Average Latency (s):  0.000123 (min 0.000010, max 0.0042)",
  # "Average packet size:  request 32, response 54".
  awk -v wl="$wl" -v case="$case" -v round="$round" -v name="$server" \
      -v dt=$((u1 - u0 + s1 - s0)) -v du=$((u1 - u0)) -v hz="$CLK_TCK" \
      -v rss="$rss" -v load="$load" -v tfile="$out.time" -v pct="$pct" '
    /Queries completed:/     { done = $3 }
    /Queries lost:/          { lost = $3 }
    /Queries per second:/    { qps = $4 }
    /Average Latency \(s\):/ { avg = $4; max = $NF; sub(/\)/, "", max) }
    /Average packet size:/   { resp = $NF }
    /Run time \(s\):/        { wall = $4 }
    END {
      getline t < tfile; split(t, tt, " ")        # dnsperf user, sys, real seconds
      if (done == 0) { print "no queries completed for " name " in " wl "/" case > "/dev/stderr"; exit 1 }
      split(pct, p, " ")
      printf "%s\t%s\t%d\t%s\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.3f\t%.3f\t%s\t%s\t%s\t%.1f\t%s\t%.0f\t%s\n",
        wl, case, round, name, qps, lost, dt / hz * 1e6 / done, du / hz * 1e6 / done,
        100 * dt / hz / wall, avg * 1000, max * 1000, p[1], p[2], p[3], rss / 1024, resp,
        100 * (tt[1] + tt[2]) / tt[3], load
    }' "$out" >>"$RESULTS"
}
print_rows() { { echo -e "$COLS"; cat; } | column -t -s $'\t' | sed 's/^/   /'; }

# run_rounds WORKLOAD "CASE:QUERYFILE ..." "INSTANCES" [dnsperf args]: every round runs
# every case against every instance; the instance order rotates each round (A B C, B C A,
# ...) so no server always runs first or right after another's load. Rounds are printed as
# they finish. Warm-up: WARMUP seconds per instance with the first case's queries.
run_rounds() {
  local wl=$1 cases=$2 insts=($3) r k c i n=${#insts[@]}; shift 3
  if [[ $WARMUP -gt 0 ]]; then
    c=${cases%% *}
    for i in "${insts[@]}"; do
      run_dnsperf "${PORT[$i]}" "$WARMUP" "$WORK/out/warmup-$wl-$i.txt" "${c#*:}" "$@"
    done
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    for c in $cases; do
      for ((k = 0; k < n; k++)); do
        i=${insts[$(((k + r - 1) % n))]}
        measure "$wl" "${c%%:*}" "$r" "$i" "${c#*:}" "$@"
      done
    done
    echo "-- $wl, round $r"
    awk -F'\t' -v w="$wl" -v r="$r" '$1 == w && $3 == r' "$RESULTS" | print_rows
  done
}

# The same work on each side? Response codes and average reply size of the last round.
show_replies() {  # show_replies WORKLOAD CASE SERVER...
  local s f
  for s in "${@:3}"; do
    f=$WORK/out/$1-$2-$s-$ROUNDS.txt
    [[ -f $f ]] && grep -h -E 'Response codes|packet size' "$f" | sed "s/^ */   $2 $s: /"
  done
}

header() {
  echo
  echo "================ workload $1: $2"
}
echo "== dnsperf: -c $CLIENTS -T $THREADS -q $OUTSTANDING -l $DURATION, ${RATE:+-Q $RATE}${RATE:-no -Q unless said};" \
     "$ROUNDS rounds; $(nproc) cores; CLK_TCK=$CLK_TCK"
echo "   cpu_us/q = server (utime+stime) delta / completed queries, usr_us/q its utime part"
echo "   (the rest is kernel time, mostly the socket calls); srv_cpu% and dnsperf_cpu% are"
echo "   % of one core over the run (200% = both cores); p50/p99/p999 only where dnsperf -v"
echo "   was on (latency workload); resp_B = dnsperf's average response size; load1 before the run"

# ---------------------------------------------------------------------------------------
# 6. Workloads.
KNOT=; [[ $HAVE_KNOT == 1 ]] && KNOT=kn

if wants mixed; then
  header mixed "lb/www/pool/static names (+ geo with ECS), UDP, steerdns vs gdnsd"
  start sd; start gd
  run_rounds mixed "mixed:$WORK/q/mixed.txt mixed-geo-ecs:$WORK/q/mixed-geo-ecs.bin" "sd gd"
  show_replies mixed mixed steerdns gdnsd
  show_replies mixed mixed-geo-ecs steerdns gdnsd
  stop sd; stop gd
fi

if wants static; then
  header static "static A/TXT names, UDP, steerdns vs gdnsd${KNOT:+ vs Knot}"
  start sd; start gd; if [[ -n $KNOT ]]; then start kn; fi
  run_rounds static "static:$WORK/q/static.txt" "sd gd $KNOT"
  show_replies static static steerdns gdnsd knot
  stop sd; stop gd; stop kn
fi

ecs_workload() {  # ecs_workload WORKLOAD QUERYFILE SD GD
  start "$3"; start "$4"
  echo "== same answers? the first 3000 queries to both (answers compared, A records sorted)"
  $BD compare "$2" "${PORT[$3]}" "${PORT[$4]}" -n 3000 \
    || echo "   WARNING: the servers disagree on some answers; the configurations are not equivalent"
  run_rounds "$1" "geo-ecs:$2" "$3 $4"
  show_replies "$1" geo-ecs steerdns gdnsd
  stop "$3"; stop "$4"
}
if wants ecs; then
  header ecs "geographic name, ECS from a random /24 on every query, 100k-network DB"
  ecs_workload ecs "$WORK/q/ecs.bin" sd gd
fi
if wants ecs-sample; then
  header ecs-sample "geographic name, ECS random /24s, the shipped sample DB (half the /24s miss it)"
  ecs_workload ecs-sample "$WORK/q/ecs-sample.bin" sd-sample gd-sample
fi

if wants methods; then
  header methods "steerdns alone, one routing method per name"
  start sd-methods 30
  cases=""
  for c in static static-ecs prio weighted geo subnet perf mv8 groups4 n0; do
    cases+=" $c:$WORK/q/m-$c.bin"
  done
  run_rounds methods "${cases# }" sd-methods
  for c in static static-ecs prio weighted geo subnet perf mv8 groups4 n0; do
    show_replies methods "$c" steerdns
  done
  stop sd-methods
fi

if wants tcp; then
  header tcp "mixed and static names over TCP (dnsperf -m tcp: one connection per client)"
  start sd; start gd; if [[ -n $KNOT ]]; then start kn; fi
  run_rounds tcp "mixed:$WORK/q/mixed.txt" "sd gd" -m tcp
  run_rounds tcp-static "static:$WORK/q/static.txt" "sd gd $KNOT" -m tcp
  show_replies tcp mixed steerdns gdnsd
  show_replies tcp-static static steerdns gdnsd knot
  stop sd; stop gd; stop kn
fi

if wants latency; then
  header latency "mixed names at a fixed rate (-Q), latency of every answer (dnsperf -v)"
  start sd; start gd
  # The maximum: a 5 s unlimited run per server; the offered rate is LAT_SHARE % of the
  # lower of the two, the same for both.
  max=
  for i in sd gd; do
    RATE= run_dnsperf "${PORT[$i]}" 5 "$WORK/out/latency-max-$i.txt" "$WORK/q/mixed.txt"
    q=$(awk '/Queries per second:/ { printf "%.0f", $4 }' "$WORK/out/latency-max-$i.txt")
    echo "   maximum $i: $q qps"
    [[ -z $max || $q -lt $max ]] && max=$q
  done
  LAT_RATE=$((max * LAT_SHARE / 100))
  echo "   offered rate: $LAT_RATE qps ($LAT_SHARE % of $max)"
  run_rounds latency "mixed-Q$LAT_RATE:$WORK/q/mixed.txt" "sd gd" -Q "$LAT_RATE" -v
  stop sd; stop gd
fi

if wants scale; then
  header scale "steerdns with $SCALE_N profiles (bench/gen_profiles.py)"
  python3 "$BENCH/gen_profiles.py" "$SCALE_N" "$WORK/scale" --port "${PORT[sd-scale]}" \
    --admin-port "$SCALE_ADMIN"
  # The scale zone is scale.test; its ns1 answers 127.0.0.1 (readiness).
  echo "== steerdns check, 3 times (/usr/bin/time: wall seconds, peak RSS)"
  for k in 1 2 3; do
    if [[ -x /usr/bin/time ]]; then
      /usr/bin/time -f '%e %M' -o "$WORK/scale-check-$k.time" "$STEERDNS" check -c "${CONF[sd-scale]}" \
        >"$WORK/scale-check-$k.out"
      read -r secs kb <"$WORK/scale-check-$k.time"
      echo "   check $k: $(cat "$WORK/scale-check-$k.out"): ${secs} s, peak RSS $((kb / 1024)) MB"
    else
      TIMEFORMAT=%R; secs=$( { time "$STEERDNS" check -c "${CONF[sd-scale]}" >/dev/null; } 2>&1 )
      echo "   check $k: ${secs} s"
    fi
  done
  echo "== serve: time from exec until ns1.scale.test answers, 3 starts"
  for k in 1 2 3; do
    t0=$(date +%s.%N)
    start sd-scale 60
    t1=$(date +%s.%N)
    echo "   start $k: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s to answer," \
      "RSS $(($(rss_kb "${PID[sd-scale]}") / 1024)) MB"
    if [[ $k -lt 3 ]]; then stop sd-scale; fi
  done
  if command -v curl >/dev/null; then
    echo "== reload through the admin API (POST /api/v1/reload returns when the new snapshot is live)"
    reload() {  # reload LABEL: one timed POST, then the RSS once the old snapshot is freed
      t=$(curl -s -o /dev/null -w '%{time_total}' -X POST "http://127.0.0.1:$SCALE_ADMIN/api/v1/reload")
      sleep 1
      echo "   reload, $1: $t s, RSS 1 s later $(($(rss_kb "${PID[sd-scale]}") / 1024)) MB"
    }
    # Unchanged files are taken over from the running configuration; an edited file is
    # parsed again. A trailing comment changes a file's bytes, not its profiles.
    files=("$WORK"/scale/profiles/*.yaml)
    for k in 1 2 3; do reload "nothing changed ($k)"; done
    for k in 1 2 3; do echo "# edit $k" >>"${files[0]}"; reload "one file edited ($k)"; done
    # Only an edited document is parsed again: a comment at each file's end edits one
    # document a file; a comment before each profile's routing: line edits every document
    # (the worst case: a full parse, as at startup).
    for k in 1 2 3; do
      for f in "${files[@]}"; do echo "# edit $k" >>"$f"; done
      reload "all ${#files[@]} files edited, one document each ($k)"
    done
    for k in 1 2 3; do
      sed -i "s/^routing:/# rev $k\nrouting:/" "${files[@]}"
      reload "every document of every file edited ($k)"
    done
    # The highest RSS since start: during a reload both snapshots and the parsed documents
    # are live at once.
    echo "   peak RSS since start (VmHWM): $(($(awk '/^VmHWM:/ { print $2 }' \
      "/proc/${PID[sd-scale]}/status") / 1024)) MB"
  fi
  # Every profile name once, shuffled: each query hits another profile.
  python3 -c "
import random; n = $SCALE_N; r = random.Random(42); v = list(range(n)); r.shuffle(v)
print('\n'.join(f'p{i}.scale.test A' for i in v))" >"$WORK/q/scale.txt"
  run_rounds scale "${SCALE_N}-names:$WORK/q/scale.txt" sd-scale
  show_replies scale "${SCALE_N}-names" steerdns
  stop sd-scale
fi

# ---------------------------------------------------------------------------------------
# 7. Medians per workload, case and server (robust to one noisy round), then the ratios.
median() {  # median WORKLOAD CASE SERVER COLUMN ("-" when the column was not measured)
  awk -F'\t' -v w="$1" -v c="$2" -v s="$3" -v k="$4" '$1 == w && $2 == c && $4 == s { print $k }' \
    "$RESULTS" | { grep -v '^-$' || true; } | sort -g \
    | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                               else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "================ medians over $ROUNDS rounds"
awk -F'\t' '{ print $1 "\t" $2 "\t" $4 }' "$RESULTS" | awk '!seen[$0]++' | while IFS=$'\t' read -r w c s; do
  row="$w\t$c\tmedian\t$s"
  for k in $(seq 5 $NCOLS); do row+="\t$(median "$w" "$c" "$s" "$k")"; done
  echo -e "$row"
done | print_rows

ratio() {  # ratio WORKLOAD CASE SERVER_A SERVER_B COLUMN -> A/B of the medians
  awk -v a="$(median "$1" "$2" "$3" "$5")" -v b="$(median "$1" "$2" "$4" "$5")" \
    'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f", a / b }'
}
echo "================ ratios of the medians (qps >1: more answers per second;" \
     "cpu <1: less server CPU per answer)"
{
  echo -e "workload\tcase\tvs\tqps\tcpu_us/q\tusr_us/q\tp99"
  awk -F'\t' '{ print $1 "\t" $2 }' "$RESULTS" | awk '!seen[$0]++' | while IFS=$'\t' read -r w c; do
    for other in gdnsd knot; do
      grep -q -P "^$w\t$c\t[0-9]+\t$other\t" "$RESULTS" || continue
      echo -e "$w\t$c\tsteerdns/$other\t$(ratio "$w" "$c" steerdns "$other" 5)\t$(ratio "$w" "$c" steerdns "$other" 7)\t$(ratio "$w" "$c" steerdns "$other" 8)\t$(ratio "$w" "$c" steerdns "$other" 13)"
    done
  done
} | column -t -s $'\t' | sed 's/^/   /'

if wants methods; then
  echo "================ methods: CPU per query of each method / static A names (target: <= 1.5);"
  echo "   usr_ = the user-space part alone (the server's own code, without the socket calls)"
  base=$(median methods static steerdns 7); base_ecs=$(median methods static-ecs steerdns 7)
  ubase=$(median methods static steerdns 8); ubase_ecs=$(median methods static-ecs steerdns 8)
  {
    echo -e "case\tqps\tcpu_us/q\t/static\t/static-ecs\tusr_us/q\tusr_/static\tusr_/static-ecs"
    for c in static static-ecs prio weighted geo subnet perf mv8 groups4 n0; do
      awk -v c="$c" -v v="$(median methods "$c" steerdns 7)" -v b="$base" -v e="$base_ecs" \
          -v u="$(median methods "$c" steerdns 8)" -v ub="$ubase" -v ue="$ubase_ecs" \
          -v q="$(median methods "$c" steerdns 5)" 'BEGIN {
        printf "%s\t%s\t%s\t%.2f%s\t%.2f\t%s\t%.2f\t%.2f\n", c, q, v, v / b,
          (v / b > 1.5 ? " OVER" : ""), v / e, u, u / ub, u / ue }'
    done
  } | column -t -s $'\t' | sed 's/^/   /'
fi
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit 0
