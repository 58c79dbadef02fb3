package idem

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Limits on the parts of a Key.
const (
	MaxClientKeyLen = 255
	MaxTenantLen    = 128
	MaxOperationLen = 64
)

// Key scopes a client's idempotency key to a tenant and an operation, so the
// same client key used by two tenants, or for two operations, names two
// different commands.
type Key struct {
	tenant, operation, client string
	full                      string // String, joined once: a request asks for it several times
}

const keySep = "#"

// NewKey validates and scopes a client key. The tenant is 1 to 128 bytes
// of printable UTF-8 text without '#', so an identity provider's subject
// ("auth0|abc") fits. The operation is a short identifier (letters,
// digits and . _ - : @). The client key is 1 to 255 printable ASCII
// characters. An invalid part gives an error wrapping ErrInvalidKey.
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
func CheckTenant(s string) error {
	switch {
	case s == "":
		return invalid("tenant", "empty")
	case len(s) > MaxTenantLen:
		return invalid("tenant", fmt.Sprintf("longer than %d bytes", MaxTenantLen))
	case !utf8.ValidString(s):
		return invalid("tenant", "not UTF-8 text")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '#' {
			return invalid("tenant", "only printable characters other than '#' are allowed")
		}
	}
	return nil
}

// CheckClientKey reports whether s is a valid client key.
func CheckClientKey(s string) error {
	switch {
	case s == "":
		return invalid("client key", "empty")
	case len(s) > MaxClientKeyLen:
		return invalid("client key", fmt.Sprintf("longer than %d characters", MaxClientKeyLen))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return invalid("client key", "not printable ASCII")
		}
	}
	return nil
}

func checkIdent(field, s string, max int) error {
	if s == "" {
		return invalid(field, "empty")
	}
	if len(s) > max {
		return invalid(field, fmt.Sprintf("longer than %d characters", max))
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:@", r)
		if !ok {
			return invalid(field, "only letters, digits and . _ - : @ are allowed")
		}
	}
	return nil
}

func invalid(field, reason string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidKey, field, reason)
}

// ParseKey is the inverse of Key.String.
func ParseKey(s string) (Key, error) {
	tenant, rest, ok1 := strings.Cut(s, keySep)
	operation, client, ok2 := strings.Cut(rest, keySep)
	if !ok1 || !ok2 {
		return Key{}, invalid("key", "not of the form tenant#operation#key")
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

// LogHash is a short digest of the key for logs and metrics, which must
// never carry the key itself (it may hold a customer's order number):
// the same key always gives the same hash, so its lines can be found.
func (k Key) LogHash() string { return policy.LogHash(k.full) }
