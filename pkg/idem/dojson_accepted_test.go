package idem_test

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

type reviewPtrText struct{ S string }

func (t *reviewPtrText) MarshalText() ([]byte, error) { return []byte(t.S), nil }

type reviewIntKey int

func (k reviewIntKey) MarshalText() ([]byte, error) { return []byte{0xe9, byte('0' + k)}, nil }

type reviewInnerP struct{ Name string }
type ReviewOuterP struct {
	*reviewInnerP
	A int
}

type ReviewPtrTextHolder struct{ T reviewPtrText }

// TestDoJSONAcceptsWhatJSONWritesFaithfully: paths the change handles: refused when json.Marshal
// writes bytes that are not UTF-8, accepted otherwise, and no panic.
func TestDoJSONAcceptsWhatJSONWritesFaithfully(t *testing.T) {
	t.Parallel()
	var nilOuter *ReviewOuterP
	for name, c := range map[string]struct {
		req     any
		refused bool
	}{
		"embedded unexported pointer to struct": {ReviewOuterP{&reviewInnerP{"\xe9"}, 1}, true},
		"embedded nil pointer":                  {ReviewOuterP{nil, 1}, false},
		"nil request pointer":                   {nilOuter, false},
		"array of strings":                      {[2]string{"a", "\xe9"}, true},
		"byte array":                            {[2]byte{0xe9, 0xe8}, false},
		"int key with MarshalText":              {map[reviewIntKey]int{1: 1}, true},
		"json.Number":                           {map[string]json.Number{"n": "12"}, false},
		"int with ,string": {struct {
			N int `json:"n,string"`
		}{5}, false},
		"interface holding a struct":           {map[string]any{"x": reviewInnerP{"\xe9"}}, true},
		"pointer MarshalText, addressable":     {&ReviewPtrTextHolder{reviewPtrText{"\xe9"}}, true},
		"pointer MarshalText, not addressable": {ReviewPtrTextHolder{reviewPtrText{"\xe9"}}, true},
		"slice elem pointer MarshalText":       {[]reviewPtrText{{"\xe9"}}, true},
		"map value pointer MarshalText":        {map[string]reviewPtrText{"k": {"\xe9"}}, true},
		"raw message, escaped lone surrogate":  {json.RawMessage(`"\ud800"`), true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			_, err := runDoJSON(t, memstore.New(), idemtest.UniqueKey(t, "acme"), c.req, &runs, 1)
			b, merr := json.Marshal(c.req)
			if c.refused != errors.Is(err, idem.ErrInvalidJSON) {
				t.Errorf("%s: err %v; want refused %v (json %q, %v)", name, err, c.refused, b, merr)
			}
		})
	}
}
