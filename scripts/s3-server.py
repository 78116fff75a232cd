#!/usr/bin/env python3
"""A moto S3 server for leaderrun's tests, on loopback, single-threaded.

Single-threaded on purpose: moto's threaded mode checks a precondition
(If-Match / If-None-Match) and then writes without a lock, so two concurrent
conditional PUTs could both succeed and the store itself would make two
leaders. One request at a time makes every conditional write atomic.

Usage: s3-server.py [--host 127.0.0.1] [--port 0]
Prints one line "READY http://HOST:PORT" on stdout once it accepts
connections (port 0 picks a free port), then serves until killed.

Buckets whose name starts with "authcheck-" are served with moto's IAM
authentication switched on (INITIAL_NO_AUTH_ACTION_COUNT = 0) for that request
only, so a test can check that bad credentials are rejected (403
InvalidAccessKeyId / SignatureDoesNotMatch) while every other test uses any
key. The switch is race-free because requests are handled one at a time.
For AccessDenied, the IAM user "leaderrun-denied" exists with the fixed test
key DENIED_KEY_ID / DENIED_SECRET below and no permissions at all.
"""

import argparse
import sys

from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

AUTH_PREFIX = "authcheck-"
# A test fixture, not a secret: valid credentials of a user with no policy.
DENIED_KEY_ID = "AKIALEADERRUNDENY000"
DENIED_SECRET = "leaderrun-test-denied-secret-00000000000"


def add_denied_user():
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.iam.models import iam_backends

    backend = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_user("us-east-1", "leaderrun-denied")
    key = backend.create_access_key("leaderrun-denied")
    backend.access_keys.pop(key.access_key_id, None)
    key.access_key_id = DENIED_KEY_ID
    key.secret_access_key = DENIED_SECRET
    backend.access_keys[key.access_key_id] = key


def bucket_of(environ):
    host = environ.get("HTTP_HOST", "")
    if host.startswith(AUTH_PREFIX):
        return host.split(".", 1)[0]
    return environ.get("PATH_INFO", "").lstrip("/").split("/", 1)[0]


class AuthForSomeBuckets:
    """WSGI middleware: IAM auth on for "authcheck-*" buckets, off otherwise."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if bucket_of(environ).startswith(AUTH_PREFIX):
            settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        else:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
        ActionAuthenticatorMixin.request_count = 0
        return self.app(environ, start_response)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--quiet", action="store_true", help="do not log each request"
    )
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("s3-server.py serves on loopback only")

    add_denied_user()
    app = AuthForSomeBuckets(DomainDispatcherApplication(create_backend_app))
    # make_server + serve_forever is what werkzeug's run_simple does; doing it
    # in two steps lets us report the port before serving.
    server = make_server(args.host, args.port, app, threaded=False, processes=1)
    if args.quiet:
        import logging

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
    print(f"READY http://{args.host}:{server.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
