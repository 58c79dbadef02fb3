"""Serve moto's DynamoDB and SQS on loopback with DynamoDB requests serialized.

moto's server answers each request on its own thread, and its DynamoDB
condition checks are not atomic with the writes they guard. Real DynamoDB
evaluates a condition and applies the write as one step, so this launcher
runs every DynamoDB request under one lock. SQS requests (long polls among
them) stay concurrent.

Usage: emulator.py [--host 127.0.0.1] [--port 0] [--exit-with-stdin]
Prints "READY http://HOST:PORT" on stdout once it accepts connections.
With --exit-with-stdin it exits when its standard input closes, so a test
process that started it cannot leave it behind.
"""

import argparse
import os
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import ThreadedWSGIServer, make_server

# Parallel tests open many connections at once while DynamoDB requests wait
# for the lock; werkzeug's accept queue of 128 can overflow, and a dropped
# connection makes the SDK retry a call that may already have been applied.
ThreadedWSGIServer.request_queue_size = 1024


class SerializeDynamoDB:
    """WSGI middleware: one DynamoDB request at a time, everything else free."""

    def __init__(self, app):
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self._app(environ, start_response)
        with self._lock:
            # Materialize the body inside the lock so the whole request,
            # condition check and write alike, happens while it is held.
            return list(self._app(environ, start_response))


def _exit_on_eof() -> None:
    sys.stdin.read()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--exit-with-stdin", action="store_true")
    args = parser.parse_args()

    app = SerializeDynamoDB(DomainDispatcherApplication(create_backend_app))
    server = make_server(
        args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler
    )
    host, port = server.server_address[:2]
    print(f"READY http://{host}:{port}", flush=True)
    if args.exit_with_stdin:
        threading.Thread(target=_exit_on_eof, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
