package lambdaidem

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Header names of the idempotency contract.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotencyExpires = "Idempotency-Expires"
	HeaderReplayed           = "Idempotent-Replayed"
	ContentTypeProblem       = "application/problem+json"
)

// DefaultProblemBase prefixes the problem types unless Options.ProblemBase
// says otherwise. It is this package's documentation, which lists them. An
// API is better served by a base of its own.
const DefaultProblemBase = "https://pkg.go.dev/github.com/chargeonce/chargeonce/pkg/idem/lambdaidem#"

// Options configure HTTP and REST. Zero fields take the defaults.
type Options struct {
	// Header names the idempotency key's header. Default
	// HeaderIdempotencyKey.
	Header string
	// Key reads the request's idempotency key, and whether it has one.
	// Default: the Header header.
	Key func(r Request) (string, bool)
	// Tenant names the request's tenant, and whether it has one (401
	// without). Default: the principal of the route's authorizer. That is
	// a JWT's "sub" claim, the IAM caller (TenantFromIAMPrincipal), or a
	// REST API Lambda authorizer's principalId. An HTTP API Lambda
	// authorizer has no principal: use TenantFromLambdaContext.
	Tenant func(r Request) (string, bool)
	// Fingerprint identifies the request, so that a key reused for another
	// request is refused; its error is answered 400. Default
	// FingerprintRequest: the route, the method, the path parameters and
	// the body. FingerprintFields takes a subset of the body;
	// FingerprintBody, the body alone.
	Fingerprint func(r Request) (idem.Fingerprint, error)
	// Intent gives the bytes stored as the command's Intent, for a
	// Resolver. Its error is answered 400. An intent over 190 KiB is
	// answered 413, and nothing is stored. Default IntentRequest: the
	// route, method, path and body, never a header or the query string.
	// Leave out what the record must not keep, such as a card number.
	// Return nil to store nothing.
	Intent func(r Request) ([]byte, error)
	// OnReplay is given every stored answer about to be replayed, with its
	// key. What it returns is answered: it may count replays or add a
	// header. The Body may be shared with a cache: replace it, do not
	// change it.
	OnReplay func(ctx context.Context, r Request, key idem.Key, resp idem.Response) idem.Response
	// Migration, when set, runs a request without a key rather than
	// answering it 400 (see KeyMigration). Default nil: the key is
	// required.
	Migration *KeyMigration
	// Wait, Reserve and OnWait are passed to idem.Do (see
	// idem.DoOptions). OnWait may cap the requests waiting on one key.
	Wait, Reserve time.Duration
	OnWait        func(ctx context.Context, key idem.Key) bool
	// ResolveAfter is how long after a lease ends the reconciler resolves
	// a command left IN_FLIGHT. It is the period of its sweep. The answers
	// for an unknown outcome count it in their Retry-After, and say so.
	// Default 0.
	ResolveAfter time.Duration
	// ProblemBase prefixes the problem types. Default DefaultProblemBase.
	ProblemBase string
	// OnError sees every error the wrapper answers for rather than
	// returns, for logging. A store failure is one, and so is the
	// handler's own error.
	OnError func(ctx context.Context, err error)
}

// api is a wrapper's options, defaults applied.
type api struct {
	Options
	// keyName is how the answers name the key: by its header, unless the
	// caller's function reads it.
	keyName string
	// now is the store's clock.
	now func() time.Time
}

func newAPI(b idem.Backend, optFns []func(*Options)) *api {
	a := &api{now: b.Now}
	for _, fn := range optFns {
		fn(&a.Options)
	}
	if a.Header == "" {
		a.Header = HeaderIdempotencyKey
	}
	if a.ProblemBase == "" {
		a.ProblemBase = DefaultProblemBase
	}
	if a.Tenant == nil {
		a.Tenant = defaultTenant
	}
	if a.Fingerprint == nil {
		a.Fingerprint = FingerprintRequest
	}
	if a.Intent == nil {
		a.Intent = IntentRequest
	}
	if a.OnError == nil {
		a.OnError = func(context.Context, error) {}
	}
	a.keyName = "idempotency key"
	if a.Key == nil {
		header := a.Header
		a.Key = func(r Request) (string, bool) { return r.Header(header) }
		a.keyName = header + " header"
	}
	return a
}

// HTTPFunc handles an HTTP API request under its lease and says what
// became of its effect (see idem.Outcome). Its response is answered as
// the outcome's Response.
type HTTPFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error)

// HTTP wraps next as an API Gateway HTTP API (payload 2.0) handler. It
// runs next at most once per tenant, operation and idempotency key.
func HTTP(b idem.Backend, operation string, next HTTPFunc, optFns ...func(*Options)) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	o := newAPI(b, optFns)
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		body, ok := decodeBody(req.Body, req.IsBase64Encoded)
		resp := o.serve(ctx, b, operation, httpRequest(&req, body), ok, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
			return next(ctx, req, l)
		})
		out, b64 := encodeBody(resp.Body)
		return events.APIGatewayV2HTTPResponse{StatusCode: resp.Status, Headers: resp.Headers, Body: out, IsBase64Encoded: b64}, nil
	}
}

// RESTFunc handles a REST API request under its lease, as HTTPFunc.
type RESTFunc func(ctx context.Context, req events.APIGatewayProxyRequest, l *idem.Lease) (idem.Outcome, error)

// REST wraps next as an API Gateway REST API (payload 1.0) handler. It
// runs next at most once per tenant, operation and idempotency key.
func REST(b idem.Backend, operation string, next RESTFunc, optFns ...func(*Options)) func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	o := newAPI(b, optFns)
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		body, ok := decodeBody(req.Body, req.IsBase64Encoded)
		resp := o.serve(ctx, b, operation, restRequest(&req, body), ok, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
			return next(ctx, req, l)
		})
		out, b64 := encodeBody(resp.Body)
		return events.APIGatewayProxyResponse{StatusCode: resp.Status, Headers: resp.Headers, Body: out, IsBase64Encoded: b64}, nil
	}
}

// serve answers one request: a refusal of the contract, the replay, or the
// handler's own response. bodyOK is false for a body that is not the
// base64 it was said to be.
func (o *api) serve(ctx context.Context, b idem.Backend, operation string, r Request, bodyOK bool, fn func(context.Context, *idem.Lease) (idem.Outcome, error)) idem.Response {
	if !bodyOK {
		return o.problem(problemInvalidRequest, "The body is not valid base64.")
	}
	tenant, ok := o.Tenant(r)
	if !ok {
		return o.problem(problemUnauthorized, "")
	}
	client, keyed := o.Key(r)
	if !keyed {
		if o.Migration == nil {
			return o.problem(problemInvalidKey, "The "+o.keyName+" is required: mint one per intent and reuse it on every retry.")
		}
		client = "unkeyed-" + rand.Text() // a key no retry will send: the request runs unprotected
	}
	if err := idem.CheckClientKey(client); err != nil {
		return o.problem(problemInvalidKey, "The "+o.keyName+" must be 1 to 255 printable ASCII characters.")
	}
	key, err := idem.NewKey(tenant, operation, client)
	if err != nil {
		return o.problem(problemUnauthorized, "")
	}
	resp := o.run(ctx, b, key, keyed, r, fn)
	if !keyed {
		o.Migration.ranWithoutKey(ctx, o, operation, r, resp.Headers)
	}
	return resp
}

// run runs fn under key through idem.Do and answers what became of it. A
// request run without a key (keyed false) can have no replay. A retry of
// it is another request.
func (o *api) run(ctx context.Context, b idem.Backend, key idem.Key, keyed bool, r Request, fn func(context.Context, *idem.Lease) (idem.Outcome, error)) idem.Response {
	fp, err := o.Fingerprint(r)
	switch {
	case errors.Is(err, idem.ErrInvalidJSON):
		return o.problem(problemInvalidRequest, "The body is not a single valid JSON value of UTF-8 text without duplicate keys, as this operation takes.")
	case err != nil:
		return o.problem(problemInvalidRequest, "The request is not one this operation takes.")
	}
	intent, err := o.Intent(r)
	if err != nil {
		return o.problem(problemInvalidRequest, "The request is not one this operation takes.")
	}
	res, err := idem.Do(ctx, b, key, fp, intent, fn, func(d *idem.DoOptions) {
		d.Wait, d.OnWait = o.Wait, o.OnWait
		if o.Reserve > 0 {
			d.Reserve = o.Reserve
		}
	})
	if err != nil && res.Lease == nil { // Begin's error: fn did not run
		return o.refused(ctx, err, keyed)
	}
	if err != nil {
		o.OnError(ctx, err)
	}
	var resp idem.Response
	switch {
	case res.Status == idem.StatusInFlight && (err != nil || res.Response.Status == 0):
		return o.pending(res.Lease.ExpiresAt, keyed)
	case res.Response.Status != 0:
		resp = withHeaders(res.Response)
	case res.Status == idem.StatusReleased:
		return o.unavailable(keyed)
	default:
		return o.problem(problemInternal, "")
	}
	if keyed && res.Status.Terminal() {
		o.expires(resp, res.RecordExpiresAt)
	}
	if res.Replayed {
		resp.Headers[HeaderReplayed] = "true"
		if o.OnReplay != nil {
			resp = o.OnReplay(ctx, r, key, resp)
		}
	}
	return resp
}

// refused answers an error of Begin by the sentinel it wraps. It gives its
// typed error's times when they are set. Only ErrUnavailable proves that
// Begin wrote no record (see idem.Backend). Any other error leaves the
// claim unknown, so a retry must keep the key.
func (o *api) refused(ctx context.Context, err error, keyed bool) idem.Response {
	switch {
	case errors.Is(err, idem.ErrMismatch):
		e := typed[idem.MismatchError](err)
		return o.expires(o.problem(problemKeyReused, "This key was used with a different request. Use a new key for a new request."), e.RecordExpiresAt)
	case errors.Is(err, idem.ErrInFlight):
		e := typed[idem.InFlightError](err)
		return o.expires(o.inProgress(e.LeaseExpiresAt), e.RecordExpiresAt)
	case errors.Is(err, idem.ErrTooLarge): // the store refuses it before it writes
		return o.problem(problemTooLarge, "The request is larger than the 190 KiB this operation stores to recover it. Nothing was stored.")
	}
	o.OnError(ctx, err)
	switch {
	case !keyed: // fn did not run, and the claim's key is one no retry sends
		return o.unavailable(false)
	case errors.Is(err, idem.ErrUnknownClaim):
		e := typed[idem.UnknownClaimError](err)
		return o.expires(o.claimUnknown(e.LeaseExpiresAt), e.RecordExpiresAt)
	case errors.Is(err, idem.ErrUnavailable):
		return o.unavailable(true)
	}
	return o.claimUnknown(time.Time{})
}

// typed is the error of type *T in err's tree. It is T's zero value when
// the Backend returned the plain sentinel; then its times are zero.
func typed[T any, P interface {
	*T
	error
}](err error) T {
	var p P
	if errors.As(err, &p) {
		return *p
	}
	var zero T
	return zero
}

// expires sets resp's Idempotency-Expires to at, unless at is zero or
// past. Zero means the store did not say. An unsettled command's earliest
// expiry may lie in the past: it would expire the moment it is released.
// Yet the key deduplicates until it is settled, so no date is true then.
func (o *api) expires(resp idem.Response, at time.Time) idem.Response {
	if at.After(o.now()) {
		resp.Headers[HeaderIdempotencyExpires] = at.UTC().Format(http.TimeFormat)
	}
	return resp
}

// The longest Retry-After for a key held by a live attempt, which may
// finish any moment. Then the longest for one whose attempt ended and
// whose resolution is overdue.
const (
	maxRetryInProgress = 30 * time.Second
	retryOverdue       = 30 * time.Second
)

// inProgress answers a key held by another attempt. Its lease ends at
// leaseEnd, or at a time the store did not say (zero).
func (o *api) inProgress(leaseEnd time.Time) idem.Response {
	now := o.now()
	switch {
	case leaseEnd.IsZero():
		p := o.problem(problemInProgress, "Another request with this key is being processed, or ended without a known outcome. "+
			"Retry with the same key after Retry-After: you get its outcome once it has one. It will not be done twice.")
		return retryAt(p, now, now)
	case now.Before(leaseEnd):
		p := o.problem(problemInProgress, "Another request with this key is being processed; its attempt holds the key until "+stamp(leaseEnd)+
			". Retry with the same key after Retry-After: you get its outcome once it has one.")
		at := leaseEnd
		if limit := now.Add(maxRetryInProgress); limit.Before(at) {
			at = limit
		}
		return retryAt(p, now, at)
	}
	resolveBy := leaseEnd.Add(o.ResolveAfter)
	at := resolveBy
	if !now.Before(resolveBy) {
		at = now.Add(retryOverdue)
	}
	p := o.problem(problemInProgress, "A request with this key ended at "+stamp(leaseEnd)+" without a known outcome. "+o.resolution(leaseEnd)+
		" Until then every retry gets this answer; it will not be done twice.")
	return retryAt(p, now, at)
}

// pending answers an attempt that ran and left the outcome unknown, under
// a lease ending at leaseEnd.
func (o *api) pending(leaseEnd time.Time, keyed bool) idem.Response {
	if !keyed {
		return o.problem(problemPending, "The outcome is not known yet. The request had no "+o.keyName+
			", so a retry is a new request and may do it again: send one to retry safely.")
	}
	p := o.problem(problemPending, "The outcome is not known yet: the request may have taken effect. Its attempt holds the key until "+stamp(leaseEnd)+
		". "+o.resolution(leaseEnd)+" Retry with the same key after Retry-After: you get 409 request-in-progress until then, then the outcome. It will not be done twice.")
	return retryAt(p, o.now(), leaseEnd.Add(o.ResolveAfter))
}

// claimUnknown answers a claim the store did not confirm. It would have
// held the key until leaseEnd, zero if the store did not say. An earlier
// attempt with the key may have carried the request out.
func (o *api) claimUnknown(leaseEnd time.Time) idem.Response {
	now := o.now()
	until := "the service's reconciliation resolves it"
	if !leaseEnd.IsZero() {
		until = stamp(leaseEnd) + ", when " + until
	}
	p := o.problem(problemPending, "The store did not confirm that the request was recorded. "+
		"It was not carried out by this attempt, but an earlier one with this key may have carried it out. "+
		"Retry with the same key after Retry-After. If the request was not recorded, the retry carries it out. "+
		"If it was, you get its outcome, or 409 request-in-progress until "+until+". It will not be done twice.")
	return retryAt(p, now, now.Add(time.Second))
}

// resolution says what resolves a command whose lease ends at leaseEnd. It
// says by when if ResolveAfter is set.
func (o *api) resolution(leaseEnd time.Time) string {
	const resolves = "the service's reconciliation finds out whether it took effect and records the outcome"
	now, resolveBy := o.now(), leaseEnd.Add(o.ResolveAfter)
	by := ""
	if o.ResolveAfter > 0 {
		by = ", by " + stamp(resolveBy)
	}
	switch {
	case now.Before(leaseEnd):
		return "Once the attempt's lease has ended, " + resolves + by + "."
	case o.ResolveAfter > 0 && !now.Before(resolveBy):
		return "The service's reconciliation, due by " + stamp(resolveBy) + ", has not recorded the outcome yet."
	}
	return "Now " + resolves + by + "."
}

// unavailable answers a request that was not carried out.
func (o *api) unavailable(keyed bool) idem.Response {
	detail := "This request was not carried out. Retry with the same key: if an earlier request with it ran, the retry gets its outcome."
	if !keyed {
		detail = "This request was not carried out; retry."
	}
	p := o.problem(problemUnavailable, detail)
	p.Headers["Retry-After"] = "1"
	return p
}

// retryAt sets p's Retry-After to the whole seconds from now to at,
// rounded up so that waiting it is enough, at least 1.
func retryAt(p idem.Response, now, at time.Time) idem.Response {
	s := int(math.Ceil(at.Sub(now).Seconds()))
	p.Headers["Retry-After"] = strconv.Itoa(max(s, 1))
	return p
}

// stamp is how the answers write a time.
func stamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// withHeaders copies r with a headers map to add to.
func withHeaders(r idem.Response) idem.Response {
	h := make(map[string]string, len(r.Headers)+2)
	for k, v := range r.Headers {
		h[k] = v
	}
	r.Headers = h
	return r
}

// problemType is a problem type (RFC 9457) the wrappers answer with.
type problemType struct {
	slug, title string
	status      int
}

var (
	problemInvalidKey     = problemType{"invalid-idempotency-key", "Missing or invalid idempotency key", http.StatusBadRequest}
	problemInvalidRequest = problemType{"invalid-request", "Invalid request", http.StatusBadRequest}
	problemTooLarge       = problemType{"request-too-large", "Request too large to store", http.StatusRequestEntityTooLarge}
	problemUnauthorized   = problemType{"unauthorized", "No tenant in the authorizer context", http.StatusUnauthorized}
	problemInProgress     = problemType{"request-in-progress", "A request with this key is in progress", http.StatusConflict}
	problemKeyReused      = problemType{"idempotency-key-reused", "Idempotency key reused with a different request", http.StatusUnprocessableEntity}
	problemInternal       = problemType{"internal-error", "Internal error", http.StatusInternalServerError}
	problemUnavailable    = problemType{"service-unavailable", "Service temporarily unavailable; this request was not carried out", http.StatusServiceUnavailable}
	problemPending        = problemType{"outcome-pending", "Outcome not known yet", http.StatusServiceUnavailable}
)

func (o *api) problem(p problemType, detail string) idem.Response {
	b, _ := json.Marshal(struct { // only strings and an integer: cannot fail
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{o.ProblemBase + p.slug, p.title, p.status, detail})
	return idem.Response{Status: p.status, Headers: map[string]string{"Content-Type": ContentTypeProblem}, Body: b}
}

// decodeBody gives a body as sent, and whether it was valid base64 when it
// was said to be.
func decodeBody(body string, b64 bool) ([]byte, bool) {
	if !b64 {
		return []byte(body), true
	}
	b, err := base64.StdEncoding.DecodeString(body)
	return b, err == nil
}

// encodeBody gives a body as API Gateway takes it: as it is when it is
// text, base64 otherwise.
func encodeBody(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}
