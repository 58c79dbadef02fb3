// Command loadgen replays the seeds' worked example against the local stack
// (make run). It sends N logical charges. 3% of them are retried once, and
// a separate 0.5% twice, with the same key and body. A share is sent twice
// at the same instant. It sends open-loop at a target rate, whatever the
// answers (2,080 requests per second by default). At most -max-inflight
// requests are outstanding. A request due while the cap is reached is
// dropped and counted.
//
// Afterwards it checks the provider simulator's ledger and the charges
// table for the run's tenant (fresh each run). It expects one charge and
// one row per logical charge: no duplicate, none missing. It prints a
// summary, and writes it as JSON. It exits 1 if it found a duplicate or a
// missing charge. Drops and slow answers do not fail it.
//
// It only talks to loopback addresses.
//
// Usage:
//
//	loadgen [-n 20000] [-rate 2080] [-retry-once 0.03] [-retry-twice 0.005]
//	        [-concurrent 0.01] [-retry-delay 500ms] [-max-inflight 512]
//	        [-target http://127.0.0.1:3000] [-provider http://127.0.0.1:4010]
//	        [-dynamodb $DYNAMODB_ENDPOINT] [-charges-table chargeonce-charges]
//	        [-out out/load]
//	loadgen sustain [flags]   (steps the offered rate up to the emulator's ceiling; see sustain.go)
//	loadgen growth [flags]    (the same fixed-rate run as the tables grow; see growth.go)
//	loadgen isolation [flags] (one tenant at many times its limit beside another, with vegeta; see isolation.go)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := loadMain
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "sustain":
			run, args = sustainMain, args[1:]
		case "growth":
			run, args = growthMain, args[1:]
		case "isolation":
			run, args = isolationMain, args[1:]
		}
	}
	if err := run(ctx, args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
		}
		os.Exit(1)
	}
}
