package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"

	"github.com/chargeonce/chargeonce/internal/devauth"
)

// HandlerFunc is a Lambda handler for HTTP API payload 2.0 events.
type HandlerFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// TokenPrefix starts the development bearer token: "Bearer dev:<tenant>",
// the one `sam local start-api`'s development authorizer takes too.
const TokenPrefix = devauth.TokenPrefix

// DevSub is the sub claim of tenant's development token: a user of the
// tenant's, "dev:<tenant>".
func DevSub(tenant string) string { return "dev:" + tenant }

// MaxBodyBytes is API Gateway's payload limit (10 MB).
const MaxBodyBytes = 10 << 20

// Defaults of the options.
const (
	DefaultTenantClaim = "tenant_id"
	DefaultTimeout     = 30 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// TenantClaim names the JWT claim the dev token's tenant is put under:
	// the charge function's TENANT_CLAIM. Default DefaultTenantClaim.
	TenantClaim string
	// Timeout is the function timeout: each invocation's context has this
	// deadline, as a Lambda invocation's has. Default DefaultTimeout.
	Timeout time.Duration
	// Logger receives one access-log record per request. Default: discard.
	Logger *slog.Logger
	// Public lists the route keys served without the JWT authorizer (a
	// webhook, authenticated by its own signature): their events carry no
	// authorizer context.
	Public []string
}

// WithTenantClaim names the JWT claim the dev token's tenant is put under.
func WithTenantClaim(name string) func(*Options) {
	return func(o *Options) { o.TenantClaim = name }
}

// WithTimeout sets the function timeout.
func WithTimeout(d time.Duration) func(*Options) {
	return func(o *Options) { o.Timeout = d }
}

// WithLogger makes the gateway write one access-log record per request
// (nil keeps the default).
func WithLogger(l *slog.Logger) func(*Options) {
	return func(o *Options) {
		if l != nil {
			o.Logger = l
		}
	}
}

// WithPublicRoutes serves the given route keys without the JWT authorizer.
func WithPublicRoutes(keys ...string) func(*Options) {
	return func(o *Options) { o.Public = append(o.Public, keys...) }
}

// Gateway is the local API. It is safe for concurrent use.
type Gateway struct {
	handler HandlerFunc
	routes  []route
	public  []string
	claim   string
	timeout time.Duration
	log     *slog.Logger
}

// route is one route key, "METHOD /path/{param}", split into segments.
type route struct {
	key      string
	method   string
	segments []string // a "{name}" segment matches any one non-empty segment
	params   int
}

// New returns a Gateway that invokes h for the given route keys, such as
// "POST /charges" and "GET /charges/{id}".
func New(h HandlerFunc, routeKeys []string, optFns ...func(*Options)) (*Gateway, error) {
	if h == nil {
		return nil, errors.New("gateway: nil handler")
	}
	o := Options{TenantClaim: DefaultTenantClaim, Timeout: DefaultTimeout, Logger: slog.New(slog.DiscardHandler)}
	for _, fn := range optFns {
		fn(&o)
	}
	g := &Gateway{handler: h, public: o.Public, claim: o.TenantClaim, timeout: o.Timeout, log: o.Logger}
	if g.claim == "" || g.timeout <= 0 {
		return nil, errors.New("gateway: the tenant claim must be named and the timeout positive")
	}
	for _, key := range routeKeys {
		r, err := parseRoute(key)
		if err != nil {
			return nil, err
		}
		g.routes = append(g.routes, r)
	}
	// Like API Gateway, prefer the most specific route: fewest parameters.
	slices.SortStableFunc(g.routes, func(a, b route) int { return a.params - b.params })
	return g, nil
}

func parseRoute(key string) (route, error) {
	method, path, ok := strings.Cut(key, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/") {
		return route{}, fmt.Errorf("gateway: route key %q is not \"METHOD /path\"", key)
	}
	r := route{key: key, method: method, segments: strings.Split(path[1:], "/")}
	for _, s := range r.segments {
		if strings.HasPrefix(s, "{") != strings.HasSuffix(s, "}") || s == "{}" {
			return route{}, fmt.Errorf("gateway: route key %q: bad segment %q", key, s)
		}
		if strings.HasPrefix(s, "{") {
			r.params++
		}
	}
	return r, nil
}

// match returns the route for method and escaped path, with its path
// parameters unescaped.
func (g *Gateway) match(method, escapedPath string) (route, map[string]string, bool) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
next:
	for _, r := range g.routes {
		if r.method != method || len(r.segments) != len(segs) {
			continue
		}
		var params map[string]string
		for i, s := range r.segments {
			name, isParam := strings.CutPrefix(s, "{")
			if !isParam {
				if s != segs[i] {
					continue next
				}
				continue
			}
			v, err := url.PathUnescape(segs[i])
			if segs[i] == "" || err != nil {
				continue next
			}
			if params == nil {
				params = map[string]string{}
			}
			params[strings.TrimSuffix(name, "}")] = v
		}
		return r, params, true
	}
	return route{}, nil, false
}

// ServeHTTP answers one request the way the deployed API would.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	requestID := apiRequestID()
	w.Header().Set("Apigw-Requestid", requestID)
	status, routeKey := g.serve(w, r, requestID, start)
	g.log.LogAttrs(r.Context(), slog.LevelInfo, "gateway",
		slog.String("request_id", requestID), slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("route", routeKey), slog.Int("status", status),
		slog.Int64("latency_ms", time.Since(start).Milliseconds()))
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, requestID string, start time.Time) (int, string) {
	rt, params, ok := g.match(r.Method, r.URL.EscapedPath())
	if !ok {
		return message(w, http.StatusNotFound, "Not Found"), ""
	}
	public := slices.Contains(g.public, rt.key)
	tenant, ok := devauth.Tenant(r.Header.Get("Authorization"))
	if !ok && !public {
		w.Header().Set("Www-Authenticate", "Bearer")
		return message(w, http.StatusUnauthorized, "Unauthorized"), rt.key
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return message(w, http.StatusBadRequest, "Bad Request"), rt.key
	}
	if len(body) > MaxBodyBytes {
		return message(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large"), rt.key
	}
	req := g.event(r, rt.key, params, tenant, body, requestID, start)
	if public {
		req.RequestContext.Authorizer = nil
	}
	res, err := g.invoke(r.Context(), req)
	if err != nil {
		g.log.LogAttrs(r.Context(), slog.LevelError, "invocation failed",
			slog.String("request_id", requestID), slog.String("error", err.Error()))
		return message(w, http.StatusInternalServerError, "Internal Server Error"), rt.key
	}
	return writeResponse(w, res), rt.key
}

// event builds the payload 2.0 event for r.
func (g *Gateway) event(r *http.Request, routeKey string, params map[string]string, tenant string, body []byte, requestID string, start time.Time) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	var cookies []string
	for name, values := range r.Header {
		name = strings.ToLower(name)
		if name == "cookie" {
			for _, v := range values {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		headers[name] = strings.Join(values, ",")
	}
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	headers["host"] = r.Host
	headers["x-forwarded-for"] = sourceIP
	headers["x-forwarded-proto"] = "http"
	var query map[string]string
	for name, values := range r.URL.Query() {
		if query == nil {
			query = map[string]string{}
		}
		query[name] = strings.Join(values, ",")
	}
	req := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              routeKey,
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     routeKey,
			AccountID:    "000000000000",
			Stage:        "$default",
			RequestID:    requestID,
			APIID:        "local",
			DomainName:   r.Host,
			DomainPrefix: strings.Split(r.Host, ".")[0],
			Time:         start.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    start.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: r.URL.Path, Protocol: r.Proto, SourceIP: sourceIP, UserAgent: r.UserAgent(),
			},
			// A JWT authorizer passes the token's claims: the tenant's, and
			// a sub, which the audit trail keeps as who asked.
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{g.claim: tenant, "sub": DevSub(tenant)}},
			},
		},
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			req.Body = string(body)
		} else {
			req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return req
}

// invoke runs the handler as a Lambda invocation: with the function
// timeout as its deadline, a Lambda context, and a panic or an overrun
// reported as a failed invocation.
func (g *Gateway) invoke(ctx context.Context, req events.APIGatewayV2HTTPRequest) (res events.APIGatewayV2HTTPResponse, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString()})
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("gateway: handler panicked: %v", p)
		}
	}()
	res, err = g.handler(ctx, req)
	switch {
	case err != nil:
		return res, fmt.Errorf("gateway: handler: %w", err)
	case ctx.Err() != nil:
		return res, fmt.Errorf("gateway: task timed out after %s", g.timeout)
	case res.StatusCode < 100 || res.StatusCode > 599:
		return res, fmt.Errorf("gateway: handler answered status %d", res.StatusCode)
	}
	return res, nil
}

// writeResponse writes the handler's response and returns its status. A
// body that claims to be base64 and is not answers 500.
func writeResponse(w http.ResponseWriter, res events.APIGatewayV2HTTPResponse) int {
	body := []byte(res.Body)
	if res.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(res.Body); err != nil {
			return message(w, http.StatusInternalServerError, "Internal Server Error")
		}
	}
	h := w.Header()
	for name, values := range res.MultiValueHeaders {
		for _, v := range values {
			h.Add(name, v)
		}
	}
	for name, v := range res.Headers {
		h.Set(name, v)
	}
	for _, c := range res.Cookies {
		h.Add("Set-Cookie", c)
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(body)
	return res.StatusCode
}

// message answers as API Gateway does for its own errors.
func message(w http.ResponseWriter, status int, text string) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "{\"message\":%q}", text)
	return status
}

// apiRequestID looks like API Gateway's request ids.
func apiRequestID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}
