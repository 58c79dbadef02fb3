// Package provider provides the wire types and an HTTP client for the card
// provider that moves the money.
//
// Every charge carries a caller-chosen Reference that the provider uses to
// deduplicate: a reference is charged at most once, however many times it is
// sent. The client never retries on its own (it also refuses redirects, which
// would re-send a charge); instead it classifies each failure so the caller
// can decide what to do:
//
//   - ErrUnavailable: the provider did not process the request. It said so
//     (HTTP 503 with the Provider-Not-Processed header, or 429), or no
//     connection could be made. Nothing happened; it is safe to retry.
//   - ErrAmbiguous: the request may have been processed (a timeout after
//     sending, a connection dropped while waiting for the answer, any other
//     5xx, an unreadable answer). The outcome is unknown and must be
//     reconciled with Lookup before the reference is released.
//   - ErrRejected: the request was refused as invalid, by the provider (a
//     4xx) or before sending. Nothing was charged, and sending the same
//     request again will not help.
//
// A declined card is a result, not an error: Charge returns StatusDeclined
// with a nil error. Every Lookup failure wraps ErrUnavailable, since a lookup
// has no side effects.
//
// The card source is a secret: the client never puts it in an error, and
// ChargeRequest redacts it when printed or logged.
package provider
