#!/usr/bin/env bash
# bench/cluster_push.sh — how long a push of many profiles takes to be served by three
# replicas sharing etcd.
#
# Per size N: a fresh single-member etcd on loopback with its limits raised for large pushes
# (--max-request-bytes 64 MiB, --max-txn-ops 10000), and three replicas (`steerdns serve`,
# `profiles: etcd`) on 127.0.0.21-23, started with no profiles. bench/gen_profiles.py writes
# N profiles into F files (default 100). Each round then measures, from the start of the
# `steerdns cluster push` until every replica's /api/v1/cluster reports the pushed revision
# (and /metrics the expected number of profiles):
#   full    push all N profiles into an empty prefix
#   one     push again with one profile changed in one file (replicas re-read one file)
#   empty   push an empty directory: every key deleted in one transaction
# `push` is the command's own wall time (checking the directory, reading etcd, the
# transaction); `served` is until the last replica serves the new revision. Medians over the
# rounds, and each replica's RSS after the last full push.
#
# Requirements: etcd (Debian etcd-server), python3, curl, cargo.
# Usage: bench/cluster_push.sh [-r ROUNDS] [-n "10000 100000"] [-f FILES] [--no-build] [--keep]
# Default: -r 3 -n "10000 100000" -f 100. Honours CARGO_TARGET_DIR.
set -euo pipefail

ROUNDS=3
SIZES="10000 100000"
FILES=100
BUILD=1
KEEP=0
ETCD_PORT=2479
ETCD_PEER=2480
PREFIX=/bench/

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -n) SIZES=$2; shift 2 ;;
    -f) FILES=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release/steerdns
if [[ $BUILD == 1 ]]; then
  (cd "$ROOT" && cargo build --release --locked --bin steerdns)
fi
command -v etcd >/dev/null || { echo "etcd is not installed (Debian etcd-server)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/steerdns-cluster-push.XXXXXX)
PIDS=()
# Replicas first (they revoke their leases), etcd last.
stop_all() {
  local i
  for (( i = ${#PIDS[@]} - 1; i >= 0; i-- )); do kill "${PIDS[i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_all
  if [[ $KEEP == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
median() { python3 -c "import sys, statistics; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "$@"; }

replica_yaml() { # i
  cat <<EOF
listen:
  dns: ["127.0.0.2$(( $1 + 1 )):5460"]
  admin: "127.0.0.2$(( $1 + 1 )):5461"
zones:
  - origin: scale.test.
    ns: [ns1.scale.test.]
    soa: { rname: hostmaster.scale.test. }
    records: ["ns1 A 127.0.0.1"]
profiles: etcd
cluster:
  node: bench-$1
  etcd:
    endpoints: ["http://127.0.0.1:$ETCD_PORT"]
    prefix: $PREFIX
EOF
}

# Until every replica serves `revision`; then checks that each holds `profiles` profiles.
# (The revision is the last key of the sorted JSON; /metrics is too large to poll at 100k.)
wait_served() { # revision profiles
  for i in 0 1 2; do
    local admin="127.0.0.2$(( i + 1 )):5461"
    until [[ $(curl -s "http://$admin/api/v1/cluster" | sed -n 's/.*"revision":\([0-9]*\)}}$/\1/p') == "$1" ]]; do
      sleep 0.05
    done
  done
  for i in 0 1 2; do
    local total
    total=$(curl -s "http://127.0.0.2$(( i + 1 )):5461/api/v1/profiles?limit=0" | sed -n 's/.*"total":\([0-9]*\).*/\1/p')
    [[ $total == "$2" ]] || { echo "replica $i holds $total profiles, not $2" >&2; exit 1; }
  done
}

# Pushes `dir`; prints "revision push_seconds served_seconds".
push_and_wait() { # dir profiles
  local t0 t1 t2 out revision
  t0=$(now)
  out=$("$BIN" cluster push "$1" -c "$WORK/r0/steerdns.yaml")
  t1=$(now)
  revision=$(echo "$out" | sed -n 's/^pushed: profiles revision //p')
  [[ -n $revision ]] || { echo "push failed: $out" >&2; exit 1; }
  wait_served "$revision" "$2"
  t2=$(now)
  echo "$revision $(elapsed "$t0" "$t1") $(elapsed "$t0" "$t2")"
}

echo "cluster push: rounds=$ROUNDS sizes=$SIZES files=$FILES ($(nproc) cores, $("$BIN" --version), $(etcd --version | head -1))"
for N in $SIZES; do
  rm -rf "$WORK"/*
  python3 "$ROOT/bench/gen_profiles.py" "$N" "$WORK/gen" --files "$FILES" >/dev/null
  mkdir -p "$WORK/empty"
  etcd --name bench --data-dir "$WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "bench=http://127.0.0.1:$ETCD_PEER" --log-level warn --logger zap \
    --max-request-bytes $((64 << 20)) --max-txn-ops 10000 --quota-backend-bytes $((8 << 30)) \
    >"$WORK/etcd.log" 2>&1 &
  PIDS+=($!)
  until curl -s "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; do sleep 0.1; done
  REPLICA_PIDS=()
  for i in 0 1 2; do
    mkdir -p "$WORK/r$i"
    replica_yaml "$i" >"$WORK/r$i/steerdns.yaml"
    "$BIN" serve -c "$WORK/r$i/steerdns.yaml" >"$WORK/r$i/log" 2>&1 &
    PIDS+=($!)
    REPLICA_PIDS+=($!)
  done
  wait_served 0 0
  full=() fullp=() one=() onep=() empty=() emptyp=()
  for r in $(seq "$ROUNDS"); do
    rm -rf "$WORK/push" && cp -r "$WORK/gen/profiles" "$WORK/push"
    res=$(push_and_wait "$WORK/push" "$N"); read -r _ p s <<<"$res"; full+=("$s"); fullp+=("$p")
    first=$(ls "$WORK/push" | head -1)
    sed -i "0,/10\./s//11./" "$WORK/push/$first"
    res=$(push_and_wait "$WORK/push" "$N"); read -r _ p s <<<"$res"; one+=("$s"); onep+=("$p")
    if [[ $r == "$ROUNDS" ]]; then
      rss=$(for pid in "${REPLICA_PIDS[@]}"; do awk '/VmRSS/ {printf "%d ", $2 / 1024}' "/proc/$pid/status"; done)
    fi
    res=$(push_and_wait "$WORK/empty" 0); read -r _ p s <<<"$res"; empty+=("$s"); emptyp+=("$p")
    echo "N=$N round $r: full push ${fullp[-1]} s, served ${full[-1]} s; one changed: push ${onep[-1]} s, served ${one[-1]} s; all removed: push ${emptyp[-1]} s, served ${empty[-1]} s"
  done
  bytes=$(cat "$WORK"/gen/profiles/* | wc -c)
  echo "N=$N ($FILES files, $bytes bytes) medians: full push $(median "${fullp[@]}") s, served by all 3 $(median "${full[@]}") s; one changed: push $(median "${onep[@]}") s, served $(median "${one[@]}") s; all removed: push $(median "${emptyp[@]}") s, served $(median "${empty[@]}") s; replica RSS after a full push (MiB): $rss"
  # Each round reloads each replica three times, in order: full, one changed, all removed.
  grep -h "configuration reloaded" "$WORK"/r*/log | sed -n 's/.*generation=\([0-9]*\).*took_ms=\([0-9]*\).*/\1 \2/p' |
    awk '{k = ($1 - 2) % 3; n[k]++; t[k] += $2} END {
      split("full,one changed,all removed", name, ",");
      for (k = 0; k < 3; k++) printf "  reload (%s): mean %.0f ms over %d reloads\n", name[k + 1], t[k] / n[k], n[k] }'
  stop_all
done
