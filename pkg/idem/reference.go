package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Reference derives the idempotency reference to send the effect's
// provider for the command that key names and createdAt started (a
// Lease's or Record's CreatedAt). Every attempt gets the same reference: a
// retry, a re-claim after a release, and a resolver after a take-over all
// read the same CreatedAt. A new command under a reused key gets a new
// one. purpose tells apart two references of one command, as a charge and
// its receipt.
//
// It is 32 lower-case hex digits (128 bits) of SHA-256 over purpose, the
// key and CreatedAt in epoch milliseconds, as records store it. It carries
// no customer data: Key.String holds the client's key, which may be an
// order number.
func Reference(purpose string, key Key, createdAt time.Time) string {
	b := make([]byte, 0, len(purpose)+len(key.full)+22)
	b = append(append(append(b, purpose...), 0), key.full...)
	b = strconv.AppendInt(append(b, 0), createdAt.UnixMilli(), 10)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
