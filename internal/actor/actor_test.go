package actor_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/actor"
)

func httpRequest(auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) events.APIGatewayV2HTTPRequest {
	var req events.APIGatewayV2HTTPRequest
	req.RequestContext.HTTP.SourceIP, req.RequestContext.HTTP.UserAgent = "203.0.113.7", "curl/8.5.0"
	req.RequestContext.Authorizer = auth
	return req
}

func TestFromHTTPReadsWhatTheAuthorizerVouchedFor(t *testing.T) {
	t.Parallel()
	jwt := func(claims map[string]string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
	}
	tests := map[string]struct {
		auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want actor.Actor
	}{
		"jwt with client_id": {jwt(map[string]string{"sub": "u-1", "client_id": "app-1", "azp": "other"}), actor.Actor{Sub: "u-1", Client: "app-1"}},
		"jwt with azp":       {jwt(map[string]string{"sub": "u-1", "azp": "app-2"}), actor.Actor{Sub: "u-1", Client: "app-2"}},
		"lambda authorizer": {&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			Lambda: map[string]any{"sub": "u-2", "client_id": "app-3", "tenant_id": "acme"},
		}, actor.Actor{Sub: "u-2", Client: "app-3"}},
		"lambda authorizer, not strings": {&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"sub": 7}}, actor.Actor{}},
		"no authorizer":                  {nil, actor.Actor{}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want := tt.want
			want.IP, want.Agent = "203.0.113.7", "curl/8.5.0"
			if got := actor.FromHTTP(httpRequest(tt.auth)); got != want {
				t.Errorf("FromHTTP = %+v, want %+v", got, want)
			}
		})
	}
}

func TestFromSQSNamesTheSenderAndTheMessage(t *testing.T) {
	t.Parallel()
	m := events.SQSMessage{MessageId: "m-1", Attributes: map[string]string{"SenderId": "AROAEXAMPLE:renewals"}}
	if got := actor.FromSQS(m); got != (actor.Actor{IAM: "AROAEXAMPLE:renewals", Message: "m-1"}) {
		t.Errorf("FromSQS = %+v", got)
	}
}

// TestAnActorStaysSmall: a user agent of kilobytes is cut to MaxField
// bytes of whole runes, in the context and in the stored form.
func TestAnActorStaysSmall(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", actor.MaxField) // two bytes a rune
	ctx := actor.NewContext(t.Context(), actor.Actor{Sub: "u", Agent: "x" + long})
	a, ok := actor.FromContext(ctx)
	if !ok || len(a.Agent) > actor.MaxField || !utf8.ValidString(a.Agent) || !strings.HasPrefix(a.Agent, "xé") {
		t.Fatalf("agent %q (%d bytes), want at most %d bytes of whole runes", a.Agent, len(a.Agent), actor.MaxField)
	}
	if back := actor.Parse(actor.Actor{Agent: "x" + long}.JSON()); back != (actor.Actor{Agent: a.Agent}) {
		t.Errorf("stored form read back as %+v", back)
	}
}

func TestTheStoredFormReadsBack(t *testing.T) {
	t.Parallel()
	a := actor.Actor{Sub: "u", Client: "c", IAM: "i", Provider: "stripe", IP: "::1", Agent: "ua", Message: "m", Event: "evt_1"}
	if got := actor.Parse(a.JSON()); got != a {
		t.Errorf("Parse(JSON) = %+v, want %+v", got, a)
	}
	if (actor.Actor{}).JSON() != nil || !actor.Parse([]byte("not json")).IsZero() {
		t.Error("the zero Actor is stored as something, or junk reads as someone")
	}
	if _, ok := actor.FromContext(t.Context()); ok {
		t.Error("an empty context carries an actor")
	}
}
