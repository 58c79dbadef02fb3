package charge_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// switchedThrottle throttles every PutItem once on is set.
type switchedThrottle struct{ on *atomic.Bool }

func (s switchedThrottle) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.on.Load() {
		return throttle{}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestThrottledRetryOfChargedKeyClaimsNothing: the first
// request charges the card (201). Its retry, same key and body, has its
// claim throttled: the service answers 503 service-unavailable "Nothing
// was charged" although the customer's intent under that key was charged.
func TestThrottledRetryOfChargedKeyClaimsNothing(t *testing.T) {
	t.Parallel()
	on := &atomic.Bool{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: switchedThrottle{on}}
			o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
		})
	}})
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusCreated)
	on.Store(true)
	retry := h.do(post("acme", key, visa))
	on.Store(false)
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("charges %d, want 1", charges)
	}
	if strings.Contains(strings.ToLower(retry.Body), "nothing was charged") {
		t.Fatalf("retry of a key already charged answered %d %s: says nothing was charged", retry.StatusCode, retry.Body)
	}
}

// TestThrottledRetryOfPendingKeyClaimsNothing: the first
// request's provider call does not answer in time: 503 outcome-pending,
// the record IN_FLIGHT, the charge possibly made (the provider's answer is
// what is lost). The retry's claim is throttled: it is told "Nothing was
// charged", which nothing proves.
func TestThrottledRetryOfPendingKeyClaimsNothing(t *testing.T) {
	t.Parallel()
	on := &atomic.Bool{}
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.CommitReserve = 500 * time.Millisecond }},
		sim:  []func(*providersim.Options){providersim.WithSlowDelay(3 * time.Second)},
		deps: func(d *app.Deps) {
			d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
				o.HTTPClient = &http.Client{Transport: switchedThrottle{on}}
				o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
			})
		},
	})
	key := newKey()
	body := strings.Replace(visa, "tok_visa", providersim.SourceSlow, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	first, err := h.handler.Handle(ctx, post("acme", key, body))
	if err != nil || problemType(t, first) != "outcome-pending" {
		t.Fatalf("first: %d %s, %v; want outcome-pending", first.StatusCode, first.Body, err)
	}
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("provider charges %d, want 1 (tok_slow charges, then answers late)", charges)
	}
	on.Store(true)
	again := h.do(post("acme", key, body))
	on.Store(false)
	if strings.Contains(strings.ToLower(again.Body), "nothing was charged") {
		t.Fatalf("retry of a key whose charge may have gone through answered %d %s: says nothing was charged", again.StatusCode, again.Body)
	}
}
