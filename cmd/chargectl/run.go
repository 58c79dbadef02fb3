package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/pkg/client"
)

// Environment variables the flags default to.
const (
	EnvURL   = "CHARGEONCE_URL"
	EnvToken = "CHARGEONCE_TOKEN"
)

// Defaults for the local stack.
const (
	DefaultURL     = "http://127.0.0.1:3000"
	DefaultToken   = "dev:acme"
	DefaultTimeout = 2 * time.Minute
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // final: retrying the same id gives the same answer
	exitUsage   = 2
	exitPending = 3 // not known yet: resume with --id, or run capture or cancel again
)

const usage = `usage:
  chargectl create --amount N --currency CUR --source TOKEN [--description TEXT] [--capture=false] [--id ID] [--json]
  chargectl get [--json] CHARGE_ID
  chargectl refunds [--json] CHARGE_ID
  chargectl capture CHARGE_ID [--amount N] [--json]
  chargectl cancel CHARGE_ID [--json]
  chargectl refund CHARGE_ID [--amount N] [--reason REASON] [--id ID] [--json]
  chargectl admin COMMAND ...   (record, stuck, reconcile, dlq, submit, settle, limits, audit, route, failover, drained: chargectl admin help)
create, get, refunds, capture, cancel and refund take: --url URL ($` + EnvURL + `), --token TOKEN ($` + EnvToken + `), --timeout DURATION
`

// run is the whole command; main only wires the process to it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "create":
		return runCreate(ctx, args[1:], stdout, stderr)
	case "get", "capture", "cancel":
		return runOnCharge(ctx, args[0], args[1:], stdout, stderr)
	case "refund":
		return runRefund(ctx, args[1:], stdout, stderr)
	case "refunds":
		return runRefunds(ctx, args[1:], stdout, stderr)
	case "admin":
		return runAdmin(ctx, args[1:], adminEnv{getenv: os.Getenv, clients: awsenv.Load, s3: awsenv.LoadS3, caller: callerARN, clock: time.Now, stdin: os.Stdin}, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "chargectl: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// common are the flags every command takes.
type common struct {
	url, token string
	timeout    time.Duration
	json       bool
}

func newFlagSet(name string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("chargectl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", envOr(EnvURL, DefaultURL), "base URL of the API")
	fs.StringVar(&c.token, "token", envOr(EnvToken, DefaultToken), "bearer token")
	fs.DurationVar(&c.timeout, "timeout", DefaultTimeout, "budget for the request and all its retries")
	fs.BoolVar(&c.json, "json", false, "print the result as JSON")
	return fs
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newClient builds the API client; retries are reported on stderr.
func (c *common) newClient(stderr io.Writer) (*client.Client, error) {
	return client.New(c.url, client.WithToken(c.token),
		client.WithOnRetry(func(attempt int, wait time.Duration, err error) {
			fmt.Fprintf(stderr, "attempt %d: %v; retrying in %v\n", attempt, err, wait.Round(time.Millisecond))
		}))
}

func runCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c           common
		amount      int64
		currency    string
		source      string
		description string
		capture     bool
		resume      string
	)
	fs := newFlagSet("create", stderr, &c)
	fs.Int64Var(&amount, "amount", 0, "amount in minor units (cents), required")
	fs.StringVar(&currency, "currency", "EUR", "ISO 4217 currency code")
	fs.StringVar(&source, "source", "", "payment source (card token), required")
	fs.StringVar(&description, "description", "", "free-text description")
	fs.BoolVar(&capture, "capture", true, "charge the card; --capture=false authorizes only (then chargectl capture or cancel)")
	fs.StringVar(&resume, "id", "", "command id of an earlier run to resume (default: mint a new one)")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 || amount <= 0 || source == "" {
		fmt.Fprintln(stderr, "chargectl create: --amount (positive) and --source are required, and no arguments")
		return exitUsage
	}
	api, id, ok := c.startCommand("create", resume, stderr)
	if !ok {
		return exitUsage
	}
	var opts []client.CreateOption
	if description != "" {
		opts = append(opts, client.WithDescription(description))
	}
	if !capture {
		opts = append(opts, client.WithCaptureLater())
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := api.Create(ctx, id, client.Money{Amount: amount, Currency: currency}, source, opts...)
	if err != nil {
		return fail(stdout, stderr, c.json, intent{id, "the card may have been charged", "chargectl create ..."}, err)
	}
	if c.json {
		return printJSON(stdout, stderr, createOutput{CommandID: id, Receipt: res.Receipt, Charge: res.Charge})
	}
	printCharge(stdout, res.Charge)
	done := "charged the card; not charged again"
	if !capture {
		done = "authorized the amount; not authorized again"
	}
	printReceipt(stdout, res.Receipt, done)
	return exitOK
}

// runOnCharge gets, captures or cancels a charge, and prints it. None takes
// a command id: get changes nothing, and capture and cancel set the
// charge's state, so running the same command again is safe.
func runOnCharge(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	var (
		c      common
		amount int64
	)
	fs := newFlagSet(cmd, stderr, &c)
	if cmd == "capture" {
		fs.Int64Var(&amount, "amount", 0, "amount to capture in minor units (default: all the charge holds)")
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return usageError(err)
	}
	given, ok := chargeAndAmount(fs, cmd, rest, amount, "capture all the charge holds", stderr)
	if !ok {
		return exitUsage
	}
	again := "chargectl " + cmd + " " + rest[0]
	var opts []client.CaptureOption
	if given {
		opts = append(opts, client.WithCaptureAmount(amount))
		again += fmt.Sprintf(" --amount %d", amount)
	}
	api, err := c.newClient(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "chargectl:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var ch client.Charge
	in := intent{effect: "the " + cmd + " may have happened", resume: again}
	switch cmd {
	case "get":
		ch, err = api.Get(ctx, rest[0])
		in = intent{}
	case "capture":
		ch, err = api.Capture(ctx, rest[0], opts...)
	default:
		ch, err = api.Cancel(ctx, rest[0])
	}
	if err != nil {
		return fail(stdout, stderr, c.json, in, err)
	}
	if c.json {
		return printJSON(stdout, stderr, ch)
	}
	printCharge(stdout, ch)
	return exitOK
}

// runRefunds prints every refund of a charge, oldest first, read a page
// at a time.
func runRefunds(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlagSet("refunds", stderr, &c)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return usageError(err)
	}
	if len(rest) != 1 {
		fmt.Fprintln(stderr, "chargectl refunds: want exactly one charge id")
		return exitUsage
	}
	api, err := c.newClient(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "chargectl:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	refunds := []client.Refund{}
	for re, err := range api.AllRefunds(ctx, rest[0]) {
		if err != nil {
			return fail(stdout, stderr, c.json, intent{}, err)
		}
		refunds = append(refunds, re)
	}
	if c.json {
		return printJSON(stdout, stderr, refunds)
	}
	for _, re := range refunds {
		printRefundLine(stdout, re)
	}
	return exitOK
}

func runRefund(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c      common
		amount int64
		reason string
		resume string
	)
	fs := newFlagSet("refund", stderr, &c)
	fs.Int64Var(&amount, "amount", 0, "amount to refund in minor units (default: all that remains of the charge)")
	fs.StringVar(&reason, "reason", "", "why: duplicate, fraudulent or requested_by_customer")
	fs.StringVar(&resume, "id", "", "command id of an earlier run to resume (default: mint a new one)")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return usageError(err)
	}
	given, ok := chargeAndAmount(fs, "refund", rest, amount, "refund all that remains", stderr)
	if !ok {
		return exitUsage
	}
	var opts []client.RefundOption
	if given {
		opts = append(opts, client.WithRefundAmount(amount))
	}
	if reason != "" {
		opts = append(opts, client.WithRefundReason(client.RefundReason(reason)))
	}
	api, id, ok := c.startCommand("refund", resume, stderr)
	if !ok {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := api.Refund(ctx, rest[0], id, opts...)
	if err != nil {
		return fail(stdout, stderr, c.json, intent{id, "the refund may have been made", "chargectl refund " + rest[0] + " ..."}, err)
	}
	if c.json {
		return printJSON(stdout, stderr, refundOutput{CommandID: id, Receipt: res.Receipt, Refund: res.Refund})
	}
	printRefund(stdout, res.Refund)
	printReceipt(stdout, res.Receipt, "made this refund; not refunded again")
	return exitOK
}

// parseInterspersed parses fs's flags wherever they stand among args (the
// refund's charge id comes first), and returns the other arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// chargeAndAmount checks the arguments of a command on one charge: exactly
// one charge id, and an --amount that is left out (to do all) or positive.
// given reports whether --amount was given.
func chargeAndAmount(fs *flag.FlagSet, cmd string, rest []string, amount int64, all string, stderr io.Writer) (given, ok bool) {
	given = flagSet(fs, "amount")
	switch {
	case given && amount <= 0:
		fmt.Fprintf(stderr, "chargectl %s: --amount must be positive; leave it out to %s\n", cmd, all)
		return given, false
	case len(rest) != 1:
		fmt.Fprintf(stderr, "chargectl %s: want exactly one charge id\n", cmd)
		return given, false
	}
	return given, true
}

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// startCommand builds the client, then mints a command id. It prints the
// id on stderr before the first request, so that a failed run can be
// resumed. To resume, it checks the id given with --id instead.
func (c *common) startCommand(cmd, resume string, stderr io.Writer) (*client.Client, client.CommandID, bool) {
	api, err := c.newClient(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "chargectl:", err)
		return nil, "", false
	}
	if resume == "" {
		id := client.NewCommandID()
		fmt.Fprintf(stderr, "command id: %s (resume with --id %s)\n", id, id)
		return api, id, true
	}
	id := client.CommandID(resume)
	if err := id.Validate(); err != nil {
		fmt.Fprintf(stderr, "chargectl %s: --id: %v\n", cmd, err)
		return nil, "", false
	}
	fmt.Fprintf(stderr, "resuming command id: %s\n", id)
	return api, id, true
}

func usageError(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// createOutput is what create --json prints.
type createOutput struct {
	CommandID client.CommandID `json:"command_id"`
	client.Receipt
	Charge client.Charge `json:"charge"`
}

// refundOutput is what refund --json prints.
type refundOutput struct {
	CommandID client.CommandID `json:"command_id"`
	client.Receipt
	Refund client.Refund `json:"refund"`
}

// errorOutput is what --json prints on failure.
type errorOutput struct {
	CommandID client.CommandID     `json:"command_id,omitempty"`
	Retryable bool                 `json:"retryable"`
	Error     string               `json:"error"`
	Problem   *client.ProblemError `json:"problem,omitempty"`
}

func printCharge(w io.Writer, ch client.Charge) {
	fmt.Fprintf(w, "charge:       %s\n", ch.ID)
	fmt.Fprintf(w, "status:       %s\n", ch.Status)
	fmt.Fprintf(w, "amount:       %d %s (minor units)\n", ch.Amount, ch.Currency)
	if ch.AmountAuthorized > 0 {
		fmt.Fprintf(w, "authorized:   %d %s (minor units)\n", ch.AmountAuthorized, ch.Currency)
	}
	if ch.Description != "" {
		fmt.Fprintf(w, "description:  %s\n", ch.Description)
	}
	fmt.Fprintf(w, "provider ref: %s\n", ch.ProviderReference)
	fmt.Fprintf(w, "created:      %s\n", ch.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "refunded:     %d %s (minor units)\n", ch.AmountRefunded, ch.Currency)
	for _, re := range ch.Refunds {
		fmt.Fprint(w, "  ")
		printRefundLine(w, re)
	}
	if ch.RefundsHasMore {
		fmt.Fprintf(w, "  more refunds: chargectl refunds %s\n", ch.ID)
	}
}

// printRefundLine prints a refund on one line.
func printRefundLine(w io.Writer, re client.Refund) {
	fmt.Fprintf(w, "refund:     %s %d %s %s\n", re.ID, re.Amount, re.Currency, re.Status)
}

func printRefund(w io.Writer, re client.Refund) {
	fmt.Fprintf(w, "refund:       %s\n", re.ID)
	fmt.Fprintf(w, "charge:       %s\n", re.ChargeID)
	fmt.Fprintf(w, "status:       %s\n", re.Status)
	fmt.Fprintf(w, "amount:       %d %s (minor units)\n", re.Amount, re.Currency)
	if re.Reason != "" {
		fmt.Fprintf(w, "reason:       %s\n", re.Reason)
	}
	fmt.Fprintf(w, "provider ref: %s\n", re.ProviderReference)
	fmt.Fprintf(w, "created:      %s\n", re.CreatedAt.UTC().Format(time.RFC3339))
}

// printReceipt says whether the command's answer was a replay, which did
// what done says, and until when its id deduplicates.
func printReceipt(w io.Writer, r client.Receipt, done string) {
	if r.Replayed {
		fmt.Fprintf(w, "replayed:     yes (an earlier request with this id %s)\n", done)
	} else {
		fmt.Fprintln(w, "replayed:     no")
	}
	if !r.KeyExpiresAt.IsZero() {
		fmt.Fprintf(w, "id expires:   %s\n", r.KeyExpiresAt.UTC().Format(time.RFC3339))
	}
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "chargectl:", err)
		return exitFailed
	}
	return exitOK
}

// pending reports whether err leaves the outcome open: the same command,
// resumed with its id, may still succeed.
func pending(err error) bool {
	for _, target := range []error{
		client.ErrInProgress, client.ErrOutcomePending, client.ErrOutcomeUnknown, client.ErrUnavailable, client.ErrRateLimited,
		client.ErrInternal, context.DeadlineExceeded, context.Canceled,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var p *client.ProblemError
	if !errors.As(err, &p) {
		return true // a network error: nothing is known
	}
	// A refund that exceeds the charge, or its limit, only while other
	// refunds are in flight may succeed if they fail. A charge whose
	// capture or cancel is unsettled may yet end in a state the request
	// applies to.
	return (errors.Is(p, client.ErrRefundExceedsCharge) || errors.Is(p, client.ErrRefundLimit)) && p.RetryAfter > 0 ||
		errors.Is(p, client.ErrChargeState) && (p.ChargeStatus == client.StatusCapturing || p.ChargeStatus == client.StatusCanceling)
}

// intent is the command a failure may leave open. It holds the command's
// id, what it may have done, and the command line that resumes it (less
// the --id). capture and cancel have no id: they are safe to run again as
// they were.
type intent struct {
	id     client.CommandID
	effect string
	resume string
}

// fail reports err and returns the exit status for it.
func fail(stdout, stderr io.Writer, asJSON bool, in intent, err error) int {
	code := exitFailed
	if pending(err) {
		code = exitPending
	}
	fmt.Fprintln(stderr, "chargectl:", err)
	var p *client.ProblemError
	if errors.As(err, &p) && p.ChargeStatus != "" {
		fmt.Fprintf(stderr, "charge status: %s\n", p.ChargeStatus)
	}
	again, unknown, later := in.resume, "run the same command again, which is safe", "run the same command again"
	if in.id != "" {
		again = fmt.Sprintf("%s --id %s", in.resume, in.id)
		unknown, later = "resume with the same id, never a new one", "resume with"
	}
	switch {
	case code == exitPending && in.resume != "" && errors.Is(err, client.ErrOutcomeUnknown):
		fmt.Fprintf(stderr, "the outcome is unknown: %s; %s: %s\n", in.effect, unknown, again)
	case in.resume != "" && errors.Is(err, client.ErrRateLimited):
		wait := time.Second
		if p != nil && p.RetryAfter > 0 {
			wait = p.RetryAfter
		}
		fmt.Fprintf(stderr, "rate limited: the tenant is over its limit, and no attempt did anything; after %v, %s: %s\n", wait, later, again)
	case code == exitPending && in.resume != "":
		fmt.Fprintf(stderr, "the outcome is not known yet; %s: %s\n", later, again)
	}
	if asJSON {
		out := errorOutput{CommandID: in.id, Retryable: code == exitPending, Error: err.Error(), Problem: p}
		if printJSON(stdout, stderr, out) != exitOK {
			return exitFailed
		}
	}
	return code
}
