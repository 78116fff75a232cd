#!/usr/bin/env bash
# Benchmarks leaderrun on the embedded file lease (release build). Not a test.
#
#   scripts/bench.sh            # N=200 runs each, REPS=5 hand-overs/take-overs, TTL=2s
#   N=1000 REPS=10 TTL=4s scripts/bench.sh
#
# Prints:
#   1. `leaderrun --lease file://... -- true` against `flock FILE true`: wall
#      time per run and their ratio, measured in the same run, alternating;
#   2. hand-over latency: SIGTERM to the leader -> the waiting candidate's
#      command has started;
#   3. take-over latency: SIGKILL to the leader -> the waiting candidate's
#      command has started (bounded below by ttl - renew-every, above by
#      ttl + retry-every);
#   4. resident memory (VmRSS) of a leader, of its watchdog, and of a
#      waiting candidate.
set -euo pipefail

N=${N:-200}
REPS=${REPS:-5}
TTL=${TTL:-2s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

echo "building the release binary..." >&2
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release --quiet --bin leaderrun)
BIN=$TARGET/release/leaderrun
command -v flock >/dev/null || { echo "flock(1) is needed (util-linux)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/leaderrun-bench.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

now_ns() { date +%s%N; }
ms() { awk -v ns="$1" 'BEGIN { printf "%.1f", ns / 1e6 }'; }
# Median, min and max of the numbers (ns) on stdin, in ms.
stats() {
    sort -n | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "n/a"; exit }
        printf "median %.1f ms (min %.1f, max %.1f, n=%d)", v[int((NR + 1) / 2)] / 1e6, v[1] / 1e6, v[NR] / 1e6, NR }'
}
wait_file() { # wait_file PATH: until it exists and is not empty (10 s at most)
    for _ in $(seq 1000); do [ -s "$1" ] && return 0; sleep 0.01; done
    echo "timed out waiting for $1" >&2; return 1
}
wait_log() { # wait_log FILE TEXT
    for _ in $(seq 1000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done
    echo "timed out waiting for '$2' in $1" >&2; return 1
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
watchdog_of() { # the child of leaderrun PID that is itself leaderrun
    local p
    for p in $(cat "/proc/$1/task/$1/children"); do
        if [ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$BIN")" ]; then echo "$p"; return; fi
    done
}

echo "leaderrun $("$BIN" --version | awk '{ print $2 }'), $(nproc) CPUs, lease dir $WORK ($(df --output=fstype "$WORK" | tail -1))"
echo

# 1. Overhead per run, against flock(1) on the same file system.
LEASE="file://$WORK/overhead.lease"
"$BIN" --lease "$LEASE" --ttl "$TTL" -- true 2>/dev/null # create the record once
lr_total=0
fl_total=0
for _ in $(seq "$N"); do
    t0=$(now_ns)
    "$BIN" --lease "$LEASE" --ttl "$TTL" -- true 2>/dev/null
    t1=$(now_ns)
    flock "$WORK/overhead.flock" true
    t2=$(now_ns)
    lr_total=$((lr_total + t1 - t0))
    fl_total=$((fl_total + t2 - t1))
done
echo "1. one run of \`true\`, $N runs each, alternating:"
echo "   leaderrun --lease file://... -- true   $(ms $((lr_total / N))) ms per run"
echo "   flock FILE true                        $(ms $((fl_total / N))) ms per run"
echo "   ratio                                  $(awk -v a=$lr_total -v b=$fl_total 'BEGIN { printf "%.1fx", a / b }')"
echo

# 2 and 3. Hand-over after SIGTERM and take-over after SIGKILL.
measure() { # measure SIGNAL: prints the latency in ns
    local sig=$1 lease="file://$WORK/$1-$RANDOM.lease" a b t0 t1
    "$BIN" --lease "$lease" --ttl "$TTL" --id a -- sleep 1000 2>"$WORK/a.err" &
    a=$!
    PIDS+=("$a")
    wait_log "$WORK/a.err" "started command"
    rm -f "$WORK/started"
    "$BIN" --lease "$lease" --ttl "$TTL" --id b -- sh -c "date +%s%N > $WORK/started; exec sleep 1000" 2>"$WORK/b.err" &
    b=$!
    PIDS+=("$b")
    wait_log "$WORK/b.err" "lease held by a"
    # A random phase against the renewal and poll cycles.
    sleep "0.$((RANDOM % 10))"
    t0=$(now_ns)
    kill -"$sig" "$a"
    wait_file "$WORK/started"
    t1=$(cat "$WORK/started")
    echo $((t1 - t0))
    kill -TERM "$b"
    wait "$a" "$b" 2>/dev/null || true
}
handover=$(for _ in $(seq "$REPS"); do measure TERM; done)
takeover=$(for _ in $(seq "$REPS"); do measure KILL; done)
echo "2. hand-over after SIGTERM to the leader (--ttl $TTL):"
echo "   $(echo "$handover" | stats)"
echo "3. take-over after SIGKILL of the leader (--ttl $TTL):"
echo "   $(echo "$takeover" | stats)"
echo "   (defaults: renew-every = ttl/3, retry-every = min(2s, ttl/4))"
echo

# 4. Resident memory.
LEASE="file://$WORK/rss.lease"
"$BIN" --lease "$LEASE" --ttl "$TTL" --id leader -- sleep 1000 2>"$WORK/l.err" &
leader=$!
PIDS+=("$leader")
wait_log "$WORK/l.err" "started command"
"$BIN" --lease "$LEASE" --ttl "$TTL" --id follower -- sleep 1000 2>"$WORK/f.err" &
follower=$!
PIDS+=("$follower")
wait_log "$WORK/f.err" "lease held by leader"
sleep 1 # a few renewals and polls
wd=$(watchdog_of "$leader")
echo "4. resident memory (VmRSS):"
echo "   leader leaderrun     $(rss_kb "$leader") kB"
echo "   its watchdog         $(rss_kb "$wd") kB"
echo "   waiting candidate    $(rss_kb "$follower") kB"
kill -TERM "$leader" "$follower"
wait "$leader" "$follower" 2>/dev/null || true
