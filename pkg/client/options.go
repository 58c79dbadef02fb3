package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults of the retry loop.
const (
	DefaultMaxAttempts = 8
	DefaultBaseBackoff = 200 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
)

// maxRetryAfter caps the wait a Retry-After header can ask for.
const maxRetryAfter = 5 * time.Minute

// Option configures a Client.
type Option func(*options)

type options struct {
	http           Doer
	token          string
	maxAttempts    int
	baseBackoff    time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	clock          func() time.Time
	sleep          func(context.Context, time.Duration) error
	rand           func() float64
	onRetry        func(attempt int, wait time.Duration, err error)
}

func defaultOptions() options {
	return options{
		http:        http.DefaultClient,
		maxAttempts: DefaultMaxAttempts,
		baseBackoff: DefaultBaseBackoff,
		maxBackoff:  DefaultMaxBackoff,
		clock:       time.Now,
		sleep:       sleep,
		rand:        rand.Float64,
	}
}

func (o *options) validate() error {
	switch {
	case o.http == nil || o.clock == nil || o.sleep == nil || o.rand == nil:
		return errors.New("client: nil HTTP client, clock, sleep or rand option")
	case o.maxAttempts < 1:
		return errors.New("client: max attempts must be at least 1")
	case o.baseBackoff <= 0 || o.maxBackoff < o.baseBackoff:
		return errors.New("client: backoff needs 0 < base <= max")
	case o.attemptTimeout < 0:
		return errors.New("client: negative attempt timeout")
	}
	return nil
}

// WithHTTPClient sends requests with d instead of http.DefaultClient.
func WithHTTPClient(d Doer) Option {
	return func(o *options) { o.http = d }
}

// WithToken sends "Authorization: Bearer <token>" with every request.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithMaxAttempts bounds the number of HTTP requests one call makes (the
// first included). The caller's context bounds them too.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = n }
}

// WithBackoff sets the backoff. Before retry n (from 0), the client waits a
// uniformly random time in [0, min(max, base*2^n)). That is "full jitter".
// It waits longer if the answer's Retry-After asks for it.
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) { o.baseBackoff, o.maxBackoff = base, max }
}

// WithAttemptTimeout bounds each attempt; an attempt that times out is
// retried. 0, the default, leaves attempts bounded by the caller's context
// and the HTTP client only.
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *options) { o.attemptTimeout = d }
}

// WithClock sets the clock used for Retry-After dates and deadlines.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock = now }
}

// WithSleep sets how the client waits between attempts. sleep must return
// ctx's error if ctx ends first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = sleep }
}

// WithRand sets the source of jitter: a function returning values in [0, 1).
func WithRand(f func() float64) Option {
	return func(o *options) { o.rand = f }
}

// WithOnRetry calls f before each wait between attempts, with the attempt
// that failed (from 1), the wait, and that attempt's error.
func WithOnRetry(f func(attempt int, wait time.Duration, err error)) Option {
	return func(o *options) { o.onRetry = f }
}

// backoff is the full-jitter wait before retry n (from 0).
func (o *options) backoff(n int) time.Duration {
	ceiling := o.baseBackoff
	for i := 0; i < n && ceiling < o.maxBackoff; i++ {
		if ceiling > o.maxBackoff/2 {
			ceiling = o.maxBackoff
			break
		}
		ceiling *= 2
	}
	ceiling = min(ceiling, o.maxBackoff)
	f := o.rand()
	if f < 0 || f >= 1 {
		f = 0
	}
	return time.Duration(f * float64(ceiling))
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
