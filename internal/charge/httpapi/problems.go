package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Headers of the idempotency contract.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotencyExpires = "Idempotency-Expires"
	HeaderReplayed           = "Idempotent-Replayed"
	HeaderRetryAfter         = "Retry-After"
)

// ContentTypeJSON and ContentTypeProblem are the response media types.
const (
	ContentTypeJSON    = "application/json"
	ContentTypeProblem = "application/problem+json"
)

// ProblemType is a stable problem type (RFC 9457) the API answers with.
type ProblemType struct {
	Slug   string
	Title  string
	Status int
}

// ProblemBase prefixes every problem type URI.
const ProblemBase = "https://chargeonce.dev/problems/"

// The problem types; api/openapi.yaml documents the same list (a test
// holds the two together).
var (
	ProblemInvalidKey         = ProblemType{"invalid-idempotency-key", "Invalid Idempotency-Key header", http.StatusBadRequest}
	ProblemInvalidRequest     = ProblemType{"invalid-request", "Invalid request", http.StatusBadRequest}
	ProblemTooLarge           = ProblemType{"payload-too-large", "Request body too large", http.StatusRequestEntityTooLarge}
	ProblemUnsupportedMedia   = ProblemType{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	ProblemUnauthorized       = ProblemType{"unauthorized", "No tenant in the authorizer context", http.StatusUnauthorized}
	ProblemInProgress         = ProblemType{"request-in-progress", "A request with this key is in progress", http.StatusConflict}
	ProblemKeyReused          = ProblemType{"idempotency-key-reused", "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity}
	ProblemDeclined           = ProblemType{"card-declined", "Card declined", http.StatusPaymentRequired}
	ProblemUnavailable        = ProblemType{"provider-unavailable", "Card provider unavailable; the request was not carried out", http.StatusServiceUnavailable}
	ProblemServiceUnavailable = ProblemType{"service-unavailable", "Service temporarily unavailable; this request was not carried out", http.StatusServiceUnavailable}
	ProblemOutcomePending     = ProblemType{"outcome-pending", "Outcome not known yet; retry the same request", http.StatusServiceUnavailable}
	ProblemProviderRejected   = ProblemType{"provider-rejected", "Card provider refused the request; it was not carried out", http.StatusBadGateway}
	ProblemNotFound           = ProblemType{"not-found", "Charge not found", http.StatusNotFound}
	ProblemChargeConflict     = ProblemType{"charge-conflict", "Charge record conflicts with the provider", http.StatusInternalServerError}
	ProblemInternal           = ProblemType{"internal-error", "Internal error", http.StatusInternalServerError}
	ProblemRefundExceeds      = ProblemType{"refund-exceeds-charge", "Refund exceeds what remains of the charge", http.StatusConflict}
	ProblemStateConflict      = ProblemType{"charge-state-conflict", "The charge is in another state", http.StatusConflict}
	ProblemRefundDeclined     = ProblemType{"refund-declined", "Refund refused by the provider", http.StatusConflict}
	ProblemRefundLimit        = ProblemType{"refund-limit-reached", "The charge has as many refunds as it may have", http.StatusConflict}
	ProblemWrongRegion        = ProblemType{"wrong-region", "Another Region serves this tenant", http.StatusMisdirectedRequest}
	ProblemRateLimited        = ProblemType{"rate-limited", "Too many requests for this tenant", http.StatusTooManyRequests}
)

// Problems lists every problem type the API answers with.
var Problems = []ProblemType{
	ProblemInvalidKey, ProblemInvalidRequest, ProblemTooLarge, ProblemUnsupportedMedia, ProblemUnauthorized,
	ProblemInProgress, ProblemKeyReused, ProblemDeclined, ProblemUnavailable, ProblemServiceUnavailable,
	ProblemOutcomePending, ProblemProviderRejected, ProblemNotFound, ProblemChargeConflict, ProblemInternal,
	ProblemRefundExceeds, ProblemStateConflict, ProblemRefundDeclined, ProblemRefundLimit, ProblemWrongRegion,
	ProblemRateLimited,
}

type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problem renders p with an optional detail. Details come from this package's
// own messages, never from an internal error.
func problem(p ProblemType, detail string) idem.Response {
	b, _ := json.Marshal(problemJSON{Type: ProblemBase + p.Slug, Title: p.Title, Status: p.Status, Detail: detail})
	return idem.Response{Status: p.Status, Headers: map[string]string{"Content-Type": ContentTypeProblem}, Body: b}
}

// withRetryAfter adds Retry-After, in seconds, to resp.
func withRetryAfter(resp idem.Response, seconds int) idem.Response {
	resp.Headers[HeaderRetryAfter] = strconv.Itoa(seconds)
	return resp
}

// retryAfter is the Retry-After value (seconds) for a wait until until.
// It rounds up: a client that waits it finds the wait over.
func retryAfter(now, until time.Time) int {
	s := int(math.Ceil(until.Sub(now).Seconds()))
	return min(max(s, 1), 30)
}

// answer is the one place an outcome becomes an HTTP answer: its status,
// problem and headers. done is what the request does, as "charged" or
// "refunded". A refusal names it as what was not done. It is empty for a
// read.
func answer(res charge.Result, now time.Time, done string) events.APIGatewayV2HTTPResponse {
	// A capture or a cancel has no key: repeating the request is enough.
	again := "retry with the same key"
	if done == "captured" || done == "canceled" {
		again = "retry the same request"
	}
	var resp idem.Response
	switch res.Outcome {
	case charge.OutcomeCreated, charge.OutcomeReplayed, charge.OutcomeDeclined, charge.OutcomeChargeConflict, charge.OutcomeRefundExceeds,
		charge.OutcomeRefundLimit:
		resp = *res.Stored
	case charge.OutcomeFound, charge.OutcomeCaptured, charge.OutcomeCanceled:
		var body []byte
		switch {
		case res.Refunds != nil:
			body = refundListBody(*res.Refunds)
		case res.Refund != nil:
			body = refundBody(*res.Refund)
		default:
			body = chargeBody(*res.Charge)
		}
		resp = idem.Response{Status: http.StatusOK, Headers: map[string]string{"Content-Type": ContentTypeJSON}, Body: body}
	case charge.OutcomeRefundHeld:
		resp = withRetryAfter(problem(ProblemRefundExceeds, "Refunds still in flight hold what this amount needs. Nothing was refunded. Retry with the same key: it may succeed if they fail."), 2)
	case charge.OutcomeRefundLimitHeld:
		resp = withRetryAfter(problem(ProblemRefundLimit, "Refunds still in flight fill the charge's limit of refunds. Nothing was refunded. Retry with the same key: it may succeed if one fails."), 2)
	case charge.OutcomeStateConflict:
		resp = stateConflict(res.Charge)
	case charge.OutcomeConflict:
		resp = withRetryAfter(problem(ProblemInProgress, "Another request with this key is being processed. Retry after the indicated time."), retryAfter(now, res.RetryAt))
	case charge.OutcomeMismatch:
		resp = problem(ProblemKeyReused, "This Idempotency-Key was used with a different request body. Use a new key for a new request.")
	case charge.OutcomeUnavailable:
		resp = withRetryAfter(problem(ProblemUnavailable, "The card provider is unavailable. Nothing was "+done+"; "+again+"."), 2)
	case charge.OutcomeBusy:
		// A throttled claim proves only that this request wrote nothing. An
		// earlier one with the key may have charged. So it never says
		// "nothing was charged".
		detail := "The service is busy: this request was not carried out. Retry it."
		if done != "" {
			detail = "The service is busy: this request was not carried out. " + upper(again) + ": if an earlier one " + done + ", the retry gets that answer."
		}
		resp = withRetryAfter(problem(ProblemServiceUnavailable, detail), 1)
	case charge.OutcomeRejected:
		resp = problem(ProblemProviderRejected, "The card provider refused the request. Nothing was "+done+". Retrying the same request will not help.")
	case charge.OutcomeAmbiguous, charge.OutcomeLeaseLost:
		resp = withRetryAfter(problem(ProblemOutcomePending, "The outcome is not known yet. "+upper(again)+"; it will not be "+done+" twice."), retryAfter(now, res.RetryAt))
	case charge.OutcomeFailoverPending:
		// Another Region may have acted: no "nothing was done".
		detail := "The tenant moved to this Region, and the Region it left may hold writes not copied here yet. Retry later."
		if done != "" {
			detail = "The tenant moved to this Region, and the Region it left may hold this request's outcome, not copied here yet. " +
				upper(again) + " later; it will not be " + done + " twice."
		}
		resp = withRetryAfter(problem(ProblemOutcomePending, detail), retryAfter(now, res.RetryAt))
	case charge.OutcomeWrongRegion:
		resp = problem(ProblemWrongRegion, "Nothing was done here: the Region "+res.Region+" serves this tenant. Send the request there.")
	case charge.OutcomeNotFound:
		resp = problem(ProblemNotFound, "")
	default:
		resp = problem(ProblemInternal, "")
	}
	return withHeaders(res, resp)
}

// webhookAnswer is the answer to a webhook delivery. It is acknowledged,
// so the provider stops redelivering it, unless it could not be processed
// yet.
func webhookAnswer(res charge.Result, now time.Time) events.APIGatewayV2HTTPResponse {
	switch res.Outcome {
	case charge.OutcomeConflict:
		return withHeaders(charge.Result{}, withRetryAfter(problem(ProblemInProgress, "Another delivery of this event is being processed."), retryAfter(now, res.RetryAt)))
	case charge.OutcomeBusy:
		return withHeaders(charge.Result{}, withRetryAfter(problem(ProblemServiceUnavailable, "The service is busy; deliver the event again."), 1))
	case charge.OutcomeAmbiguous:
		return withHeaders(charge.Result{}, withRetryAfter(problem(ProblemOutcomePending,
			"The event may be recorded, not yet processed. Deliver it again."), retryAfter(now, res.RetryAt)))
	case charge.OutcomeFailoverPending:
		return withHeaders(charge.Result{}, withRetryAfter(problem(ProblemServiceUnavailable, "The tenant's writes from another Region are not copied here yet; deliver the event again."), 30))
	case charge.OutcomeWrongRegion:
		// Kept by the provider until the serving Region's record of it is here.
		return withHeaders(charge.Result{}, problem(ProblemWrongRegion,
			"The Region "+res.Region+" serves this tenant, and its record of this event is not copied here yet. Deliver it again."))
	case charge.OutcomeError:
		return answer(res, now, "done")
	}
	return withHeaders(res, received())
}

// withHeaders adds the idempotency contract's headers to resp.
func withHeaders(res charge.Result, resp idem.Response) events.APIGatewayV2HTTPResponse {
	headers := make(map[string]string, len(resp.Headers)+2)
	for k, v := range resp.Headers {
		headers[k] = v
	}
	if !res.KeyExpiresAt.IsZero() {
		headers[HeaderIdempotencyExpires] = res.KeyExpiresAt.UTC().Format(http.TimeFormat)
	}
	if res.Replayed {
		headers[HeaderReplayed] = "true"
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: resp.Status, Headers: headers, Body: string(resp.Body)}
}

// stateConflict is the 409 of a request for a charge in another state.
// The member charge_status names that state when it is known.
func stateConflict(c *charge.Charge) idem.Response {
	if c == nil {
		return problem(ProblemStateConflict, "The charge is not in a state this request applies to. Nothing was done.")
	}
	b, _ := json.Marshal(struct {
		problemJSON
		ChargeStatus string `json:"charge_status"`
	}{problemJSON{Type: ProblemBase + ProblemStateConflict.Slug, Title: ProblemStateConflict.Title, Status: ProblemStateConflict.Status,
		Detail: "The charge's status is " + c.Status + ", not one this request applies to. Nothing was done."}, c.Status})
	return idem.Response{Status: http.StatusConflict, Headers: map[string]string{"Content-Type": ContentTypeProblem}, Body: b}
}

// retryHint tells how to retry a request refused before it did anything.
// With a key, an earlier request may have done it: the retry gets that.
func retryHint(route string) string {
	if _, keyed := keyedOperations[route]; keyed {
		return "Retry with the same key after the indicated time: if an earlier request with it " + done[route] + ", the retry gets that answer."
	}
	return "Retry it after the indicated time."
}

// rateLimited is the 429 of a request past its tenant's rate or
// concurrency. It is refused before its key was claimed. The detail names
// every limit Retry-After waits for.
func rateLimited(route string, r *limit.Refusal, now time.Time) idem.Response {
	rate := fmt.Sprintf("its rate limit of %d requests a second", r.Limits.Rate)
	concurrency := fmt.Sprintf("its concurrency limit of %d requests at once", r.Limits.Concurrency)
	over := rate
	switch {
	case r.Limit == "concurrency":
		over = concurrency
	case r.ConcurrencyToo:
		over = rate + ", and " + concurrency
	}
	detail := "This tenant is over " + over + ". This request was refused before it did anything. " + retryHint(route)
	return withRetryAfter(problem(ProblemRateLimited, detail), retryAfter(now, now.Add(r.RetryAfter)))
}

// shedAnswer is the 503 of a request that can wait, shed until until
// while the store is throttled.
func shedAnswer(route string, now, until time.Time) idem.Response {
	detail := "The service is near its capacity and keeps it for charges and captures. This request was refused before it did anything. " + retryHint(route)
	return withRetryAfter(problem(ProblemServiceUnavailable, detail), retryAfter(now, until))
}

// upper is s with its first letter upper-case.
func upper(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
