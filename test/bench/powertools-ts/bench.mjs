// Time the Powertools TypeScript handler (handler.mjs) on the emulator, as
// TestSideBySide times chargeonce's handler and as ../powertools/bench.py
// times the Python one, by the same method.
//
// TestSideBySide (sidebyside_test.go) creates the tables and runs this with
// the endpoint of its proxy to the emulator and the provider simulator's
// URL. The handler is called in process with an API Gateway HTTP API
// event: after WARM_UP first calls that are not measured, N first calls
// with fresh keys, a replay of each (the same key and body), then N pairs
// of calls sent at the same instant with the same fresh key (a concurrent
// duplicate), first one at a time (pairs one at a time) and then from a
// fixed number of concurrent calls. Each call is
// timed from the call to its return. Before each phase it names it to the
// proxy (POST /phase?name=CONTENDER/MODE/PHASE), which counts and times
// the DynamoDB calls.
//
// Usage: node bench.mjs --endpoint URL --provider URL --table T
//          --charges-table C --tenant-claim NAME --n N --concurrency K --name CONTENDER
// Prints the result as one JSON object on stdout.

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { build } from './handler.mjs';

const BODY = '{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 42"}';
const TENANT = 'bench';
// First calls made before the measured ones, by every contender alike.
const WARM_UP = 10;

// context is the part of a Lambda context Powertools reads.
const context = {
  functionName: 'powertools-ts-charge',
  memoryLimitInMB: '1024',
  invokedFunctionArn: 'arn:aws:lambda:us-east-1:123456789012:function:powertools-ts-charge',
  awsRequestId: 'bench',
  getRemainingTimeInMillis: () => 10_000,
};

function event(tenantClaim, key) {
  return {
    version: '2.0',
    routeKey: 'POST /charges',
    rawPath: '/charges',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: BODY,
    isBase64Encoded: false,
    requestContext: {
      http: { method: 'POST', path: '/charges' },
      authorizer: { jwt: { claims: { [tenantClaim]: TENANT } } },
    },
  };
}

// percentile is the nearest-rank p-th percentile, as the Go side computes it.
function percentile(sorted, p) {
  const rank = Math.max(1, Math.ceil((p * sorted.length) / 100));
  return sorted[Math.min(rank, sorted.length) - 1];
}

function summary(ms) {
  const s = [...ms].sort((a, b) => a - b);
  return { count: s.length, p50_ms: percentile(s, 50), p99_ms: percentile(s, 99), mean_ms: s.reduce((a, b) => a + b, 0) / s.length };
}

// call runs the handler on ev: its latency in ms, and its answer ("201",
// or the error's name) and body.
async function call(handle, ev) {
  const start = performance.now();
  let answer, body;
  try {
    const resp = await handle(ev, context);
    answer = String(resp.statusCode);
    body = resp.body;
  } catch (err) {
    answer = err.name;
  }
  return { ms: performance.now() - start, answer, body };
}

// run calls handle on each event, concurrency at a time.
async function run(handle, events, concurrency) {
  const out = new Array(events.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < events.length) {
      const i = next++;
      out[i] = await call(handle, events[i]);
      if (out[i].answer !== '201') {
        throw new Error(`answer ${out[i].answer}`);
      }
    }
  }));
  return out;
}

// duplicates sends each event twice at the same instant, pairs at a time,
// and returns the latency of the call of each pair that did not do the
// work (the one that did not answer 201, else the later) and the answers.
async function duplicates(handle, events, pairs) {
  const ms = [];
  const answers = {};
  for (let i = 0; i < events.length; i += pairs) {
    await Promise.all(events.slice(i, i + pairs).map(async (ev) => {
      const [a, b] = await Promise.all([call(handle, ev), call(handle, ev)]);
      let first = a, dup = b;
      if (a.answer !== '201' || (b.answer === '201' && a.ms > b.ms)) {
        [first, dup] = [b, a];
      }
      if (first.answer !== '201') {
        throw new Error(`a duplicate pair answered ${a.answer} and ${b.answer}`);
      }
      if (dup.answer === '201' && dup.body !== first.body) {
        throw new Error('a concurrent duplicate charged twice');
      }
      const name = dup.answer === '201' ? '201 replayed' : dup.answer;
      answers[name] = (answers[name] ?? 0) + 1;
      ms.push(dup.ms);
    }));
  }
  return { latency: summary(ms), answers };
}

async function main() {
  const { values: args } = parseArgs({
    options: Object.fromEntries(['endpoint', 'provider', 'table', 'charges-table', 'tenant-claim', 'n', 'concurrency', 'name']
      .map((k) => [k, { type: 'string' }])),
  });
  const n = Number(args.n ?? 200);
  const concurrency = Number(args.concurrency ?? 8);
  const dynamodb = new DynamoDBClient({
    endpoint: args.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  const handle = build(dynamodb, args.table, args['charges-table'], args.provider, args['tenant-claim']);
  const phase = (name) => fetch(`${args.endpoint}/phase?name=${encodeURIComponent(`${args.name}/${name}`)}`, { method: 'POST' });
  const version = (pkg) => JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;
  const out = {
    powertools_version: version('@aws-lambda-powertools/idempotency'),
    sdk_version: version('@aws-sdk/client-dynamodb'),
    runtime_version: process.version,
    runs: {},
  };
  await phase('');
  await run(handle, Array.from({ length: WARM_UP }, () => event(args['tenant-claim'], `pt-ts-warm-${randomUUID()}`)), 1);
  for (const [mode, conc] of [['serial', 1], ['concurrent', concurrency]]) {
    const events = Array.from({ length: n }, () => event(args['tenant-claim'], `pt-ts-${mode}-${randomUUID()}`));
    await phase(`${mode}/first`);
    const first = await run(handle, events, conc);
    await phase(`${mode}/replay`);
    const replay = await run(handle, events, conc);
    if (first.some((f, i) => f.body !== replay[i].body)) {
      throw new Error('a replay answered otherwise than its first call');
    }
    const pairs = Array.from({ length: n }, () => event(args['tenant-claim'], `pt-ts-dup-${mode}-${randomUUID()}`));
    await phase(`${mode}/duplicate`);
    const duplicate = await duplicates(handle, pairs, Math.max(1, conc / 2));
    await phase('');
    out.runs[mode] = {
      concurrency: conc,
      first: summary(first.map((r) => r.ms)),
      replay: summary(replay.map((r) => r.ms)),
      duplicate,
    };
  }
  process.stdout.write(JSON.stringify(out));
}

await main();
