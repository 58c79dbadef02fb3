package testkit

import "github.com/chargeonce/chargeonce/pkg/idem/idemtest"

// CallCounter counts DynamoDB calls by operation name: idemtest's.
type CallCounter = idemtest.CallCounter
