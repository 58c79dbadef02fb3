package secrets_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// counted is the emulator's Secrets Manager, counting the reads and
// failing them while down is set.
type counted struct {
	api   secrets.API
	reads atomic.Int32
	down  atomic.Bool
}

var errDown = errors.New("secrets manager unreachable")

func (c *counted) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.reads.Add(1)
	if c.down.Load() {
		return nil, errDown
	}
	return c.api.GetSecretValue(ctx, in, optFns...)
}

func newSecret(t *testing.T, value string, maxAge time.Duration) (*secrets.Secret, *counted, *testkit.Clock, string) {
	t.Helper()
	name := testkit.Secret(t, value)
	api := &counted{api: testkit.Clients(t).SecretsManager}
	clock := testkit.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	return secrets.New(api, name, func(o *secrets.Options) { o.MaxAge, o.Clock = maxAge, clock.Now }), api, clock, name
}

func value(t *testing.T, s *secrets.Secret, want string) {
	t.Helper()
	if got, err := s.Value(t.Context()); err != nil || got != want {
		t.Fatalf("Value = %q, %v; want %q", got, err, want)
	}
}

// TestValueIsKeptForMaxAge: one read per execution environment until the
// value is MaxAge old; then a rotation is read.
func TestValueIsKeptForMaxAge(t *testing.T) {
	t.Parallel()
	s, api, clock, name := newSecret(t, "sk_first", time.Minute)
	value(t, s, "sk_first")
	testkit.RotateSecret(t, name, "sk_second")
	clock.Advance(59 * time.Second)
	value(t, s, "sk_first")
	if n := api.reads.Load(); n != 1 {
		t.Errorf("%d reads within MaxAge, want 1", n)
	}
	clock.Advance(time.Second)
	value(t, s, "sk_second")
	if n := api.reads.Load(); n != 2 {
		t.Errorf("%d reads after MaxAge, want 2", n)
	}
}

// TestRefreshReadsARotation: a caller whose key was refused reads the
// rotated one at once. A second caller with the same refused key reads
// nothing.
func TestRefreshReadsARotation(t *testing.T) {
	t.Parallel()
	s, api, _, name := newSecret(t, "sk_first", time.Hour)
	value(t, s, "sk_first")
	testkit.RotateSecret(t, name, "sk_second")
	for range 2 {
		if got, err := s.Refresh(t.Context(), "sk_first"); err != nil || got != "sk_second" {
			t.Fatalf("Refresh = %q, %v; want sk_second", got, err)
		}
	}
	if n := api.reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2: the second refresh of the same stale key reads nothing", n)
	}
	value(t, s, "sk_second")
}

// TestMissingSecretIsUnavailable: a secret that does not exist is an
// error wrapping ErrUnavailable, and so is one with no string.
func TestMissingSecretIsUnavailable(t *testing.T) {
	t.Parallel()
	s := secrets.New(testkit.Clients(t).SecretsManager, testkit.UniqueName("chargeonce/missing"))
	if _, err := s.Value(t.Context()); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Value of a missing secret: %v, want ErrUnavailable", err)
	}
	if _, err := s.Refresh(t.Context(), ""); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Refresh of a missing secret: %v, want ErrUnavailable", err)
	}
}

// TestFailedReReadKeepsTheValue: an outage at a re-read serves the value
// held. It tries again after a short while, not at every call.
func TestFailedReReadKeepsTheValue(t *testing.T) {
	t.Parallel()
	s, api, clock, _ := newSecret(t, "sk_first", time.Minute)
	value(t, s, "sk_first")
	api.down.Store(true)
	clock.Advance(time.Minute)
	value(t, s, "sk_first")
	value(t, s, "sk_first")
	if n := api.reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2: a failed re-read is not tried again at once", n)
	}
	if _, err := s.Refresh(t.Context(), "sk_first"); !errors.Is(err, errDown) || !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Refresh while down: %v, want ErrUnavailable wrapping the cause", err)
	}
	api.down.Store(false)
	clock.Advance(30 * time.Second)
	value(t, s, "sk_first")
	if n := api.reads.Load(); n != 4 {
		t.Errorf("%d reads, want 4: the re-read is tried again after 30s", n)
	}
}

// TestFailedReadIsRememberedWithNoValueHeld: an unreadable secret costs
// one read per short while, not one per call. Then it is read again, and
// found once it exists.
func TestFailedReadIsRememberedWithNoValueHeld(t *testing.T) {
	t.Parallel()
	name := testkit.UniqueName("chargeonce/missing")
	api := &counted{api: testkit.Clients(t).SecretsManager}
	clock := testkit.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	s := secrets.New(api, name, func(o *secrets.Options) { o.MaxAge, o.Clock = time.Hour, clock.Now })
	for range 1000 {
		if _, err := s.Value(t.Context()); !errors.Is(err, secrets.ErrUnavailable) {
			t.Fatalf("Value of a missing secret: %v, want ErrUnavailable", err)
		}
	}
	if n := api.reads.Load(); n != 1 {
		t.Errorf("%d reads for 1,000 calls, want 1: a failed read is remembered", n)
	}
	testkit.CreateSecret(t, name, "whsec_late")
	clock.Advance(29 * time.Second)
	if _, err := s.Value(t.Context()); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Value within 30s of the failed read: %v, want the remembered ErrUnavailable", err)
	}
	clock.Advance(time.Second)
	value(t, s, "whsec_late")
	if n := api.reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2: the read is tried again after 30s", n)
	}
}

// TestRefusedKeyIsReadAgainOnceASecond: while the provider refuses the key
// held, every refused request asks for a refresh. They cost one read a
// second, whether it finds the same key or fails.
func TestRefusedKeyIsReadAgainOnceASecond(t *testing.T) {
	t.Parallel()
	s, api, clock, name := newSecret(t, "sk_revoked", time.Hour)
	value(t, s, "sk_revoked")
	for range 100 {
		if got, err := s.Refresh(t.Context(), "sk_revoked"); err != nil || got != "sk_revoked" {
			t.Fatalf("Refresh = %q, %v; want the key held, sk_revoked", got, err)
		}
	}
	if n := api.reads.Load(); n != 2 {
		t.Errorf("%d reads for 100 refreshes within a second, want 2", n)
	}
	api.down.Store(true)
	clock.Advance(time.Second)
	for range 100 {
		if _, err := s.Refresh(t.Context(), "sk_revoked"); !errors.Is(err, secrets.ErrUnavailable) {
			t.Fatalf("Refresh while down: %v, want ErrUnavailable", err)
		}
	}
	if n := api.reads.Load(); n != 3 {
		t.Errorf("%d reads for 100 refreshes while down, want 3", n)
	}
	api.down.Store(false)
	testkit.RotateSecret(t, name, "sk_new")
	clock.Advance(time.Second)
	if got, err := s.Refresh(t.Context(), "sk_revoked"); err != nil || got != "sk_new" {
		t.Fatalf("Refresh a second on = %q, %v; want the rotated sk_new", got, err)
	}
}
