package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// EnvSTSEndpoint redirects the STS client that names the operator (an
// emulator); unset, AWS's.
const EnvSTSEndpoint = "STS_ENDPOINT"

// audit prints the trail's history of the command TENANT KEY names, or
// with byCharge of TENANT's charge CHARGE_ID, oldest first. A key is
// hashed here: it is neither sent nor shown.
func (a *admin) audit(ctx context.Context, args []string, byCharge bool) error {
	archive, index, err := a.trail(ctx)
	if err != nil {
		return err
	}
	trail, err := audit.NewTrail(archive, index, a.clock)
	if err != nil {
		return err
	}
	var history []audit.Entry
	if byCharge {
		rows, err := charge.NewRows(a.clients.DynamoDB, a.cfg.ChargesTable)
		if err != nil {
			return err
		}
		history, err = trail.ChargeHistory(ctx, rows, args[0], args[1])
		if err != nil {
			return err
		}
	} else {
		key, err := a.key(args)
		if err != nil {
			return err
		}
		if history, err = trail.History(ctx, key.LogHash()); err != nil {
			return err
		}
	}
	if a.json {
		return a.printJSON(history)
	}
	if len(history) == 0 {
		fmt.Fprintln(a.stdout, "no entries in the index's retention; older ones are in the archive: query it with Athena (docs/operations.md)")
		return nil
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AT\tWHAT\tOPERATION\tKEY HASH\tCHARGE / REFUND\tSTATUS\tANSWER\tBY\tFROM")
	for _, e := range history {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(e.At), e.What, e.Operation, e.KeyHash,
			strings.Trim(e.Charge+" "+e.Refund, " "), status(e), answer(e), principal(e.Principal), origin(e.Origin))
	}
	return w.Flush()
}

func status(e audit.Entry) string {
	if e.Was != "" && e.Was != e.Status {
		return e.Was + " → " + e.Status
	}
	return e.Status
}

func answer(e audit.Entry) string {
	if e.Answer == 0 {
		return ""
	}
	return strings.TrimSpace(fmt.Sprint(e.Answer, " ", e.Problem[strings.LastIndex(e.Problem, "/")+1:]))
}

// principal and origin are an entry's who and whence, as name=value pairs.
func principal(p *audit.Principal) string {
	if p == nil {
		return "-"
	}
	return pairs("sub", p.Sub, "client", p.Client, "iam", p.IAM, "provider", p.Provider, "service", p.Service)
}

func origin(o *audit.Origin) string {
	if o == nil {
		return "-"
	}
	return pairs("ip", o.IP, "ua", quote(o.UserAgent), "message", o.Message, "event", o.Event)
}

func quote(s string) string {
	if s == "" || !strings.ContainsAny(s, " \t") {
		return s
	}
	return fmt.Sprintf("%q", s)
}

// pairs is "name=value" for each name and non-empty value, space-separated.
func pairs(kv ...string) string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, kv[i]+"="+kv[i+1])
		}
	}
	return strings.Join(out, " ")
}

// trail is the deployment's audit trail: its archive and its index.
func (a *admin) trail(ctx context.Context) (*audit.Archive, *audit.Index, error) {
	store, err := a.s3(ctx)
	if err != nil {
		return nil, nil, err
	}
	archive, err := audit.NewArchive(store, a.cfg.AuditBucket)
	if err != nil {
		return nil, nil, err
	}
	index, err := audit.NewIndex(a.clients.DynamoDB, a.cfg.AuditIndexTable)
	return archive, index, err
}

// note appends to the audit trail the settlement of rec the operator asks
// for, as, and who the operator is. The streams show the record taken
// over and settled, but not by whom.
func (a *admin) note(ctx context.Context, key idem.Key, rec *idem.Record, res provider.Result, as string) error {
	who, err := a.caller(ctx)
	if err != nil {
		return fmt.Errorf("who settles it: %w", err)
	}
	archive, index, err := a.trail(ctx)
	if err != nil {
		return err
	}
	asked, _ := json.Marshal(struct {
		As          string `json:"settle_as"`
		ProviderID  string `json:"provider_id,omitempty"`
		DeclineCode string `json:"decline_code,omitempty"`
	}{as, res.ChargeID, res.DeclineCode})
	e := audit.Entry{
		At: a.clock().UTC(), What: audit.WhatOperatorSettles, Tenant: key.Tenant(), Operation: key.Operation(), KeyHash: key.LogHash(),
		Principal: &audit.Principal{IAM: who}, Request: asked, Status: as, CreatedAt: rec.CreatedAt.UTC(), Attempts: rec.Attempts,
		// The lease it saw: the trail puts it before the take-over that ends it.
		Lease: audit.LeaseHash(rec.LeaseToken),
	}
	if key.Operation() == charge.RefundOperation {
		e.Refund = charge.RefundID(key, rec.CreatedAt)
	} else {
		e.Charge = charge.ChargeID(key, rec.CreatedAt)
	}
	return audit.Note(ctx, archive, index, e, a.cfg.IndexRetention)
}

// callerARN is who runs chargectl: the ARN STS gives the default chain's
// credentials, at STS_ENDPOINT when it is set.
func callerARN(ctx context.Context) (string, error) {
	cfg, err := awsenv.Config(ctx, false)
	if err != nil {
		return "", err
	}
	return caller(ctx, cfg, os.Getenv(EnvSTSEndpoint))
}

// caller is the ARN STS gives cfg's credentials, at endpoint unless it is
// empty.
func caller(ctx context.Context, cfg aws.Config, endpoint string) (string, error) {
	out, err := sts.NewFromConfig(cfg, func(o *sts.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", fmt.Errorf("sts: %w", err)
	}
	return aws.ToString(out.Arn), nil
}
