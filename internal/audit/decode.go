package audit

import (
	"encoding/json"
	"maps"
	"mime"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Records reads the idempotency table's items (dynamostore.Store).
type Records interface {
	Decode(item map[string]types.AttributeValue) (*idem.Record, error)
}

// decoder turns stream records into entries, with the subjects (key
// hashes) the index files each under.
type decoder struct {
	records Records
	// tables maps a table's name to TableRecords or TableCharges.
	tables map[string]string
}

// decode is r's entry and its subjects. It never fails: a change it
// cannot read is an entry saying so.
func (d *decoder) decode(r events.DynamoDBEventRecord) (Entry, []string) {
	e := Entry{Event: r.EventID, Seq: r.Change.SequenceNumber, At: r.Change.ApproximateCreationDateTime.UTC(), What: WhatUnreadable}
	before, after := item(r.Change.OldImage), item(r.Change.NewImage)
	switch e.Table = d.tables[tableOf(r.EventSourceArn)]; e.Table {
	case TableRecords:
		return d.record(e, r, before, after)
	case TableCharges:
		return d.row(e, r.EventName, before, after)
	}
	return e, nil
}

// tableOf is the table name in a stream's ARN, ".../table/NAME/stream/...".
func tableOf(streamARN string) string {
	parts := strings.Split(streamARN, "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// record is the entry of a change to an idempotency record.
func (d *decoder) record(e Entry, r events.DynamoDBEventRecord, before, after map[string]types.AttributeValue) (Entry, []string) {
	img := after
	if img == nil {
		img = before
	}
	rec, err := d.records.Decode(img)
	if err != nil {
		return e, nil
	}
	var was *idem.Record
	if before != nil && after != nil {
		if was, err = d.records.Decode(before); err == nil {
			e.Was = string(was.Status)
		}
	}
	e.Tenant, e.Operation, e.KeyHash = rec.Key.Tenant(), rec.Key.Operation(), rec.Key.LogHash()
	e.Status, e.Attempts, e.CreatedAt, e.ExpiresAt = string(rec.Status), rec.Attempts, rec.CreatedAt.UTC(), rec.ExpiresAt.UTC()
	e.Lease = LeaseHash(rec.LeaseToken)
	d.intent(&e, rec)
	if rec.Response != nil {
		e.Answer, e.Problem = rec.Response.Status, problemType(rec.Response)
	}
	e.What = d.change(&e, r, was, rec, after == nil)
	subjects := []string{e.KeyHash}
	if e.Command != "" {
		subjects = append(subjects, e.Command)
	}
	if e.What == WhatClaimed && e.Operation == charge.RefundOperation && e.Charge != "" {
		// A refund refused or in flight has no row: its claim leads to it.
		subjects = append(subjects, chargeSubject(e.Tenant, e.Charge))
	}
	return e, subjects
}

// change says what a change to rec was; was is the record before it, nil
// for a new one. A removal is TTL's only when the stream says so. AWS's
// stream does, on each of TTL's. The functions may not delete records:
// any other removal is one to look into. One after the record's retention
// is filed apart: moto's stream names no one, so a test's TTL looks so.
// Retention is judged at the change's time, not the reader's. A change
// that leaves the record as read is the queue mark's.
func (d *decoder) change(e *Entry, r events.DynamoDBEventRecord, was, rec *idem.Record, removed bool) string {
	switch {
	case removed:
		e.Principal, e.Origin = nil, nil
		switch id := r.UserIdentity; {
		case id != nil && id.Type == "Service" && id.PrincipalID == ServiceTTL:
			e.Principal = &Principal{Service: ServiceTTL}
			return WhatExpired
		case id != nil:
			e.Principal = &Principal{IAM: id.PrincipalID}
		case !rec.ExpiresAt.IsZero() && !rec.ExpiresAt.After(e.At):
			return WhatDeletedAfterRetention
		}
		return WhatDeleted
	case was != nil && reflect.DeepEqual(was, rec):
		return WhatQueueMark
	case rec.Status == idem.StatusInFlight && (was == nil || was.Status != idem.StatusInFlight):
		return WhatClaimed
	case rec.Status == idem.StatusInFlight && was.LeaseToken != rec.LeaseToken:
		return WhatTakenOver
	case rec.Status == idem.StatusInFlight:
		return WhatLeaseMoved
	case rec.Status == idem.StatusSucceeded:
		return WhatSucceeded
	case rec.Status == idem.StatusFailedPermanent:
		return WhatFailed
	case rec.Status == idem.StatusReleased:
		return WhatReleased
	}
	return WhatUnreadable
}

// intent reads what rec's intent says of the command into e. That is who
// asked, the ids it names, and the request without its card source.
func (d *decoder) intent(e *Entry, rec *idem.Record) {
	switch rec.Key.Operation() {
	case charge.ChargeOperation:
		e.Charge = charge.ChargeID(rec.Key, rec.CreatedAt)
	case charge.RefundOperation:
		e.Refund = charge.RefundID(rec.Key, rec.CreatedAt)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(rec.Intent, &fields) != nil {
		return
	}
	if by, ok := fields["by"]; ok {
		e.by(actor.Parse(by))
	}
	str := func(name string) string {
		var s string
		_ = json.Unmarshal(fields[name], &s)
		return s
	}
	switch rec.Key.Operation() {
	case charge.RefundOperation:
		e.Charge = str("charge")
	case charge.NotificationOperation:
		e.Tenant, e.Command = str("tenant"), str("command")
		e.Charge, e.Refund = ids(str("row"))
		return // the event's own payload is Stripe's, not a request of ours
	}
	delete(fields, "by")
	delete(fields, "source")
	if len(fields) == 0 {
		return
	}
	b, _ := json.Marshal(fields) // raw values of valid JSON
	e.Request, _ = idem.CanonicalJSON(b)
}

// ids are the charge and refund ids a row's id names: "ch_…" or
// "ch_…#re_…".
func ids(row string) (chargeID, refundID string) {
	chargeID, refundID, _ = strings.Cut(row, "#")
	return chargeID, refundID
}

// problemType is the type of a stored problem+json answer, or "".
func problemType(r *idem.Response) string {
	for name, v := range r.Headers {
		if mt, _, err := mime.ParseMediaType(v); strings.EqualFold(name, "Content-Type") && err == nil && mt == "application/problem+json" {
			var p struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(r.Body, &p)
			return p.Type
		}
	}
	return ""
}

// row is the entry of a change to a row of the charges table: a charge's
// or a refund's.
func (d *decoder) row(e Entry, event string, before, after map[string]types.AttributeValue) (Entry, []string) {
	img := after
	if img == nil {
		img = before
	}
	var r struct {
		Tenant  string `dynamodbav:"tenant"`
		ID      string `dynamodbav:"id"`
		Status  string `dynamodbav:"status"`
		Created string `dynamodbav:"created_at"`
		MovedBy string `dynamodbav:"moved_by"`
	}
	var fields map[string]any
	if attributevalue.UnmarshalMap(img, &r) != nil ||
		attributevalue.UnmarshalMapWithOptions(img, &fields, func(o *attributevalue.DecoderOptions) { o.UseNumber = true }) != nil {
		return e, nil
	}
	e.Tenant, e.Status = r.Tenant, r.Status
	e.Charge, e.Refund = ids(r.ID)
	if created, err := time.Parse(charge.TimeLayout, r.Created); err == nil {
		e.CreatedAt = created.UTC()
	}
	var was string
	if before != nil && after != nil {
		var old struct {
			Status string `dynamodbav:"status"`
		}
		if attributevalue.UnmarshalMap(before, &old) == nil {
			was, e.Was = old.Status, old.Status
		}
	}
	moving := r.Status == charge.StatusCapturing || r.Status == charge.StatusCanceling
	if moving && was != r.Status {
		// The capture or cancel this change began: who asked for it.
		e.by(actor.Parse([]byte(r.MovedBy)))
	}
	for _, private := range []string{charge.AttrTenant, charge.AttrID, charge.AttrIdempotencyKey, charge.AttrMovedBy} {
		delete(fields, private)
	}
	e.Row, _ = json.Marshal(numbers(fields))
	e.What = map[string]string{"INSERT": WhatRowWritten, "MODIFY": WhatRowChanged, "REMOVE": WhatRowDeleted}[event]
	if event == "MODIFY" && reflect.DeepEqual(unmarked(before), unmarked(after)) {
		e.What = WhatQueueMark
	}
	var subjects []string
	if key, ok := charge.RowKey(img); ok {
		e.Operation, e.KeyHash = key.Operation(), key.LogHash()
		subjects = append(subjects, e.KeyHash)
	}
	return e, subjects
}

// unmarked is a row's item without its queue mark.
func unmarked(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := maps.Clone(item)
	delete(out, charge.AttrQueuedUntil)
	delete(out, charge.AttrQueuedRenewed)
	return out
}

// numbers is v with DynamoDB's numbers as JSON numbers, not strings.
func numbers(v any) any {
	switch v := v.(type) {
	case attributevalue.Number:
		return json.Number(v)
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	}
	return v
}
