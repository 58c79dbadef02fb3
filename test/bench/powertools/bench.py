"""Time the Powertools handler (handler.py) on the emulator, as
TestSideBySide times chargeonce's handler and the naive one.

TestSideBySide (sidebyside_test.go) creates the tables and runs this with
the emulator's endpoint and the provider simulator's URL. The method is
the Go side's: the handler is called in process with an API Gateway HTTP
API event, N first calls with fresh keys and then a replay of each (the
same key and body), first one at a time and then from a fixed number of
threads; each call is timed from the call to its return. Every DynamoDB
call of the handler's client is counted by operation (a botocore event
hook), apart for first calls and replays.

Usage: bench.py --endpoint URL --provider URL --table T --charges-table C
                --tenant-claim NAME --n N --concurrency K
Prints the result as one JSON object on stdout.
"""

import argparse
import collections
import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

import boto3
from botocore.config import Config

import handler as powertools_handler

BODY = '{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 42"}'
TENANT = "bench"


class Context:
    """The part of a Lambda context Powertools reads."""

    function_name = "powertools-charge"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:powertools-charge"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis():
        return 10_000


class Calls:
    """DynamoDB calls by operation, counted from botocore's before-call event."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_op = collections.Counter()

    def __call__(self, model, **_):
        with self._lock:
            self._by_op[model.name] += 1

    def snapshot(self):
        with self._lock:
            by_op, self._by_op = dict(self._by_op), collections.Counter()
        return by_op


def event(tenant_claim, key):
    return {
        "version": "2.0",
        "routeKey": "POST /charges",
        "rawPath": "/charges",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "body": BODY,
        "isBase64Encoded": False,
        "requestContext": {
            "http": {"method": "POST", "path": "/charges"},
            "authorizer": {"jwt": {"claims": {tenant_claim: TENANT}}},
        },
    }


def percentile(sorted_ms, p):
    """The nearest-rank p-th percentile, as the Go side computes it."""
    rank = max(1, -(-p * len(sorted_ms) // 100))
    return sorted_ms[min(rank, len(sorted_ms)) - 1]


def summary(ms):
    s = sorted(ms)
    return {"count": len(s), "p50_ms": percentile(s, 50), "p99_ms": percentile(s, 99), "mean_ms": sum(s) / len(s)}


def run(handle, events, concurrency):
    """Call handle on each event from concurrency threads; the latencies in ms."""

    def one(ev):
        start = time.perf_counter()
        resp = handle(ev, Context())
        elapsed = (time.perf_counter() - start) * 1e3
        if resp.get("statusCode") != 201:
            raise RuntimeError(f"answer {resp}")
        return elapsed, resp["body"]

    if concurrency == 1:
        return [one(ev) for ev in events]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, events))


def main():
    p = argparse.ArgumentParser()
    for name in ("endpoint", "provider", "table", "charges-table", "tenant-claim"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()

    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(max_pool_connections=max(10, 2 * args.concurrency)),
    )
    calls = Calls()
    dynamodb.meta.events.register("before-call.dynamodb", calls)
    handle = powertools_handler.build(
        dynamodb, args.table, args.charges_table, args.provider, args.tenant_claim
    )
    out = {"powertools_version": version("aws-lambda-powertools"), "boto3_version": boto3.__version__, "runs": {}}
    for name, concurrency in (("serial", 1), ("concurrent", args.concurrency)):
        events = [event(args.tenant_claim, f"pt-{name}-{uuid.uuid4().hex}") for _ in range(args.n)]
        calls.snapshot()
        first = run(handle, events, concurrency)
        first_calls = calls.snapshot()
        replay = run(handle, events, concurrency)
        replay_calls = calls.snapshot()
        if [b for _, b in first] != [b for _, b in replay]:
            sys.exit("bench.py: a replay answered otherwise than its first call")
        out["runs"][name] = {
            "concurrency": concurrency,
            "first": summary([ms for ms, _ in first]),
            "replay": summary([ms for ms, _ in replay]),
            "first_calls": {op: n / args.n for op, n in first_calls.items()},
            "replay_calls": {op: n / args.n for op, n in replay_calls.items()},
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
