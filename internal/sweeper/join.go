package sweeper

import (
	"context"
	"iter"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Join is one Index over several, their shards one after another. It joins
// the idempotency table's stuck leases and the charges table's captures and
// cancels in flight.
func Join(indexes ...Index) Index { return joined(indexes) }

type joined []Index

func (j joined) Shards() int {
	n := 0
	for _, ix := range j {
		n += ix.Shards()
	}
	return n
}

func (j joined) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error] {
	for _, ix := range j {
		if shard < ix.Shards() {
			return ix.StuckLeases(ctx, shard, before)
		}
		shard -= ix.Shards()
	}
	return func(func(idem.Record, error) bool) {}
}
