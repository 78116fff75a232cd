#!/usr/bin/env bash
# The Azure Blob emulator for the azblob:// tests: Azurite (blob service only),
# in memory, on loopback.
#
#   eval "$(scripts/azure-server.sh start)"   # install if needed, start, print exports
#   cargo test --test azblob
#   scripts/azure-server.sh stop
#
# `start` installs Azurite from the npm registry into a project-local prefix
# (target/azurite, or $LEADERRUN_AZURITE_PREFIX) if it is not there yet, starts
# azurite-blob on a free loopback port with in-memory persistence, waits until
# it answers, and prints on stdout the `export` lines the tests need:
# LEADERRUN_AZURITE_ENDPOINT (http://127.0.0.1:PORT/devstoreaccount1) and
# AZURE_STORAGE_CONNECTION_STRING for Azurite's well-known development account
# (a published fixture, not a secret). Everything else goes to stderr. Its log
# is target/azurite-server/server.log. `stop` ends the server it started (by
# pid).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# 3.35.0 is the newest release that runs on Node 20 (3.36 needs Node >= 21).
AZURITE_VERSION=3.35.0
PREFIX=${LEADERRUN_AZURITE_PREFIX:-$ROOT/target/azurite}
STATE=${LEADERRUN_AZURITE_STATE:-$ROOT/target/azurite-server}
PIDFILE=$STATE/server.pid
BIN=$PREFIX/node_modules/.bin/azurite-blob
# Azurite's well-known development account and key (documented by Microsoft).
ACCOUNT=devstoreaccount1
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

log() { echo "azure-server: $*" >&2; }

install() {
    if [ -x "$BIN" ] &&
        [ "$(node -p "require('$PREFIX/node_modules/azurite/package.json').version" 2>/dev/null)" = "$AZURITE_VERSION" ]; then
        return
    fi
    command -v npm >/dev/null || {
        log "npm is needed to install Azurite (apt-get install nodejs npm)"
        exit 1
    }
    log "installing azurite@$AZURITE_VERSION into $PREFIX"
    mkdir -p "$PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --no-save --loglevel=error \
        "azurite@$AZURITE_VERSION" >&2
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

# A loopback port that was free a moment ago.
free_port() {
    node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# Whether something accepts connections on the loopback port.
listening() {
    node -e 'const c=require("net").connect(+process.argv[1],"127.0.0.1",()=>{c.end();process.exit(0)});c.on("error",()=>process.exit(1))' "$1"
}

start() {
    install
    stop
    mkdir -p "$STATE"
    local port url="" tries
    for tries in 1 2 3; do
        port=$(free_port)
        # From $STATE, so that nothing Azurite might write lands elsewhere.
        (cd "$STATE" && exec "$BIN" --blobHost 127.0.0.1 --blobPort "$port" \
            --inMemoryPersistence --skipApiVersionCheck --disableProductStyleUrl \
            --silent >"$STATE/server.log" 2>&1 </dev/null) &
        echo $! >"$PIDFILE"
        for _ in $(seq 300); do
            if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
                break
            fi
            if listening "$port"; then
                url="http://127.0.0.1:$port/$ACCOUNT"
                break
            fi
            sleep 0.1
        done
        [ -n "$url" ] && break
        log "attempt $tries: Azurite did not start on port $port; its log:"
        cat "$STATE/server.log" >&2
        stop
    done
    if [ -z "$url" ]; then
        log "Azurite did not start"
        exit 1
    fi
    log "Azurite blob on $url (pid $(cat "$PIDFILE"), log $STATE/server.log)"
    cat <<EOF
export LEADERRUN_AZURITE_ENDPOINT=$url
export AZURE_STORAGE_CONNECTION_STRING='DefaultEndpointsProtocol=http;AccountName=$ACCOUNT;AccountKey=$KEY;BlobEndpoint=$url;'
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
