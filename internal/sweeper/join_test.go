package sweeper

import (
	"context"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// shards is an Index whose shard i yields one record naming it.
type shards struct {
	name string
	n    int
}

func (s shards) Shards() int { return s.n }

func (s shards) StuckLeases(_ context.Context, shard int, _ time.Time) iter.Seq2[idem.Record, error] {
	return func(yield func(idem.Record, error) bool) {
		k, _ := idem.NewKey("t", s.name, string(rune('a'+shard)))
		yield(idem.Record{Key: k}, nil)
	}
}

func TestJoinReadsEveryShardOfEveryIndex(t *testing.T) {
	j := Join(shards{"leases", 3}, shards{"moves", 1})
	if j.Shards() != 4 {
		t.Fatalf("shards %d, want 4", j.Shards())
	}
	var got []string
	for i := range j.Shards() {
		for rec := range j.StuckLeases(t.Context(), i, time.Now()) {
			got = append(got, rec.Key.String())
		}
	}
	if want := []string{"t#leases#a", "t#leases#b", "t#leases#c", "t#moves#a"}; !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
}
