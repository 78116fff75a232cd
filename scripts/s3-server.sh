#!/usr/bin/env bash
# The S3-compatible server for the s3:// tests: moto, single-threaded, loopback.
#
#   eval "$(scripts/s3-server.sh start)"   # install if needed, start, print exports
#   cargo test
#   scripts/s3-server.sh stop
#
# `start` installs moto into the project-local virtual environment (.venv, or
# $LEADERRUN_VENV) if it is not there yet, starts scripts/s3-server.py on a
# free loopback port, waits until it answers, and prints on stdout the
# `export` lines the tests need (LEADERRUN_S3_ENDPOINT, test credentials,
# region, and AWS_EC2_METADATA_DISABLED so that no SDK ever probes instance
# metadata). Everything else goes to stderr. Its request log is
# target/s3-server/server.log. `stop` ends the server it started (by pid).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LEADERRUN_VENV:-$ROOT/.venv}
STATE=${LEADERRUN_S3_STATE:-$ROOT/target/s3-server}
PIDFILE=$STATE/server.pid

log() { echo "s3-server: $*" >&2; }

install() {
    if [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import moto, flask, flask_cors' 2>/dev/null; then
        return
    fi
    log "installing moto into $VENV"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$ROOT/scripts/s3-requirements.txt" >&2
}

stop() {
    if [ -f "$PIDFILE" ]; then
        local pid
        pid=$(cat "$PIDFILE")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$PIDFILE"
    fi
}

start() {
    install
    stop
    mkdir -p "$STATE"
    : >"$STATE/ready"
    "$VENV/bin/python" "$ROOT/scripts/s3-server.py" --host 127.0.0.1 --port 0 \
        >"$STATE/ready" 2>"$STATE/server.log" </dev/null &
    echo $! >"$PIDFILE"
    local url=""
    for _ in $(seq 300); do
        url=$(sed -n 's/^READY //p' "$STATE/ready")
        [ -n "$url" ] && break
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            log "the server exited; its log:"
            cat "$STATE/server.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    if [ -z "$url" ]; then
        log "the server did not start within 30s; its log:"
        cat "$STATE/server.log" >&2
        stop
        exit 1
    fi
    log "moto S3 on $url (pid $(cat "$PIDFILE"), log $STATE/server.log)"
    cat <<EOF
export LEADERRUN_S3_ENDPOINT=$url
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
EOF
}

case "${1:-}" in
start) start ;;
stop) stop ;;
install) install ;;
*)
    echo "usage: $0 start|stop|install" >&2
    exit 64
    ;;
esac
