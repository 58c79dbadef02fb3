// Package client provides a Go client for the chargeonce API
// (api/openapi.yaml). It covers charges: POST /charges and GET
// /charges/{id}. It captures and cancels an authorization: POST
// /charges/{id}/capture and /cancel. It covers refunds: POST
// /charges/{id}/refunds, GET /charges/{id}/refunds and
// /refunds/{refund_id}.
//
// The client never invents an idempotency key. The caller mints a CommandID
// once, when the intent to charge or to refund is formed (NewCommandID). It
// keeps the id with the intent and passes it to Create or Refund. They send
// it as the Idempotency-Key. Inside them, every retry reuses that id and
// the same request body bytes. Retries follow a network error, a timeout, a
// 409, a 429 or a 5xx. So the server replays a retry after a lost response.
// It does not charge the card, or refund it, again. A caller may give up:
// its context ends, or the process dies. It can resume later with the same
// method, the same id and the same arguments.
//
// Capture and Cancel take no command id. They set the charge's state, and
// setting a state twice is setting it once. The same call again answers the
// same charge. So they retry with the same request, and a caller may simply
// call again.
//
// Retries back off exponentially with full jitter. They never come sooner
// than a Retry-After header asks. They stop when the caller's context ends
// or the attempts run out. Other 4xx answers are returned at once. So are
// the 409s and 5xx the service states are final.
//
// Problem answers (application/problem+json) are returned as *ProblemError,
// which matches the package's sentinel errors with errors.Is:
//
//	res, err := c.Create(ctx, id, client.Money{Amount: 1500, Currency: "EUR"}, "tok_visa")
//	switch {
//	case errors.Is(err, client.ErrDeclined):
//		// final for this id: mint a new id for a new attempt
//	case errors.Is(err, client.ErrOutcomePending), errors.Is(err, client.ErrInProgress):
//		// not settled yet: call Create again later with the same id
//	}
package client
