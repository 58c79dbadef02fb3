package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Note appends e, an act no table's change names its actor for: an
// operator's settlement, say. It is an object of its own, filed under
// e.KeyHash for retention. Note sets e's Event, Table and Seq. Its Lease
// is the record's it saw (LeaseHash). The trail reads it just before the
// change that ended that lease: the operator's take-over (order.go).
func Note(ctx context.Context, archive *Archive, index *Index, e Entry, retention time.Duration) error {
	if archive == nil || index == nil || e.KeyHash == "" || e.At.IsZero() {
		return errors.New("audit: a note needs the trail, a key's hash and a time")
	}
	e.Event, e.Table, e.Seq = uuid.NewString(), TableOperator, strconv.FormatInt(e.At.UnixNano(), 10)
	if _, err := write(ctx, archive, index, []Entry{e}, map[string]bool{e.KeyHash: true}, retention, 1); err != nil {
		return fmt.Errorf("audit: note: %w", err)
	}
	return nil
}
