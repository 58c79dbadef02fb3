package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// settlement is what settle's flags say the provider's records show.
type settlement struct {
	chargeID, refundID, declineCode string
	declined, released, yes         bool
}

// result is the settlement as the provider's answer SettleByOperator
// takes. It is refused unless exactly one outcome is given. That outcome
// must be one the key's operation can have: --charged for a charge,
// --refunded for a refund.
func (s settlement) result(operation string) (provider.Result, error) {
	var given []provider.Result
	if s.chargeID != "" {
		given = append(given, provider.Result{Status: provider.StatusCharged, ChargeID: s.chargeID})
	}
	if s.refundID != "" {
		given = append(given, provider.Result{Status: provider.StatusRefunded, ChargeID: s.refundID})
	}
	if s.declined {
		given = append(given, provider.Result{Status: provider.StatusDeclined, DeclineCode: s.declineCode})
	}
	if s.released {
		given = append(given, provider.Result{Status: provider.StatusNotFound})
	}
	switch {
	case len(given) != 1:
		return provider.Result{}, errors.New("give exactly one of --charged REF, --refunded REF, --declined, --released")
	case s.chargeID != "" && operation != charge.ChargeOperation:
		return provider.Result{}, fmt.Errorf("--charged settles a key of --operation %s, not %s", charge.ChargeOperation, operation)
	case s.refundID != "" && operation != charge.RefundOperation:
		return provider.Result{}, fmt.Errorf("--refunded settles a key of --operation %s, not %s", charge.RefundOperation, operation)
	}
	if s.declined && s.declineCode == "" {
		return provider.Result{}, errors.New("--declined needs a --decline-code")
	}
	return given[0], nil
}

// noProvider is the provider of the service settle drives. An operator
// settles from the provider's own records, so settling asks the provider
// nothing. A call would be a bug, refused before anything is sent.
type noProvider struct{}

var errNoProvider = errors.New("chargectl: an operator's settle calls no provider")

func (noProvider) Charge(context.Context, provider.ChargeRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) Lookup(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) Guarantees() provider.Guarantees { return provider.Guarantees{} }

func (noProvider) Refund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) LookupRefund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) Capture(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) Cancel(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

func (noProvider) State(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errNoProvider
}

// service is the charge service on st, fence and the charges table. It
// stores the HTTP API's answers, so a retry replays what the API would
// have answered.
func (a *admin) service(st *dynamostore.Store, fence charge.Fence) (*charge.Service, error) {
	rows, err := charge.NewRows(a.clients.DynamoDB, a.cfg.ChargesTable)
	if err != nil {
		return nil, err
	}
	return charge.NewService(charge.Config{Store: st, Rows: rows, Provider: noProvider{}, Answers: httpapi.Answers{}, Fence: fence})
}

// notHere says why this Region may not settle key now (charge.Service's
// MaySettle, or its SettleByOperator).
func (a *admin) notHere(key idem.Key, res charge.Result) error {
	switch res.Outcome {
	case charge.OutcomeWrongRegion:
		return fmt.Errorf("%s serves tenant %s, not %s: settle it there", cmp.Or(res.Region, "another Region"), key.Tenant(), a.cfg.Regions.Region)
	case charge.OutcomeFailoverPending:
		return fmt.Errorf("a failover of tenant %s is pending: %s does not serve it yet, or the Region it left, not drained, may hold newer writes of %s "+
			"(docs/operations.md, \"Failing a Region over\")", key.Tenant(), a.cfg.Regions.Region, keyText(key))
	case charge.OutcomeBusy:
		return errors.New("the routes table could not be read, so whom this Region serves is not known")
	}
	return fmt.Errorf("%s: not settled (%s)", keyText(key), res.Outcome)
}

// evidenceOutput is what settle shows of a record before it writes. It
// holds the record and the reference to look up at the provider. It holds
// what was asked for: for a refund, the charge it refunds. It never holds
// the card source the intent may keep.
type evidenceOutput struct {
	recordOutput
	ProviderReference string `json:"provider_reference"`
	Amount            int64  `json:"amount"`
	Currency          string `json:"currency"`
	Charge            string `json:"charge,omitempty"`
	ProviderCharge    string `json:"provider_charge,omitempty"`
}

// settleOutput is what settle prints once it has settled.
type settleOutput struct {
	Evidence  evidenceOutput `json:"evidence"`
	SettledAs string         `json:"settled_as"` // charged, refunded, declined or released
	// ProviderChargeID is the provider's id for what it did: a charge's,
	// or a refund's.
	ProviderChargeID string         `json:"provider_charge_id,omitempty"`
	Outcome          charge.Outcome `json:"outcome"`
	Record           *recordOutput  `json:"record,omitempty"` // none once a released key's retention has run out
}

// settle settles an IN_FLIGHT key as res says. It waits until the operator
// has seen its evidence and typed the key (unless yes). The evidence and
// the question go where the text output goes. With --json they go to
// stderr, so that stdout holds one JSON object.
func (a *admin) settle(ctx context.Context, args []string, res provider.Result, yes bool) error {
	key, err := a.key(args)
	if err != nil {
		return err
	}
	st, fence, err := a.store()
	if err != nil {
		return err
	}
	svc, err := a.service(st, fence)
	if err != nil {
		return err
	}
	rec, err := a.get(ctx, st, key)
	if err != nil {
		return err
	}
	if rec.Status != idem.StatusInFlight {
		return fmt.Errorf("%s is %s%s, not IN_FLIGHT: nothing to settle", keyText(key), rec.Status, answered(rec))
	}
	// Asked before the note, so a refusal writes nothing at all.
	if res, ok := svc.MaySettle(ctx, key, rec.CreatedAt); !ok {
		return fmt.Errorf("%w: nothing written", a.notHere(key, res))
	}
	// The reference binds the settlement to the intent shown here. If the
	// record is another by the time it is preempted, nothing is written.
	if res.Reference, err = charge.Reference(key, rec.CreatedAt); err != nil {
		return err
	}
	// The members a charge's and a refund's intents share, and a
	// refund's charge.
	var in struct {
		Amount         int64  `json:"amount"`
		Currency       string `json:"currency"`
		Charge         string `json:"charge"`
		ProviderCharge string `json:"provider_charge"`
	}
	if err := json.Unmarshal(rec.Intent, &in); err != nil {
		return fmt.Errorf("stored intent: %w", err)
	}
	ev := evidenceOutput{
		recordOutput: newRecordOutput(key, rec), ProviderReference: res.Reference, Amount: in.Amount, Currency: in.Currency,
		Charge: in.Charge, ProviderCharge: in.ProviderCharge,
	}
	as, plan := describe(key, rec, res)
	talk := a.stdout
	if a.json {
		talk = a.stderr
	}
	w := tabwriter.NewWriter(talk, 0, 4, 2, ' ', 0)
	a.printRecord(w, ev.recordOutput)
	fmt.Fprintf(w, "provider reference:\t%s\n", ev.ProviderReference)
	fmt.Fprintf(w, "amount:\t%d %s (minor units)\n", ev.Amount, ev.Currency)
	if ev.Charge != "" {
		fmt.Fprintf(w, "refunds charge:\t%s (provider charge %s)\n", ev.Charge, ev.ProviderCharge)
	}
	fmt.Fprintf(w, "will settle it as:\t%s\n", plan)
	if err := w.Flush(); err != nil {
		return err
	}
	if !yes {
		if err := a.confirm(talk, key); err != nil {
			return err
		}
	}
	// Who settles it goes to the audit trail first: no settlement
	// unrecorded. The trail's entries of the record follow it.
	if err := a.note(ctx, key, rec, res, as); err != nil {
		return fmt.Errorf("%w: nothing settled", err)
	}
	outcome, after, err := svc.SettleByOperator(ctx, key, res)
	if err != nil {
		return err
	}
	switch outcome {
	case charge.OutcomeWrongRegion, charge.OutcomeFailoverPending, charge.OutcomeBusy:
		// Refused since the note: it stays, naming a settlement not made.
		return fmt.Errorf("%w: nothing settled", a.notHere(key, charge.Result{Outcome: outcome}))
	case charge.OutcomeNothingToDo:
		return fmt.Errorf("%s changed since it was read (now %s%s, created %s): nothing written", keyText(key), after.Status, answered(after), stamp(after.CreatedAt))
	}
	out := settleOutput{Evidence: ev, SettledAs: as, ProviderChargeID: res.ChargeID, Outcome: outcome}
	if after != nil {
		r := newRecordOutput(key, after)
		out.Record = &r
	}
	switch {
	case a.json:
		return a.printJSON(out)
	case after == nil:
		fmt.Fprintf(a.stdout, "settled %s as %s (outcome %s): its retention, counted from its creation, has run out, so the key is free: its next request is a new command\n", keyText(key), as, outcome)
	default:
		fmt.Fprintf(a.stdout, "settled %s as %s (outcome %s): status %s%s\n", keyText(key), as, outcome, after.Status, answered(after))
	}
	fmt.Fprintln(a.stdout, "check with:", recordCommand(key))
	return nil
}

// describe names what settling rec as res does, in a word and in full.
func describe(key idem.Key, rec *idem.Record, res provider.Result) (string, string) {
	refund := key.Operation() == charge.RefundOperation
	switch {
	case res.Status == provider.StatusCharged:
		return "charged", fmt.Sprintf("charged by provider charge %s: SUCCEEDED, with its charge row %s and the 201 the API answers",
			res.ChargeID, charge.ChargeID(key, rec.CreatedAt))
	case res.Status == provider.StatusRefunded:
		return "refunded", fmt.Sprintf("refunded by provider refund %s: SUCCEEDED, with its refund row %s, its hold settled, and the 201 the API answers",
			res.ChargeID, charge.RefundID(key, rec.CreatedAt))
	case res.Status == provider.StatusDeclined && refund:
		return "declined", fmt.Sprintf("declined (%s): FAILED_PERMANENT, its hold freed, with the 409 the API answers", res.DeclineCode)
	case res.Status == provider.StatusDeclined:
		return "declined", fmt.Sprintf("declined (%s): FAILED_PERMANENT, with the 402 the API answers", res.DeclineCode)
	case refund:
		return "released", "not refunded: its hold freed, RELEASED until its retention from the command's creation ends (a retry of the same request before then refunds it under the same reference; after, it is a new command)"
	default:
		return "released", "not charged: RELEASED until its retention from the command's creation ends (a retry of the same request before then charges it under the same reference; after, it is a new command)"
	}
}

// answered is rec's stored answer, as a suffix to its status.
func answered(rec *idem.Record) string {
	if rec.Response == nil {
		return ""
	}
	return fmt.Sprintf(", stored answer %d", rec.Response.Status)
}

// confirm asks the operator to type key's client key. A settlement cannot
// be undone, so it takes more than a stray Enter. A key pasted into the
// wrong command is refused.
func (a *admin) confirm(w io.Writer, key idem.Key) error {
	fmt.Fprintf(w, "type the key to confirm (%s): ", key.ClientKey())
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the confirmation: %w", err)
	}
	if typed := strings.TrimSpace(line); typed != key.ClientKey() {
		return fmt.Errorf("not confirmed (typed %q): nothing written", typed)
	}
	return nil
}
