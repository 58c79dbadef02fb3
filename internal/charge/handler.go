package charge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 16 * 1024

// Headers of the idempotency contract.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotencyExpires = "Idempotency-Expires"
	HeaderReplayed           = "Idempotent-Replayed"
)

// Route keys of the HTTP API.
const (
	RouteCreate = "POST /charges"
	RouteGet    = "GET /charges/{id}"
)

// requestFields are the exact member names of a create request.
var requestFields = []string{"amount", "currency", "source", "description"}

// Handler serves the charge API as API Gateway HTTP API (payload 2.0)
// events. Client errors are responses, never Go errors: the Lambda
// invocation only fails if the handler itself is broken.
type Handler struct {
	svc         *Service
	tenantClaim string
	log         *slog.Logger
}

// NewHandler returns a Handler reading the tenant from the JWT claim named
// tenantClaim in the authorizer context.
func NewHandler(svc *Service, tenantClaim string, log *slog.Logger) (*Handler, error) {
	if svc == nil || tenantClaim == "" {
		return nil, errors.New("charge: handler needs a service and a tenant claim")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{svc: svc, tenantClaim: tenantClaim, log: log}, nil
}

// Handle answers one request.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	var (
		res   Result
		err   error
		attrs []any
	)
	tenant, ok := h.tenant(req)
	route := routeOf(req)
	switch {
	case !ok:
		res = Result{Response: problem(ProblemUnauthorized, ""), Outcome: OutcomeInvalid}
	case route == RouteCreate:
		var keyHash string
		res, keyHash, err = h.create(ctx, tenant, req)
		attrs = append(attrs, "key_hash", keyHash)
	case route == RouteGet:
		res, err = h.svc.Get(ctx, tenant, req.PathParameters["id"])
	default:
		res = Result{Response: problem(ProblemNotFound, "No such route."), Outcome: OutcomeNotFound}
	}
	if err != nil {
		// The cause is logged by class, never sent: 5xx bodies reveal nothing.
		attrs = append(attrs, "error_class", ErrorClass(err))
		res = Result{Response: problem(ProblemInternal, ""), Outcome: OutcomeError}
	}
	attrs = append(attrs, "request_id", requestID(ctx), "route", route, "tenant", tenant,
		"outcome", string(res.Outcome), "status", res.Response.Status)
	level := slog.LevelInfo
	if res.Response.Status >= 500 {
		level = slog.LevelError
	}
	h.log.Log(ctx, level, "request", attrs...)
	return toEvent(res), nil
}

func (h *Handler) tenant(req events.APIGatewayV2HTTPRequest) (string, bool) {
	if req.RequestContext.Authorizer == nil || req.RequestContext.Authorizer.JWT == nil {
		return "", false
	}
	t := req.RequestContext.Authorizer.JWT.Claims[h.tenantClaim]
	if _, err := idem.NewKey(t, Operation, "probe"); err != nil {
		return "", false // absent, or not usable as a tenant identifier
	}
	return t, true
}

func routeOf(req events.APIGatewayV2HTTPRequest) string {
	if req.RouteKey != "" && req.RouteKey != "$default" {
		return req.RouteKey
	}
	method, path := req.RequestContext.HTTP.Method, strings.TrimSuffix(req.RawPath, "/")
	switch {
	case method == http.MethodPost && path == "/charges":
		return RouteCreate
	case method == http.MethodGet && strings.HasPrefix(path, "/charges/") && !strings.Contains(path[len("/charges/"):], "/"):
		return RouteGet
	}
	return method + " " + path
}

// create validates a POST /charges request completely before anything is
// stored or sent to the provider.
func (h *Handler) create(ctx context.Context, tenant string, req events.APIGatewayV2HTTPRequest) (Result, string, error) {
	var keyHash string // known once the key is valid
	invalid := func(p ProblemType, detail string) (Result, string, error) {
		return Result{Response: problem(p, detail), Outcome: OutcomeInvalid}, keyHash, nil
	}
	mt, _, err := mime.ParseMediaType(header(req, "Content-Type"))
	if err != nil || mt != ContentTypeJSON {
		return invalid(ProblemUnsupportedMedia, "Send the body as application/json.")
	}
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return invalid(ProblemInvalidRequest, "The body is not valid base64.")
		}
	}
	if len(body) > MaxBodyBytes {
		return invalid(ProblemTooLarge, "The body must be at most 16384 bytes.")
	}
	rawKey, present := headerOK(req, HeaderIdempotencyKey)
	if !present {
		return invalid(ProblemInvalidKey, "The Idempotency-Key header is required: mint one per payment intent and reuse it on every retry.")
	}
	id, err := ParseCommandID(rawKey)
	if err != nil {
		return invalid(ProblemInvalidKey, "The Idempotency-Key must be 1 to 255 printable ASCII characters.")
	}
	key, _ := idem.NewKey(tenant, Operation, string(id)) // tenant and id are valid
	keyHash = KeyHash(key)
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return invalid(ProblemInvalidRequest, "The body is not a single valid JSON value without duplicate keys.")
	}
	var in struct {
		Amount      any    `json:"amount"` // a json.Number if it is a number
		Currency    string `json:"currency"`
		Source      string `json:"source"`
		Description string `json:"description"`
	}
	const shape = "The body must be an object with a number amount and string currency, source and description, and no other fields."
	// encoding/json matches field names case-insensitively; the contract
	// names them exactly, so check the names before decoding.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &fields); err != nil {
		return invalid(ProblemInvalidRequest, shape)
	}
	for name, value := range fields {
		if !slices.Contains(requestFields, name) || string(value) == "null" {
			return invalid(ProblemInvalidRequest, shape)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return invalid(ProblemInvalidRequest, shape)
	}
	number, _ := in.Amount.(json.Number)
	amount, err := ParseAmount(number)
	var r Request
	if err == nil {
		r, err = NewRequest(amount, in.Currency, in.Source, in.Description)
	}
	if err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			return invalid(ProblemInvalidRequest, ie.Field+": "+ie.Reason+".")
		}
		return Result{}, keyHash, err
	}
	if whole := strconv.FormatInt(amount, 10); number.String() != whole {
		// 1500.0 and 1.5e3 are the amount 1500: the same request, so the
		// same fingerprint as the body with "amount":1500.
		fields["amount"] = json.RawMessage(whole)
		if canonical, err = json.Marshal(fields); err == nil {
			canonical, err = idem.CanonicalJSON(canonical)
		}
		if err != nil {
			return Result{}, keyHash, fmt.Errorf("charge: re-canonicalize the body: %w", err)
		}
	}
	res, err := h.svc.Create(ctx, tenant, id, r, idem.FingerprintOf(canonical))
	return res, keyHash, err
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

func toEvent(res Result) events.APIGatewayV2HTTPResponse {
	headers := make(map[string]string, len(res.Response.Headers)+2)
	for k, v := range res.Response.Headers {
		headers[k] = v
	}
	if !res.KeyExpiresAt.IsZero() {
		headers[HeaderIdempotencyExpires] = res.KeyExpiresAt.UTC().Format(http.TimeFormat)
	}
	if res.Replayed {
		headers[HeaderReplayed] = "true"
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: res.Response.Status, Headers: headers, Body: string(res.Response.Body)}
}

func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}
