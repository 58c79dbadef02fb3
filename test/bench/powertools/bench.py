"""Time the Powertools handler (handler.py) on the emulator, as
TestSideBySide times chargeonce's handler and as ../powertools-ts/bench.mjs
times the TypeScript one, by the same method.

TestSideBySide (sidebyside_test.go) creates the tables and runs this with
the endpoint of its proxy to the emulator and the provider simulator's URL.
The handler is called in process with an API Gateway HTTP API event:
after WARM_UP first calls that are not measured, N first calls with fresh
keys, a replay of each (the same key and body), then N pairs of calls sent
at the same instant with the same fresh key (a concurrent duplicate),
first one at a time (pairs one at a time) and then from a fixed number of
threads. Each call is timed from the call to its return. Before each phase
it names it to the proxy (POST /phase?name=CONTENDER/MODE/PHASE), which
counts and times the DynamoDB calls.

Usage: bench.py --endpoint URL --provider URL --table T --charges-table C
                --tenant-claim NAME --n N --concurrency K --name CONTENDER
Prints the result as one JSON object on stdout.
"""

import argparse
import collections
import json
import sys
import time
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

import boto3
from botocore.config import Config

import handler as powertools_handler

BODY = '{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 42"}'
TENANT = "bench"
# First calls made before the measured ones, by every contender alike.
WARM_UP = 10


class Context:
    """The part of a Lambda context Powertools reads."""

    function_name = "powertools-charge"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:powertools-charge"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis():
        return 10_000


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


def call(handle, ev):
    """Run handle on ev: its latency in ms, its answer ("201", or the
    exception's name) and its body."""
    start = time.perf_counter()
    try:
        resp = handle(ev, Context())
        answer, body = str(resp.get("statusCode")), resp.get("body")
    except Exception as e:  # noqa: BLE001 - the answer is the exception's name
        answer, body = type(e).__name__, None
    return (time.perf_counter() - start) * 1e3, answer, body


def run(handle, events, concurrency):
    """Call handle on each event from concurrency threads; (ms, answer, body) each."""

    def one(ev):
        out = call(handle, ev)
        if out[1] != "201":
            raise RuntimeError(f"answer {out[1]}")
        return out

    if concurrency == 1:
        return [one(ev) for ev in events]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, events))


def duplicates(handle, events, pairs):
    """Send each event twice at the same instant, pairs at a time: the
    latency of the call of each pair that did not do the work (the one that
    did not answer 201, else the later) and the answers."""
    ms, answers = [], collections.Counter()
    with ThreadPoolExecutor(max_workers=2 * pairs) as pool:
        for i in range(0, len(events), pairs):
            wave = [(pool.submit(call, handle, ev), pool.submit(call, handle, ev)) for ev in events[i : i + pairs]]
            for fa, fb in wave:
                a, b = fa.result(), fb.result()
                first, dup = a, b
                if a[1] != "201" or (b[1] == "201" and a[0] > b[0]):
                    first, dup = b, a
                if first[1] != "201":
                    sys.exit(f"bench.py: a duplicate pair answered {a[1]} and {b[1]}")
                if dup[1] == "201" and dup[2] != first[2]:
                    sys.exit("bench.py: a concurrent duplicate charged twice")
                answers["201 replayed" if dup[1] == "201" else dup[1]] += 1
                ms.append(dup[0])
    return {"latency": summary(ms), "answers": dict(answers)}


def main():
    p = argparse.ArgumentParser()
    for name in ("endpoint", "provider", "table", "charges-table", "tenant-claim", "name"):
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
    handle = powertools_handler.build(
        dynamodb, args.table, args.charges_table, args.provider, args.tenant_claim
    )

    def phase(name):
        query = urllib.parse.urlencode({"name": f"{args.name}/{name}" if name else ""})
        urllib.request.urlopen(urllib.request.Request(f"{args.endpoint}/phase?{query}", method="POST")).close()

    out = {
        "powertools_version": version("aws-lambda-powertools"),
        "sdk_version": boto3.__version__,
        "runtime_version": sys.version.split()[0],
        "runs": {},
    }
    phase("")
    run(handle, [event(args.tenant_claim, f"pt-warm-{uuid.uuid4().hex}") for _ in range(WARM_UP)], 1)
    for name, concurrency in (("serial", 1), ("concurrent", args.concurrency)):
        events = [event(args.tenant_claim, f"pt-{name}-{uuid.uuid4().hex}") for _ in range(args.n)]
        phase(f"{name}/first")
        first = run(handle, events, concurrency)
        phase(f"{name}/replay")
        replay = run(handle, events, concurrency)
        if [b for _, _, b in first] != [b for _, _, b in replay]:
            sys.exit("bench.py: a replay answered otherwise than its first call")
        pairs = [event(args.tenant_claim, f"pt-dup-{name}-{uuid.uuid4().hex}") for _ in range(args.n)]
        phase(f"{name}/duplicate")
        duplicate = duplicates(handle, pairs, max(1, concurrency // 2))
        phase("")
        out["runs"][name] = {
            "concurrency": concurrency,
            "first": summary([ms for ms, _, _ in first]),
            "replay": summary([ms for ms, _, _ in replay]),
            "duplicate": duplicate,
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
