#!/usr/bin/env bash
# bench/dnstap.sh — the cost of the dnstap query log: server CPU per query under dnsperf
# with the log off, on for every exchange and on for 1 % of them, and a baseline binary
# (another build, e.g. main before the log existed) without it.
#
# Cases (each a fresh server on 127.0.0.1, the example configuration):
#   base      --base BINARY, no log (skipped without --base)
#   off       this build, no log
#   file      log.dnstap.file, sample 1.0 (every exchange: 2 messages a query)
#   file-1pct log.dnstap.file, sample 0.01
#   socket    log.dnstap.socket with fstrm_capture as the reader, sample 1.0 (skipped
#             without fstrm_capture; its own CPU is not counted)
# Every round runs every case once, in an order rotated each round. Per run: 2 s of
# warm-up, then dnsperf -l SECONDS; server CPU is utime+stime from /proc/PID/stat (the
# writer thread included), divided by the queries dnsperf saw answered. Logged runs also
# report the messages written and dropped (from /metrics). At the end: medians per case.
#
# --icount runs each server under callgrind instead and counts the user-space instructions
# of the whole process (every thread, the dnstap writer's included) over a fixed number of
# queries at a fixed rate: -n QUERIES (default 10000) at -Q (default 2000). Kernel work
# (the socket calls, the writer's writes) is not in it, but neither is the noise of other
# work on the machine, which CPU time per query suffers from on a shared machine.
#
# Requirements: dnsperf, curl, cargo (fstrm-bin for the socket case, valgrind for --icount).
# Usage: bench/dnstap.sh [-r ROUNDS] [-l SECONDS] [-c CLIENTS] [-q OUTSTANDING] [-Q QPS]
#                        [--icount [-n QUERIES]] [--base BINARY] [--no-build] [--keep]
# Default: -r 5 -l 8 -c 4 -q 200, no rate limit. -Q offers a fixed rate (dnsperf -Q), so
# that every case answers the same load in the same batching regime. Honours
# CARGO_TARGET_DIR.
set -euo pipefail

ROUNDS=5
DURATION=8
CLIENTS=4
OUTSTANDING=200
RATE=
ICOUNT=0
QUERIES=10000
BASE=
BUILD=1
KEEP=0
PORT=5440
ADMIN=5441
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -l) DURATION=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    -q) OUTSTANDING=$2; shift 2 ;;
    -Q) RATE="-Q $2"; shift 2 ;;
    -n) QUERIES=$2; shift 2 ;;
    --icount) ICOUNT=1; shift ;;
    --base) BASE=$(realpath "$2"); shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
[[ $ICOUNT == 1 && -z $RATE ]] && RATE="-Q 2000"
need dnsperf curl getconf
steerdns_binary "$REPO" "$BUILD"
CLK_TCK=$(getconf CLK_TCK)
work_dir steerdns-dnstap-bench
PID=
CAPTURE=
cleanup() {
  for p in $PID $CAPTURE; do stop_pid "$p"; done
  if [[ $KEEP == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

CASES="off file file-1pct"
[[ -n $BASE ]] && CASES="base $CASES"
command -v fstrm_capture >/dev/null && CASES="$CASES socket"
echo "== $("$STEERDNS" --version) ($(git -C "$REPO" describe --always --dirty)); base: ${BASE:-none}"
echo "   $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); cases: $CASES; rate: ${RATE:-unlimited}"

# The example configuration, on our ports, with the case's log block.
config() {  # config CASE -> path
  local dir=$WORK/$1 log=
  mkdir -p "$dir"
  case $1 in
    file) log="log: { dnstap: { file: $dir/q.fstrm } }" ;;
    file-1pct) log="log: { dnstap: { file: $dir/q.fstrm, sample: 0.01 } }" ;;
    socket) log="log: { dnstap: { socket: $dir/s.sock } }" ;;
  esac
  # The files it names are found next to it, as in the repository.
  for f in profiles zones geo-data; do ln -sfn "$REPO/$f" "$dir/$f"; done
  sed -e "s|dns: \[.*\]|dns: [\"127.0.0.1:$PORT\"]|" -e "s|127.0.0.1:8053|127.0.0.1:$ADMIN|" \
    "$REPO/steerdns.yaml" >"$dir/steerdns.yaml"
  [[ -n $log ]] && echo "$log" >>"$dir/steerdns.yaml"
  echo "$dir/steerdns.yaml"
}

printf 'www.tm.example.test A\napi.tm.example.test A\ninfo.tm.example.test TXT\nmissing.tm.example.test A\npool.tm.example.test A\n' >"$WORK/queries.txt"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
answers() {  # the server on $PORT answers a query
  dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries.txt" -n 1 -t 1 2>/dev/null \
    | grep -q 'Queries completed: *[1-9]'
}
metric() {  # metric NAME: the sum of a metric's series
  curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v n="$1" '$1 ~ "^"n { s += $2 } END { print s + 0 }'
}

run() {  # run CASE ROUND
  local c=$1 cfg bin=$STEERDNS t0 t1 out done_q qps
  cfg=$(config "$c")
  [[ $c == base ]] && bin=$BASE
  if [[ $c == socket ]]; then
    rm -f "$WORK/socket/s.sock"
    fstrm_capture -t protobuf:dnstap.Dnstap -u "$WORK/socket/s.sock" -w "$WORK/socket/cap.fstrm" >/dev/null 2>&1 &
    CAPTURE=$!
    sleep 0.3
  fi
  if [[ $ICOUNT == 1 ]]; then
    RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$WORK/$c.$2.cg" \
      "$bin" serve -c "$cfg" 2>"$WORK/$c.log" &
  else
    RUST_LOG=warn "$bin" serve -c "$cfg" 2>"$WORK/$c.log" &
  fi
  PID=$!
  wait_until 6000 0.05 "$PID" "$WORK/$c.log" answers
  # shellcheck disable=SC2086 # $RATE is empty or two words
  if [[ $ICOUNT == 1 ]]; then
    icount "$c" "$2"
    return
  fi
  dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries.txt" -l 2 -c "$CLIENTS" -q "$OUTSTANDING" $RATE >/dev/null 2>&1
  t0=$(cpu_ticks "$PID")
  # shellcheck disable=SC2086
  out=$(dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries.txt" -l "$DURATION" -c "$CLIENTS" -q "$OUTSTANDING" $RATE 2>&1)
  t1=$(cpu_ticks "$PID")
  done_q=$(awk '/Queries completed:/ { print $3 }' <<<"$out")
  qps=$(awk '/Queries per second:/ { printf "%d", $4 }' <<<"$out")
  local sent=- dropped=-
  if [[ $c != off && $c != base ]]; then
    sent=$(metric steerdns_dnstap_sent_total); dropped=$(metric steerdns_dnstap_dropped_total)
  fi
  stop_pid "$PID"; PID=
  if [[ -n $CAPTURE ]]; then kill -INT "$CAPTURE"; wait "$CAPTURE" 2>/dev/null || true; CAPTURE=; fi
  local us
  us=$(awk -v t="$((t1 - t0))" -v k="$CLK_TCK" -v q="$done_q" 'BEGIN { printf "%.3f", t / k * 1e6 / q }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$c" "$qps" "$us" "$sent" "$dropped" | tee -a "$WORK/results.tsv"
}

icount() {  # icount CASE ROUND: the server runs under callgrind; warm up, zero, count
  local c=$1 out done_q ir
  # shellcheck disable=SC2086
  dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries.txt" -n 200 -c "$CLIENTS" $RATE >/dev/null 2>&1
  callgrind_control -z "$PID" >/dev/null 2>&1
  # shellcheck disable=SC2086
  out=$(dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries.txt" -n $((QUERIES / 5)) -c "$CLIENTS" $RATE 2>&1)
  callgrind_control -d "$PID" >/dev/null 2>&1
  done_q=$(awk '/Queries completed:/ { print $3 }' <<<"$out")
  local sent=- dropped=-
  if [[ $c != off && $c != base ]]; then
    sent=$(metric steerdns_dnstap_sent_total); dropped=$(metric steerdns_dnstap_dropped_total)
  fi
  stop_pid "$PID"; PID=
  if [[ -n $CAPTURE ]]; then kill -INT "$CAPTURE"; wait "$CAPTURE" 2>/dev/null || true; CAPTURE=; fi
  # The dump taken after the counted queries (callgrind numbers its dumps from 1).
  ir=$(awk '/^summary:/ { print $2; exit }' "$WORK/$c.$2.cg.1")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$c" "$done_q" "$((ir / done_q))" "$sent" "$dropped" \
    | tee -a "$WORK/results.tsv"
}

if [[ $ICOUNT == 1 ]]; then
  printf 'round\tcase\tqueries\tinstructions/q\tsent\tdropped\n'
else
  printf 'round\tcase\tqps\tcpu_us/q\tsent\tdropped\n'
fi
read -ra order <<<"$CASES"
for ((r = 1; r <= ROUNDS; r++)); do
  n=${#order[@]}
  for ((i = 0; i < n; i++)); do run "${order[$(((i + r) % n))]}" "$r"; done
done
unit="µs/q"; [[ $ICOUNT == 1 ]] && unit="instructions/q"
echo "== medians over $ROUNDS rounds ($unit)"
for c in $CASES; do
  awk -F'\t' -v c="$c" '$2 == c { print $4 }' "$WORK/results.tsv" | sort -g \
    | awk -v c="$c" -v u="$unit" '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "   %-10s %.3f %s (rounds %.3f–%.3f)\n", c, m, u, v[1], v[NR] }'
done
