package charge_test

import (
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestGetWithAnIDOfAnotherFormIsNotFound: any id that is not "ch_" and 24
// hex digits answers 404 without a call to the store. DynamoDB refuses a
// sort key over 1,024 bytes with a ValidationException, which was a 500.
func TestGetWithAnIDOfAnotherFormIsNotFound(t *testing.T) {
	t.Parallel()
	var calls testkit.CallCounter
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, calls.Option())
	}})
	for name, id := range map[string]string{
		"over 1,024 bytes":   "ch_" + strings.Repeat("a", 2000),
		"one digit short":    "ch_00000000000000000000000",
		"one digit too many": "ch_0000000000000000000000000",
		"upper-case hex":     "ch_00000000000000000000000A",
		"another prefix":     "re_000000000000000000000000",
		"not hex":            "ch_00000000000000000000000g",
	} {
		calls.Snapshot()
		wantStatus(t, h.do(get("acme", id)), 404)
		if got := calls.Snapshot(); len(got) != 0 {
			t.Errorf("%s: the GET made DynamoDB calls %v, want none", name, got)
		}
	}
}
