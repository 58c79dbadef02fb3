package charge_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// The contract's rules on the in-memory store (memstore, which the
// conformance suite holds to the DynamoDB store) and the provider
// simulator: no DynamoDB, no Python, so `make check` runs them.

type rules struct {
	t     *testing.T
	h     *httpapi.Handler
	sim   *providersim.Simulator
	store *memstore.Store
}

func newRules(t *testing.T) *rules {
	t.Helper()
	r := &rules{t: t, sim: providersim.New(), store: memstore.New()}
	// The charges table's key, as template.yaml declares it: memstore
	// checks the rows' condition (attribute_not_exists(id)) only on a
	// table whose key it knows.
	r.store.DeclareKey("charges", charge.AttrTenant, charge.AttrID)
	srv := httptest.NewServer(r.sim)
	t.Cleanup(srv.Close)
	// The charges table is written through the record's commit (memstore
	// keeps the writes) and read only by GET /charges/{id}, which these
	// tests do not send: a client that reaches no endpoint will do.
	rows, err := charge.NewRows(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "charges")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Config{Store: r.store, Rows: rows, Provider: provider.NewClient(srv.URL, ""), Answers: httpapi.Answers{}})
	if err != nil {
		t.Fatal(err)
	}
	if r.h, err = httpapi.NewHandler(svc); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rules) do(key, body string) events.APIGatewayV2HTTPResponse {
	r.t.Helper()
	resp, err := r.h.Handle(context.Background(), post("acme", key, body))
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// charges counts the references the provider charged, and the charge rows
// committed with records.
func (r *rules) charges() (charged, rows int) {
	for _, e := range r.sim.Ledger().References {
		if e.Status == provider.StatusCharged {
			charged++
		}
	}
	return charged, len(r.store.Writes())
}

func (r *rules) wantCharges(n int) {
	r.t.Helper()
	if charged, rows := r.charges(); charged != n || rows != n {
		r.t.Fatalf("%d references charged and %d charge rows, want %d", charged, rows, n)
	}
}

func TestRulesTwiceWithOneKeyIsOneChargeAndTheSameAnswer(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	first := r.do("order-1", visa)
	again := r.do("order-1", visa)
	if first.StatusCode != http.StatusCreated || again.StatusCode != http.StatusCreated || again.Body != first.Body ||
		again.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("first %d %s, again %d %s (replayed=%s)", first.StatusCode, first.Body, again.StatusCode, again.Body, again.Headers[httpapi.HeaderReplayed])
	}
	r.wantCharges(1)
}

func TestRulesConcurrentRequestsAreOneCharge(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			r.do("order-1", visa)
		})
	}
	close(start)
	wg.Wait()
	r.wantCharges(1)
}

func TestRulesTwoKeysWithOneBodyAreTwoCharges(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	a, b := r.do("order-1", visa), r.do("order-2", visa)
	if a.StatusCode != http.StatusCreated || b.StatusCode != http.StatusCreated || a.Body == b.Body {
		t.Fatalf("two keys: %d %s and %d %s, want two different 201s", a.StatusCode, a.Body, b.StatusCode, b.Body)
	}
	r.wantCharges(2)
}

func TestRulesOneKeyWithAnotherBodyIsRefused(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	first := r.do("order-1", visa)
	other := r.do("order-1", strings.Replace(visa, "1500", "1501", 1))
	if other.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(other.Body, httpapi.ProblemKeyReused.Slug) {
		t.Fatalf("another body under the key: %d %s, want 422", other.StatusCode, other.Body)
	}
	if again := r.do("order-1", visa); again.Body != first.Body {
		t.Fatalf("the first answer changed: %s, was %s", again.Body, first.Body)
	}
	r.wantCharges(1)
}

func TestRulesAnUnavailableProviderReleasesTheKey(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	body := strings.Replace(visa, "tok_visa", providersim.SourceUnavailableOnce, 1)
	if got := r.do("order-1", body); got.StatusCode != http.StatusServiceUnavailable || got.Headers[httpapi.HeaderIdempotencyExpires] == "" {
		t.Fatalf("provider unavailable: %d %v %s, want 503 with Idempotency-Expires", got.StatusCode, got.Headers, got.Body)
	}
	r.wantCharges(0)
	if got := r.do("order-1", strings.Replace(body, "1500", "1501", 1)); got.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body under a released key: %d, want 422", got.StatusCode)
	}
	if got := r.do("order-1", body); got.StatusCode != http.StatusCreated {
		t.Fatalf("the retry: %d %s, want 201", got.StatusCode, got.Body)
	}
	r.wantCharges(1)
}

func TestRulesADeclineIsStored(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	body := strings.Replace(visa, "tok_visa", providersim.SourceDecline, 1)
	first, again := r.do("order-1", body), r.do("order-1", body)
	if first.StatusCode != http.StatusPaymentRequired || again.Body != first.Body || again.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("decline: %d %s, then %d %s", first.StatusCode, first.Body, again.StatusCode, again.Body)
	}
	if calls := r.sim.Ledger().TotalCalls; calls != 1 {
		t.Fatalf("the provider was asked %d times, want once", calls)
	}
}
