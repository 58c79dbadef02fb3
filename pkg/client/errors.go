package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ProblemBase is the prefix of every problem type URI the API answers with.
const ProblemBase = "https://chargeonce.dev/problems/"

// Sentinel errors, matched with errors.Is against the errors the Client's
// methods return. A *ProblemError matches the sentinel of its problem type.
var (
	// ErrInvalid: the request was refused as malformed. It was
	// invalid-request, invalid-idempotency-key, payload-too-large or
	// unsupported-media-type. Or a command was given an id that cannot be
	// an Idempotency-Key. Nothing was done.
	ErrInvalid = errors.New("client: invalid request")
	// ErrUnauthorized: the token was refused or names no tenant.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrDeclined: the card was declined. Final for the command id.
	ErrDeclined = errors.New("client: card declined")
	// ErrNotFound: no such charge, or refund, for this tenant.
	ErrNotFound = errors.New("client: not found")
	// ErrInProgress: a request with the same command id, or the same
	// capture or cancel, is still running.
	ErrInProgress = errors.New("client: request in progress")
	// ErrKeyReused: the command id was first used with a different request.
	// It had another amount, currency, source or description. For a refund,
	// it had another charge, amount or reason. Nothing was charged or
	// refunded.
	ErrKeyReused = errors.New("client: command id reused with a different request")
	// ErrOutcomePending: the command's outcome is not known yet; the server
	// settles it in the background. Retry later with the same command id,
	// or, for Capture and Cancel, the same call.
	ErrOutcomePending = errors.New("client: outcome pending")
	// ErrUnavailable: the request was refused before anything ran. It is
	// the service's own 503 provider-unavailable or service-unavailable. Or
	// it is API Gateway's bare 429: its throttle answers before the
	// function is invoked. The refused request did nothing. An earlier
	// request with the same id may have, or an earlier attempt of the same
	// capture or cancel. So retry with that id, or the same call.
	ErrUnavailable = errors.New("client: unavailable")
	// ErrRateLimited: the tenant is over its rate or concurrency limit (429
	// rate-limited). The request was refused before its id was claimed. As
	// with ErrUnavailable, the refused request did nothing. An earlier one
	// with the same id may have. Retry with that id after the
	// *ProblemError's RetryAfter. The client already did, until its
	// attempts or its context ran out.
	ErrRateLimited = errors.New("client: rate limited")
	// ErrOutcomeUnknown: the outcome is unknown. Retry with the same
	// command id, never a new one. For Capture and Cancel, make the same
	// call again, which is safe. The answer proves nothing about what ran.
	// It may be a 5xx without a problem body. API Gateway answers one when
	// the function fails or outlives its timeout, after it may have charged
	// or refunded. It may be a network error after the request may have
	// been sent. Once an attempt of a call may have run, every later error
	// of that call matches it too. None then matches ErrUnavailable. Such
	// attempts end in a network error, a bare 5xx, outcome-pending,
	// request-in-progress or internal-error.
	ErrOutcomeUnknown = errors.New("client: outcome unknown")
	// ErrInternal: the service failed unexpectedly (500 internal-error), or
	// the charge's record conflicts with the provider's answer (500
	// charge-conflict, final: not retried). Retrying with the same command
	// id is safe.
	ErrInternal = errors.New("client: internal error")
	// ErrRejected: the provider refused the request before carrying it
	// out (502 provider-rejected). Final: retrying the same request will
	// not help.
	ErrRejected = errors.New("client: provider rejected the request")
	// ErrRefundExceedsCharge: the refund is more than what remains of the
	// charge. Nothing was refunded. When the *ProblemError's RetryAfter is
	// 0, it is final for the command id. When it is positive, other refunds
	// of the charge were in flight. If they fail, a retry with the same id
	// after RetryAfter may succeed. Refund already retried until its
	// attempts or its context ran out.
	ErrRefundExceedsCharge = errors.New("client: refund exceeds what remains of the charge")
	// ErrChargeState: the charge is not in a state the request applies to.
	// A refund needs a charge in StatusSucceeded. A capture fails on a
	// canceled charge, or on another amount than the one captured. A cancel
	// fails on a captured charge. The *ProblemError's ChargeStatus is the
	// charge's status. This request did nothing.
	ErrChargeState = errors.New("client: the charge's state forbids the request")
	// ErrRefundDeclined: the provider refused the refund for good. Final
	// for the command id, like ErrDeclined.
	ErrRefundDeclined = errors.New("client: refund declined")
	// ErrRefundLimit: the charge has as many refunds as a charge may have
	// (1,000). Nothing was refunded. As with ErrRefundExceedsCharge, a
	// *ProblemError's RetryAfter of 0 makes it final. A positive one says
	// refunds in flight fill the limit. If one fails, a retry with the same
	// id may succeed.
	ErrRefundLimit = errors.New("client: the charge has all the refunds it may have")
	// ErrWrongRegion: another Region serves the tenant (421
	// wrong-region). The *ProblemError's Detail names it. Nothing
	// was done: send the request there, with the same command id.
	ErrWrongRegion = errors.New("client: another Region serves the tenant")
)

const (
	slugRefundExceedsCharge = "refund-exceeds-charge"
	slugChargeState         = "charge-state-conflict"
	slugRefundLimit         = "refund-limit-reached"
)

// finalProblems are the problem types of retryable statuses (409, 5xx) that
// the client does not retry. The service says no retry can change them. A
// refund-exceeds-charge or a refund-limit-reached is final only without
// Retry-After.
var finalProblems = map[string]bool{
	"provider-rejected": true, "charge-conflict": true, slugChargeState: true, "refund-declined": true,
}

// storedOutcomes are the failures the service stores as a command's
// outcome. It replays them to every retry with its id. A
// refund-exceeds-charge or a refund-limit-reached is stored only when
// final. After an attempt whose outcome was unknown, they still prove what
// the command did: nothing.
var storedOutcomes = map[string]bool{"card-declined": true, "refund-declined": true, slugRefundExceedsCharge: true, slugRefundLimit: true}

// stateProofs still prove what a Capture or a Cancel did after an attempt
// whose outcome was unknown. That is a charge-state-conflict. Had that
// attempt set the state, the same request would find it set and answer 200.
// So the conflict proves that this request did nothing.
var stateProofs = map[string]bool{slugChargeState: true}

// problemSentinels maps each problem type's slug to its sentinel.
var problemSentinels = map[string]error{
	"invalid-idempotency-key": ErrInvalid,
	"invalid-request":         ErrInvalid,
	"payload-too-large":       ErrInvalid,
	"unsupported-media-type":  ErrInvalid,
	"unauthorized":            ErrUnauthorized,
	"card-declined":           ErrDeclined,
	"not-found":               ErrNotFound,
	"request-in-progress":     ErrInProgress,
	"idempotency-key-reused":  ErrKeyReused,
	"internal-error":          ErrInternal,
	"charge-conflict":         ErrInternal,
	"provider-rejected":       ErrRejected,
	"provider-unavailable":    ErrUnavailable,
	"service-unavailable":     ErrUnavailable,
	"rate-limited":            ErrRateLimited,
	"outcome-pending":         ErrOutcomePending,
	slugRefundExceedsCharge:   ErrRefundExceedsCharge,
	slugChargeState:           ErrChargeState,
	"refund-declined":         ErrRefundDeclined,
	slugRefundLimit:           ErrRefundLimit,
	"wrong-region":            ErrWrongRegion,
}

// ProblemError is an error answer from the API. It holds the problem
// details of an application/problem+json body. Some answers have none, such
// as a gateway's own 401 or 502. Then Type is "about:blank", with the
// status's text as Title.
type ProblemError struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// ChargeStatus is the charge's status on a charge-state-conflict (the
	// problem's extension member charge_status), or "".
	ChargeStatus ChargeStatus `json:"charge_status,omitempty"`
	// RetryAfter is the wait the Retry-After header asked for, or 0.
	RetryAfter time.Duration `json:"-"`
}

func (e *ProblemError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Status, e.Title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Slug is the last segment of Type ("card-declined"), or "" when Type is
// not one of the API's problem types.
func (e *ProblemError) Slug() string {
	slug, ok := strings.CutPrefix(e.Type, ProblemBase)
	if !ok {
		return ""
	}
	return slug
}

// Is reports whether target is the sentinel of e's problem type. An answer
// without a known problem type matches by what it proves. That follows API
// Gateway's documented answers. 401 is ErrUnauthorized, an authorizer's
// refusal. 404 is ErrNotFound. 429 is ErrUnavailable: a throttle or quota
// answers before the integration is invoked. Any 5xx is ErrOutcomeUnknown,
// since it may come after the function ran. HTTP APIs answer 500 for a
// function error or timeout, and 503 for an integration timeout. REST APIs
// answer 502 for a function error and 504 for an integration timeout. See
// developerguide/http-api-troubleshooting-lambda.html and
// supported-gateway-response-types.html. Its one answer from before the
// invocation, an authorizer's failure (500), looks the same.
func (e *ProblemError) Is(target error) bool {
	if s, ok := problemSentinels[e.Slug()]; ok {
		return s == target
	}
	switch {
	case e.Status == http.StatusUnauthorized:
		return target == ErrUnauthorized
	case e.Status == http.StatusNotFound:
		return target == ErrNotFound
	case e.Status == http.StatusTooManyRequests:
		return target == ErrUnavailable
	case e.Status >= 500:
		return target == ErrOutcomeUnknown
	}
	return false
}

// unknownError is an error whose request may have run. It may be a network
// error, or a context that ended mid-request. It may be an answer that
// could not be read. It may be any error after an attempt of the same call
// that may have run (see mayHaveRun). It matches ErrOutcomeUnknown and its
// cause's sentinels. It does not match ErrUnavailable and ErrRateLimited,
// which would say that nothing was charged.
type unknownError struct{ err error }

func (e *unknownError) Error() string { return e.err.Error() }

// Is matches ErrOutcomeUnknown and what the cause matches, except the
// refusals: the earlier attempt may have charged.
func (e *unknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown || target != ErrUnavailable && target != ErrRateLimited && errors.Is(e.err, target)
}

// As finds what the cause holds, a *ProblemError among them.
func (e *unknownError) As(target any) bool { return errors.As(e.err, target) }
