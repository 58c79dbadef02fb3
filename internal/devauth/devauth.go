// Package devauth is the HTTP API's development Lambda (REQUEST)
// authorizer, for `sam local start-api`, which does not emulate JWT
// authorizers. It accepts "Authorization: Bearer dev:<tenant>", the token
// `make run`'s local gateway takes, and returns the tenant in its context
// under TENANT_CLAIM, where the charge function reads it.
//
// The template deploys it only with ApiAuthorizer=sam-local-dev, and even
// then it refuses every request unless AWS_SAM_LOCAL is "true": SAM CLI
// sets that variable in the containers it runs, Lambda never does and the
// template may not (test/deploy checks), so a deployed copy lets no one in.
package devauth

import (
	"context"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TokenPrefix starts the development bearer token: "Bearer dev:<tenant>".
const TokenPrefix = "dev:"

// Environment variables the authorizer reads.
const (
	// EnvSAMLocal is set to "true" by SAM CLI in its local containers.
	EnvSAMLocal = "AWS_SAM_LOCAL"
	// EnvTenantClaim names the context member the tenant goes in: the
	// charge function's TENANT_CLAIM.
	EnvTenantClaim = "TENANT_CLAIM"
)

// DefaultTenantClaim is the context member of the tenant unless
// TENANT_CLAIM names another; the charge function's default.
const DefaultTenantClaim = "tenant_id"

// Config is the authorizer's configuration.
type Config struct {
	TenantClaim string
	// SAMLocal: the authorizer runs under SAM CLI, the only place it
	// lets anyone in.
	SAMLocal bool
}

// Load reads the configuration from the environment.
func Load(getenv func(string) string) Config {
	c := Config{TenantClaim: getenv(EnvTenantClaim), SAMLocal: getenv(EnvSAMLocal) == "true"}
	if c.TenantClaim == "" {
		c.TenantClaim = DefaultTenantClaim
	}
	return c
}

// Authorizer answers API Gateway's authorization requests (payload 2.0,
// simple responses).
type Authorizer struct {
	cfg    Config
	logger *slog.Logger
}

// New returns an authorizer; logger receives one line per refusal.
func New(cfg Config, logger *slog.Logger) *Authorizer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !cfg.SAMLocal {
		logger.Error("devauth: not under sam local (" + EnvSAMLocal + " is not \"true\"): every request is refused")
	}
	return &Authorizer{cfg: cfg, logger: logger}
}

// Handle authorizes one request.
func (a *Authorizer) Handle(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
	if !a.cfg.SAMLocal {
		a.logger.WarnContext(ctx, "refused", "reason", "not under sam local", "route", req.RouteKey)
		return events.APIGatewayV2CustomAuthorizerSimpleResponse{}, nil
	}
	tenant, ok := Tenant(header(req.Headers, "authorization"))
	if !ok || idem.CheckTenant(tenant) != nil {
		a.logger.InfoContext(ctx, "refused", "reason", "no Bearer "+TokenPrefix+"<tenant> token", "route", req.RouteKey)
		return events.APIGatewayV2CustomAuthorizerSimpleResponse{}, nil
	}
	return events.APIGatewayV2CustomAuthorizerSimpleResponse{
		IsAuthorized: true,
		Context:      map[string]any{a.cfg.TenantClaim: tenant},
	}, nil
}

// Tenant reads the tenant from "Bearer dev:<tenant>".
func Tenant(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tenant, ok := strings.CutPrefix(strings.TrimSpace(token), TokenPrefix)
	return tenant, ok && tenant != ""
}

// header looks name up in headers whatever their case: API Gateway
// lower-cases them, SAM CLI passes them as the client sent them.
func header(headers map[string]string, name string) string {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
