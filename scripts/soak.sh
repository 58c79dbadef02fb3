#!/usr/bin/env bash
# make soak: the model test on fresh seeds, in both modes, and the
# simulation of two and three Regions (test/regions), until SOAK_MINUTES (default 10)
# have passed. Each round draws a new seed from /dev/urandom and names it,
# so a failure reproduces with -rapid.seed.
# Then one short chaos run (cmd/chaos) for CHAOS_DURATION (default 60s),
# on a fresh seed it names too.
# It needs the emulator's endpoints in the environment (scripts/with-emulator.sh).
set -euo pipefail
minutes=${SOAK_MINUTES:-10}
# Histories per round: small enough to draw many seeds in the time.
checks=${SOAK_CHECKS:-100}
stripe_checks=${SOAK_STRIPE_CHECKS:-25}
regions_checks=${SOAK_REGIONS_CHECKS:-200}
go=${GO:-go}
end=$(($(date +%s) + minutes * 60))
rounds=0 histories=0 stripe_histories=0 regions_histories=0
start=$(date +%s)
while (($(date +%s) < end)); do
	for mode in "TestChargePathModel ./test/model $checks" "TestChargePathModelStripe ./test/model $stripe_checks" "TestRegions ./test/regions $regions_checks"; do
		read -r name pkg n <<<"$mode"
		seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
		echo "soak: $name, $n histories, -rapid.seed=$seed"
		if ! "$go" test -count=1 -timeout 30m -run "^${name}\$" "$pkg" -rapid.checks="$n" -rapid.seed="$seed" >"${TMPDIR:-/tmp}/soak.log" 2>&1; then
			grep -v '^=== RUN' "${TMPDIR:-/tmp}/soak.log"
			echo "soak: FAILED: go test -run '^${name}\$' $pkg -rapid.seed=$seed -rapid.checks=$n"
			exit 1
		fi
		case $name in
		TestChargePathModel) histories=$((histories + n)) ;;
		TestChargePathModelStripe) stripe_histories=$((stripe_histories + n)) ;;
		*) regions_histories=$((regions_histories + n)) ;;
		esac
	done
	rounds=$((rounds + 1))
done
echo "soak: passed $rounds rounds of fresh seeds in $(($(date +%s) - start)) s: $histories histories on providersim, $stripe_histories in Stripe mode, $regions_histories in each world of two and three Regions"

chaos_duration=${CHAOS_DURATION:-60s} chaos_outage=${CHAOS_OUTAGE:-20s}
seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
out=${TMPDIR:-/tmp}/soak-chaos
mkdir -p out
"$go" build -o out/localstack ./cmd/localstack
"$go" build -o out/chaos ./cmd/chaos
echo "soak: chaos for $chaos_duration, the last $chaos_outage a DynamoDB outage, -seed $seed"
if ! out/chaos -stack out/localstack -duration "$chaos_duration" -outage "$chaos_outage" -seed "$seed" -out "$out"; then
	echo "soak: chaos FAILED: make chaos CHAOS_DURATION=$chaos_duration CHAOS_OUTAGE=$chaos_outage CHAOS_ARGS='-seed $seed' (its stack's log: $out-stack.log)"
	exit 1
fi
