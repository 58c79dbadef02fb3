package idem

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// ReplayCache is a Backend that keeps the stored responses of settled
// commands in process memory. It keeps those Begin has replayed, and those
// this process settled through it. A warm replay then makes no call to the
// store. It holds at most a fixed number of entries, dropping the least
// recently used. An entry answers only its own key, which names the
// tenant, and fingerprint. It never answers once the record's retention
// has ended. Anything else goes to the wrapped Backend. It is safe for
// concurrent use.
//
// Settled records never change until their retention ends. So a cached
// replay is the one the store would give. The cache is off unless you wrap
// a store in it.
type ReplayCache struct {
	Backend

	max int

	mu      sync.Mutex
	lru     *list.List // of *cached, most recently used first
	entries map[Key]*list.Element
}

var _ Backend = (*ReplayCache)(nil)

// cached is a settled command's replay, or a command begun through the
// cache (IN_FLIGHT, under token). A begun one keeps the fingerprint its
// settlement needs: a Lease does not carry one.
type cached struct {
	key     Key
	fp      Fingerprint
	status  Status
	token   string
	resp    Response
	expires time.Time
}

// NewReplayCache wraps b in a cache of at most maxEntries entries (at
// least 1). It honours retention by b's clock.
func NewReplayCache(b Backend, maxEntries int) *ReplayCache {
	return &ReplayCache{Backend: b, max: max(maxEntries, 1), lru: list.New(), entries: map[Key]*list.Element{}}
}

// Begin answers a replay from the cache when it can. Otherwise it asks the
// wrapped Backend. It keeps any replay that gives, and the fingerprint of
// any lease, for the settlement.
func (c *ReplayCache) Begin(ctx context.Context, key Key, fp Fingerprint, intent []byte) (Begun, error) {
	if err := ctx.Err(); err != nil {
		return Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), err)
	}
	if b, ok := c.lookup(key, fp); ok {
		return b, nil
	}
	b, err := c.Backend.Begin(ctx, key, fp, intent)
	if err != nil {
		return b, err
	}
	switch {
	case b.Replay != nil && b.Status.Terminal():
		c.keep(&cached{key: key, fp: fp, status: b.Status, resp: copyResponse(*b.Replay), expires: b.RecordExpiresAt})
	case b.Lease != nil:
		c.keep(&cached{key: key, fp: fp, status: StatusInFlight, token: b.Lease.Token})
	}
	return b, nil
}

// Commit commits through the wrapped Backend. If it succeeds for a lease
// begun through the cache, resp becomes the command's replay.
func (c *ReplayCache) Commit(ctx context.Context, l *Lease, resp Response, writes ...types.TransactWriteItem) error {
	err := c.Backend.Commit(ctx, l, resp, writes...)
	if err == nil {
		c.settled(l, StatusSucceeded, resp)
	}
	return err
}

// Fail fails through the wrapped Backend. If it succeeds for a lease begun
// through the cache, resp becomes the command's replay.
func (c *ReplayCache) Fail(ctx context.Context, l *Lease, resp Response) error {
	err := c.Backend.Fail(ctx, l, resp)
	if err == nil {
		c.settled(l, StatusFailedPermanent, resp)
	}
	return err
}

// SettleClaim settles a command's claim through the wrapped Backend, if
// it keeps claims (dynamostore.Store.SettleClaim). Recover calls it.
func (c *ReplayCache) SettleClaim(ctx context.Context, key Key, created time.Time) error {
	return settleClaim(ctx, c.Backend, key, created)
}

// settled turns the entry of the command l began through the cache into
// its replay, as the store holds it. It lasts until l's record expires.
func (c *ReplayCache) settled(l *Lease, status Status, resp Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[l.Key]
	if !ok {
		return
	}
	e := el.Value.(*cached)
	if e.status != StatusInFlight || e.token != l.Token {
		return // begun elsewhere (a take-over), or by another attempt
	}
	el.Value = &cached{key: l.Key, fp: e.fp, status: status, resp: copyResponse(resp), expires: l.RecordExpiresAt}
	c.lru.MoveToFront(el)
}

func (c *ReplayCache) lookup(key Key, fp Fingerprint) (Begun, bool) {
	now := c.Backend.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return Begun{}, false
	}
	e := el.Value.(*cached)
	if !e.status.Terminal() {
		return Begun{}, false // the store knows how it stands
	}
	if policy.Expired(e.expires, now) {
		c.lru.Remove(el)
		delete(c.entries, key)
		return Begun{}, false
	}
	if e.fp != fp {
		return Begun{}, false // the store refuses it, and says until when
	}
	c.lru.MoveToFront(el)
	resp := copyResponse(e.resp)
	return Begun{Replay: &resp, RecordExpiresAt: e.expires, Status: e.status}, true
}

func (c *ReplayCache) keep(e *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[e.key]; ok {
		el.Value = e
		c.lru.MoveToFront(el)
		return
	}
	c.entries[e.key] = c.lru.PushFront(e)
	if c.lru.Len() > c.max {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.entries, oldest.Value.(*cached).key)
	}
}

// len is how many entries the cache holds.
func (c *ReplayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// copyResponse copies r as a stored response reads back: a headers map and
// a body, both non-nil. A replay from memory then equals the store's.
func copyResponse(r Response) Response {
	out := Response{Status: r.Status, Headers: maps.Clone(r.Headers), Body: bytes.Clone(r.Body)}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if out.Body == nil {
		out.Body = []byte{}
	}
	return out
}
