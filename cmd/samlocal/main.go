// Command samlocal is `make sam-local`'s last step, once scripts/sam-docker.sh
// has a Docker daemon and the base image: it serves the DynamoDB/SQS
// emulator and the provider simulator on the docker bridge's address with
// the template's tables and queues (package samlocal), runs `sam build`
// for -arch, writes a SAM CLI configuration for `sam local invoke` and
// `sam local start-api` into -config-dir, and prints the commands. On a
// terminal it then opens a shell where they work, and stops everything
// when that shell exits; otherwise it serves until SIGINT or SIGTERM.
//
// Usage:
//
//	samlocal [-arch arm64] [-host <docker0's address>] [-emulator-port 4566]
//	         [-provider-port 4010] [-api-port 3001] [-config-dir .aws-sam/local]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/chargeonce/chargeonce/internal/local/samlocal"
)

type options struct {
	arch, host, configDir               string
	emulatorPort, providerPort, apiPort int
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "samlocal:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("samlocal", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.arch, "arch", samlocal.ArchARM64, "the functions' architecture: arm64 (as deployed; qemu on an x86_64 host) or x86_64")
	fs.StringVar(&o.host, "host", "", "address the containers reach the emulator and provider on (default: docker0's IPv4 address)")
	fs.IntVar(&o.emulatorPort, "emulator-port", 4566, "port of the DynamoDB/SQS emulator")
	fs.IntVar(&o.providerPort, "provider-port", 4010, "port of the provider simulator")
	fs.IntVar(&o.apiPort, "api-port", 3001, "port `sam local start-api` serves on, on 127.0.0.1")
	fs.StringVar(&o.configDir, "config-dir", filepath.Join(".aws-sam", "local"), "where the SAM CLI configuration is written")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.host == "" {
		var err error
		if o.host, err = samlocal.BridgeAddress(); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

func run(ctx context.Context, o options) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	stack, err := samlocal.Start(ctx, samlocal.Options{Root: root, Host: o.host, EmulatorPort: o.emulatorPort, ProviderPort: o.providerPort, Arch: o.arch})
	if err != nil {
		return err
	}
	defer stack.Close()
	fmt.Fprintf(os.Stderr, "samlocal: emulator %s, provider simulator %s; sam build for %s ...\n", stack.EmulatorURL, stack.ProviderURL, o.arch)
	if err := samlocal.Build(root, o.arch, "", os.Stderr); err != nil {
		return err
	}
	cfg, err := stack.WriteConfig(o.configDir, "", "127.0.0.1", o.apiPort)
	if err != nil {
		return err
	}
	printBanner(os.Stderr, stack, cfg, o)

	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err == nil {
		return shell(ctx, root)
	}
	emuExited, served := stack.Exited()
	fmt.Fprintln(os.Stderr, "samlocal: serving until Ctrl-C (no terminal to open a shell on)")
	select {
	case <-ctx.Done():
		return nil
	case <-emuExited:
		return errors.New("the emulator exited")
	case err := <-served:
		return fmt.Errorf("the provider simulator stopped: %w", err)
	}
}

// shell runs an interactive bash where the printed commands work: the
// venv's sam first on PATH, in samlocal.Env. Its exit ends the session.
func shell(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, "bash", "--norc", "-i")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, ".venv", "bin")+":"+os.Getenv("PATH"), `PS1=(sam-local) \w$ `)
	cmd.Env = append(cmd.Env, samlocal.Env...)
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) || ctx.Err() != nil {
		return nil // the shell's own status is the user's last command's
	}
	return err
}

func printBanner(w io.Writer, s *samlocal.Stack, cfg samlocal.Config, o options) {
	rel := cfg.Path
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, cfg.Path); err == nil {
			rel = r
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nsam local is ready (%s functions; the containers reach %s).\n\n", o.arch, o.host)
	fmt.Fprintf(&b, "  DynamoDB/SQS emulator  %s   (tables %s, %s; queues %s, %s)\n", s.EmulatorURL,
		samlocal.IdempotencyTable, samlocal.ChargesTable, samlocal.ReconcileQueue, samlocal.ChargeRequestsQueue)
	fmt.Fprintf(&b, "  provider simulator     %s   (sources tok_visa, tok_decline, ...; GET /v1/ledger)\n", s.ProviderURL)
	fmt.Fprintf(&b, "  SAM CLI configuration  %s   (its env-vars file %s)\n\n", rel, filepath.Join(filepath.Dir(rel), filepath.Base(cfg.EnvVars)))
	fmt.Fprintf(&b, "Invoke each function with its event from events/:\n\n")
	for _, c := range [][2]string{
		{"ChargeFunction", "charge-create"}, {"ChargeFunction", "charge-replay"}, {"ChargeFunction", "charge-mismatch"},
		{"IntakeFunction", "intake-sqs"}, {"SweeperFunction", "sweeper-schedule"}, {"ReconcileFunction", "reconcile-sqs"},
	} {
		fmt.Fprintf(&b, "  sam local invoke --config-file %s %s -e events/%s.json\n", rel, c[0], c[1])
	}
	fmt.Fprintf(&b, "\nServe the API (the development authorizer takes Authorization: Bearer dev:<tenant>):\n\n")
	fmt.Fprintf(&b, "  sam local start-api --config-file %s &\n", rel)
	fmt.Fprintf(&b, "  curl -si -X POST http://127.0.0.1:%d/charges -H 'Authorization: Bearer dev:acme' -H 'Content-Type: application/json' -H 'Idempotency-Key: order-1001' -d '{\"amount\":1500,\"currency\":\"EUR\",\"source\":\"tok_visa\"}'\n\n", o.apiPort)
	_, _ = io.WriteString(w, b.String())
}
