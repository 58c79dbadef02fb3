#!/usr/bin/env bash
# Run Schemathesis (from .venv) against api/openapi.yaml and a local stack
# (cmd/localstack) that this script starts on free ports and stops after,
# whatever the outcome. Arguments go to `schemathesis run`, after those of
# scripts/schemathesis.toml. Exits with Schemathesis's status.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

work=$(mktemp -d)
pid=""
stop() {
  if [[ -n "$pid" ]]; then
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap stop EXIT

go build -o "$work/localstack" ./cmd/localstack
: >"$work/stack.log" # read below before the stack may have opened it
# Schemathesis sends as fast as the stack answers, all as one tenant: far
# past a tenant's default rate, whose 429 would stop the contract's checks.
# The handler's own tests hold the 429 to the spec.
TENANT_RATE_LIMIT=${TENANT_RATE_LIMIT:-100000} "$work/localstack" -root "$root" -addr 127.0.0.1:0 -provider-addr 127.0.0.1:0 -emulator-port 0 \
  >"$work/stack.log" 2>"$work/stack.err" &
pid=$!

api=""
for _ in $(seq 1 600); do
  api=$(sed -n 's/.*"msg":"localstack ready".*"api":"\([^"]*\)".*/\1/p' "$work/stack.log")
  [[ -n "$api" ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$work/stack.log" "$work/stack.err" >&2
    echo "the local stack exited before it served" >&2
    exit 1
  fi
  sleep 0.1
done
[[ -n "$api" ]] || { echo "the local stack did not serve within 60s" >&2; exit 1; }
echo "local stack: $api" >&2

status=0
"$root/.venv/bin/schemathesis" --config-file scripts/schemathesis.toml run api/openapi.yaml \
  --url "$api" --no-color "$@" || status=$?
if ((status != 0)); then
  echo "the local stack's log (errors only):" >&2
  grep '"level":"ERROR"' "$work/stack.log" >&2 || true
fi
exit "$status"
