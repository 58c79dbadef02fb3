package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"
)

// fakeTime is an injected clock and sleep: sleeping advances the clock and
// records the wait, without waiting.
type fakeTime struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.waits = append(f.waits, d)
	return nil
}

func (f *fakeTime) options(rnd float64) []Option {
	return []Option{WithClock(f.clock), WithSleep(f.sleep), WithRand(func() float64 { return rnd })}
}

// scripted answers each request with the next of its replies (the last
// one repeats) and records what it was sent.
type scripted struct {
	mu      sync.Mutex
	replies []reply
	keys    []string
	bodies  []string
	paths   []string // method, path and query
	types   []string // Content-Type
}

type reply struct {
	status int
	header map[string]string
	body   string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, r.Header.Get(HeaderIdempotencyKey))
	s.bodies = append(s.bodies, string(b))
	s.paths = append(s.paths, r.Method+" "+r.URL.RequestURI())
	s.types = append(s.types, r.Header.Get("Content-Type"))
	rp := s.replies[min(n, len(s.replies)-1)]
	s.mu.Unlock()
	if rp.status == 0 {
		// The answer is lost: the connection drops after the request ran.
		panic(http.ErrAbortHandler)
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

func (s *scripted) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func problemReply(status int, slug string, header map[string]string) reply {
	h := map[string]string{"Content-Type": "application/problem+json"}
	for k, v := range header {
		h[k] = v
	}
	return reply{status, h, `{"type":"` + ProblemBase + slug + `","title":"t","status":0,"detail":"d"}`}
}

const chargeBody = `{"id":"ch_0123456789abcdef01234567","amount":1500,"currency":"EUR","status":"succeeded","provider_reference":"pr_1","created_at":"2025-01-02T03:04:05Z"}`

func created(replayed bool) reply {
	h := map[string]string{"Content-Type": "application/json", HeaderIdempotencyExpires: "Fri, 03 Jan 2025 03:04:05 GMT"}
	if replayed {
		h[HeaderReplayed] = "true"
	}
	return reply{http.StatusCreated, h, chargeBody}
}

func newScripted(t *testing.T, opts []Option, replies ...reply) (*Client, *scripted) {
	t.Helper()
	s := &scripted{replies: replies}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, append([]Option{WithHTTPClient(srv.Client()), WithToken("dev:acme")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

var eur1500 = Money{Amount: 1500, Currency: "EUR"}

func TestNewCommandID(t *testing.T) {
	t.Parallel()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[CommandID]bool{}
	for range 100 {
		id := NewCommandID()
		if !uuid.MatchString(string(id)) || id.Validate() != nil {
			t.Fatalf("NewCommandID() = %q, want a valid version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("NewCommandID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestCommandIDValidate(t *testing.T) {
	t.Parallel()
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	for name, tc := range map[string]struct {
		id    CommandID
		valid bool
	}{
		"uuid":      {NewCommandID(), true},
		"printable": {"order 42 ~!", true},
		"max":       {CommandID(long[:255]), true},
		"empty":     {"", false},
		"too long":  {CommandID(long), false},
		"control":   {"a\nb", false},
		"non-ascii": {"café", false},
	} {
		err := tc.id.Validate()
		if (err == nil) != tc.valid || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: Validate() = %v, want valid %v", name, err, tc.valid)
		}
	}
}

func TestCreateRefusesInvalidIDWithoutRequest(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, created(false))
	if _, err := c.Create(context.Background(), "", eur1500, "tok_visa"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Create with empty id: %v, want ErrInvalid", err)
	}
	if n := s.requests(); n != 0 {
		t.Fatalf("%d requests sent for an invalid id", n)
	}
}

func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	base, maxB := 100*time.Millisecond, 1*time.Second
	ceilings := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for _, rnd := range []float64{0, 0.5, 0.999999} {
		o := defaultOptions()
		o.baseBackoff, o.maxBackoff, o.rand = base, maxB, func() float64 { return rnd }
		for n, c := range ceilings {
			ceiling := c * time.Millisecond
			got := o.backoff(n)
			if got < 0 || got >= ceiling {
				t.Errorf("rand %v: backoff(%d) = %v, want in [0, %v)", rnd, n, got, ceiling)
			}
			if want := time.Duration(rnd * float64(ceiling)); got != want {
				t.Errorf("rand %v: backoff(%d) = %v, want %v", rnd, n, got, want)
			}
		}
	}
	o := defaultOptions()
	o.rand = func() float64 { return 0.999999 }
	if got := o.backoff(1000); got >= DefaultMaxBackoff || got < DefaultMaxBackoff*9/10 {
		t.Errorf("backoff(1000) = %v, want just under the %v cap", got, DefaultMaxBackoff)
	}
}

func TestRetriesReuseIDAndBodyBytes(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	c, s := newScripted(t, ft.options(0.5),
		reply{http.StatusBadGateway, nil, "bad gateway"},
		problemReply(http.StatusServiceUnavailable, "outcome-pending", map[string]string{HeaderRetryAfter: "1"}),
		problemReply(http.StatusInternalServerError, "internal-error", nil),
		reply{http.StatusTooManyRequests, nil, ""},
		created(true))
	id := NewCommandID()
	res, err := c.Create(context.Background(), id, eur1500, "tok_visa", WithDescription("Order 7"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 5 || !res.Replayed || res.Charge.ID != "ch_0123456789abcdef01234567" {
		t.Fatalf("result %+v, want a replay after 5 attempts", res)
	}
	if want := time.Date(2025, 1, 3, 3, 4, 5, 0, time.UTC); !res.KeyExpiresAt.Equal(want) {
		t.Errorf("KeyExpiresAt = %v, want %v", res.KeyExpiresAt, want)
	}
	want := `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"Order 7"}`
	for i := range s.keys {
		if s.keys[i] != string(id) || s.bodies[i] != want {
			t.Errorf("attempt %d sent key %q body %s, want %q %s", i+1, s.keys[i], s.bodies[i], id, want)
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	c, _ := newScripted(t, append(ft.options(0), WithBackoff(10*time.Millisecond, 50*time.Millisecond)),
		problemReply(http.StatusConflict, "request-in-progress", map[string]string{HeaderRetryAfter: "3"}),
		problemReply(http.StatusServiceUnavailable, "provider-unavailable", map[string]string{HeaderRetryAfter: "Thu, 02 Jan 2025 03:04:15 GMT"}),
		reply{http.StatusServiceUnavailable, nil, ""},
		created(false))
	if _, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa"); err != nil {
		t.Fatal(err)
	}
	// 3s, then the date 10s after the clock (now 3s later), then jitter 0.
	want := []time.Duration{3 * time.Second, 7 * time.Second, 0}
	if len(ft.waits) != len(want) {
		t.Fatalf("waits %v, want %v", ft.waits, want)
	}
	for i := range want {
		if ft.waits[i] != want[i] {
			t.Errorf("wait %d = %v, want %v", i, ft.waits[i], want[i])
		}
	}
}

// TestRateLimitedRetriesTheSameIDAfterRetryAfter: a tenant over its limit
// is answered 429 rate-limited; the client waits what Retry-After asks and
// sends the same id. Out of attempts, the error says the tenant was
// limited and the wait, and, as nothing may have run, no more.
func TestRateLimitedRetriesTheSameIDAfterRetryAfter(t *testing.T) {
	t.Parallel()
	limited := problemReply(http.StatusTooManyRequests, "rate-limited", map[string]string{HeaderRetryAfter: "1"})
	ft := &fakeTime{now: time.Now()}
	c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(3)), limited, limited, created(false))
	id := NewCommandID()
	if _, err := c.Create(t.Context(), id, eur1500, "tok_visa"); err != nil {
		t.Fatal(err)
	}
	if len(ft.waits) != 2 || ft.waits[0] != time.Second || ft.waits[1] != time.Second {
		t.Fatalf("waits %v, want [1s 1s]", ft.waits)
	}
	for i, k := range s.keys {
		if k != string(id) {
			t.Fatalf("attempt %d sent id %q, want %q", i+1, k, id)
		}
	}

	c, _ = newScripted(t, append(ft.options(0), WithMaxAttempts(2)), limited)
	_, err := c.Create(t.Context(), NewCommandID(), eur1500, "tok_visa")
	var p *ProblemError
	if !errors.Is(err, ErrRateLimited) || errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &p) || p.RetryAfter != time.Second {
		t.Fatalf("err = %v: want ErrRateLimited with RetryAfter 1s, not ErrOutcomeUnknown", err)
	}

	c, _ = newScripted(t, append(ft.options(0), WithMaxAttempts(2)), reply{http.StatusBadGateway, nil, ""}, limited)
	if _, err := c.Create(t.Context(), NewCommandID(), eur1500, "tok_visa"); !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrRateLimited) {
		t.Fatalf("rate-limited after a bare 502: %v, want ErrOutcomeUnknown and not ErrRateLimited: the first attempt may have charged", err)
	}
}

func TestRetryAfterNeverShortensJitter(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	c, _ := newScripted(t, append(ft.options(0.5), WithBackoff(4*time.Second, 4*time.Second)),
		problemReply(http.StatusConflict, "request-in-progress", map[string]string{HeaderRetryAfter: "1"}),
		created(false))
	if _, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa"); err != nil {
		t.Fatal(err)
	}
	if len(ft.waits) != 1 || ft.waits[0] != 2*time.Second {
		t.Fatalf("waits %v, want [2s] (jitter above Retry-After)", ft.waits)
	}
}

func TestContextDeadlineEndsLoop(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	c, s := newScripted(t, append(ft.options(0.999), WithMaxAttempts(1000), WithBackoff(time.Second, 8*time.Second)),
		problemReply(http.StatusServiceUnavailable, "outcome-pending", map[string]string{HeaderRetryAfter: "2"}))
	ctx, cancel := context.WithDeadline(context.Background(), ft.now.Add(30*time.Second))
	defer cancel()
	_, err := c.Create(ctx, NewCommandID(), eur1500, "tok_visa")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrOutcomePending) {
		t.Fatalf("err = %v, want the last answer (ErrOutcomePending) and DeadlineExceeded", err)
	}
	var p *ProblemError
	if !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable || p.RetryAfter != 2*time.Second {
		t.Fatalf("err = %#v, want a *ProblemError 503 with RetryAfter 2s", p)
	}
	var total time.Duration
	for _, w := range ft.waits {
		total += w
	}
	if total > 30*time.Second || s.requests() != len(ft.waits)+1 || s.requests() < 4 {
		t.Fatalf("%d requests, waits %v (total %v): want the loop to stop before the 30s deadline", s.requests(), ft.waits, total)
	}
}

func TestCanceledContextStopsSleep(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, []Option{WithBackoff(time.Hour, time.Hour), WithRand(func() float64 { return 0.5 })},
		problemReply(http.StatusConflict, "request-in-progress", nil))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := c.Create(ctx, NewCommandID(), eur1500, "tok_visa")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrInProgress) || s.requests() != 1 {
		t.Fatalf("err = %v after %d requests, want Canceled and ErrInProgress after 1", err, s.requests())
	}
}

func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(3)),
		problemReply(http.StatusServiceUnavailable, "provider-unavailable", nil))
	res, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
	if !errors.Is(err, ErrUnavailable) || s.requests() != 3 || res.Attempts != 3 {
		t.Fatalf("err = %v after %d requests (result says %d), want ErrUnavailable after 3", err, s.requests(), res.Attempts)
	}
}

// TestFinalAnswersAreNotRetried: Create, Refund, Capture and Cancel share
// the retry loop, and each returns a final answer at once, as its sentinel.
func TestFinalAnswersAreNotRetried(t *testing.T) {
	t.Parallel()
	commands := map[string]func(*Client) error{
		"create": func(c *Client) error {
			_, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
			return err
		},
		"refund": func(c *Client) error {
			_, err := c.Refund(context.Background(), chargeID, NewCommandID())
			return err
		},
		"capture": func(c *Client) error {
			_, err := c.Capture(t.Context(), chargeID)
			return err
		},
		"cancel": func(c *Client) error {
			_, err := c.Cancel(t.Context(), chargeID)
			return err
		},
	}
	for slug, tc := range map[string]struct {
		status int
		want   error
	}{
		"invalid-request":         {400, ErrInvalid},
		"invalid-idempotency-key": {400, ErrInvalid},
		"unauthorized":            {401, ErrUnauthorized},
		"card-declined":           {402, ErrDeclined},
		"not-found":               {404, ErrNotFound},
		"payload-too-large":       {413, ErrInvalid},
		"unsupported-media-type":  {415, ErrInvalid},
		"idempotency-key-reused":  {422, ErrKeyReused},
		"provider-rejected":       {502, ErrRejected},
		"charge-conflict":         {500, ErrInternal},
		"charge-state-conflict":   {409, ErrChargeState},
		"refund-declined":         {409, ErrRefundDeclined},
		"refund-exceeds-charge":   {409, ErrRefundExceedsCharge},
	} {
		for name, call := range commands {
			ft := &fakeTime{now: time.Now()}
			c, s := newScripted(t, ft.options(0), problemReply(tc.status, slug, nil), created(false))
			err := call(c)
			var p *ProblemError
			if !errors.Is(err, tc.want) || !errors.As(err, &p) || p.Status != tc.status || p.Slug() != slug {
				t.Errorf("%s %s: err = %v, want %v as a *ProblemError %d", name, slug, err, tc.want, tc.status)
			}
			if s.requests() != 1 {
				t.Errorf("%s %s: %d requests, want 1", name, slug, s.requests())
			}
		}
	}
}

func TestProblemErrorIs(t *testing.T) {
	t.Parallel()
	all := []error{ErrInvalid, ErrUnauthorized, ErrDeclined, ErrNotFound, ErrInProgress, ErrKeyReused, ErrOutcomePending, ErrUnavailable, ErrOutcomeUnknown, ErrInternal, ErrRejected,
		ErrRefundExceedsCharge, ErrChargeState, ErrRefundDeclined}
	for name, tc := range map[string]struct {
		p    *ProblemError
		want error
	}{
		"not-found":             {&ProblemError{Type: ProblemBase + "not-found", Status: 404}, ErrNotFound},
		"request-in-progress":   {&ProblemError{Type: ProblemBase + "request-in-progress", Status: 409}, ErrInProgress},
		"outcome-pending":       {&ProblemError{Type: ProblemBase + "outcome-pending", Status: 503}, ErrOutcomePending},
		"provider-unavailable":  {&ProblemError{Type: ProblemBase + "provider-unavailable", Status: 503}, ErrUnavailable},
		"internal-error":        {&ProblemError{Type: ProblemBase + "internal-error", Status: 500}, ErrInternal},
		"service-unavailable":   {&ProblemError{Type: ProblemBase + "service-unavailable", Status: 503}, ErrUnavailable},
		"provider-rejected":     {&ProblemError{Type: ProblemBase + "provider-rejected", Status: 502}, ErrRejected},
		"refund-exceeds-charge": {&ProblemError{Type: ProblemBase + "refund-exceeds-charge", Status: 409}, ErrRefundExceedsCharge},
		"charge-state-conflict": {&ProblemError{Type: ProblemBase + "charge-state-conflict", Status: 409}, ErrChargeState},
		"refund-declined":       {&ProblemError{Type: ProblemBase + "refund-declined", Status: 409}, ErrRefundDeclined},
		"gateway 401":           {&ProblemError{Type: "about:blank", Status: 401}, ErrUnauthorized},
		"gateway 500":           {&ProblemError{Type: "about:blank", Status: 500}, ErrOutcomeUnknown},
		"gateway 502":           {&ProblemError{Type: "about:blank", Status: 502}, ErrOutcomeUnknown},
		"gateway 503":           {&ProblemError{Type: "about:blank", Status: 503}, ErrOutcomeUnknown},
		"gateway 504":           {&ProblemError{Type: "about:blank", Status: 504}, ErrOutcomeUnknown},
		"gateway 429":           {&ProblemError{Type: "about:blank", Status: 429}, ErrUnavailable},
		"unknown 418":           {&ProblemError{Type: "about:blank", Status: 418}, nil},
	} {
		for _, s := range all {
			if got := errors.Is(tc.p, s); got != (s == tc.want) {
				t.Errorf("%s: errors.Is(%v) = %v", name, s, got)
			}
		}
	}
}

func TestNonProblemAnswer(t *testing.T) {
	t.Parallel()
	c, _ := newScripted(t, nil, reply{http.StatusUnauthorized, map[string]string{"Content-Type": "application/json"}, `{"message":"Unauthorized"}`})
	_, err := c.Get(context.Background(), "ch_0123456789abcdef01234567")
	var p *ProblemError
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &p) || p.Type != "about:blank" || p.Detail != `{"message":"Unauthorized"}` {
		t.Fatalf("err = %v (%+v), want an about:blank 401", err, p)
	}
}

// dropping fails the first n requests as a dropped connection would.
type dropping struct {
	mu sync.Mutex
	n  int
	rt http.RoundTripper
}

func (d *dropping) RoundTrip(r *http.Request) (*http.Response, error) {
	d.mu.Lock()
	drop := d.n > 0
	d.n--
	d.mu.Unlock()
	if drop {
		return nil, io.ErrUnexpectedEOF
	}
	return d.rt.RoundTrip(r)
}

func TestNetworkErrorsAreRetried(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	s := &scripted{replies: []reply{created(false)}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &dropping{n: 2, rt: srv.Client().Transport}}
	c, err := New(srv.URL, append(ft.options(0), WithHTTPClient(hc))...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
	if err != nil || res.Attempts != 3 || s.requests() != 1 {
		t.Fatalf("res %+v err %v, server saw %d: want success on attempt 3", res, err, s.requests())
	}
}

// TestNetworkErrorIsUnknown: a connection dropped after the request may
// have been sent proves nothing, so the error says the outcome is unknown.
func TestNetworkErrorIsUnknown(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	s := &scripted{replies: []reply{created(false)}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &dropping{n: 2, rt: srv.Client().Transport}}
	c, err := New(srv.URL, append(ft.options(0), WithHTTPClient(hc), WithMaxAttempts(2))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrOutcomeUnknown wrapping the network error", err)
	}
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			<-release
			return
		}
		created(false).write(w)
	}))
	t.Cleanup(srv.Close)
	ft := &fakeTime{now: time.Now()}
	c, err := New(srv.URL, append(ft.options(0), WithHTTPClient(srv.Client()), WithAttemptTimeout(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
	close(release)
	if err != nil || res.Attempts != 2 {
		t.Fatalf("res %+v err %v, want success on attempt 2", res, err)
	}
}

func (rp reply) write(w http.ResponseWriter) {
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		opts []Option
		ok   bool
	}{
		{"http://127.0.0.1:3000", nil, true},
		{"https://api.example.com/prod/", nil, true},
		{"127.0.0.1:3000", nil, false},
		{"ftp://x", nil, false},
		{"http://x", []Option{WithMaxAttempts(0)}, false},
		{"http://x", []Option{WithBackoff(time.Second, time.Millisecond)}, false},
		{"http://x", []Option{WithHTTPClient(nil)}, false},
	} {
		if _, err := New(tc.url, tc.opts...); (err == nil) != tc.ok {
			t.Errorf("New(%q): %v, want ok %v", tc.url, err, tc.ok)
		}
	}
}

func TestGetPathAndToken(t *testing.T) {
	t.Parallel()
	var path, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.EscapedPath(), r.Header.Get("Authorization")
		reply{http.StatusOK, map[string]string{"Content-Type": "application/json"}, chargeBody}.write(w)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/prod/", WithHTTPClient(srv.Client()), WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Get(context.Background(), "ch_0123456789abcdef01234567")
	if err != nil || ch.Amount != 1500 || ch.CreatedAt.IsZero() {
		t.Fatalf("Get: %+v, %v", ch, err)
	}
	if path != "/prod/charges/ch_0123456789abcdef01234567" || auth != "Bearer tok" {
		t.Fatalf("path %q auth %q", path, auth)
	}
}
