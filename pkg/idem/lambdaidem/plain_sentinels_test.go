package lambdaidem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// plainBegin is a custom Backend as backend.go allows one ("Return the
// sentinels of this package, wrapped or not, or its typed errors:
// callers test them with errors.Is alone"): its Begin gives ErrMismatch
// and ErrInFlight as plain sentinels, as pkg/idem's own
// plain_conformance_test wrapper does (and passes the suite).
type plainBegin struct{ idem.Backend }

func (p plainBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	b, err := p.Backend.Begin(ctx, key, fp, intent)
	for _, s := range []error{idem.ErrMismatch, idem.ErrInFlight} {
		if errors.Is(err, s) {
			return b, fmt.Errorf("plain store: %w", s)
		}
	}
	return b, err
}

// TestHTTPPlainSentinels: a key reused with another request is
// 422 idempotency-key-reused, and a key in flight 409 request-in-progress,
// whichever conforming Backend says so.
func TestHTTPPlainSentinels(t *testing.T) {
	t.Parallel()
	store := plainBegin{memstore.New()}
	handler := lambdaidem.HTTP(store, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		if req.Body == `{"item":"timeout"}` {
			return idem.Unknown(idem.Response{}), nil
		}
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{}`)}), nil
	})
	ctx := t.Context()
	key := idemtest.UniqueKey(t, "x").ClientKey()
	if first, err := handler(ctx, httpRequest("acme", key, `{"item":"book"}`)); err != nil || first.StatusCode != 201 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	reused, _ := handler(ctx, httpRequest("acme", key, `{"item":"pen"}`))
	if reused.StatusCode != 422 {
		t.Errorf("key reused with another request through a plain-sentinel Backend: %d %s; want 422 idempotency-key-reused", reused.StatusCode, reused.Body)
	}
	_, _ = handler(ctx, httpRequest("acme", key+"-t", `{"item":"timeout"}`))
	pending, _ := handler(ctx, httpRequest("acme", key+"-t", `{"item":"timeout"}`))
	if pending.StatusCode != 409 {
		t.Errorf("key in flight through a plain-sentinel Backend: %d %s; want 409 request-in-progress", pending.StatusCode, pending.Body)
	}
}

// unknownBegin is a conforming Backend whose claim landed but whose answer
// was lost: it writes the record, then says ErrUnknownClaim, plain (as the
// suite's plain-sentinel wrapper would give it).
type unknownBegin struct{ idem.Backend }

func (u unknownBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if _, err := u.Backend.Begin(ctx, key, fp, intent); err != nil {
		return idem.Begun{}, err
	}
	return idem.Begun{}, fmt.Errorf("plain store: %w", idem.ErrUnknownClaim)
}

// TestHTTPPlainUnknownClaim: backend.go, "An error wrapping
// ErrUnavailable proves that no record was written: only then may a
// caller answer 'nothing was done'". A claim that landed, reported as
// ErrUnknownClaim, must not be answered "Service temporarily unavailable;
// nothing was done".
func TestHTTPPlainUnknownClaim(t *testing.T) {
	t.Parallel()
	handler := lambdaidem.HTTP(unknownBegin{memstore.New()}, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{}`)}), nil
	})
	resp, _ := handler(t.Context(), httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{"item":"book"}`))
	if resp.StatusCode == 503 && strings.Contains(resp.Body, "nothing was done") {
		t.Fatalf("a claim that landed (ErrUnknownClaim): %d %s", resp.StatusCode, resp.Body)
	}
}
