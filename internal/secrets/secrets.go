// Package secrets reads the functions' secrets from AWS Secrets Manager at
// run time: the provider's API key, the webhook signing secret. A
// function's environment names each secret. Its value is kept per
// execution environment. It is read again after a bounded age, and when
// the provider refuses it. So a rotation needs no deploy.
package secrets

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// ErrUnavailable: the secret could not be read. It may be missing, not a
// string, denied, or unreachable. Nothing that needs it was attempted.
var ErrUnavailable = errors.New("secret unavailable")

// DefaultMaxAge is how long a value is kept before it is read again.
const DefaultMaxAge = 5 * time.Minute

// retryAfter is how soon a failed read is tried again. Meanwhile the value
// held serves, or the failed read's error. So an outage costs each request
// no call of its own.
const retryAfter = 30 * time.Second

// refreshGap is how soon a refused key is read again. A revoked key refuses
// every request; each would otherwise read the secret.
const refreshGap = time.Second

// API is the part of the Secrets Manager client a Secret uses.
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Options configure a Secret.
type Options struct {
	// MaxAge is how long a value is kept before it is read again;
	// DefaultMaxAge if zero or less.
	MaxAge time.Duration
	// Clock is time.Now by default.
	Clock func() time.Time
}

// Secret is one secret, named by its name or ARN. It is safe for
// concurrent use: callers that find the value stale wait for one read.
type Secret struct {
	api  API
	id   string
	opts Options

	mu    sync.Mutex
	value string
	held  bool
	next  time.Time // when the value is to be read again
	// failed is the last read's error, returned until next while no
	// value is held.
	failed error
	// refreshed is when Refresh last read; refreshFailed, its error.
	refreshed     time.Time
	refreshFailed error
}

// New returns the secret id (a name or an ARN), read through api when
// first needed.
func New(api API, id string, optFns ...func(*Options)) *Secret {
	o := Options{}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Secret{api: api, id: id, opts: o}
}

// Value returns the secret's value. It is the one held, unless that is
// older than MaxAge or none is held; then it is read now. A failed read is
// tried again after a short while. Meanwhile the value held serves. With
// none held, the failed read's error does; it wraps ErrUnavailable.
func (s *Secret) Value(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	if now.Before(s.next) {
		if !s.held {
			return "", s.failed
		}
		return s.value, nil
	}
	v, err := s.read(ctx)
	if err != nil {
		s.next, s.failed = now.Add(min(retryAfter, s.opts.MaxAge)), err
		if !s.held {
			return "", err
		}
		return s.value, nil
	}
	s.value, s.held, s.next = v, true, now.Add(s.opts.MaxAge)
	return v, nil
}

// Refresh reads the secret again, for a caller whose value stale was
// refused. It returns the value read. A value held that is not stale was
// refreshed by another caller: it is returned as it is. Within refreshGap
// of its last read, Refresh answers as that read did. The error wraps
// ErrUnavailable.
func (s *Secret) Refresh(ctx context.Context, stale string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held && s.value != stale {
		return s.value, nil
	}
	now := s.opts.Clock()
	if now.Before(s.refreshed.Add(refreshGap)) {
		if s.refreshFailed != nil {
			return "", s.refreshFailed
		}
		return s.value, nil
	}
	v, err := s.read(ctx)
	s.refreshed, s.refreshFailed = now, err
	if err != nil {
		return "", err
	}
	s.value, s.held, s.next = v, true, now.Add(s.opts.MaxAge)
	return v, nil
}

// read asks Secrets Manager for the current version's string.
func (s *Secret) read(ctx context.Context) (string, error) {
	out, err := s.api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.id)})
	if err != nil {
		return "", fmt.Errorf("secrets: read %s: %w: %w", s.id, ErrUnavailable, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", fmt.Errorf("secrets: read %s: %w: no string value", s.id, ErrUnavailable)
	}
	return *out.SecretString, nil
}
