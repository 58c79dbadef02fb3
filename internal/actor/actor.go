package actor

import (
	"context"
	"encoding/json"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Actor is who asked for a command and from where. Every field is
// optional; each is cut to MaxField bytes, so a record stays small.
type Actor struct {
	// Sub and Client are what the authorizer vouched for: the JWT's sub
	// and client id (client_id, or azp). Or a Lambda authorizer's.
	Sub    string `json:"sub,omitempty"`
	Client string `json:"client,omitempty"`
	// IAM is an AWS principal: the sender of a queue's message.
	IAM string `json:"iam,omitempty"`
	// Provider is the payment provider whose signed event this is.
	Provider string `json:"prov,omitempty"`
	// IP and Agent are the HTTP request's source address and user agent.
	IP    string `json:"ip,omitempty"`
	Agent string `json:"ua,omitempty"`
	// Message is the queue message's id; Event the provider's event id.
	Message string `json:"msg,omitempty"`
	Event   string `json:"evt,omitempty"`
}

// MaxField is the most bytes an Actor keeps of one field. A user agent
// can run to kilobytes; 128 bytes keep its product and version.
const MaxField = 128

// IsZero reports whether a names no one and nowhere.
func (a Actor) IsZero() bool { return a == Actor{} }

// clipped is a with every field cut to MaxField bytes, whole runes only.
func (a Actor) clipped() Actor {
	for _, f := range []*string{&a.Sub, &a.Client, &a.IAM, &a.Provider, &a.IP, &a.Agent, &a.Message, &a.Event} {
		*f = clip(*f)
	}
	return a
}

func clip(s string) string {
	if len(s) <= MaxField {
		return s
	}
	s = s[:MaxField]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// JSON is a's compact JSON form, as a record keeps it; nil for the zero
// Actor.
func (a Actor) JSON() []byte {
	if a.IsZero() {
		return nil
	}
	b, _ := json.Marshal(a.clipped()) // strings always marshal
	return b
}

// Parse reads the form JSON writes. Anything else is the zero Actor.
func Parse(b []byte) Actor {
	var a Actor
	if json.Unmarshal(b, &a) != nil {
		return Actor{}
	}
	return a.clipped()
}

// key holds an Actor in a context.
type key struct{}

// NewContext returns ctx carrying a, cut to MaxField bytes a field.
func NewContext(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, key{}, a.clipped())
}

// FromContext returns the Actor ctx carries, if any.
func FromContext(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(key{}).(Actor)
	return a, ok
}

// FromHTTP is the caller of an API Gateway HTTP API request. It takes the
// JWT authorizer's sub and client id claims, or a Lambda authorizer's
// context members of those names. It takes the source IP and user agent.
func FromHTTP(req events.APIGatewayV2HTTPRequest) Actor {
	a := Actor{IP: req.RequestContext.HTTP.SourceIP, Agent: req.RequestContext.HTTP.UserAgent}
	auth := req.RequestContext.Authorizer
	switch {
	case auth == nil:
	case auth.JWT != nil:
		c := auth.JWT.Claims
		a.Sub, a.Client = c["sub"], first(c["client_id"], c["azp"])
	case auth.Lambda != nil:
		sub, _ := auth.Lambda["sub"].(string)
		client, _ := auth.Lambda["client_id"].(string)
		a.Sub, a.Client = sub, client
	}
	return a
}

// FromSQS is the sender of a queue's message: the IAM principal SQS names
// (its SenderId attribute) and the message's id.
func FromSQS(m events.SQSMessage) Actor {
	return Actor{IAM: m.Attributes["SenderId"], Message: m.MessageId}
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
