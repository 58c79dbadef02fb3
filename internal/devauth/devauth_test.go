package devauth_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/devauth"
)

func request(headers map[string]string) events.APIGatewayV2CustomAuthorizerV2Request {
	return events.APIGatewayV2CustomAuthorizerV2Request{Type: "REQUEST", RouteKey: "POST /charges", Headers: headers}
}

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// TestRefusesOutsideSAM is the guarantee that makes a deployed copy
// harmless: without AWS_SAM_LOCAL=true, as in Lambda, every request is
// refused, a valid development token included, and the refusal is logged.
func TestRefusesOutsideSAM(t *testing.T) {
	t.Parallel()
	for name, vars := range map[string]map[string]string{
		"unset":     {},
		"empty":     {devauth.EnvSAMLocal: ""},
		"not true":  {devauth.EnvSAMLocal: "1"},
		"uppercase": {devauth.EnvSAMLocal: "TRUE"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			a := devauth.New(devauth.Load(env(vars)), slog.New(slog.NewJSONHandler(&logs, nil)))
			for _, h := range []map[string]string{{"authorization": "Bearer dev:acme"}, {"Authorization": "Bearer dev:acme"}, {}} {
				res, err := a.Handle(t.Context(), request(h))
				if err != nil || res.IsAuthorized || res.Context != nil {
					t.Errorf("headers %v: %+v %v, want refused with no context", h, res, err)
				}
			}
			if !strings.Contains(logs.String(), "every request is refused") {
				t.Errorf("no start-up error logged: %s", logs.String())
			}
		})
	}
}

func TestUnderSAM(t *testing.T) {
	t.Parallel()
	local := map[string]string{devauth.EnvSAMLocal: "true"}
	a := devauth.New(devauth.Load(env(local)), nil)
	for _, h := range []map[string]string{{"authorization": "Bearer dev:acme"}, {"Authorization": "bearer  dev:acme"}} {
		res, err := a.Handle(t.Context(), request(h))
		if err != nil || !res.IsAuthorized || res.Context[devauth.DefaultTenantClaim] != "acme" || len(res.Context) != 1 {
			t.Errorf("headers %v: %+v %v, want authorized with tenant_id acme", h, res, err)
		}
	}
	for _, auth := range []string{"", "Bearer", "Bearer dev:", "Bearer acme", "Basic dev:acme", "Bearer dev:ac#me", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln"} {
		res, err := a.Handle(t.Context(), request(map[string]string{"authorization": auth}))
		if err != nil || res.IsAuthorized || res.Context != nil {
			t.Errorf("Authorization %q: %+v %v, want refused", auth, res, err)
		}
	}

	local[devauth.EnvTenantClaim] = "org"
	res, err := devauth.New(devauth.Load(env(local)), nil).Handle(t.Context(), request(map[string]string{"authorization": "Bearer dev:acme"}))
	if err != nil || !res.IsAuthorized || res.Context["org"] != "acme" {
		t.Errorf("TENANT_CLAIM=org: %+v %v, want the tenant under org", res, err)
	}
}
