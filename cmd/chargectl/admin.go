package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/client"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

const adminUsage = `usage:
  chargectl admin record [--json] [--operation OP] TENANT KEY
                                                   the idempotency record of a key
  chargectl admin stuck [--json] [--max N]        stuck leases, oldest first, from the stuck-lease index
  chargectl admin reconcile [--json] [--operation OP] TENANT KEY
                                                   queue a key for reconciliation now
  chargectl admin dlq list [--json] [--max N]     the dead-letter queue's messages (left in place)
  chargectl admin dlq redrive [--json] [--key [--operation OP] TENANT KEY]
                                                   move dead letters back to the reconcile queue
  chargectl admin submit [--json] --tenant TENANT --amount N [--currency CUR] --source TOKEN [--description TEXT] [--id ID]
                                                   submit a charge on the charge-requests queue
  chargectl admin settle [--json] [--yes] [--operation OP]
      (--charged REF | --refunded REF | --declined [--decline-code CODE] | --released) TENANT KEY
                                                   settle an in-flight (parked) key as the provider's records say,
                                                   after showing its evidence and asking you to type KEY
  chargectl admin limits list [--json]            the tenants whose limits an operator set
  chargectl admin limits set [--json] [--rate N] [--concurrency N] TENANT
                                                   set a tenant's limits: requests a second, requests at once
                                                   (a limit not given keeps the default); applies within LIMITS_MAX_AGE
  chargectl admin limits clear [--json] TENANT    give a tenant the default limits again
  chargectl admin audit [--json] [--operation OP] TENANT KEY
                                                   the audit trail of a key (hashed here), oldest first
  chargectl admin audit [--json] --charge TENANT CHARGE_ID
                                                   the audit trail of a charge: its key's, its refunds'
  chargectl admin route [--json] HOME              who serves the tenants homed in the Region HOME, and what is not drained
  chargectl admin failover [--json] [--yes] HOME REGION
                                                   serve HOME's tenants from REGION, after the fence (docs/operations.md)
  chargectl admin drained [--json] [--yes] HOME REGION
                                                   REGION's writes for HOME have all replicated: its claims and records
                                                   become the serving Region's to settle
OP, the operation the key is scoped to: ` + charge.ChargeOperation + ` (default, POST /charges) or ` + charge.RefundOperation + `
(POST /charges/{id}/refunds); record, reconcile and redrive also take ` + charge.NotificationOperation + `
(TENANT the tenant whose command the event names, KEY stripe:<event id>)
configuration, as the functions read it: ` + app.EnvIdempotencyTable + `, ` + app.EnvChargesTable + `, ` + app.EnvLimitsTable + `, ` + app.EnvIdempotencyTTL + `,
` + app.EnvReconcileQueueURL + `, ` + app.EnvReconcileDLQURL + `, ` + app.EnvChargeRequestsQueueURL + `, ` + app.EnvAuditBucket + `,
` + app.EnvAuditIndexTable + `, ` + app.EnvAuditIndexDays + `, ` + app.EnvRoutesTable + `, ` + app.EnvLedgerTable + `,
` + app.EnvHomeRegion + `, ` + app.EnvTenantHomes + `, ` + app.EnvAWSRegion + `, ` + awsenv.EnvDynamoDBEndpoint + `, ` + awsenv.EnvSQSEndpoint + ` and
` + awsenv.EnvS3Endpoint + ` (unset: AWS), and the SDK's AWS_* variables
`

// Prefix lengths of what record shows of a lease token and a fingerprint.
// They are enough to tell two apart, too little to forge a fenced write.
const (
	ownerPrefix       = 8
	fingerprintPrefix = 12
)

// adminEnv is what the admin commands run on: the deployment's
// configuration and AWS clients, the clock, and the operator's input
// (settle's confirmation).
type adminEnv struct {
	getenv  app.Getenv
	clients func(context.Context) (awsenv.Clients, error)
	// s3 reaches the audit trail's bucket (admin audit, settle's note);
	// caller is who runs the command, as IAM knows them (settle's note).
	s3     func(context.Context) (*s3.Client, error)
	caller func(context.Context) (string, error)
	clock  func() time.Time
	stdin  io.Reader
}

// admin is one admin command, configured.
type admin struct {
	adminEnv
	cfg            app.AdminConfig
	clients        awsenv.Clients
	json           bool
	operation      string // the operation of the key the arguments name
	stdout, stderr io.Writer
}

func runAdmin(ctx context.Context, args []string, env adminEnv, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, adminUsage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	if cmd == "dlq" || cmd == "limits" {
		if len(args) == 0 {
			fmt.Fprint(stderr, adminUsage)
			return exitUsage
		}
		cmd, args = cmd+" "+args[0], args[1:]
	}
	a := &admin{adminEnv: env, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("chargectl admin "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&a.json, "json", false, "print the result as JSON")
	operation := func() {
		fs.StringVar(&a.operation, "operation", charge.ChargeOperation, "the `OP` the key is scoped to: "+charge.ChargeOperation+" or "+charge.RefundOperation)
	}
	var (
		nargs int
		need  []string
		do    func(context.Context, []string) error
		most  int
		byKey bool
		sub   submission
		// check refuses, as a usage error, flags that do not fit together.
		check   func() error
		set     settlement
		settled provider.Result
		limits  limit.Limits
	)
	switch cmd {
	case "record":
		nargs, need = 2, []string{app.EnvIdempotencyTable}
		operation()
		do = a.record
	case "stuck":
		need = []string{app.EnvIdempotencyTable}
		fs.IntVar(&most, "max", 1000, "list at most this many")
		do = func(ctx context.Context, _ []string) error { return a.stuck(ctx, most) }
	case "reconcile":
		nargs, need = 2, []string{app.EnvReconcileQueueURL}
		operation()
		do = a.reconcile
	case "dlq list":
		need = []string{app.EnvReconcileDLQURL}
		fs.IntVar(&most, "max", 1000, "list at most this many")
		do = func(ctx context.Context, _ []string) error { return a.dlqList(ctx, most) }
	case "dlq redrive":
		need = []string{app.EnvReconcileQueueURL, app.EnvReconcileDLQURL}
		fs.BoolVar(&byKey, "key", false, "move only the messages of the key TENANT KEY given as arguments")
		operation()
		do = a.dlqRedrive
	case "submit":
		need = []string{app.EnvChargeRequestsQueueURL}
		fs.StringVar(&sub.tenant, "tenant", "", "the tenant to charge for, required")
		fs.Int64Var(&sub.req.Amount, "amount", 0, "amount in minor units (cents), required")
		fs.StringVar(&sub.req.Currency, "currency", "EUR", "ISO 4217 currency code")
		fs.StringVar(&sub.req.Source, "source", "", "payment source (card token), required")
		fs.StringVar(&sub.req.Description, "description", "", "free-text description")
		fs.StringVar(&sub.id, "id", "", "command id (default: mint a new one); submit again with the same id to resubmit")
		do = func(ctx context.Context, _ []string) error { return a.submit(ctx, sub) }
	case "settle":
		nargs, need = 2, []string{app.EnvIdempotencyTable, app.EnvChargesTable, app.EnvAuditBucket, app.EnvAuditIndexTable}
		operation()
		fs.StringVar(&set.chargeID, "charged", "", "the provider charged it: its id for the charge is `REF`")
		fs.StringVar(&set.refundID, "refunded", "", "the provider refunded it (--operation "+charge.RefundOperation+"): its id for the refund is `REF`")
		fs.BoolVar(&set.declined, "declined", false, "the provider declined it")
		fs.StringVar(&set.declineCode, "decline-code", "card_declined", "with --declined, the provider's decline `CODE`, which the 402 names")
		fs.BoolVar(&set.released, "released", false, "the provider has no charge for it: release the key, so a retry charges it")
		fs.BoolVar(&set.yes, "yes", false, "settle without asking to type the key")
		check = func() (err error) {
			settled, err = set.result(a.operation)
			return err
		}
		do = func(ctx context.Context, args []string) error { return a.settle(ctx, args, settled, set.yes) }
	case "limits list":
		need = []string{app.EnvLimitsTable}
		do = func(ctx context.Context, _ []string) error { return a.limitsList(ctx) }
	case "limits set":
		nargs, need = 1, []string{app.EnvLimitsTable}
		fs.IntVar(&limits.Rate, "rate", 0, "requests the tenant may start a second (0: the default)")
		fs.IntVar(&limits.Concurrency, "concurrency", 0, "requests of the tenant that may run at once (0: the default)")
		check = func() error {
			if err := limits.CheckOverride(); err != nil {
				return fmt.Errorf("give --rate, --concurrency or both: %w", err)
			}
			return nil
		}
		do = func(ctx context.Context, args []string) error { return a.limitsSet(ctx, args[0], limits) }
	case "limits clear":
		nargs, need = 1, []string{app.EnvLimitsTable}
		do = func(ctx context.Context, args []string) error { return a.limitsSet(ctx, args[0], limit.Limits{}) }
	case "audit":
		nargs, need = 2, []string{app.EnvAuditBucket, app.EnvAuditIndexTable}
		operation()
		var byCharge bool
		fs.BoolVar(&byCharge, "charge", false, "the arguments are TENANT CHARGE_ID: the charge's trail, its key's and its refunds'")
		check = func() error {
			if !byCharge {
				return nil
			}
			need = append(need, app.EnvChargesTable)
			if id := fs.Arg(1); !charge.IsChargeID(id) {
				return fmt.Errorf("%q: %w", id, charge.ErrNotChargeID)
			}
			return nil
		}
		do = func(ctx context.Context, args []string) error { return a.audit(ctx, args, byCharge) }
	case "route":
		nargs, need = 1, []string{app.EnvRoutesTable}
		do = a.route
	case "failover", "drained":
		nargs, need = 2, []string{app.EnvRoutesTable}
		var yes bool
		fs.BoolVar(&yes, "yes", false, "change the route without asking to type its name")
		do = func(ctx context.Context, args []string) error {
			if cmd == "failover" {
				return a.failover(ctx, args, yes)
			}
			return a.drained(ctx, args, yes)
		}
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, adminUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "chargectl admin: unknown command %q\n%s", cmd, adminUsage)
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if byKey {
		nargs = 2
	}
	if a.operation != "" && !charge.Reconciles(a.operation) {
		fmt.Fprintf(stderr, "chargectl admin %s: --operation %q: want %s, %s or %s\n%s", cmd, a.operation,
			charge.ChargeOperation, charge.RefundOperation, charge.NotificationOperation, adminUsage)
		return exitUsage
	}
	if fs.NArg() != nargs {
		fmt.Fprintf(stderr, "chargectl admin %s: want %d arguments, got %d\n%s", cmd, nargs, fs.NArg(), adminUsage)
		return exitUsage
	}
	if check != nil {
		if err := check(); err != nil {
			fmt.Fprintf(stderr, "chargectl admin %s: %v\n%s", cmd, err, adminUsage)
			return exitUsage
		}
	}
	cfg, err := app.LoadAdmin(env.getenv, need...)
	if err != nil {
		fmt.Fprintf(stderr, "chargectl admin %s: %v\n", cmd, err)
		return exitUsage
	}
	a.cfg = cfg
	if a.clients, err = env.clients(ctx); err != nil {
		fmt.Fprintln(stderr, "chargectl admin:", err)
		return exitFailed
	}
	if err := do(ctx, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "chargectl admin %s: %v\n", cmd, err)
		return exitFailed
	}
	return exitOK
}

// key is the idempotency key the arguments TENANT KEY name, with the
// client key (its Idempotency-Key) scoped to --operation.
func (a *admin) key(args []string) (idem.Key, error) {
	return idem.NewKey(args[0], a.operation, args[1])
}

// store is the functions' idempotency store. In several Regions the
// Fence says whom this Region serves; in one it is nil.
func (a *admin) store() (*dynamostore.Store, charge.Fence, error) {
	return app.AdminStore(a.cfg, app.Deps{Clients: a.clients, Clock: a.clock})
}

// get reads key's record, saying what no record means.
func (a *admin) get(ctx context.Context, st *dynamostore.Store, key idem.Key) (*idem.Record, error) {
	rec, err := st.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		return nil, fmt.Errorf("no record for %s: never used, or past its retention", keyText(key))
	}
	return rec, err
}

// recordOutput is what record prints.
type recordOutput struct {
	Tenant          string        `json:"tenant"`
	Key             string        `json:"key"`
	Operation       string        `json:"operation"`
	Status          idem.Status   `json:"status"`
	CreatedAt       time.Time     `json:"created_at"`
	LeaseOwner      string        `json:"lease_owner,omitempty"`
	LeaseExpiresAt  time.Time     `json:"lease_expires_at,omitzero"`
	AttemptDeadline time.Time     `json:"attempt_deadline,omitzero"`
	RecordExpiresAt time.Time     `json:"record_expires_at,omitzero"`
	Attempts        int           `json:"attempts"`
	Fingerprint     string        `json:"fingerprint"`
	Answer          *answerOutput `json:"answer,omitempty"`
}

type answerOutput struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body"`
}

func (a *admin) record(ctx context.Context, args []string) error {
	key, err := a.key(args)
	if err != nil {
		return err
	}
	st, _, err := a.store()
	if err != nil {
		return err
	}
	rec, err := a.get(ctx, st, key)
	if err != nil {
		return err
	}
	out := newRecordOutput(key, rec)
	if a.json {
		return a.printJSON(out)
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	a.printRecord(w, out)
	return w.Flush()
}

func newRecordOutput(key idem.Key, rec *idem.Record) recordOutput {
	out := recordOutput{
		Tenant: key.Tenant(), Key: key.ClientKey(), Operation: key.Operation(), Status: rec.Status, CreatedAt: rec.CreatedAt,
		LeaseOwner: prefix(rec.LeaseToken, ownerPrefix), LeaseExpiresAt: rec.LeaseExpiresAt, AttemptDeadline: rec.AttemptDeadline,
		RecordExpiresAt: rec.ExpiresAt, Attempts: rec.Attempts, Fingerprint: prefix(rec.Fingerprint, fingerprintPrefix),
	}
	if r := rec.Response; r != nil {
		out.Answer = &answerOutput{Status: r.Status, Headers: r.Headers, Body: string(r.Body)}
	}
	return out
}

// printRecord writes out's lines to w, for the caller to add its own
// lines aligned with them and flush.
func (a *admin) printRecord(w io.Writer, out recordOutput) {
	now := a.clock()
	fmt.Fprintf(w, "key:\t%s / %s (%s)\n", out.Tenant, out.Key, out.Operation)
	fmt.Fprintf(w, "status:\t%s\n", out.Status)
	fmt.Fprintf(w, "created:\t%s\n", stamp(out.CreatedAt))
	fmt.Fprintf(w, "lease owner:\t%s\n", cmp.Or(out.LeaseOwner, "-"))
	if !out.LeaseExpiresAt.IsZero() {
		fmt.Fprintf(w, "lease expires:\t%s\n", relative(out.LeaseExpiresAt, now))
		fmt.Fprintf(w, "attempt deadline:\t%s\n", relative(out.AttemptDeadline, now))
	}
	if out.RecordExpiresAt.IsZero() {
		fmt.Fprintf(w, "record expires:\tnot while in flight\n")
	} else {
		fmt.Fprintf(w, "record expires:\t%s\n", relative(out.RecordExpiresAt, now))
	}
	fmt.Fprintf(w, "attempts:\t%d (reconciler take-overs)\n", out.Attempts)
	fmt.Fprintf(w, "fingerprint:\t%s…\n", out.Fingerprint)
	if out.Answer == nil {
		fmt.Fprintf(w, "stored answer:\tnone\n")
	} else {
		fmt.Fprintf(w, "stored answer:\t%d\n", out.Answer.Status)
		fmt.Fprintf(w, "answer body:\t%s\n", out.Answer.Body)
	}
}

// stuckOutput is one line of stuck.
type stuckOutput struct {
	Tenant         string    `json:"tenant"`
	Key            string    `json:"key"`
	Operation      string    `json:"operation"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	AgeSeconds     float64   `json:"age_seconds"`
	Attempts       int       `json:"attempts"`
}

func (a *admin) stuck(ctx context.Context, limit int) error {
	st, _, err := a.store()
	if err != nil {
		return err
	}
	now := a.clock()
	var found []idem.Record
	var errs []error
	for shard := range st.Shards() {
		for sl, err := range st.StuckLeases(ctx, shard, now) {
			if err != nil {
				errs = append(errs, err)
				break
			}
			found = append(found, sl)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.SortFunc(found, func(x, y idem.Record) int { return x.LeaseExpiresAt.Compare(y.LeaseExpiresAt) })
	more := len(found) > limit
	found = found[:min(len(found), limit)]
	out := make([]stuckOutput, len(found))
	for i, sl := range found {
		out[i] = stuckOutput{
			Tenant: sl.Key.Tenant(), Key: sl.Key.ClientKey(), Operation: sl.Key.Operation(),
			LeaseExpiresAt: sl.LeaseExpiresAt, AgeSeconds: now.Sub(sl.LeaseExpiresAt).Seconds(), Attempts: sl.Attempts,
		}
	}
	if a.json {
		return a.printJSON(struct {
			Stuck     []stuckOutput `json:"stuck"`
			Truncated bool          `json:"truncated"`
		}{out, more})
	}
	if len(out) == 0 {
		fmt.Fprintln(a.stdout, "no stuck leases")
		return nil
	}
	fmt.Fprintf(a.stdout, "%d stuck leases, oldest first:\n", len(out))
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AGE\tLEASE EXPIRED\tATTEMPTS\tTENANT\tKEY")
	for _, s := range out {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", now.Sub(s.LeaseExpiresAt).Round(time.Second), stamp(s.LeaseExpiresAt), s.Attempts, s.Tenant, s.Key)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(a.stdout, "more not shown (--max %d)\n", limit)
	}
	return nil
}

func (a *admin) reconcile(ctx context.Context, args []string) error {
	key, err := a.key(args)
	if err != nil {
		return err
	}
	sender, err := queue.NewSender(a.clients.SQS, a.cfg.ReconcileQueueURL)
	if err != nil {
		return err
	}
	if err := sender.EnqueueReconcile(ctx, key, 0); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]string{"queued_tenant": key.Tenant(), "queued_key": key.ClientKey(), "queue": a.cfg.ReconcileQueueURL})
	}
	fmt.Fprintf(a.stdout, "queued %s / %s (%s) for reconciliation now\n", key.Tenant(), key.ClientKey(), key.Operation())
	fmt.Fprintln(a.stdout, "the reconciler settles it if its lease has run out, and does nothing otherwise; check with:", recordCommand(key))
	return nil
}

// submission is what submit sends: a POST /charges body, as the command
// id of tenant.
type submission struct {
	tenant, id string
	req        struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Source      string `json:"source"`
		Description string `json:"description,omitempty"`
	}
}

// submitOutput is what submit prints.
type submitOutput struct {
	Tenant    string `json:"tenant"`
	CommandID string `json:"command_id"`
	MessageID string `json:"message_id"`
}

// submit sends a charge-requests message, checked first as the intake
// checks it, so a malformed one is refused here rather than dead-lettered.
func (a *admin) submit(ctx context.Context, sub submission) error {
	if sub.id == "" {
		sub.id = string(client.NewCommandID())
		fmt.Fprintf(a.stderr, "command id: %s (submit again with --id %s; POST /charges with Idempotency-Key %s replays it)\n", sub.id, sub.id, sub.id)
	}
	body, _ := json.Marshal(sub.req) // strings and an integer: cannot fail
	msg, err := intake.EncodeMessage(sub.tenant, charge.CommandID(sub.id), body)
	if err != nil {
		return err
	}
	if _, err := intake.ParseMessage(msg); err != nil {
		return err
	}
	q, err := intake.NewQueue(a.clients.SQS, a.cfg.ChargeRequestsQueueURL)
	if err != nil {
		return err
	}
	messageID, err := q.Submit(ctx, sub.tenant, charge.CommandID(sub.id), body)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(submitOutput{Tenant: sub.tenant, CommandID: sub.id, MessageID: messageID})
	}
	fmt.Fprintf(a.stdout, "submitted %s / %s (message %s)\n", sub.tenant, sub.id, messageID)
	fmt.Fprintln(a.stdout, "the intake charges it once however often it is delivered; check with: chargectl admin record", sub.tenant, sub.id)
	return nil
}

func (a *admin) printJSON(v any) error {
	if printJSON(a.stdout, a.stderr, v) != exitOK {
		return errors.New("cannot write the output")
	}
	return nil
}

func prefix(s string, n int) string { return s[:min(len(s), n)] }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// relative shows t and how far it is from now.
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d < 0 {
		return fmt.Sprintf("%s (%s ago)", stamp(t), -d)
	}
	return fmt.Sprintf("%s (in %s)", stamp(t), d)
}

// recordCommand is the command line that shows key's record.
func recordCommand(key idem.Key) string {
	if key.Operation() == charge.ChargeOperation {
		return "chargectl admin record " + key.Tenant() + " " + key.ClientKey()
	}
	return "chargectl admin record --operation " + key.Operation() + " " + key.Tenant() + " " + key.ClientKey()
}

// keyText is how a key shows in lists: tenant / key.
func keyText(k idem.Key) string {
	return strings.Join([]string{k.Tenant(), k.ClientKey()}, " / ")
}
