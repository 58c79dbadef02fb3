package lambdaidem

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
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

// DefaultProblemBase prefixes the problem types unless
// Options.ProblemBase says otherwise.
const DefaultProblemBase = "https://chargeonce.dev/problems/"

// Options are what the HTTP and REST wrappers share.
type Options struct {
	// Header names the idempotency key's header. Default
	// HeaderIdempotencyKey.
	Header string
	// Wait and Reserve are passed to idem.Do (see idem.DoOptions).
	Wait, Reserve time.Duration
	// ProblemBase prefixes the problem types. Default DefaultProblemBase.
	ProblemBase string
	// Clock gives the time for Retry-After. Default time.Now.
	Clock func() time.Time
	// OnError sees every error the wrapper answers for rather than
	// returns (a store failure, the handler's own error), for logging.
	OnError func(ctx context.Context, err error)
}

func (o *Options) defaults() {
	if o.Header == "" {
		o.Header = HeaderIdempotencyKey
	}
	if o.ProblemBase == "" {
		o.ProblemBase = DefaultProblemBase
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.OnError == nil {
		o.OnError = func(context.Context, error) {}
	}
}

func (o *Options) doOptions(d *idem.DoOptions) {
	d.Wait = o.Wait
	if o.Reserve > 0 {
		d.Reserve = o.Reserve
	}
}

// HTTPFunc handles an HTTP API request under its lease and says what
// became of its effect (see idem.Outcome). Its response is answered as
// the outcome's Response.
type HTTPFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error)

// HTTPOptions configure HTTP.
type HTTPOptions struct {
	Options
	// Tenant names the request's tenant. Default: the JWT authorizer's
	// "sub" claim (TenantFromJWTClaim("sub")).
	Tenant func(req events.APIGatewayV2HTTPRequest) (string, bool)
}

// TenantFromJWTClaim reads the tenant from a claim of the HTTP API's JWT
// authorizer.
func TenantFromJWTClaim(claim string) func(events.APIGatewayV2HTTPRequest) (string, bool) {
	return func(req events.APIGatewayV2HTTPRequest) (string, bool) {
		a := req.RequestContext.Authorizer
		if a == nil || a.JWT == nil {
			return "", false
		}
		t, ok := a.JWT.Claims[claim]
		return t, ok && t != ""
	}
}

// HTTP wraps next as an API Gateway HTTP API (payload 2.0) handler that
// runs it at most once per (tenant, operation, Idempotency-Key).
func HTTP(b idem.Backend, operation string, next HTTPFunc, optFns ...func(*HTTPOptions)) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	o := HTTPOptions{Tenant: TenantFromJWTClaim("sub")}
	for _, fn := range optFns {
		fn(&o)
	}
	o.defaults()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		tenant, ok := o.Tenant(req)
		r := request{tenant: tenant, hasTenant: ok, body: req.Body, base64: req.IsBase64Encoded}
		r.key, r.hasKey = lookup(req.Headers, o.Header)
		resp := o.serve(ctx, b, operation, r, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
			return next(ctx, req, l)
		})
		body, b64 := encodeBody(resp.Body)
		return events.APIGatewayV2HTTPResponse{StatusCode: resp.Status, Headers: resp.Headers, Body: body, IsBase64Encoded: b64}, nil
	}
}

// RESTFunc handles a REST API request under its lease, as HTTPFunc.
type RESTFunc func(ctx context.Context, req events.APIGatewayProxyRequest, l *idem.Lease) (idem.Outcome, error)

// RESTOptions configure REST.
type RESTOptions struct {
	Options
	// Tenant names the request's tenant. Default: the Lambda authorizer's
	// principalId.
	Tenant func(req events.APIGatewayProxyRequest) (string, bool)
}

func principalID(req events.APIGatewayProxyRequest) (string, bool) {
	t, ok := req.RequestContext.Authorizer["principalId"].(string)
	return t, ok && t != ""
}

// REST wraps next as an API Gateway REST API (payload 1.0) handler that
// runs it at most once per (tenant, operation, Idempotency-Key).
func REST(b idem.Backend, operation string, next RESTFunc, optFns ...func(*RESTOptions)) func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	o := RESTOptions{Tenant: principalID}
	for _, fn := range optFns {
		fn(&o)
	}
	o.defaults()
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		tenant, ok := o.Tenant(req)
		r := request{tenant: tenant, hasTenant: ok, body: req.Body, base64: req.IsBase64Encoded}
		r.key, r.hasKey = lookup(req.Headers, o.Header)
		if !r.hasKey {
			if vs, ok := lookupMulti(req.MultiValueHeaders, o.Header); ok && len(vs) == 1 {
				r.key, r.hasKey = vs[0], true
			}
		}
		resp := o.serve(ctx, b, operation, r, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
			return next(ctx, req, l)
		})
		body, b64 := encodeBody(resp.Body)
		return events.APIGatewayProxyResponse{StatusCode: resp.Status, Headers: resp.Headers, Body: body, IsBase64Encoded: b64}, nil
	}
}

// request is what the wrappers read from either kind of event.
type request struct {
	tenant, key       string
	hasTenant, hasKey bool
	body              string
	base64            bool
}

// serve answers one request: every refusal of the contract, the replay,
// or the handler's own response.
func (o *Options) serve(ctx context.Context, b idem.Backend, operation string, r request, fn func(context.Context, *idem.Lease) (idem.Outcome, error)) idem.Response {
	if !r.hasTenant {
		return o.problem(problemUnauthorized, "")
	}
	if !r.hasKey {
		return o.problem(problemInvalidKey, "The "+o.Header+" header is required: mint one per intent and reuse it on every retry.")
	}
	key, err := idem.NewKey(r.tenant, operation, r.key)
	var ve *idem.ValidationError
	switch {
	case errors.As(err, &ve) && ve.Field == "client key":
		return o.problem(problemInvalidKey, "The "+o.Header+" must be 1 to 255 printable ASCII characters.")
	case err != nil:
		return o.problem(problemUnauthorized, "")
	}
	body := []byte(r.body)
	if r.base64 {
		if body, err = base64.StdEncoding.DecodeString(r.body); err != nil {
			return o.problem(problemInvalidRequest, "The body is not valid base64.")
		}
	}
	fp := idem.FingerprintOf(nil)
	if len(body) > 0 {
		if fp, err = idem.FingerprintJSON(body); err != nil {
			return o.problem(problemInvalidRequest, "The body is not a single valid JSON value of UTF-8 text without duplicate keys.")
		}
	}
	res, err := idem.Do(ctx, b, key, fp, nil, fn, o.doOptions)
	var (
		inflight *idem.InFlightError
		mismatch *idem.MismatchError
		unknown  *idem.UnknownClaimError
	)
	switch {
	case errors.As(err, &inflight):
		p := o.problem(problemInProgress, "Another request with this key is being processed. Retry after the indicated time.")
		p.Headers["Retry-After"] = retryAfter(o.Clock(), inflight.LeaseExpiresAt)
		return p
	case errors.As(err, &mismatch):
		return o.problem(problemKeyReused, "This key was used with a different request body. Use a new key for a new request.")
	case errors.As(err, &unknown):
		// The claim may have landed: the function has not run, but a
		// reconciler may yet run it, so "nothing was done" is not known.
		o.OnError(ctx, err)
		p := o.problem(problemPending, "The outcome is not known yet. Retry with the same key; it will not be done twice.")
		p.Headers["Retry-After"] = retryAfter(o.Clock(), unknown.LeaseExpiresAt)
		return p
	case err != nil && res.Lease == nil:
		o.OnError(ctx, err)
		p := o.problem(problemUnavailable, "Nothing was done; retry with the same key.")
		p.Headers["Retry-After"] = "1"
		return p
	case err != nil:
		o.OnError(ctx, err)
	}
	var resp idem.Response
	switch {
	case res.Status == idem.StatusInFlight && (err != nil || res.Response.Status == 0):
		resp = o.problem(problemPending, "The outcome is not known yet. Retry with the same key; it will not be done twice.")
		resp.Headers["Retry-After"] = retryAfter(o.Clock(), res.Lease.ExpiresAt)
		return resp
	case res.Response.Status != 0:
		resp = withHeaders(res.Response)
	case res.Status == idem.StatusReleased:
		resp = o.problem(problemUnavailable, "Nothing was done; retry with the same key.")
		resp.Headers["Retry-After"] = "1"
		return resp
	default:
		return o.problem(problemInternal, "")
	}
	if res.Status.Terminal() {
		resp.Headers[HeaderIdempotencyExpires] = res.RecordExpiresAt.UTC().Format(http.TimeFormat)
	}
	if res.Replayed {
		resp.Headers[HeaderReplayed] = "true"
	}
	return resp
}

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
	problemInvalidKey     = problemType{"invalid-idempotency-key", "Invalid Idempotency-Key header", http.StatusBadRequest}
	problemInvalidRequest = problemType{"invalid-request", "Invalid request", http.StatusBadRequest}
	problemUnauthorized   = problemType{"unauthorized", "No tenant in the authorizer context", http.StatusUnauthorized}
	problemInProgress     = problemType{"request-in-progress", "A request with this key is in progress", http.StatusConflict}
	problemKeyReused      = problemType{"idempotency-key-reused", "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity}
	problemInternal       = problemType{"internal-error", "Internal error", http.StatusInternalServerError}
	problemUnavailable    = problemType{"service-unavailable", "Service temporarily unavailable; nothing was done", http.StatusServiceUnavailable}
	problemPending        = problemType{"outcome-pending", "Outcome not known yet; retry with the same key", http.StatusServiceUnavailable}
)

func (o *Options) problem(p problemType, detail string) idem.Response {
	b, _ := json.Marshal(struct { // only strings and an integer: cannot fail
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{o.ProblemBase + p.slug, p.title, p.status, detail})
	return idem.Response{Status: p.status, Headers: map[string]string{"Content-Type": ContentTypeProblem}, Body: b}
}

// retryAfter is the Retry-After value, in seconds from 1 to 30, for a
// lease ending at until.
func retryAfter(now, until time.Time) string {
	s := int(until.Sub(now).Seconds() + 0.999)
	return strconv.Itoa(min(max(s, 1), 30))
}

// lookup finds a header whatever its case (HTTP APIs lower-case them).
func lookup(headers map[string]string, name string) (string, bool) {
	if v, ok := headers[strings.ToLower(name)]; ok {
		return v, true
	}
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func lookupMulti(headers map[string][]string, name string) ([]string, bool) {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// encodeBody gives a body as API Gateway takes it: as it is when it is
// text, base64 otherwise.
func encodeBody(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}
