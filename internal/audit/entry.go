package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/chargeonce/chargeonce/internal/actor"
)

// Entry is one change to a record or a row, as the trail keeps it. It is
// one line of JSON in the archive. It never holds a raw key, a card
// source or a secret. A key is kept as its hash (idem.Key.LogHash), the
// one the functions' logs name it by.
type Entry struct {
	// Event is the stream record's id. A batch delivered twice is written
	// twice; readers keep one entry of each event.
	Event string `json:"event"`
	// Table is the table changed (TableRecords or TableCharges); Seq the
	// change's sequence number in its stream, which orders an item's
	// changes.
	Table string `json:"table"`
	Seq   string `json:"seq"`
	// At is when DynamoDB made the change.
	At time.Time `json:"at"`
	// What says what happened (the What constants).
	What string `json:"what"`
	// Tenant is whose command or row it is. A provider event's record is
	// filed under the tenant of the command it settles.
	Tenant    string `json:"tenant"`
	Operation string `json:"operation,omitempty"`
	// KeyHash is the hash of the command's key; Command, on a provider
	// event's entries, that of the command the event settles.
	KeyHash string `json:"key_hash,omitempty"`
	Command string `json:"command,omitempty"`
	// Charge and Refund are the ids the command or row names.
	Charge string `json:"charge,omitempty"`
	Refund string `json:"refund,omitempty"`
	// Principal and Origin are who asked and from where, as the command's
	// claim (or a capture's or cancel's move) kept them.
	Principal *Principal `json:"principal,omitempty"`
	Origin    *Origin    `json:"origin,omitempty"`
	// Request is the request as its record keeps it, in canonical JSON,
	// without its card source.
	Request json.RawMessage `json:"request,omitempty"`
	// Status is the record's status (IN_FLIGHT, SUCCEEDED, ...) or the
	// row's (succeeded, requires_capture, failed, ...); Was the one
	// before the change.
	Status string `json:"status,omitempty"`
	Was    string `json:"was,omitempty"`
	// Answer and Problem are the stored answer's HTTP status and problem
	// type, once the command is settled.
	Answer  int    `json:"answer,omitempty"`
	Problem string `json:"problem,omitempty"`
	// Attempts counts the take-overs of the command: the reconciler's,
	// a provider event's, an operator's.
	Attempts int `json:"attempts,omitempty"`
	// Lease names the attempt that holds the record, or last held it
	// (LeaseHash). An operator's note names the lease it saw.
	Lease string `json:"lease,omitempty"`
	// CreatedAt is the command's claim, or the row's creation; ExpiresAt
	// the end of the record's retention.
	CreatedAt time.Time `json:"created_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Row is a row's attributes after the change (before it, for a
	// removal), without its idempotency key.
	Row json.RawMessage `json:"row,omitempty"`
}

// Principal is who asked. It is what the authorizer vouched for: a JWT's
// sub and client id. Or an IAM principal, a queue's sender. Or a payment
// provider, for a signed event. Or an AWS service: DynamoDB's TTL.
type Principal struct {
	Sub      string `json:"sub,omitempty"`
	Client   string `json:"client,omitempty"`
	IAM      string `json:"iam,omitempty"`
	Provider string `json:"provider,omitempty"`
	Service  string `json:"service,omitempty"`
}

// Origin is where a request came from: an HTTP client's address and user
// agent, a queue's message, a provider's event.
type Origin struct {
	IP        string `json:"ip,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
	Message   string `json:"message,omitempty"`
	Event     string `json:"event,omitempty"`
}

// The tables whose changes the trail keeps. TableOperator marks an
// operator's own word (Note).
const (
	TableRecords  = "idempotency"
	TableCharges  = "charges"
	TableOperator = "operator"
)

// What an entry says happened.
const (
	// A record's changes.
	WhatClaimed    = "claimed"        // a key claimed for a command, first or again
	WhatLeaseMoved = "lease-extended" // the lease holder's heartbeat or postponement
	WhatTakenOver  = "taken-over"     // another attempt took the lease
	WhatSucceeded  = "succeeded"
	WhatFailed     = "failed"   // settled for good without the effect: a decline, a refusal
	WhatReleased   = "released" // proven not done: the key is free
	WhatExpired    = "expired"  // deleted by TTL, as the stream says
	WhatDeleted    = "deleted"  // deleted by someone else, or within retention
	WhatUnreadable = "unreadable"
	// Deleted after its retention ended, the stream naming no one. AWS's
	// names TTL on TTL's deletions, so this one is not TTL's. moto's
	// stream names no one, ever.
	WhatDeletedAfterRetention = "deleted-after-retention"
	// The reconciler's mark of a queued message, set, renewed or removed:
	// no step of the command, whichever the record's or row's status.
	WhatQueueMark = "queue-mark"
	// A row's changes.
	WhatRowWritten = "row-written"
	WhatRowChanged = "row-changed"
	WhatRowDeleted = "row-deleted"
	// An operator's word: the settlement chargectl admin settle writes.
	WhatOperatorSettles = "operator-settles"
	// An object the index names that the archive no longer has. Its
	// Event is the object's name, At its day. The lifecycle removes an
	// object once its retention ends.
	WhatObjectGone = "object-gone"
)

// ServiceTTL is the principal of a change DynamoDB's TTL made.
const ServiceTTL = "dynamodb.amazonaws.com"

// LeaseHash names a lease by its token's SHA-256, 8 bytes in hex. The
// token itself is never kept: it lets its holder settle the record.
func LeaseHash(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// by sets e's principal and origin from a.
func (e *Entry) by(a actor.Actor) {
	p := Principal{Sub: a.Sub, Client: a.Client, IAM: a.IAM, Provider: a.Provider}
	if p != (Principal{}) {
		e.Principal = &p
	}
	o := Origin{IP: a.IP, UserAgent: a.Agent, Message: a.Message, Event: a.Event}
	if o != (Origin{}) {
		e.Origin = &o
	}
}
