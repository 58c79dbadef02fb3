"""Serve DynamoDB and SQS from fakecloud on loopback, as emulator.py serves moto's.

fakecloud (the Rust crate, AGPL, installed by `make fakecloud` into
bin/tools/bin, or found on PATH) applies conditional writes atomically and
honours ClientRequestToken, so unlike moto it needs no lock in front of it;
this launcher only gives it emulator.py's command line and READY protocol,
so that scripts/with-emulator.sh, `make run` and the tests start either one
the same way (EMULATOR=fakecloud picks this one).

Usage: fakecloud.py [--host 127.0.0.1] [--port 0] [--exit-with-stdin]
Prints "READY http://HOST:PORT" on stdout once fakecloud accepts
connections. With --exit-with-stdin it stops fakecloud and exits when its
standard input closes; otherwise on SIGINT or SIGTERM.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_TIMEOUT = 60.0


def find_binary():
    """fakecloud on PATH, else the copy `make fakecloud` installs."""
    found = shutil.which("fakecloud")
    if found:
        return found
    local = os.path.join(ROOT, "bin", "tools", "bin", "fakecloud")
    if os.access(local, os.X_OK):
        return local
    sys.exit("fakecloud.py: no fakecloud on PATH or in bin/tools/bin (run `make fakecloud`)")


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_ready(proc, host, port):
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"fakecloud.py: fakecloud exited with status {proc.returncode} before it was ready")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"fakecloud.py: fakecloud not ready after {READY_TIMEOUT:.0f}s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--exit-with-stdin", action="store_true")
    args = parser.parse_args()

    port = args.port or free_port(args.host)
    env = dict(os.environ, FAKECLOUD_LOG=os.environ.get("FAKECLOUD_LOG", "warn"))
    proc = subprocess.Popen(
        [find_binary(), "--addr", f"{args.host}:{port}"],
        env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_with_stdin:
        def watch_stdin():
            sys.stdin.read()
            stop.set()
        threading.Thread(target=watch_stdin, daemon=True).start()

    wait_ready(proc, args.host, port)
    print(f"READY http://{args.host}:{port}", flush=True)
    while not stop.is_set() and proc.poll() is None:
        stop.wait(0.2)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0 if stop.is_set() else (proc.returncode or 1)


if __name__ == "__main__":
    sys.exit(main())
