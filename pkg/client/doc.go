// Package client provides a Go client for the chargeonce API: charges
// (POST /charges, GET /charges/{id}), the capture and cancel of an
// authorization (POST /charges/{id}/capture and /cancel) and refunds
// (POST /charges/{id}/refunds, GET /charges/{id}/refunds and
// /refunds/{refund_id}); see api/openapi.yaml.
//
// The client never invents an idempotency key. The caller mints a
// CommandID once, when the intent to charge or to refund is formed
// (NewCommandID), keeps it with the intent, and passes it to Create or
// Refund, which send it as the Idempotency-Key. Inside them, every retry
// (after a network error, a timeout, a 409, a 429 or a 5xx) reuses that id
// and the same request body bytes, so a retry after a lost response is
// replayed by the server instead of charging the card, or refunding it,
// again. A caller that gives up (its context ends, or the process dies)
// can resume later by calling the same method again with the same id and
// the same arguments.
//
// Capture and Cancel take no command id. They set the charge's state, and
// setting a state twice is setting it once: the same call again answers
// the same charge, so they retry with the same request, and a caller may
// simply call again.
//
// Retries back off exponentially with full jitter, never sooner than a
// Retry-After header asks, and stop when the caller's context ends or the
// maximum number of attempts is reached. Other 4xx answers, and the 409s
// and 5xx the service states are final, are returned at once.
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
