package testkit

import (
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// Clock is the settable clock tests share with the stores and handlers they
// build. Pass its Now as their clock. It is pkg/idem's, which users' tests
// have too.
type Clock = idemtest.Clock

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return idemtest.NewClock(t) }
