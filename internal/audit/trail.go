package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Trail reads the entries of commands, found through the index.
type Trail struct {
	archive *Archive
	index   *Index
	now     func() time.Time
}

// NewTrail returns the trail kept in archive and found through index;
// now tells an object past the archive's retention from one within it.
func NewTrail(archive *Archive, index *Index, now func() time.Time) (*Trail, error) {
	if archive == nil || index == nil || now == nil {
		return nil, errors.New("audit: the trail needs an archive, an index and a clock")
	}
	return &Trail{archive: archive, index: index, now: now}, nil
}

// History is every entry of the commands whose key hashes are subjects.
// It holds their records' changes and the rows they wrote, with every
// later change of those rows. It holds the provider events that settled
// them. Each change is there once, in the order it happened (order.go).
// The index finds the entries of its retention, the latest three months.
// Older ones are in the archive alone, for Athena. An object the archive
// no longer has is an entry saying so (WhatObjectGone).
func (t *Trail) History(ctx context.Context, subjects ...string) ([]Entry, error) {
	want := map[string]bool{}
	for _, s := range subjects {
		want[s] = true
	}
	entries, err := t.read(ctx, subjects...)
	if err != nil {
		return nil, err
	}
	return causal(slices.DeleteFunc(entries, func(e Entry) bool { return !want[e.KeyHash] && !want[e.Command] })), nil
}

// read is every entry, once, of the objects the index files under
// subjects. An object gone from the archive is an entry of the subject
// it was filed under, saying so.
func (t *Trail) read(ctx context.Context, subjects ...string) ([]Entry, error) {
	objects := map[string]string{} // by name, a subject it is filed under
	for _, s := range subjects {
		names, err := t.index.objects(ctx, s)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			objects[n] = s
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		seen = map[string]bool{}
		out  []Entry
	)
	sem := make(chan struct{}, DefaultConcurrency)
	for name, subject := range objects {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			entries, err := t.archive.get(ctx, name)
			if errors.Is(err, errGone) {
				entries, err = t.gone(name, subject)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, e := range entries {
				if !seen[e.Event] {
					seen[e.Event] = true
					out = append(out, e)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// ChargeRows reads a charge with its refunds (charge.Rows).
type ChargeRows interface {
	GetWithRefunds(ctx context.Context, tenant, id string) (charge.Charge, bool, error)
}

// ErrNoCharge: the charges table holds no such charge.
var ErrNoCharge = errors.New("audit: no such charge")

// ChargeHistory is the History of tenant's charge id. That is the history
// of the command that created it, and of each of its refunds'. Its row,
// kept for good, names the first. The index files each refund's claim
// under the charge too: a refused or unsettled refund has no row. The
// key that created it may have served
// another intent before: those entries are there too. A later intent of
// its key or of a refund's, once their records expired, is another
// charge's or refund's: its entries are not. An id that is not a
// charge's is refused: a prefix of one could name several.
func (t *Trail) ChargeHistory(ctx context.Context, rows ChargeRows, tenant, id string) ([]Entry, error) {
	if !charge.IsChargeID(id) {
		return nil, fmt.Errorf("audit: %q: %w", id, charge.ErrNotChargeID)
	}
	c, found, err := rows.GetWithRefunds(ctx, tenant, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("audit: charge %s: %w", id, err)
	case !found:
		return nil, fmt.Errorf("%w: %s", ErrNoCharge, id)
	}
	key := subject(tenant, charge.ChargeOperation, string(c.IdempotencyKey))
	claims, err := t.read(ctx, chargeSubject(tenant, id))
	if err != nil {
		return nil, err
	}
	subjects, refunds := []string{key, chargeSubject(tenant, id)}, map[string]bool{}
	for _, e := range claims {
		if e.Operation == charge.RefundOperation && e.Tenant == tenant && e.Charge == id {
			subjects = append(subjects, e.KeyHash)
			refunds[e.Refund] = true
		}
	}
	for _, r := range c.Refunds {
		subjects = append(subjects, subject(tenant, charge.RefundOperation, string(r.IdempotencyKey)))
		refunds[r.ID] = true
	}
	history, err := t.History(ctx, subjects...)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(history, func(e Entry) bool {
		earlier := (e.KeyHash == key || e.Command == key) && e.CreatedAt.Before(c.CreatedAt)
		return e.Charge != id && !refunds[e.Refund] && !earlier && e.What != WhatObjectGone
	}), nil
}

// gone is the entry of the object name, filed under subject, that the
// archive no longer has: at its day, the one its name holds. Within the
// archive's least retention, no object may be gone: a delete marker hides
// it, and that is an error to look into, never routine.
func (t *Trail) gone(name, subject string) ([]Entry, error) {
	e := Entry{Event: name, What: WhatObjectGone, KeyHash: subject}
	if i := strings.Index(name, "day="); i >= 0 && len(name) >= i+14 {
		e.At, _ = time.Parse(time.DateOnly, name[i+4:i+14])
	}
	if e.At.IsZero() || t.now().Before(e.At.AddDate(0, 0, MinRetentionDays+1)) {
		return nil, fmt.Errorf("audit: %s is missing within the archive's retention: look into it (a delete marker?): %w", name, errGone)
	}
	return []Entry{e}, nil
}

// chargeSubject is what the index files a refund's claim under, besides
// its key: its charge. A key's hash never holds "#".
func chargeSubject(tenant, id string) string { return "charge#" + tenant + "#" + id }

// subject is the key hash the index files a command under.
func subject(tenant, operation, client string) string {
	k, err := idem.NewKey(tenant, operation, client)
	if err != nil {
		return ""
	}
	return k.LogHash()
}
