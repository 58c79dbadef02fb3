package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Limits on the parts of a Key.
const (
	MaxClientKeyLen = 255
	MaxTenantLen    = 128
	MaxOperationLen = 64
)

// ErrInvalidKey is matched (errors.Is) by every *ValidationError.
var ErrInvalidKey = errors.New("idem: invalid key")

// ValidationError says which part of a key is invalid and why.
type ValidationError struct {
	Field  string // "tenant", "operation" or "client key"
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("idem: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidKey) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidKey }

// Key scopes a client's idempotency key to a tenant and an operation, so the
// same client key used by two tenants, or for two operations, names two
// different commands.
type Key struct {
	tenant, operation, client string
	full                      string // String, joined once: a request asks for it several times
}

const keySep = "#"

// NewKey validates and scopes a client key. Tenant and operation are short
// identifiers (letters, digits and . _ - : @); the client key is 1 to 255
// printable ASCII characters.
func NewKey(tenant, operation, clientKey string) (Key, error) {
	if err := CheckTenant(tenant); err != nil {
		return Key{}, err
	}
	if err := checkIdent("operation", operation, MaxOperationLen); err != nil {
		return Key{}, err
	}
	if err := CheckClientKey(clientKey); err != nil {
		return Key{}, err
	}
	return Key{tenant: tenant, operation: operation, client: clientKey, full: tenant + keySep + operation + keySep + clientKey}, nil
}

// CheckTenant reports whether s is a valid tenant: what NewKey accepts as
// one, checked without building a key.
func CheckTenant(s string) error { return checkIdent("tenant", s, MaxTenantLen) }

// CheckClientKey reports whether s is a valid client key.
func CheckClientKey(s string) error {
	switch {
	case s == "":
		return &ValidationError{Field: "client key", Reason: "empty"}
	case len(s) > MaxClientKeyLen:
		return &ValidationError{Field: "client key", Reason: fmt.Sprintf("longer than %d characters", MaxClientKeyLen)}
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return &ValidationError{Field: "client key", Reason: "not printable ASCII"}
		}
	}
	return nil
}

func checkIdent(field, s string, max int) error {
	if s == "" {
		return &ValidationError{Field: field, Reason: "empty"}
	}
	if len(s) > max {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("longer than %d characters", max)}
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:@", r)
		if !ok {
			return &ValidationError{Field: field, Reason: "only letters, digits and . _ - : @ are allowed"}
		}
	}
	return nil
}

// ParseKey is the inverse of Key.String.
func ParseKey(s string) (Key, error) {
	tenant, rest, ok1 := strings.Cut(s, keySep)
	operation, client, ok2 := strings.Cut(rest, keySep)
	if !ok1 || !ok2 {
		return Key{}, &ValidationError{Field: "key", Reason: "not of the form tenant#operation#key"}
	}
	return NewKey(tenant, operation, client)
}

// String is the stored partition key: tenant#operation#client-key. Tenant and
// operation cannot contain '#', so the form is unambiguous.
func (k Key) String() string { return k.full }

// Tenant returns the tenant the key belongs to.
func (k Key) Tenant() string { return k.tenant }

// Operation returns the operation the key is scoped to.
func (k Key) Operation() string { return k.operation }

// ClientKey returns the key as the client sent it.
func (k Key) ClientKey() string { return k.client }

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k == Key{} }

// LogHash is a short digest of the key for logs and metrics, which must
// never carry the key itself (it may hold a customer's order number):
// the same key always gives the same hash, so its lines can be found.
func (k Key) LogHash() string { return logHash(k.full) }

// logHash is LogHash of a key's string form, for one that does not parse.
func logHash(full string) string {
	var in [400]byte // longer than any key: the buffer stays on the stack
	sum := sha256.Sum256(append(append(in[:0], "log\x00"...), full...))
	return hex.EncodeToString(sum[:8])
}
