package lambdaidem

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Request is what the API options read of a request. It is the same for an
// HTTP API and a REST API, so one key, tenant or fingerprint function
// serves both. HTTP and REST give the event itself, for anything else.
type Request struct {
	// Route is the route the request matched, never its path. For an HTTP
	// API it is the route key ("POST /orders/{id}"). For a REST API it is
	// the method and resource.
	Route string
	// Body is the request's body, decoded from base64 when it was sent so.
	Body       []byte
	Authorizer Authorizer

	http *events.APIGatewayV2HTTPRequest
	rest *events.APIGatewayProxyRequest
}

// Authorizer is what API Gateway's authorizer said of the caller.
type Authorizer struct {
	// JWTClaims are an HTTP API JWT authorizer's claims, or a REST API
	// Cognito user pool authorizer's.
	JWTClaims map[string]string
	// Lambda is an HTTP API Lambda authorizer's context, or a REST API
	// Lambda authorizer's principalId and context.
	Lambda map[string]any
	// IAM is the caller of a request signed for IAM authorization, nil
	// for any other.
	IAM *IAMCaller
}

// IAMCaller is the AWS principal that signed a request.
type IAMCaller struct {
	AccountID string
	UserARN   string
	// UserID is the IAM user's or role's unique ID (AIDA…, AROA…). For a
	// role, ":" and the caller's session name follow.
	UserID string
}

// HTTP is the HTTP API event, nil for a REST API request.
func (r Request) HTTP() *events.APIGatewayV2HTTPRequest { return r.http }

// REST is the REST API event, nil for an HTTP API request.
func (r Request) REST() *events.APIGatewayProxyRequest { return r.rest }

// Header is the value of the header name, whatever its case. A REST API's
// comes from its single-value headers, or else a multi-value header with
// one value.
func (r Request) Header(name string) (string, bool) {
	switch {
	case r.http != nil:
		return lookup(r.http.Headers, name)
	case r.rest == nil:
		return "", false
	}
	if v, ok := lookup(r.rest.Headers, name); ok {
		return v, true
	}
	for k, vs := range r.rest.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(vs) == 1 {
			return vs[0], true
		}
	}
	return "", false
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

func httpRequest(req *events.APIGatewayV2HTTPRequest, body []byte) Request {
	r := Request{Route: req.RouteKey, Body: body, http: req}
	if a := req.RequestContext.Authorizer; a != nil {
		r.Authorizer.Lambda = a.Lambda
		if a.JWT != nil {
			r.Authorizer.JWTClaims = a.JWT.Claims
		}
		if a.IAM != nil {
			r.Authorizer.IAM = &IAMCaller{AccountID: a.IAM.AccountID, UserARN: a.IAM.UserARN, UserID: a.IAM.UserID}
		}
	}
	return r
}

func restRequest(req *events.APIGatewayProxyRequest, body []byte) Request {
	r := Request{Route: req.HTTPMethod + " " + req.Resource, Body: body, rest: req}
	r.Authorizer.Lambda = req.RequestContext.Authorizer
	if claims, ok := req.RequestContext.Authorizer["claims"].(map[string]any); ok {
		r.Authorizer.JWTClaims = make(map[string]string, len(claims))
		for k, v := range claims {
			if s, ok := v.(string); ok {
				r.Authorizer.JWTClaims[k] = s
			}
		}
	}
	if id := req.RequestContext.Identity; id.User != "" {
		r.Authorizer.IAM = &IAMCaller{AccountID: id.AccountID, UserARN: id.UserArn, UserID: id.User}
	}
	return r
}

// TenantFromJWTClaim reads the tenant from a claim of the JWT authorizer.
// For a REST API that is the Cognito user pool authorizer.
func TenantFromJWTClaim(claim string) func(Request) (string, bool) {
	return func(r Request) (string, bool) {
		t := r.Authorizer.JWTClaims[claim]
		return t, t != ""
	}
}

// TenantFromLambdaContext reads the tenant from a value of the Lambda
// authorizer's context. The value is a string or an integer. "principalId"
// names a REST API authorizer's principal.
func TenantFromLambdaContext(name string) func(Request) (string, bool) {
	return func(r Request) (string, bool) {
		switch v := r.Authorizer.Lambda[name].(type) {
		case string:
			return v, v != ""
		case float64: // how encoding/json decodes a number
			// From 2^53 on, a float64 holds no exact integer: 2^53+1 reads
			// as 2^53. Two tenants would read as one.
			if v == float64(int64(v)) && math.Abs(v) < 1<<53 {
				return strconv.FormatInt(int64(v), 10), true
			}
		}
		return "", false
	}
}

// TenantFromIAMPrincipal makes the IAM user or role that signed the
// request the tenant. It names it by its unique ID (AIDA…, AROA…), not its
// ARN. A role's caller is named by its session, which new credentials
// change. So by ARN a retry would be another tenant's first attempt. All
// callers of a role are one tenant. A federated user (account:name) is a
// tenant of its own.
func TenantFromIAMPrincipal() func(Request) (string, bool) {
	return func(r Request) (string, bool) {
		if r.Authorizer.IAM == nil {
			return "", false
		}
		id := r.Authorizer.IAM.UserID
		if role, _, ok := strings.Cut(id, ":"); ok && strings.HasPrefix(role, "AROA") {
			id = role // a role's session name, which new credentials change
		}
		return id, id != ""
	}
}

// TenantConstant puts every request in one tenant. It is for an API with a
// single tenant, or whose authorizer keeps each caller to its own keys.
func TenantConstant(tenant string) func(Request) (string, bool) {
	return func(Request) (string, bool) { return tenant, true }
}

// defaultTenant is the principal of the route's authorizer. That is a
// JWT's sub, an IAM caller, or a REST API Lambda authorizer's principalId.
func defaultTenant(r Request) (string, bool) {
	for _, tenant := range defaultTenants {
		if t, ok := tenant(r); ok {
			return t, true
		}
	}
	return "", false
}

var defaultTenants = [...]func(Request) (string, bool){
	TenantFromJWTClaim("sub"), TenantFromIAMPrincipal(), TenantFromLambdaContext("principalId"),
}

// FingerprintRequest is the default fingerprint. It covers the canonical
// JSON body and what the request acts on. That is the route, the method,
// the path parameters and the query string. So one key and one body sent
// to two orders, as PUT /orders/{id}, are two requests. The second is
// refused, not answered with the first. A $default route has no path
// parameters: its path counts instead. Members are put in a canonical
// order, so one request always gives one fingerprint.
func FingerprintRequest(r Request) (idem.Fingerprint, error) {
	if len(r.Body) == 0 {
		return targetOf(r).fingerprint(nil)
	}
	body, err := idem.CanonicalJSON(r.Body)
	if err != nil {
		return idem.Fingerprint{}, err
	}
	return targetOf(r).fingerprint(body)
}

// FingerprintBody fingerprints the canonical JSON body alone
// (idem.FingerprintJSON), or the empty body: for an API whose route says
// nothing the body does not. It was the default before v1.
func FingerprintBody(r Request) (idem.Fingerprint, error) {
	if len(r.Body) == 0 {
		return idem.FingerprintOf(nil), nil
	}
	return idem.FingerprintJSON(r.Body)
}

// FingerprintFields fingerprints only the named top-level members of a
// JSON object body. It covers what the request acts on, as
// FingerprintRequest does. Requests that differ elsewhere in the body,
// such as a timestamp, are the same request. A member missing is left out.
// A body that is not a JSON object is refused.
func FingerprintFields(fields ...string) func(Request) (idem.Fingerprint, error) {
	return func(r Request) (idem.Fingerprint, error) {
		subset, err := fieldsOf(r.Body, fields)
		if err != nil {
			return idem.Fingerprint{}, err
		}
		return targetOf(r).fingerprint(subset)
	}
}

// Intent is the request HTTP and REST store as the command's Intent, by
// default (IntentRequest), so that a Resolver can rebuild it. It holds
// what the request acts on and its body. It holds no header and no query
// string: they may carry credentials. A resolver reads it with
// json.Unmarshal(l.Intent, &in).
type Intent struct {
	// Route is the route the request matched, as Request.Route.
	Route  string `json:"route"`
	Method string `json:"method"`
	// Path is the path parameters, and RawPath the path as requested.
	Path    map[string]string `json:"path,omitempty"`
	RawPath string            `json:"rawPath,omitempty"`
	// Body is a JSON body in canonical form (idem.CanonicalJSON).
	Body json.RawMessage `json:"body,omitempty"`
	// RawBody is any other body, as sent: base64 in the stored JSON.
	RawBody []byte `json:"rawBody,omitempty"`
}

// IntentRequest is the default Options.Intent: the request as an Intent,
// in JSON. Headers and the query string are left out.
func IntentRequest(r Request) ([]byte, error) {
	in := Intent{Route: r.Route}
	switch {
	case r.http != nil:
		in.Method, in.Path, in.RawPath = r.http.RequestContext.HTTP.Method, r.http.PathParameters, r.http.RawPath
	case r.rest != nil:
		in.Method, in.Path, in.RawPath = r.rest.HTTPMethod, r.rest.PathParameters, r.rest.Path
	}
	if len(r.Body) > 0 {
		if body, err := idem.CanonicalJSON(r.Body); err == nil {
			in.Body = body
		} else {
			in.RawBody = r.Body
		}
	}
	return json.Marshal(in)
}

// target is what a request acts on, and its body, as the fingerprints
// cover them. Its JSON form is canonicalised before it is hashed.
type target struct {
	Route  string            `json:"route"`
	Method string            `json:"method"`
	Path   map[string]string `json:"path,omitempty"`
	// RawPath is a $default route's path, which has no parameters.
	RawPath string `json:"rawPath,omitempty"`
	// Query is the query string's parameters, decoded. So a retry whose
	// proxy re-encodes or reorders them is the same request.
	Query map[string][]string `json:"query,omitempty"`
	Body  json.RawMessage     `json:"body,omitempty"` // canonical; none for an empty body
}

func targetOf(r Request) target {
	t := target{Route: r.Route}
	switch {
	case r.http != nil:
		t.Method, t.Path = r.http.RequestContext.HTTP.Method, r.http.PathParameters
		if len(r.http.QueryStringParameters) > 0 {
			t.Query = make(map[string][]string, len(r.http.QueryStringParameters))
		}
		for k, v := range r.http.QueryStringParameters { // an HTTP API joins repeated values with commas
			t.Query[k] = []string{v}
		}
		if r.http.RouteKey == "$default" {
			t.RawPath = r.http.RawPath
		}
	case r.rest != nil:
		t.Method, t.Path, t.Query = r.rest.HTTPMethod, r.rest.PathParameters, r.rest.MultiValueQueryStringParameters
	}
	return t
}

// fingerprint is the fingerprint of t with the canonical body.
func (t target) fingerprint(body []byte) (idem.Fingerprint, error) {
	t.Body = body
	doc, _ := json.Marshal(t) // strings and a canonical body: cannot fail
	return idem.FingerprintJSON(doc)
}

// fieldsOf is the canonical JSON object of the named members of the JSON
// object doc. The whole document is canonicalised first. So it is refused
// as FingerprintJSON refuses it, as for a duplicate member among them.
func fieldsOf(doc []byte, fields []string) ([]byte, error) {
	c, err := idem.CanonicalJSON(doc)
	if err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if c[0] != '{' || json.Unmarshal(c, &all) != nil {
		return nil, fmt.Errorf("%w: not an object", idem.ErrInvalidJSON)
	}
	kept := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if v, ok := all[f]; ok {
			kept[f] = v
		}
	}
	subset, _ := json.Marshal(kept) // members of a canonical document: cannot fail
	return idem.CanonicalJSON(subset)
}
