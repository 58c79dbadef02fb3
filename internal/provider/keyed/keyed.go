// Package keyed runs a provider adapter on an API key read at run time
// (package secrets), not one fixed when the function starts: the adapter
// is built for the key the secret holds, and built again when the key
// changes. When the provider refuses a key (401), the key is read again
// and the call made once more with it, if it changed: a 401 is the
// provider's proof that it did not act on the request, so the second send
// charges nothing twice. A key still refused after the re-read is
// provider.ErrUnavailable: nothing was done, and a retry may succeed once
// the secret is rotated.
package keyed

import (
	"context"
	"fmt"
	"sync"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// Key is where the API key is read: a secret.
type Key interface {
	// Value is the key, read when none is held or it is old.
	Value(ctx context.Context) (string, error)
	// Refresh reads the key again after stale was refused.
	Refresh(ctx context.Context, stale string) (string, error)
}

// Adapter is what Provider wraps: a provider adapter for one key.
type Adapter interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
	Lookup(ctx context.Context, reference string) (provider.Result, error)
	Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	State(ctx context.Context, charge string) (provider.Result, error)
}

// Kind is how one kind of adapter is built and read.
type Kind[A Adapter] struct {
	// Build returns the adapter that authenticates with key.
	Build func(key string) (A, error)
	// Unauthorized reports whether an adapter's error is the provider
	// refusing its key, with the proof that it did not act on the request.
	Unauthorized func(error) bool
	// Guarantees are the adapter's, known before any key is.
	Guarantees provider.Guarantees
}

// Provider is an adapter of kind A on the key its Key holds. It is safe
// for concurrent use.
type Provider[A Adapter] struct {
	key  Key
	kind Kind[A]

	mu      sync.Mutex
	builtOn string // the key current was built with
	current A
	built   bool
}

// New returns the provider of kind on key.
func New[A Adapter](key Key, kind Kind[A]) *Provider[A] {
	return &Provider[A]{key: key, kind: kind}
}

// Prepare reads the key, if it is not held, and builds its adapter. The
// charge path calls it before it claims a command, so a key that cannot
// be read fails the request with nothing claimed.
func (p *Provider[A]) Prepare(ctx context.Context) error {
	_, _, err := p.adapter(ctx)
	return err
}

// Guarantees are the kind's.
func (p *Provider[A]) Guarantees() provider.Guarantees { return p.kind.Guarantees }

// Charge charges req through the adapter (see call).
func (p *Provider[A]) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.Charge(ctx, req) })
}

// Lookup looks reference up through the adapter (see call).
func (p *Provider[A]) Lookup(ctx context.Context, reference string) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.Lookup(ctx, reference) })
}

// Refund refunds req through the adapter (see call): a refusal of the
// key proves nothing was refunded, as for a charge.
func (p *Provider[A]) Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.Refund(ctx, req) })
}

// LookupRefund looks the refund req up through the adapter (see call).
func (p *Provider[A]) LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.LookupRefund(ctx, req) })
}

// Capture captures req through the adapter (see call): a refusal of the
// key proves nothing was captured, as for a charge.
func (p *Provider[A]) Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.Capture(ctx, req) })
}

// Cancel cancels req through the adapter (see call), as Capture.
func (p *Provider[A]) Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.Cancel(ctx, req) })
}

// State reads the charge's state through the adapter (see call).
func (p *Provider[A]) State(ctx context.Context, charge string) (provider.Result, error) {
	return call(ctx, p, func(a A) (provider.Result, error) { return a.State(ctx, charge) })
}

// call runs fn on the adapter for the key held and, if the provider
// refused that key, reads the key again and runs fn once more on the
// new key's adapter. If the key cannot be read, fn is not run and the
// error wraps provider.ErrUnavailable: nothing was sent.
func call[A Adapter](ctx context.Context, p *Provider[A], fn func(A) (provider.Result, error)) (provider.Result, error) {
	a, key, err := p.adapter(ctx)
	if err != nil {
		return provider.Result{}, fmt.Errorf("keyed: %w: %w", provider.ErrUnavailable, err)
	}
	res, err := fn(a)
	if err == nil || !p.kind.Unauthorized(err) {
		return res, err
	}
	if fresh, rerr := p.key.Refresh(ctx, key); rerr == nil && fresh != key {
		a, uerr := p.use(fresh)
		if uerr != nil {
			return provider.Result{}, fmt.Errorf("keyed: %w: %w", provider.ErrUnavailable, uerr)
		}
		if res, err = fn(a); err == nil || !p.kind.Unauthorized(err) {
			return res, err
		}
	}
	// Not the request's fault, and not final: once the secret holds a key
	// the provider takes, the same request goes through.
	return provider.Result{}, fmt.Errorf("keyed: %w: the provider refuses the API key the secret holds: %v", provider.ErrUnavailable, err)
}

// adapter is the adapter for the key held, and that key.
func (p *Provider[A]) adapter(ctx context.Context) (A, string, error) {
	key, err := p.key.Value(ctx)
	if err != nil {
		var zero A
		return zero, "", err
	}
	a, err := p.use(key)
	return a, key, err
}

// use returns the adapter for key, built unless it is the current one.
func (p *Provider[A]) use(key string) (A, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.built && p.builtOn == key {
		return p.current, nil
	}
	a, err := p.kind.Build(key)
	if err != nil {
		var zero A
		return zero, err
	}
	p.current, p.builtOn, p.built = a, key, true
	return a, nil
}

// ReplayAdapter is an Adapter that also looks a charge up by replaying
// its request (the stripe adapter).
type ReplayAdapter interface {
	Adapter
	LookupRequest(ctx context.Context, req provider.LookupRequest) (provider.Result, error)
}

// Replaying is a Provider of a ReplayAdapter: it replays too, and checks
// a source before anything is stored, which needs no key.
type Replaying[A ReplayAdapter] struct {
	*Provider[A]
	check func(source string) error
}

// NewReplaying returns the provider of kind on key, whose sources check
// checks.
func NewReplaying[A ReplayAdapter](key Key, kind Kind[A], check func(source string) error) *Replaying[A] {
	return &Replaying[A]{Provider: New(key, kind), check: check}
}

// LookupRequest looks req up through the adapter (see call).
func (r *Replaying[A]) LookupRequest(ctx context.Context, req provider.LookupRequest) (provider.Result, error) {
	return call(ctx, r.Provider, func(a A) (provider.Result, error) { return a.LookupRequest(ctx, req) })
}

// CheckSource refuses a source the adapter would refuse.
func (r *Replaying[A]) CheckSource(source string) error { return r.check(source) }
