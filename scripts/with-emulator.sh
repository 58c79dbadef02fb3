#!/usr/bin/env bash
# Run a command with the DynamoDB/SQS/Secrets Manager/S3 emulator up, then
# stop the emulator, whatever the command's exit status. Endpoints already
# set in the environment (DynamoDB Local, AWS) are used as they are, and
# when all four are set no emulator is started. EMULATOR=fakecloud starts fakecloud (scripts/fakecloud.py,
# `make fakecloud` installs it) instead of moto (scripts/emulator.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ -n "${DYNAMODB_ENDPOINT:-}" && -n "${SQS_ENDPOINT:-}" && -n "${SECRETSMANAGER_ENDPOINT:-}" && -n "${S3_ENDPOINT:-}" ]]; then
  exec "$@"
fi

case "${EMULATOR:-moto}" in
  moto) launcher=emulator.py ;;
  fakecloud) launcher=fakecloud.py ;;
  *) echo "EMULATOR=$EMULATOR: want moto or fakecloud" >&2; exit 2 ;;
esac

log=$(mktemp)
"$root/.venv/bin/python" "$root/scripts/$launcher" --port 0 >"$log" 2>"$log.err" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log" "$log.err"' EXIT

url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^READY //p' "$log")
  [[ -n "$url" ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$log.err" >&2
    echo "emulator exited before it was ready" >&2
    exit 1
  fi
  sleep 0.1
done
[[ -n "$url" ]] || { echo "emulator not ready after 60s" >&2; exit 1; }

export DYNAMODB_ENDPOINT="${DYNAMODB_ENDPOINT:-$url}"
export SQS_ENDPOINT="${SQS_ENDPOINT:-$url}"
export SECRETSMANAGER_ENDPOINT="${SECRETSMANAGER_ENDPOINT:-$url}"
export S3_ENDPOINT="${S3_ENDPOINT:-$url}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
echo "emulator: $url" >&2
"$@"
