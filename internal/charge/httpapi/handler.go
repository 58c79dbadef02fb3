package httpapi

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = charge.MaxBodyBytes

// Route keys of the HTTP API.
const (
	RouteCreate      = "POST /charges"
	RouteGet         = "GET /charges/{id}"
	RouteRefund      = "POST /charges/{id}/refunds"
	RouteListRefunds = "GET /charges/{id}/refunds"
	RouteGetRefund   = "GET /charges/{id}/refunds/{refund_id}"
	RouteCapture     = "POST /charges/{id}/capture"
	RouteCancel      = "POST /charges/{id}/cancel"
)

// moveOperations are the Operation dimension of the routes that set a
// state. They have no key to name it.
var moveOperations = map[string]metrics.Operation{RouteCapture: metrics.OperationCapture, RouteCancel: metrics.OperationCancel}

// keyedOperations are the Operation dimension of the keyed routes. A
// request refused before its key was read counts under them.
var keyedOperations = map[string]metrics.Operation{RouteCreate: metrics.OperationCharge, RouteRefund: metrics.OperationRefund}

// done says what each command route's request does, for what an answer
// proves was not done.
var done = map[string]string{RouteCreate: "charged", RouteRefund: "refunded", RouteCapture: "captured", RouteCancel: "canceled"}

// Deferrable are the routes that can wait: reads, listings and refunds.
// They are shed while the store is throttled. API Gateway gives them a
// smaller rate (template.yaml's RouteSettings). So creating, capturing
// and canceling payments keep the capacity.
var Deferrable = []string{RouteGet, RouteListRefunds, RouteGetRefund, RouteRefund}

// Routes are every route the charge function serves, the webhook's too.
var Routes = []string{RouteCreate, RouteGet, RouteRefund, RouteListRefunds, RouteGetRefund, RouteCapture, RouteCancel, RouteWebhook}

// DefaultTenantClaim is the JWT claim that names the tenant unless
// configured otherwise.
const DefaultTenantClaim = "tenant_id"

// Service is what the handler asks of the charge service.
type Service interface {
	Create(ctx context.Context, key idem.Key, req charge.Request, fp idem.Fingerprint) (charge.Result, error)
	Get(ctx context.Context, tenant, id string) (charge.Result, error)
	Refund(ctx context.Context, key idem.Key, chargeID string, req charge.RefundRequest, fp idem.Fingerprint) (charge.Result, error)
	GetRefund(ctx context.Context, tenant, chargeID, refundID string) (charge.Result, error)
	ListRefunds(ctx context.Context, tenant, chargeID string, p charge.Page) (charge.Result, error)
	Capture(ctx context.Context, tenant, id string, amount int64) (charge.Result, error)
	Cancel(ctx context.Context, tenant, id string) (charge.Result, error)
	Notify(ctx context.Context, n charge.Notification) (charge.Result, error)
}

var _ Service = (*charge.Service)(nil)

// Fence says whether this Region serves a tenant, and if not, the answer
// (charge.Service.Serves).
type Fence interface {
	Serves(ctx context.Context, tenant string) (charge.Result, bool)
}

var _ Fence = (*charge.Service)(nil)

// Options configure a Handler. Zero fields take the defaults.
type Options struct {
	// TenantClaim names the JWT claim, or the member of a Lambda
	// authorizer's context, that holds the tenant. Default
	// DefaultTenantClaim.
	TenantClaim string
	// Logger receives one record per request. Default: discard.
	Logger *slog.Logger
	// Clock returns the current time, for Retry-After. Default time.Now.
	Clock func() time.Time
	// Metrics receives one embedded-metric-format line per request.
	// Default os.Stdout, where Lambda hands them to CloudWatch.
	Metrics io.Writer
	// Webhook verifies the deliveries to RouteWebhook. By default there is
	// none, and every delivery is refused (400).
	Webhook WebhookVerifier
	// Tracer records each request as a span: route, status and outcome.
	// Nil traces nothing.
	Tracer *tracing.Tracer
	// Fence answers a tenant another Region serves, before its limits
	// count the request. It is nil in one Region, which serves every
	// tenant.
	Fence Fence
	// Limiter holds each tenant to its limits before its request does
	// anything. Nil holds none, for tests of other behaviours.
	Limiter *limit.Limiter
	// Shedder sheds the requests that can wait while the store is
	// throttled. Nil sheds none.
	Shedder *limit.Shedder
}

// Handler serves the charge API as API Gateway HTTP API (payload 2.0)
// events. Client errors are responses, never Go errors. The Lambda
// invocation fails only if the handler itself is broken.
type Handler struct {
	svc     Service
	opt     Options
	metrics *metrics.Emitter
}

// NewHandler returns a Handler answering with svc.
func NewHandler(svc Service, optFns ...func(*Options)) (*Handler, error) {
	if svc == nil {
		return nil, errors.New("httpapi: nil service")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.TenantClaim == "" {
		o.TenantClaim = DefaultTenantClaim
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Webhook == nil {
		o.Webhook = func(context.Context, []byte, string) (charge.Notification, error) {
			return charge.Notification{}, ErrWebhooksOff
		}
	}
	m := metrics.New(o.Metrics, metrics.FunctionCharge, func(mo *metrics.Options) { mo.Clock = o.Clock })
	return &Handler{svc: svc, opt: o, metrics: m}, nil
}

// Handle answers one request.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	var (
		res     charge.Result
		refused *idem.Response // a request refused before the service saw it
		key     idem.Key       // a POST's, once it is valid
		err     error
		attrs   []slog.Attr
	)
	ctx, span := h.opt.Tracer.StartInvocation(ctx, metrics.FunctionCharge, trace.SpanKindServer)
	defer h.opt.Tracer.End(ctx, span)
	attrs = make([]slog.Attr, 0, 8) // every attribute the log line can have
	rec := h.metrics.Record()
	ctx = metrics.NewContext(ctx, rec)
	// Who asks and from where, kept with the command for the audit trail.
	ctx = actor.NewContext(ctx, actor.FromHTTP(req))
	tenant, ok := h.tenant(req)
	route := routeOf(&req)
	var (
		ticket    *limit.Ticket
		limited   metrics.Outcome // rate-limited or shed: refused before it did anything
		elsewhere bool            // not served here: answered before the limits count it
	)
	if ok && route != RouteWebhook {
		if res, elsewhere = h.elsewhere(ctx, tenant); !elsewhere {
			var why string
			if refused, ticket, limited, why = h.admit(ctx, tenant, route); why != "" {
				attrs = append(attrs, slog.String("limit", why))
			}
		}
	}
	if ticket != nil {
		// A request that waits for its key's holder, or for a move in
		// flight, does no new work until it acts itself. Past
		// limit.MaxWaiters on one of them, it answers in progress at once.
		ctx = charge.WithWaitHooks(ctx, charge.WaitHooks{
			OnWait: func(on idem.Key, wait time.Duration, worked bool) bool {
				return h.opt.Limiter.Wait(ctx, ticket, on.LogHash(), wait, worked)
			},
			OnWork: func() { h.opt.Limiter.Retake(ctx, ticket) },
		})
	}
	switch {
	case route == RouteWebhook:
		// Signed by Stripe, not authorised by a tenant's JWT.
		res, refused, err = h.webhook(ctx, req)
	case !ok:
		refused = ref(problem(ProblemUnauthorized, ""))
	case elsewhere:
		// Another Region serves the tenant, or may: the route does nothing.
	case refused != nil:
		// Past its tenant's limits, or shed: the route does nothing.
	case route == RouteCreate:
		res, refused, key, err = h.create(ctx, tenant, req)
		attrs = append(attrs, slog.String("key_hash", keyHash(key)))
	case route == RouteRefund:
		res, refused, key, err = h.refund(ctx, tenant, req)
		attrs = append(attrs, slog.String("key_hash", keyHash(key)))
	case route == RouteGet:
		res, err = h.svc.Get(ctx, tenant, req.PathParameters["id"])
	case route == RouteGetRefund:
		res, err = h.svc.GetRefund(ctx, tenant, req.PathParameters["id"], req.PathParameters["refund_id"])
	case route == RouteListRefunds:
		res, refused, err = h.listRefunds(ctx, tenant, req)
	case route == RouteCapture || route == RouteCancel:
		res, refused, err = h.move(ctx, tenant, route, req)
	default:
		res = charge.Result{Outcome: charge.OutcomeNotFound}
	}
	// A request refused so far was refused before the service was asked.
	// It did nothing. The service refuses input only once it has read the
	// store, so that refusal counts.
	asked := refused == nil
	if r, _ := invalidInput(err); r != nil {
		refused, err = r, nil
	}
	if err != nil {
		// The cause is logged by class, never sent. 5xx bodies reveal nothing.
		attrs = append(attrs, slog.String("error_class", charge.ErrorClass(err)))
		// A provider not made ready stopped the request before its claim.
		res = charge.Result{Outcome: charge.OutcomeError, Idle: errors.Is(err, charge.ErrProviderNotReady)}
	}
	var resp events.APIGatewayV2HTTPResponse
	if route == RouteWebhook {
		resp = webhookAnswer(res, h.opt.Clock())
	} else {
		resp = answer(res, h.opt.Clock(), done[route])
	}
	if ticket != nil {
		h.opt.Limiter.Done(ctx, ticket, asked && counted(res))
	}
	if res.Outcome == charge.OutcomeBusy && h.opt.Shedder != nil {
		h.opt.Shedder.Throttled()
	}
	if refused != nil {
		res.Outcome = charge.OutcomeInvalid
		resp = events.APIGatewayV2HTTPResponse{StatusCode: refused.Status, Headers: refused.Headers, Body: string(refused.Body)}
	}
	outcome := cmp.Or(string(limited), string(res.Outcome))
	attrs = append(attrs, slog.String("request_id", requestID(ctx)), slog.String("route", route), slog.String("tenant", tenant),
		slog.String("outcome", outcome), slog.Int("status", resp.StatusCode))
	level := slog.LevelInfo
	if resp.StatusCode >= 500 {
		level = slog.LevelError
	}
	h.opt.Logger.LogAttrs(ctx, level, "request", attrs...)
	if span.IsRecording() {
		h.traced(span, route, outcome, resp.StatusCode, err)
	}
	switch op, moved := moveOperations[route]; {
	case moved:
		rec.Count(metrics.Requests, op, cmp.Or(limited, res.Outcome.Metric()))
	case limited != "":
		rec.Count(metrics.Requests, cmp.Or(keyedOperations[route], metrics.OperationNone), limited)
	case elsewhere && keyedOperations[route] != "":
		// A command, its key not read: counted under its route's operation.
		rec.Count(metrics.Requests, keyedOperations[route], res.Outcome.Metric())
	case route == RouteCreate || route == RouteRefund || refused != nil && route != RouteWebhook:
		rec.Count(metrics.Requests, charge.MetricOperation(key), res.Outcome.Metric())
	}
	if err := rec.Flush(ctx); err != nil {
		h.opt.Logger.ErrorContext(ctx, "writing metrics failed", "error", err.Error())
	}
	return resp, nil
}

// traced sets the request's span attributes. They are the outcome, the
// status, the class of a failure, and the route if it is the API's. Any
// other path could carry anything.
func (h *Handler) traced(span trace.Span, route, outcome string, status int, err error) {
	if slices.Contains(Routes, route) {
		tracing.String(span, tracing.AttrRoute, route)
	}
	tracing.Outcome(span, outcome)
	tracing.Int(span, tracing.AttrStatus, status)
	if err != nil {
		tracing.Error(span, charge.ErrorClass(err))
	}
}

func ref(r idem.Response) *idem.Response { return &r }

// elsewhere answers a request whose tenant this Region does not serve.
// It comes before the tenant's limits, so it costs them nothing here.
func (h *Handler) elsewhere(ctx context.Context, tenant string) (charge.Result, bool) {
	if h.opt.Fence == nil {
		return charge.Result{}, false
	}
	res, here := h.opt.Fence.Serves(ctx, tenant)
	return res, !here
}

// admit sheds a deferrable request while the store is throttled, then
// holds it to its tenant's limits. Either refusal comes before the request
// does anything, so it stores and charges nothing. A shed request does not
// count against its tenant. A refusal says why: the limit reached, or
// "shed".
func (h *Handler) admit(ctx context.Context, tenant, route string) (*idem.Response, *limit.Ticket, metrics.Outcome, string) {
	now := h.opt.Clock()
	if h.opt.Shedder != nil && slices.Contains(Deferrable, route) {
		if left, shed := h.opt.Shedder.Shedding(); shed {
			return ref(shedAnswer(route, now, now.Add(left))), nil, metrics.OutcomeShed, "shed"
		}
	}
	if h.opt.Limiter == nil {
		return nil, nil, "", ""
	}
	tk, refusal := h.opt.Limiter.Admit(ctx, tenant)
	if refusal != nil {
		return ref(rateLimited(route, refusal, now)), nil, metrics.OutcomeRateLimited, refusal.Limit
	}
	return nil, tk, "", ""
}

// counted reports whether a request the service answered stays counted
// against its tenant's rate. Only those that did new work do. An idle
// answer is cheap: about a key that exists, or a move made or in
// progress. So a retry storm on one key or move leaves the tenant's rate
// to its other requests.
func counted(res charge.Result) bool {
	return !res.Idle
}

// keyHash is key's LogHash, or empty for a key not read.
func keyHash(key idem.Key) string {
	if key == (idem.Key{}) {
		return ""
	}
	return key.LogHash()
}

// requestBody is req's body, decoded if API Gateway base64-encoded it.
// A body that does not decode gets a 400 problem. One longer than limit
// bytes gets a 413, with tooLarge as its detail.
func requestBody(req events.APIGatewayV2HTTPRequest, limit int, tooLarge string) ([]byte, *idem.Response) {
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return nil, ref(problem(ProblemInvalidRequest, "The body is not valid base64."))
		}
	}
	if len(body) > limit {
		return nil, ref(problem(ProblemTooLarge, tooLarge))
	}
	return body, nil
}

// tenant reads the caller's tenant from the authorizer context. That is
// a JWT authorizer's claims, or what a Lambda (REQUEST) authorizer
// returned. Both use the same name, TenantClaim. A value that is not a
// string names no tenant.
func (h *Handler) tenant(req events.APIGatewayV2HTTPRequest) (string, bool) {
	a := req.RequestContext.Authorizer
	if a == nil {
		return "", false
	}
	var t string
	switch {
	case a.JWT != nil:
		t = a.JWT.Claims[h.opt.TenantClaim]
	case a.Lambda != nil:
		t, _ = a.Lambda[h.opt.TenantClaim].(string)
	}
	if err := idem.CheckTenant(t); err != nil {
		return "", false // absent, or not usable as a tenant identifier
	}
	return t, true
}

// routeOf is req's route key, as API Gateway names it. For a $default
// route it is the route that method and path match. It then sets that
// route's path parameters.
func routeOf(req *events.APIGatewayV2HTTPRequest) string {
	if req.RouteKey != "" && req.RouteKey != "$default" {
		return req.RouteKey
	}
	method, path := req.RequestContext.HTTP.Method, strings.TrimSuffix(req.RawPath, "/")
	for _, route := range Routes {
		if params, ok := match(route, method, path); ok {
			req.PathParameters = params
			return route
		}
	}
	return method + " " + path
}

// match reports whether method and path match route, and its path
// parameters.
func match(route, method, path string) (map[string]string, bool) {
	rm, rp, _ := strings.Cut(route, " ")
	want, got := strings.Split(rp, "/"), strings.Split(path, "/")
	if rm != method || len(want) != len(got) {
		return nil, false
	}
	params := map[string]string{}
	for i, w := range want {
		switch {
		case strings.HasPrefix(w, "{"):
			if got[i] == "" {
				return nil, false
			}
			params[strings.Trim(w, "{}")] = got[i]
		case w != got[i]:
			return nil, false
		}
	}
	return params, true
}

// create validates a POST /charges request completely before anything is
// stored or sent to the provider.
func (h *Handler) create(ctx context.Context, tenant string, req events.APIGatewayV2HTTPRequest) (charge.Result, *idem.Response, idem.Key, error) {
	return keyed(ctx, tenant, req, charge.ChargeOperation, charge.ParseBody, h.svc.Create)
}

// refund validates a POST /charges/{id}/refunds request likewise. Its
// body may be empty, which refunds all that remains.
func (h *Handler) refund(ctx context.Context, tenant string, req events.APIGatewayV2HTTPRequest) (charge.Result, *idem.Response, idem.Key, error) {
	chargeID := req.PathParameters["id"]
	parse := func(body []byte) (charge.RefundRequest, idem.Fingerprint, error) {
		return charge.ParseRefundBody(chargeID, body)
	}
	run := func(ctx context.Context, key idem.Key, r charge.RefundRequest, fp idem.Fingerprint) (charge.Result, error) {
		return h.svc.Refund(ctx, key, chargeID, r, fp)
	}
	return keyed(ctx, tenant, req, charge.RefundOperation, parse, run)
}

// move validates a capture or a cancel, which set a state. They need no
// Idempotency-Key, and one sent is ignored. Setting a state twice sets it
// once: the charge's row is the record. A capture's body is optional.
func (h *Handler) move(ctx context.Context, tenant, route string, req events.APIGatewayV2HTTPRequest) (charge.Result, *idem.Response, error) {
	mt, _, err := mime.ParseMediaType(header(req, "Content-Type"))
	if (err != nil || mt != ContentTypeJSON) && req.Body != "" {
		return charge.Result{}, ref(problem(ProblemUnsupportedMedia, "Send the body as application/json.")), nil
	}
	body, refused := requestBody(req, MaxBodyBytes, "The body must be at most 16384 bytes.")
	if refused != nil {
		return charge.Result{}, refused, nil
	}
	id := req.PathParameters["id"]
	if route == RouteCancel {
		// A cancel takes no body. One sent is not read.
		res, err := h.svc.Cancel(ctx, tenant, id)
		return res, nil, err
	}
	amount, err := charge.ParseCaptureBody(body)
	if err != nil {
		refused, err := invalidInput(err)
		return charge.Result{}, refused, err
	}
	res, err := h.svc.Capture(ctx, tenant, id, amount)
	return res, nil, err
}

// listRefunds reads the page of a charge's refunds that the query asks
// for. A query refused is a 400. So is a starting_after that names no
// refund of the charge; the service finds that.
func (h *Handler) listRefunds(ctx context.Context, tenant string, req events.APIGatewayV2HTTPRequest) (charge.Result, *idem.Response, error) {
	p, err := charge.ParsePage(req.QueryStringParameters)
	if err != nil {
		refused, err := invalidInput(err)
		return charge.Result{}, refused, err
	}
	res, err := h.svc.ListRefunds(ctx, tenant, req.PathParameters["id"], p)
	return res, nil, err
}

// keyed validates what every POST that appends shares, before anything is
// stored. That is the media type, the body's size and the Idempotency-Key,
// scoped to operation. parse reads the body; its errors are answered here.
// run asks the service. The key is returned once it is valid (zero before).
func keyed[R any](ctx context.Context, tenant string, req events.APIGatewayV2HTTPRequest, operation string,
	parse func(body []byte) (R, idem.Fingerprint, error),
	run func(ctx context.Context, key idem.Key, r R, fp idem.Fingerprint) (charge.Result, error)) (charge.Result, *idem.Response, idem.Key, error) {
	var key idem.Key
	invalid := func(p ProblemType, detail string) (charge.Result, *idem.Response, idem.Key, error) {
		return charge.Result{}, ref(problem(p, detail)), key, nil
	}
	mt, _, err := mime.ParseMediaType(header(req, "Content-Type"))
	if (err != nil || mt != ContentTypeJSON) && (req.Body != "" || operation == charge.ChargeOperation) {
		return invalid(ProblemUnsupportedMedia, "Send the body as application/json.")
	}
	body, refused := requestBody(req, MaxBodyBytes, "The body must be at most 16384 bytes.")
	if refused != nil {
		return charge.Result{}, refused, key, nil
	}
	rawKey, present := headerOK(req, HeaderIdempotencyKey)
	if !present {
		return invalid(ProblemInvalidKey, "The Idempotency-Key header is required: mint one per intent and reuse it on every retry.")
	}
	id, err := charge.ParseCommandID(rawKey)
	if err != nil {
		return invalid(ProblemInvalidKey, "The Idempotency-Key must be 1 to 255 printable ASCII characters.")
	}
	key, _ = idem.NewKey(tenant, operation, string(id)) // tenant and id are valid
	r, fp, err := parse(body)
	if err != nil {
		refused, err := invalidInput(err)
		return charge.Result{}, refused, key, err
	}
	res, err := run(ctx, key, r, fp)
	return res, nil, key, err
}

// invalidInput answers err with a 400 if it refuses a body or a field.
// Any other error is returned as it is. errors.AsType, not As, so no
// target variable escapes on the way that succeeds.
func invalidInput(err error) (*idem.Response, error) {
	if be, ok := errors.AsType[*charge.BodyError](err); ok {
		return ref(problem(ProblemInvalidRequest, be.Reason)), nil
	}
	if ie, ok := errors.AsType[*charge.InvalidError](err); ok {
		return ref(problem(ProblemInvalidRequest, ie.Field+": "+ie.Reason+".")), nil
	}
	return nil, err
}

func header(req events.APIGatewayV2HTTPRequest, name string) string {
	v, _ := headerOK(req, name)
	return v
}

// headerOK finds a header whatever its case (API Gateway lower-cases them).
func headerOK(req events.APIGatewayV2HTTPRequest, name string) (string, bool) {
	if v, ok := req.Headers[strings.ToLower(name)]; ok {
		return v, true
	}
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}
