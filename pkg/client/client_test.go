package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/client"
)

var eur1500 = client.Money{Amount: 1500, Currency: "EUR"}

// counting counts the requests it forwards.
type counting struct {
	n  atomic.Int32
	rt http.RoundTripper
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// losingFirst forwards the first request to the server and reads its
// answer in full, then reports a dropped connection instead of returning
// it: the server acted, the client never heard.
type losingFirst struct {
	mu   sync.Mutex
	lost []byte // the body of the answer that was lost
	done bool
	rt   http.RoundTripper
}

var errConnReset = errors.New("read: connection reset by peer")

func (l *losingFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	lose := !l.done
	l.done = true
	l.mu.Unlock()
	resp, err := l.rt.RoundTrip(r)
	if err != nil || !lose {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.lost = b
	l.mu.Unlock()
	return nil, errConnReset
}

// instant is an injected sleep that records the waits and does not wait.
type instant struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *instant) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newClient(t *testing.T, url string, rt http.RoundTripper, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{
		client.WithHTTPClient(&http.Client{Transport: rt}), client.WithToken("dev:acme"),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRetryAfterLostResponseReplays(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	lossy := &losingFirst{rt: http.DefaultTransport}
	sleep := &instant{}
	c := newClient(t, st.URL, lossy, client.WithSleep(sleep.sleep))

	id := client.NewCommandID()
	res, err := c.Create(context.Background(), id, eur1500, providersim.SourceVisa, client.WithDescription("Order 1"))
	if err != nil {
		t.Fatal(err)
	}
	var lost client.Charge
	if err := json.Unmarshal(lossy.lost, &lost); err != nil || lost.ID == "" {
		t.Fatalf("the lost answer was not a charge: %s (%v)", lossy.lost, err)
	}
	if res.Attempts != 2 || !res.Replayed || res.Charge.ID != lost.ID {
		t.Fatalf("result %+v, want attempt 2 to replay charge %s", res, lost.ID)
	}
	if res.Charge.Amount != 1500 || res.Charge.Currency != "EUR" || res.Charge.Description != "Order 1" || res.Charge.Status != "succeeded" {
		t.Errorf("charge %+v does not match the request", res.Charge)
	}
	if res.KeyExpiresAt.Before(time.Now().Add(23 * time.Hour)) {
		t.Errorf("KeyExpiresAt %v, want about 24h ahead", res.KeyExpiresAt)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}
	got, err := c.Get(context.Background(), res.Charge.ID)
	if err != nil || got.ID != res.Charge.ID || !got.CreatedAt.Equal(res.Charge.CreatedAt) {
		t.Fatalf("Get(%s) = %+v, %v", res.Charge.ID, got, err)
	}
}

func TestInProgressIsRetriedUntilReplay(t *testing.T) {
	t.Parallel()
	st := newStack(t, []func(*providersim.Options){providersim.WithSlowDelay(time.Second)},
		func(c *app.ChargeConfig) { c.InflightWait = 0 })
	// The injected sleep waits a little, not the Retry-After asked for,
	// and records what was asked.
	var mu sync.Mutex
	var waits []time.Duration
	var conflicts int
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	onRetry := func(_ int, _ time.Duration, err error) {
		if errors.Is(err, client.ErrInProgress) {
			mu.Lock()
			conflicts++
			mu.Unlock()
		}
	}
	cnt := &counting{rt: http.DefaultTransport}
	c := newClient(t, st.URL, cnt, client.WithSleep(sleep), client.WithOnRetry(onRetry), client.WithMaxAttempts(200))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	id := client.NewCommandID()
	type outcome struct {
		res client.Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := c.Create(ctx, id, eur1500, providersim.SourceSlow)
		first <- outcome{res, err}
	}()
	// Start the second request once the first one is at the provider.
	for st.Sim.Ledger().TotalCalls == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	second, err := c.Create(ctx, id, eur1500, providersim.SourceSlow)
	if err != nil {
		t.Fatal(err)
	}
	one := <-first
	if one.err != nil {
		t.Fatal(one.err)
	}
	if one.res.Replayed || !second.Replayed || second.Charge.ID != one.res.Charge.ID {
		t.Fatalf("first %+v, second %+v: want the second to replay the first's charge", one.res, second)
	}
	mu.Lock()
	defer mu.Unlock()
	if conflicts == 0 || second.Attempts < 2 {
		t.Fatalf("second took %d attempts with %d conflicts: want 409s retried", second.Attempts, conflicts)
	}
	if waits[0] < time.Second {
		t.Errorf("first wait %v, want at least the 1s Retry-After", waits[0])
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}
}

func TestReusedIDWithAnotherBody(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	cnt := &counting{rt: http.DefaultTransport}
	c := newClient(t, st.URL, cnt, client.WithSleep((&instant{}).sleep))
	ctx := context.Background()
	id := client.NewCommandID()
	if _, err := c.Create(ctx, id, eur1500, providersim.SourceVisa); err != nil {
		t.Fatal(err)
	}
	cnt.n.Store(0)
	_, err := c.Create(ctx, id, client.Money{Amount: 1600, Currency: "EUR"}, providersim.SourceVisa)
	var p *client.ProblemError
	if !errors.Is(err, client.ErrKeyReused) || !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity {
		t.Fatalf("err = %v, want ErrKeyReused as a 422 *ProblemError", err)
	}
	if n := cnt.n.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (a 422 is final)", n)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}
}

func TestDeclineIsFinal(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	cnt := &counting{rt: http.DefaultTransport}
	c := newClient(t, st.URL, cnt, client.WithSleep((&instant{}).sleep))
	ctx := context.Background()
	id := client.NewCommandID()
	for i := range 2 {
		cnt.n.Store(0)
		_, err := c.Create(ctx, id, eur1500, providersim.SourceDecline)
		var p *client.ProblemError
		if !errors.Is(err, client.ErrDeclined) || !errors.As(err, &p) || p.Status != http.StatusPaymentRequired {
			t.Fatalf("call %d: err = %v, want ErrDeclined as a 402 *ProblemError", i+1, err)
		}
		if n := cnt.n.Load(); n != 1 {
			t.Errorf("call %d: %d requests, want 1 (a decline is not retried)", i+1, n)
		}
	}
	if l := st.Sim.Ledger(); l.TotalCalls != 1 {
		t.Fatalf("provider saw %d calls, want 1 (the second call is a replay)", l.TotalCalls)
	}
}

func TestGetUnknownAndUnauthorized(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	c := newClient(t, st.URL, http.DefaultTransport)
	if _, err := c.Get(context.Background(), "ch_000000000000000000000000"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get unknown: %v, want ErrNotFound", err)
	}
	anon, err := client.New(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.Create(context.Background(), client.NewCommandID(), eur1500, providersim.SourceVisa)
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("Create without a token: %v, want ErrUnauthorized", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("401")) {
		t.Errorf("error %q does not say 401", err)
	}
}
