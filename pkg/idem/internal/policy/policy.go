// Package policy holds the rules every idempotency store in pkg/idem
// follows alike. They say how long a lease lasts and when retention ends.
// They say which stuck-lease shard a key belongs to, how lease tokens are
// made, and how large a stored response may be. The DynamoDB store and the
// in-memory store both apply them, so they cannot drift apart.
package policy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Policy is the part of a store's options that decides times and sizes.
type Policy struct {
	Retention        time.Duration
	ReleaseRetention time.Duration
	LeaseMargin      time.Duration
	MaxLease         time.Duration
	DefaultLease     time.Duration
	Shards           int
	CompressAbove    int
	Clock            func() time.Time
	Random           io.Reader
}

// WithDefaults returns p with every zero field set to its default.
func WithDefaults(p Policy) Policy {
	setDefault(&p.Retention, 24*time.Hour)
	setDefault(&p.ReleaseRetention, p.Retention)
	setDefault(&p.LeaseMargin, 5*time.Second)
	setDefault(&p.MaxLease, 15*time.Minute)
	setDefault(&p.DefaultLease, 30*time.Second)
	setDefault(&p.Shards, 16)
	setDefault(&p.CompressAbove, 1024)
	if p.Clock == nil {
		p.Clock = time.Now
	}
	if p.Random == nil {
		p.Random = rand.Reader
	}
	return p
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Now is the clock's time at the millisecond precision records keep.
func (p Policy) Now() time.Time { return time.UnixMilli(p.Clock().UnixMilli()) }

// LeaseUntil gives the end of a lease starting at now. It is the context's
// deadline, a Lambda's remaining time, plus a margin, capped by MaxLease.
func (p Policy) LeaseUntil(ctx context.Context, now time.Time) time.Time {
	d := p.DefaultLease
	if deadline, ok := ctx.Deadline(); ok {
		// A deadline is on the real clock, and now on the store's, which a
		// test may have moved. So the time left is measured on the real
		// one.
		d = time.Until(deadline) + p.LeaseMargin
	}
	return time.UnixMilli(now.Add(min(max(d, p.LeaseMargin), p.MaxLease)).UnixMilli())
}

// RetainUntil is when a record settled under a lease ending at leaseEnd
// stops deduplicating. That is Retention later, at the whole second TTL
// stores.
func (p Policy) RetainUntil(leaseEnd time.Time) time.Time {
	return time.Unix(leaseEnd.Add(p.Retention).Unix(), 0)
}

// ReleasedUntil is when a RELEASED command created at created stops
// deduplicating. That is ReleaseRetention after its creation, at a whole
// second, however often it was released. A release does not restart
// retention. A caller derives references from (Key, CreatedAt), and a
// provider deduplicates one for ReleaseRetention. So a key never outlives
// its reference's deduplication.
func (p Policy) ReleasedUntil(created time.Time) time.Time {
	return time.Unix(created.Add(p.ReleaseRetention).Unix(), 0)
}

// SettledUntil is when a command created at created stops deduplicating,
// once the lease ending at leaseEnd settles it. A release gives
// ReleasedUntil, a commit or a failure RetainUntil.
func (p Policy) SettledUntil(released bool, created, leaseEnd time.Time) time.Time {
	if released {
		return p.ReleasedUntil(created)
	}
	return p.RetainUntil(leaseEnd)
}

// Earliest is the earliest an unsettled command may stop deduplicating. It
// was created at created and is leased until leaseEnd. It is the sooner of
// two ends: this lease releasing it, or settling it.
func (p Policy) Earliest(created, leaseEnd time.Time) time.Time {
	released, settled := p.ReleasedUntil(created), p.RetainUntil(leaseEnd)
	if released.Before(settled) {
		return released
	}
	return settled
}

// Latest is the latest a command created at created, leased until
// leaseEnd, may stop deduplicating. It is the later of the two ends
// Earliest weighs. A Ledger's claim of the command lasts until then.
func (p Policy) Latest(created, leaseEnd time.Time) time.Time {
	released, settled := p.ReleasedUntil(created), p.RetainUntil(leaseEnd)
	if released.After(settled) {
		return released
	}
	return settled
}

// Expired reports whether a record whose retention ends at expiresAt is
// past it at now. expiresAt is a whole second, or zero for none. The
// record is past it from that instant on, the Idempotency-Expires a client
// is told. Every store, and the replay cache, use this one rule.
func Expired(expiresAt, now time.Time) bool {
	return !expiresAt.IsZero() && !now.Before(expiresAt)
}

// Token returns a new lease token: 128 random bits in unpadded URL-safe
// base64. It is 22 characters: a record stores it, and DynamoDB takes it
// as a ClientRequestToken of at most 36.
func (p Policy) Token() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(p.Random, b[:]); err != nil {
		return "", fmt.Errorf("idem: lease token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Shard is the stuck-lease shard of a key, given in its stored form.
func (p Policy) Shard(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(p.Shards))
}

// Limits on what a record can hold. DynamoDB items are at most 400 KB,
// attribute names included; the rest of a record is well under 2 KB.
const (
	MaxHeaders       = 16
	MaxStoredPayload = 380 * 1024
	// MaxIntent is the largest intent a record takes.
	MaxIntent = MaxStoredPayload / 2
)

// StoredBody returns the body as a record keeps it. It is gzipped when
// larger than compressAbove bytes, if compression makes it smaller.
func StoredBody(body []byte, compressAbove int) (stored []byte, gzipped bool) {
	if len(body) <= compressAbove {
		return body, false
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(body) // writes to a bytes.Buffer cannot fail
	_ = zw.Close()
	if buf.Len() < len(body) {
		return buf.Bytes(), true
	}
	return body, false
}

// TooLarge explains why a response does not fit in a record, or is "" if
// it fits. The record holds its headers and stored body, beside an intent
// of intentLen bytes.
func TooLarge(headers map[string]string, storedBody []byte, intentLen int) string {
	if len(headers) > MaxHeaders {
		return fmt.Sprintf("%d response headers, at most %d", len(headers), MaxHeaders)
	}
	size := intentLen + len(storedBody)
	for k, v := range headers {
		size += len(k) + len(v)
	}
	if size > MaxStoredPayload {
		return fmt.Sprintf("response and intent need %d bytes, at most %d", size, MaxStoredPayload)
	}
	return ""
}

// WritesDigest is a digest of a commit's business writes. By it a repeated
// Commit of one lease is recognised as the same commit, or refused as
// another. It covers every table, key, item, expression, name and value
// the writes carry. It is taken when the Commit is made. So a caller that
// reuses its write values for the next row cannot make two commits look
// alike.
func WritesDigest(writes []types.TransactWriteItem) string {
	h := sha256.New()
	for _, w := range writes {
		var (
			kind                string
			table, cond, update *string
			key                 map[string]types.AttributeValue
			names               map[string]string
			values              map[string]types.AttributeValue
		)
		switch {
		case w.Put != nil:
			kind, table, cond, key, names, values = "put", w.Put.TableName, w.Put.ConditionExpression, w.Put.Item, w.Put.ExpressionAttributeNames, w.Put.ExpressionAttributeValues
		case w.Update != nil:
			kind, table, cond, key, names, values = "update", w.Update.TableName, w.Update.ConditionExpression, w.Update.Key, w.Update.ExpressionAttributeNames, w.Update.ExpressionAttributeValues
			update = w.Update.UpdateExpression
		case w.Delete != nil:
			kind, table, cond, key, names, values = "delete", w.Delete.TableName, w.Delete.ConditionExpression, w.Delete.Key, w.Delete.ExpressionAttributeNames, w.Delete.ExpressionAttributeValues
		case w.ConditionCheck != nil:
			kind, table, cond, key, names, values = "check", w.ConditionCheck.TableName, w.ConditionCheck.ConditionExpression, w.ConditionCheck.Key, w.ConditionCheck.ExpressionAttributeNames, w.ConditionCheck.ExpressionAttributeValues
		}
		fmt.Fprintf(h, "%s{table=%q;cond=%q;update=%q;", kind, deref(table), deref(cond), deref(update))
		writeAttrs(h, "item", key)
		writeNames(h, names)
		writeAttrs(h, "values", values)
		fmt.Fprint(h, "}")
	}
	return string(h.Sum(nil))
}

func deref(p *string) string {
	if p == nil {
		return "\x00nil"
	}
	return *p
}

func writeNames(w io.Writer, names map[string]string) {
	fmt.Fprint(w, "names{")
	for _, k := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(w, "%q=%q;", k, names[k])
	}
	fmt.Fprint(w, "}")
}

func writeAttrs(w io.Writer, name string, attrs map[string]types.AttributeValue) {
	fmt.Fprintf(w, "%s{", name)
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(w, "%q=", k)
		writeValue(w, attrs[k])
	}
	fmt.Fprint(w, "}")
}

// writeValue writes one attribute value with its type. A set's members are
// in order, since DynamoDB keeps a set without one.
func writeValue(w io.Writer, v types.AttributeValue) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		fmt.Fprintf(w, "S%q;", v.Value)
	case *types.AttributeValueMemberN:
		fmt.Fprintf(w, "N%q;", v.Value)
	case *types.AttributeValueMemberB:
		fmt.Fprintf(w, "B%q;", v.Value)
	case *types.AttributeValueMemberBOOL:
		fmt.Fprintf(w, "BOOL%t;", v.Value)
	case *types.AttributeValueMemberNULL:
		fmt.Fprintf(w, "NULL%t;", v.Value)
	case *types.AttributeValueMemberSS:
		fmt.Fprintf(w, "SS%q;", slices.Sorted(slices.Values(v.Value)))
	case *types.AttributeValueMemberNS:
		fmt.Fprintf(w, "NS%q;", slices.Sorted(slices.Values(v.Value)))
	case *types.AttributeValueMemberBS:
		bs := make([]string, len(v.Value))
		for i, b := range v.Value {
			bs[i] = string(b)
		}
		fmt.Fprintf(w, "BS%q;", slices.Sorted(slices.Values(bs)))
	case *types.AttributeValueMemberL:
		fmt.Fprint(w, "L[")
		for _, e := range v.Value {
			writeValue(w, e)
		}
		fmt.Fprint(w, "];")
	case *types.AttributeValueMemberM:
		writeAttrs(w, "M", v.Value)
		fmt.Fprint(w, ";")
	default:
		fmt.Fprintf(w, "%T;", v)
	}
}

// LeaseCommitted returns the address of an *idem.Lease's digest of the
// business writes its Commit may have applied. Package idem sets it. So a
// store in another package keeps that state on the lease, and users cannot
// touch it.
var LeaseCommitted func(lease any) **string

// LeaseMarked returns the address of an *idem.Lease's note that a
// release's end may stand on its command's Ledger claim. Package idem
// sets it, as LeaseCommitted.
var LeaseMarked func(lease any) *bool

// LogHash is idem.Key.LogHash of a key's string form, also of one that
// does not parse.
func LogHash(full string) string {
	var in [512]byte // longer than any key: the buffer stays on the stack
	sum := sha256.Sum256(append(append(in[:0], "log\x00"...), full...))
	return hex.EncodeToString(sum[:8])
}
