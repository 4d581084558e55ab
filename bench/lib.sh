# bench/lib.sh — what the benchmark scripts share, sourced by them (not run on its own):
# the usage text, tool checks, finding (and building) the steerdns binary, a work
# directory, waiting for a server to answer, stopping it, and the two-namespace veth bed.
#
# Every function exits the script (status 1, or 2 for a missing tool or privilege) with a
# message on stderr when it cannot do its job; none changes the shell's options.

# usage [STATUS]: the calling script's header comment (from line 2 down to the line before
# `set -euo`), then exit.
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit "${1:-0}"
}

# need TOOL...: every TOOL is on PATH or in an sbin directory (often missing from a user's
# PATH), or exit 2 naming the first missing one.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool || -x /sbin/$tool ]] \
      || { echo "missing: $tool" >&2; exit 2; }
  done
}

# need_root: exit 2 unless running as root (namespaces, XDP).
need_root() {
  [[ $(id -u) == 0 ]] || { echo "needs root (namespaces, XDP)" >&2; exit 2; }
}

# steerdns_binary SRC BUILD: sets STEERDNS to the release binary of the source tree SRC,
# built first when BUILD is 1. `cargo metadata` tells where it lands, whatever
# CARGO_TARGET_DIR or a .cargo/config target-dir says, so the path is never guessed.
# STEERDNS_BIN=PATH names a binary to use instead; then nothing is built.
steerdns_binary() {
  local src=$1 build=$2 target
  if [[ -n ${STEERDNS_BIN:-} ]]; then
    STEERDNS=$(realpath "$STEERDNS_BIN")
  else
    need cargo
    target=$(cd "$src" && cargo metadata --format-version 1 --no-deps \
      | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
    STEERDNS=$target/release/steerdns
    if [[ $build == 1 ]]; then
      echo "== building steerdns (release) from $src into $target" >&2
      (cd "$src" && cargo build --release --quiet)
    fi
  fi
  [[ -x $STEERDNS ]] || { echo "no binary at $STEERDNS (drop --no-build?)" >&2; exit 1; }
}

# work_dir NAME: sets WORK to a new directory /tmp/NAME.XXXXXX.
work_dir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
}

# wait_until TRIES PAUSE PID LOG CMD...: runs CMD every PAUSE seconds until it succeeds
# (status 0). Exits showing LOG when process PID ends first, or after TRIES tries.
wait_until() {
  local tries=$1 pause=$2 pid=$3 log=$4 n
  shift 4
  for ((n = 0; n < tries; n++)); do
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited; log:" >&2; cat "$log" >&2; exit 1; }
    "$@" && return 0
    sleep "$pause"
  done
  echo "no answer after $tries tries of: $*; log:" >&2
  cat "$log" >&2
  exit 1
}

# stop_pid PID [NAME]: SIGTERM, then SIGKILL when it is still there after 5 s; waits for it.
# Nothing when PID is empty or already gone.
stop_pid() {
  local pid=$1 name=${2:-$1} i
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "warning: $name ($pid) ignored SIGTERM, killing" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# veth_bed SERVER_NS SERVER_IF SERVER_IP CLIENT_NS CLIENT_IF CLIENT_IP: two network
# namespaces joined by a veth pair (the kernel's default queues), both ends up with their
# address (/24) and loopback up, and the client's neighbour entry for the server set, so no
# ARP runs during a measurement. veth_bed_remove NS... removes them (deleting a namespace
# deletes its end of the pair, and with it the other end).
veth_bed() {
  local sns=$1 sif=$2 sip=$3 cns=$4 cif=$5 cip=$6 x mac
  ip netns add "$sns"
  ip netns add "$cns"
  ip link add "$sif" netns "$sns" type veth peer name "$cif" netns "$cns"
  ip -n "$sns" addr add "$sip/24" dev "$sif"
  ip -n "$cns" addr add "$cip/24" dev "$cif"
  for x in "$sns:$sif" "$cns:$cif"; do
    ip -n "${x%%:*}" link set "${x#*:}" up
    ip -n "${x%%:*}" link set lo up
  done
  mac=$(ip netns exec "$sns" cat "/sys/class/net/$sif/address")
  ip -n "$cns" neigh replace "$sip" lladdr "$mac" dev "$cif"
}

veth_bed_remove() {
  local ns
  for ns in "$@"; do ip netns del "$ns" 2>/dev/null || true; done
}
