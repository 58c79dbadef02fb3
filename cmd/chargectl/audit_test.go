package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestAdminAudit: chargectl admin audit shows a key's trail, hashing the
// key it is given, and a charge's, its refund's with it; oldest first. It
// refuses a prefix of a charge id, which could name several.
func TestAdminAudit(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	tr := s.trail
	order, refundID := testkit.UniqueName("order"), testkit.UniqueName("refund")
	code, out := runCLI(t, s.url, &testkit.LogBuffer{}, "create", "--amount", "1500", "--source", "tok_visa", "--id", order, "--json")
	var created createOutput
	if code != exitOK || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("create: exit %d %s", code, out)
	}
	stderr := &testkit.LogBuffer{}
	if code, out := runCLI(t, s.url, stderr, "refund", created.Charge.ID, "--amount", "500", "--id", refundID); code != exitOK {
		t.Fatalf("refund: exit %d %s %s", code, out, stderr)
	}
	tr.Drain(t)

	code, out, _ = s.admin(t, "audit", "acme", order)
	hash := s.key(t, order).LogHash()
	if code != exitOK || strings.Contains(out, order) || !strings.Contains(out, hash) {
		t.Fatalf("audit of the key: exit %d, want its hash and never the key:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "AT ") || !strings.Contains(lines[1], "claimed") || !strings.Contains(lines[1], "sub=dev:acme ") ||
		!strings.Contains(out, "IN_FLIGHT → SUCCEEDED") || !strings.Contains(out, " 201 ") || !strings.Contains(out, "row-written") {
		t.Errorf("audit of the key: want its claim, its settlement with the 201, its row:\n%s", out)
	}
	code, out, _ = s.admin(t, "audit", "--charge", "--json", "acme", created.Charge.ID)
	var history []audit.Entry
	if code != exitOK || json.Unmarshal([]byte(out), &history) != nil {
		t.Fatalf("audit --charge --json: exit %d %s", code, out)
	}
	ops := map[string]bool{}
	for _, e := range history {
		ops[e.Operation] = true
	}
	if !ops[charge.ChargeOperation] || !ops[charge.RefundOperation] {
		t.Errorf("the charge's trail holds the operations %v, want its charge's and its refund's", ops)
	}
	if code, _, stderr := s.admin(t, "audit", "--charge", "acme", "ch_000000000000000000000000"); code != exitFailed || !strings.Contains(stderr, "no such charge") {
		t.Errorf("audit of an unknown charge: exit %d %s", code, stderr)
	}
	if code, _, stderr := s.admin(t, "audit", "--charge", "acme", created.Charge.ID[:12]); code != exitUsage || !strings.Contains(stderr, "not a charge id") {
		t.Errorf("audit of a charge id's prefix: exit %d %s, want it refused", code, stderr)
	}
}

// TestAdminSettleNotesWhoSettles: an operator's settlement is in the
// trail with who made it, as IAM names them, before the record's own
// take-over and release.
func TestAdminSettleNotesWhoSettles(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	order := testkit.UniqueName("order")
	s.parked(t, order)
	if code, _, stderr := s.admin(t, "settle", "--yes", "--released", "acme", order); code != exitOK {
		t.Fatalf("settle: exit %d %s", code, stderr)
	}
	s.trail.Drain(t)
	history, err := s.trail.Reader(t).History(t.Context(), s.key(t, order).LogHash())
	if err != nil {
		t.Fatal(err)
	}
	var whats []string
	for _, e := range history {
		whats = append(whats, e.What)
	}
	want := []string{audit.WhatClaimed, audit.WhatLeaseMoved, audit.WhatOperatorSettles, audit.WhatTakenOver, audit.WhatReleased}
	if !slices.Equal(whats, want) {
		t.Fatalf("the trail: %v, want %v", whats, want)
	}
	if e := history[2]; e.Principal == nil || e.Principal.IAM != operatorARN || e.Status != "released" || e.Charge != charge.ChargeID(s.key(t, order), history[0].CreatedAt) {
		t.Errorf("the operator's note: %+v", e)
	}
}

// TestAdminSettleRefusesWithoutItsNote: when the trail cannot take the
// note, nothing is settled.
func TestAdminSettleRefusesWithoutItsNote(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	order := testkit.UniqueName("order")
	s.parked(t, order)
	s.env[app.EnvAuditBucket] = testkit.UniqueName("no-such-bucket")
	if code, _, stderr := s.admin(t, "settle", "--yes", "--released", "acme", order); code != exitFailed || !strings.Contains(stderr, "nothing settled") {
		t.Fatalf("settle without the trail: exit %d %s", code, stderr)
	}
	if code, out, _ := s.admin(t, "record", "acme", order); code != exitOK || !strings.Contains(out, "IN_FLIGHT") {
		t.Errorf("the record after a refused settle: %s", out)
	}
}

// TestCallerIsWhomSTSNames: chargectl names its operator by the ARN STS
// gives its credentials (the emulator serves STS on its one port).
func TestCallerIsWhomSTSNames(t *testing.T) {
	t.Parallel()
	arn, err := caller(t.Context(), testkit.Config(t), testkit.Endpoints(t).DynamoDB)
	if err != nil || !strings.HasPrefix(arn, "arn:aws:") {
		t.Errorf("caller: %q %v, want an ARN", arn, err)
	}
}

// TestAdminSettleFilesItsNoteForTheIndexsDays: the note is found through
// the index for AUDIT_INDEX_DAYS, as the audit function files the
// streams' entries: not for the default's 92 days.
func TestAdminSettleFilesItsNoteForTheIndexsDays(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	order := testkit.UniqueName("order")
	s.parked(t, order)
	s.env[app.EnvAuditIndexDays] = "30"
	if code, _, stderr := s.admin(t, "settle", "--yes", "--released", "acme", order); code != exitOK {
		t.Fatalf("settle: exit %d %s", code, stderr)
	}
	out, err := s.clients.DynamoDB.Query(t.Context(), &dynamodb.QueryInput{
		TableName:                 aws.String(s.trail.Config.AuditIndexTable),
		KeyConditionExpression:    aws.String("#s = :s"),
		ExpressionAttributeNames:  map[string]string{"#s": audit.AttrSubject},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: s.key(t, order).LogHash()}},
	})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("the note's index items: %v %v", out, err)
	}
	var object string
	var expires int64
	if attributevalue.Unmarshal(out.Items[0][audit.AttrObject], &object) != nil || attributevalue.Unmarshal(out.Items[0][audit.AttrExpires], &expires) != nil {
		t.Fatalf("the note's index item: %v", out.Items[0])
	}
	want := time.Now().Add(30 * 24 * time.Hour)
	if got := time.Unix(expires, 0); !strings.Contains(object, audit.TableOperator) || got.Sub(want).Abs() > time.Minute {
		t.Errorf("the note %s is filed until %s, want %s", object, got, want)
	}
}

// TestAdminSettleRefusesTheIndexDaysTheAuditFunctionRefuses: a count of
// AUDIT_INDEX_DAYS that is none, or that overflows a duration, is
// refused before anything is written. The audit function refuses it too.
// Neither files an entry for a time it did not mean.
func TestAdminSettleRefusesTheIndexDaysTheAuditFunctionRefuses(t *testing.T) {
	t.Parallel()
	for _, days := range []string{"0", "200000"} {
		t.Run(days, func(t *testing.T) {
			t.Parallel()
			s := newAdminStack(t)
			order := testkit.UniqueName("order")
			s.parked(t, order)
			s.env[app.EnvAuditIndexDays] = days
			if _, err := app.LoadAudit(func(name string) string { return s.env[name] }); err == nil {
				t.Errorf("the audit function takes %s=%s", app.EnvAuditIndexDays, days)
			}
			if code, _, stderr := s.admin(t, "settle", "--yes", "--released", "acme", order); code != exitUsage || !strings.Contains(stderr, app.EnvAuditIndexDays) {
				t.Fatalf("settle with %s=%s: exit %d %s, want it refused", app.EnvAuditIndexDays, days, code, stderr)
			}
			out, err := s.clients.DynamoDB.Query(t.Context(), &dynamodb.QueryInput{
				TableName:                 aws.String(s.trail.Config.AuditIndexTable),
				KeyConditionExpression:    aws.String("#s = :s"),
				ExpressionAttributeNames:  map[string]string{"#s": audit.AttrSubject},
				ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: s.key(t, order).LogHash()}},
			})
			if err != nil || len(out.Items) != 0 {
				t.Errorf("a refused settle filed %v %v", out, err)
			}
			delete(s.env, app.EnvAuditIndexDays)
			if code, out, _ := s.admin(t, "record", "acme", order); code != exitOK || !strings.Contains(out, "IN_FLIGHT") {
				t.Errorf("the record after a refused settle: %s", out)
			}
		})
	}
}

// TestAdminSettleNoteAfterAReclaimPrecedesTheOperatorsTakeOver: the
// reconciler takes a command over and releases it. The client's retry
// claims it again: a reclaim, which keeps its creation and resets its
// attempts. That attempt is parked, and an operator settles it. The note
// is read just before the operator's own take-over, not before the
// reconciler's, which came before the release.
func TestAdminSettleNoteAfterAReclaimPrecedesTheOperatorsTakeOver(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	ctx := t.Context()
	order := testkit.UniqueName("order")
	k := s.key(t, order)
	_, fp, err := charge.ParseBody([]byte(settleBody))
	if err != nil {
		t.Fatal(err)
	}
	intent := []byte(`{"amount":1500,"currency":"EUR"}`)
	clock := testkit.NewClock(time.Now().Add(-10 * time.Minute))
	old, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Begin(ctx, k, fp, intent); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute) // the first attempt's lease ran out
	taken, err := old.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Release(ctx, taken); err != nil { // the reconciler: the provider has nothing
		t.Fatal(err)
	}
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	again, err := st.Begin(ctx, k, fp, intent) // the client's retry: a reclaim
	if err != nil || again.Lease == nil {
		t.Fatalf("reclaim: %+v %v", again, err)
	}
	if err := st.Postpone(ctx, again.Lease, time.Now().Add(30*24*time.Hour)); err != nil { // parked
		t.Fatal(err)
	}
	if code, _, stderr := s.admin(t, "settle", "--yes", "--released", "acme", order); code != exitOK {
		t.Fatalf("settle: exit %d %s", code, stderr)
	}
	s.trail.Drain(t)
	history, err := s.trail.Reader(t).History(t.Context(), k.LogHash())
	if err != nil {
		t.Fatal(err)
	}
	var whats []string
	for _, e := range history {
		whats = append(whats, e.What)
	}
	want := []string{
		audit.WhatClaimed, audit.WhatTakenOver, audit.WhatReleased, // the first attempt and the reconciler
		audit.WhatClaimed, audit.WhatLeaseMoved, // the retry, parked
		audit.WhatOperatorSettles, audit.WhatTakenOver, audit.WhatReleased, // the operator
	}
	if !slices.Equal(whats, want) {
		t.Errorf("the trail:\n %v\nwant\n %v", whats, want)
	}
}

// TestAuditNamesAnObjectDeletedWithinItsRetention: a delete marker over
// a locked object is no routine gap. The audit fails, naming the object
// for the operator to look into.
func TestAuditNamesAnObjectDeletedWithinItsRetention(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	tr := s.trail
	order := testkit.UniqueName("order")
	code, out := runCLI(t, s.url, &testkit.LogBuffer{}, "create", "--amount", "1500", "--source", "tok_visa", "--id", order, "--json")
	var created createOutput
	if code != exitOK || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("create: exit %d %s", code, out)
	}
	tr.Drain(t)
	bucket := aws.String(tr.Config.AuditBucket)
	objs, err := tr.S3.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: bucket})
	if err != nil || len(objs.Contents) == 0 {
		t.Fatalf("objects %v %v", objs, err)
	}
	name := aws.ToString(objs.Contents[0].Key)
	if _, err := tr.S3.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: bucket, Key: objs.Contents[0].Key}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := s.admin(t, "audit", "acme", order)
	if code == exitOK || !strings.Contains(stderr, name) {
		t.Fatalf("audit with %s deleted: exit %d %s %s; want a failure naming it", name, code, out, stderr)
	}
}
