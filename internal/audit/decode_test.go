package audit

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// fakeRecords decodes an image {"id": name} as the record of that name.
type fakeRecords map[string]*idem.Record

func (f fakeRecords) Decode(item map[string]types.AttributeValue) (*idem.Record, error) {
	if id, ok := item["id"].(*types.AttributeValueMemberS); ok && f[id.Value] != nil {
		return f[id.Value], nil
	}
	return nil, errors.New("not a record")
}

func image(name string) map[string]events.DynamoDBAttributeValue {
	if name == "" {
		return nil
	}
	return map[string]events.DynamoDBAttributeValue{"id": events.NewStringAttribute(name)}
}

const recordsStream = "arn:aws:dynamodb:us-east-1:123456789012:table/records/stream/2026-12-01T00:00:00.000"

// TestEachChangeOfARecordIsNamed: what an entry says happened, from the
// record before and after the change, and who made a removal.
func TestEachChangeOfARecordIsNamed(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1")
	rec := func(st idem.Status, tok string, expires time.Time) *idem.Record {
		return &idem.Record{Key: key, Status: st, LeaseToken: tok, CreatedAt: now.Add(-time.Hour), ExpiresAt: expires,
			Intent: []byte(`{"amount":1500,"by":{"sub":"u-1","ip":"203.0.113.7"},"currency":"EUR","source":"pm_card_visa"}`)}
	}
	moved := rec(idem.StatusInFlight, "a", time.Time{})
	moved.LeaseExpiresAt = now.Add(time.Minute)
	records := fakeRecords{
		"leased-a": rec(idem.StatusInFlight, "a", time.Time{}),
		"moved-a":  moved,
		"leased-b": rec(idem.StatusInFlight, "b", time.Time{}),
		"done":     rec(idem.StatusSucceeded, "", now.Add(time.Hour)),
		"expired":  rec(idem.StatusSucceeded, "", now.Add(-time.Minute)),
		"released": rec(idem.StatusReleased, "", now.Add(time.Hour)),
		"declined": rec(idem.StatusFailedPermanent, "", now.Add(time.Hour)),
		"unknown":  rec("PAUSED", "", now.Add(time.Hour)),
	}
	ttl := &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: ServiceTTL}
	someone := &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "backup.amazonaws.com"}
	tests := []struct {
		name, event, before, after string
		identity                   *events.DynamoDBUserIdentity
		what                       string
		principal                  *Principal
	}{
		{"a claim", "INSERT", "", "leased-a", nil, WhatClaimed, &Principal{Sub: "u-1"}},
		{"a heartbeat", "MODIFY", "leased-a", "moved-a", nil, WhatLeaseMoved, &Principal{Sub: "u-1"}},
		{"a take-over", "MODIFY", "leased-a", "leased-b", nil, WhatTakenOver, &Principal{Sub: "u-1"}},
		{"a settlement", "MODIFY", "leased-a", "done", nil, WhatSucceeded, &Principal{Sub: "u-1"}},
		{"a decline", "MODIFY", "leased-a", "declined", nil, WhatFailed, &Principal{Sub: "u-1"}},
		{"a release", "MODIFY", "leased-a", "released", nil, WhatReleased, &Principal{Sub: "u-1"}},
		{"a key claimed again once expired", "MODIFY", "expired", "leased-a", nil, WhatClaimed, &Principal{Sub: "u-1"}},
		{"TTL, as the stream says", "REMOVE", "done", "", ttl, WhatExpired, &Principal{Service: ServiceTTL}},
		{"past retention, TTL not named", "REMOVE", "expired", "", nil, WhatDeletedAfterRetention, nil},
		{"a deletion within retention", "REMOVE", "done", "", nil, WhatDeleted, nil},
		{"a deletion by another service", "REMOVE", "done", "", someone, WhatDeleted, &Principal{IAM: "backup.amazonaws.com"}},
		{"an unknown status", "MODIFY", "done", "unknown", nil, WhatUnreadable, &Principal{Sub: "u-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := decoder{records: records, tables: map[string]string{"records": TableRecords}}
			e, subjects := d.decode(events.DynamoDBEventRecord{
				EventID: "e-1", EventName: tt.event, EventSourceArn: recordsStream, UserIdentity: tt.identity,
				Change: events.DynamoDBStreamRecord{OldImage: image(tt.before), NewImage: image(tt.after), SequenceNumber: "100",
					ApproximateCreationDateTime: events.SecondsEpochTime{Time: now}},
			})
			if e.What != tt.what || e.KeyHash != key.LogHash() || len(subjects) != 1 || subjects[0] != key.LogHash() {
				t.Errorf("entry %+v, subjects %v, want %s of %s", e, subjects, tt.what, key.LogHash())
			}
			if (e.Principal == nil) != (tt.principal == nil) || e.Principal != nil && *e.Principal != *tt.principal {
				t.Errorf("principal %+v, want %+v", e.Principal, tt.principal)
			}
			if tt.event != "REMOVE" && string(e.Request) != `{"amount":1500,"currency":"EUR"}` {
				t.Errorf("request %s, want the intent without its source and who asked", e.Request)
			}
		})
	}
}

// TestAChangeNotReadIsKeptAsUnreadable: an item no decoder reads, or a
// stream of another table, still leaves an entry, naming nothing of it.
func TestAChangeNotReadIsKeptAsUnreadable(t *testing.T) {
	t.Parallel()
	d := decoder{records: fakeRecords{}, tables: map[string]string{"records": TableRecords}}
	for _, arn := range []string{recordsStream, "arn:aws:dynamodb:us-east-1:123456789012:table/other/stream/x"} {
		e, subjects := d.decode(events.DynamoDBEventRecord{
			EventID: "e-1", EventName: "INSERT", EventSourceArn: arn,
			Change: events.DynamoDBStreamRecord{NewImage: image("order-1"), SequenceNumber: "100"},
		})
		if e.What != WhatUnreadable || e.Event != "e-1" || e.KeyHash != "" || e.Tenant != "" || subjects != nil {
			t.Errorf("%s: entry %+v, subjects %v", arn, e, subjects)
		}
	}
}

// TestAQueueMarkIsNoStepOfTheCommand: the reconciler marks a stuck
// command's record, or a charge's row, while its message is queued. It
// renews the mark, and removes it once the message is handled, maybe
// after the command settled. None of these is a claim, a lease's move, a
// settlement or a row's change: the entry says so.
func TestAQueueMarkIsNoStepOfTheCommand(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1")
	rec := func(st idem.Status) *idem.Record {
		return &idem.Record{Key: key, Status: st, LeaseToken: "a", CreatedAt: now.Add(-time.Hour), Intent: []byte(`{"amount":1500}`)}
	}
	// A record's mark is an attribute its reading does not show.
	records := fakeRecords{"leased": rec(idem.StatusInFlight), "leased, marked": rec(idem.StatusInFlight),
		"done": rec(idem.StatusSucceeded), "done, marked": rec(idem.StatusSucceeded)}
	row := func(status string, marks ...string) map[string]events.DynamoDBAttributeValue {
		img := map[string]events.DynamoDBAttributeValue{
			charge.AttrTenant: events.NewStringAttribute("acme"), charge.AttrID: events.NewStringAttribute("ch_0123456789abcdef01234567"),
			"status": events.NewStringAttribute(status), charge.AttrIdempotencyKey: events.NewStringAttribute("order-1"),
		}
		for _, m := range marks {
			img[m] = events.NewNumberAttribute("1796644800000")
		}
		return img
	}
	const chargesStream = "arn:aws:dynamodb:us-east-1:123456789012:table/charges/stream/2026-12-01T00:00:00.000"
	tests := []struct {
		name          string
		stream        string
		before, after map[string]events.DynamoDBAttributeValue
		what          string
	}{
		{"a record marked", recordsStream, image("leased"), image("leased, marked"), WhatQueueMark},
		{"a settled record unmarked", recordsStream, image("done, marked"), image("done"), WhatQueueMark},
		{"a record settled", recordsStream, image("leased, marked"), image("done, marked"), WhatSucceeded},
		{"a row marked", chargesStream, row(charge.StatusCapturing), row(charge.StatusCapturing, charge.AttrQueuedUntil), WhatQueueMark},
		{"a row's mark renewed", chargesStream, row(charge.StatusCapturing, charge.AttrQueuedUntil),
			row(charge.StatusCapturing, charge.AttrQueuedUntil, charge.AttrQueuedRenewed), WhatQueueMark},
		{"a settled row unmarked", chargesStream, row(charge.StatusSucceeded, charge.AttrQueuedUntil), row(charge.StatusSucceeded), WhatQueueMark},
		{"a row settled", chargesStream, row(charge.StatusCapturing, charge.AttrQueuedUntil), row(charge.StatusSucceeded, charge.AttrQueuedUntil), WhatRowChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := decoder{records: records, tables: map[string]string{"records": TableRecords, "charges": TableCharges}}
			e, _ := d.decode(events.DynamoDBEventRecord{
				EventID: "e-1", EventName: "MODIFY", EventSourceArn: tt.stream,
				Change: events.DynamoDBStreamRecord{OldImage: tt.before, NewImage: tt.after, SequenceNumber: "100",
					ApproximateCreationDateTime: events.SecondsEpochTime{Time: now}},
			})
			if e.What != tt.what || e.KeyHash != key.LogHash() {
				t.Errorf("entry %+v, want %s of %s", e, tt.what, key.LogHash())
			}
		})
	}
}
