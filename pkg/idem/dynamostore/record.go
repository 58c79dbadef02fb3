package dynamostore

import (
	"context"
	"encoding/hex"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Get reads the record for key with a strongly consistent read. A missing
// record, or one past its retention that DynamoDB has not deleted yet,
// gives ErrNotFound. A RELEASED record is returned as it is.
func (s *Store) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	rec, err := s.stored(ctx, key)
	if err != nil {
		return nil, err
	}
	if policy.Expired(rec.ExpiresAt, s.pol.Clock()) {
		return nil, fmt.Errorf("idem: get %s: %w", key.LogHash(), idem.ErrNotFound)
	}
	return rec, nil
}

// stored reads key's record, even one past its retention. ErrNotFound
// says no item is stored.
func (s *Store) stored(ctx context.Context, key idem.Key) (*idem.Record, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.tableName,
		Key:            s.itemKey(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", key.LogHash(), AsUnavailable(err))
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("idem: get %s: %w", key.LogHash(), idem.ErrNotFound)
	}
	return s.decodeRecord(key, out.Item)
}

// StuckLeases yields, from one shard, the in-flight records whose lease
// expired before the given time, oldest first. It queries the stuck-lease
// index (Options.StuckLeaseIndex), a page at a time: the table must have
// it, or DynamoDB refuses the query. With Options.ScanStuckLeases it scans
// the table instead. Terminal and released records are not listed. The
// lease's end is kept in epoch milliseconds, and before counts to its
// millisecond: a lease is listed when its end's millisecond is before
// before's. Stop early by breaking out of the loop. An item that does not
// decode is yielded as an error wrapping ErrUnreadableRecord, and the
// listing goes on; any other error ends it.
func (s *Store) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error] {
	if s.layout.index == "" {
		return s.scanStuckLeases(ctx, shard, before)
	}
	in := &dynamodb.QueryInput{
		TableName:              s.tableName,
		IndexName:              aws.String(s.layout.index),
		KeyConditionExpression: aws.String("#shard = :shard AND #lexp < :before"),
		Limit:                  aws.Int32(100),
	}
	names, values := map[string]string{"#shard": s.layout.shard, "#lexp": s.layout.lexp}, map[string]types.AttributeValue{":shard": num(int64(shard)), ":before": millis(before)}
	in.FilterExpression = s.ownRecords(names, values)
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = names, values
	return func(yield func(idem.Record, error) bool) {
		p := dynamodb.NewQueryPaginator(s.db, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(idem.Record{}, fmt.Errorf("idem: stuck leases shard %d, index %s: %w", shard, s.layout.index, AsUnavailable(err)))
				return
			}
			for _, item := range page.Items {
				sl, err := s.decodeStuck(item)
				if !yield(sl, err) {
					return
				}
			}
		}
	}
}

// scanStuckLeases is StuckLeases without the index. The shard is one
// segment of a parallel Scan, so a sweep of every shard reads the table
// once, whatever its size; a Scan has no order, so the segment's stuck
// leases are gathered and sorted before the first is yielded.
func (s *Store) scanStuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error] {
	filter := "#lexp < :before"
	names := map[string]string{"#key": s.layout.keyIn, "#lexp": s.layout.lexp, "#att": attrAttempts}
	values := map[string]types.AttributeValue{":before": millis(before)}
	if own := s.ownRecords(names, values); own != nil {
		filter += " AND " + *own
	}
	in := &dynamodb.ScanInput{
		TableName:                 s.tableName,
		FilterExpression:          aws.String(filter),
		ProjectionExpression:      aws.String("#key, #lexp, #att"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		Segment:                   aws.Int32(int32(shard)),
		TotalSegments:             aws.Int32(int32(s.pol.Shards)),
	}
	return func(yield func(idem.Record, error) bool) {
		var found []idem.Record
		for p := dynamodb.NewScanPaginator(s.db, in); p.HasMorePages(); {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(idem.Record{}, fmt.Errorf("idem: stuck leases shard %d, scan: %w", shard, AsUnavailable(err)))
				return
			}
			for _, item := range page.Items {
				sl, err := s.decodeStuck(item)
				if err != nil {
					if !yield(sl, err) {
						return
					}
					continue
				}
				found = append(found, sl)
			}
		}
		slices.SortFunc(found, func(a, b idem.Record) int { return a.LeaseExpiresAt.Compare(b.LeaseExpiresAt) })
		for _, sl := range found {
			if !yield(sl, nil) {
				return
			}
		}
	}
}

// ownRecords is the filter that keeps this store's records out of a table
// that others share (another static partition key, another key prefix),
// adding what it names to names and values; nil when the table is its own.
// The stuck-lease index holds every in-flight record of the table, so its
// query needs the filter as much as a Scan does.
func (s *Store) ownRecords(names map[string]string, values map[string]types.AttributeValue) *string {
	var conds []string
	if s.layout.fixedIn != "" {
		conds = append(conds, "#fixed = :fixed")
		names["#fixed"], values[":fixed"] = s.layout.fixedIn, s.layout.fixed
	}
	if s.layout.prefix != "" {
		conds = append(conds, "begins_with(#key, :prefix)")
		names["#key"], values[":prefix"] = s.layout.keyIn, str(s.layout.prefix)
	}
	if len(conds) == 0 {
		return nil
	}
	return aws.String(strings.Join(conds, " AND "))
}

// decodeStuck reads an item of the stuck-lease listing. An item that does
// not decode gives an error wrapping
// ErrUnreadableRecord, naming the item by its key's hash only: the key
// may be a client's, and the parser's error would quote it.
func (s *Store) decodeStuck(item map[string]types.AttributeValue) (idem.Record, error) {
	v, ok := item[s.layout.keyIn].(*types.AttributeValueMemberS)
	if !ok {
		return idem.Record{}, fmt.Errorf("idem: stuck lease without %s: %w", s.layout.keyIn, idem.ErrUnreadableRecord)
	}
	stored, ok := strings.CutPrefix(v.Value, s.layout.prefix)
	unreadable := func(why string) error {
		return fmt.Errorf("idem: stuck lease key:%s: %w: %s", policy.LogHash(stored), idem.ErrUnreadableRecord, why)
	}
	if !ok {
		return idem.Record{}, unreadable(fmt.Sprintf("without the key prefix %q", s.layout.prefix))
	}
	key, err := idem.ParseKey(stored)
	if err != nil {
		return idem.Record{}, unreadable("not a key")
	}
	ms, err := numberAttr(item, s.layout.lexp)
	if err != nil {
		return idem.Record{}, unreadable(err.Error())
	}
	attempts, _ := numberAttr(item, attrAttempts) // absent until the first take-over
	return idem.Record{Key: key, LeaseExpiresAt: time.UnixMilli(ms), Attempts: int(attempts)}, nil
}

// Decode reads the record an item of the store's table holds, as a Scan
// or DynamoDB Streams hands it over (a stream record's old or new image),
// expired or not. An item that is not one of the store's records gives an
// error wrapping ErrUnreadableRecord, naming its key by its hash only.
func (s *Store) Decode(item map[string]types.AttributeValue) (*idem.Record, error) {
	v, ok := item[s.layout.keyIn].(*types.AttributeValueMemberS)
	if !ok {
		return nil, fmt.Errorf("idem: item without %s: %w", s.layout.keyIn, idem.ErrUnreadableRecord)
	}
	unreadable := func(why string) error {
		return fmt.Errorf("idem: item key:%s: %w: %s", policy.LogHash(v.Value), idem.ErrUnreadableRecord, why)
	}
	if s.layout.fixedIn != "" {
		if f, ok := item[s.layout.fixedIn].(*types.AttributeValueMemberS); !ok || f.Value != s.layout.fixed.(*types.AttributeValueMemberS).Value {
			return nil, unreadable("another store's item")
		}
	}
	stored, ok := strings.CutPrefix(v.Value, s.layout.prefix)
	if !ok {
		return nil, unreadable(fmt.Sprintf("without the key prefix %q", s.layout.prefix))
	}
	key, err := idem.ParseKey(stored)
	if err != nil {
		return nil, unreadable("not a key")
	}
	rec, err := s.decodeRecord(key, item)
	if err != nil {
		return nil, unreadable(err.Error())
	}
	return rec, nil
}

func (s *Store) decodeRecord(key idem.Key, item map[string]types.AttributeValue) (*idem.Record, error) {
	rec := &idem.Record{Key: key}
	if v, ok := item[attrStatus].(*types.AttributeValueMemberS); ok {
		rec.Status = idem.Status(v.Value)
	}
	if v, ok := item[attrFingerprint].(*types.AttributeValueMemberB); ok {
		rec.Fingerprint = hex.EncodeToString(v.Value)
	}
	if v, ok := item[attrIntent].(*types.AttributeValueMemberB); ok {
		rec.Intent = v.Value
	}
	if v, ok := item[attrLeaseToken].(*types.AttributeValueMemberS); ok {
		rec.LeaseToken = v.Value
	}
	if v, ok := item[attrRegion].(*types.AttributeValueMemberS); ok {
		rec.Region = v.Value
	}
	created, err := numberAttr(item, attrCreatedAt)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt = time.UnixMilli(created)
	if attempts, err := numberAttr(item, attrAttempts); err == nil {
		rec.Attempts = int(attempts)
	}
	if rec.Status == idem.StatusInFlight {
		lexp, err := numberAttr(item, s.layout.lexp)
		if err != nil {
			return nil, err
		}
		deadline, err := numberAttr(item, attrAttemptDeadline)
		if err != nil {
			return nil, err
		}
		rec.LeaseExpiresAt, rec.AttemptDeadline = time.UnixMilli(lexp), time.UnixMilli(deadline)
		return rec, nil
	}
	exp, err := numberAttr(item, s.layout.ttl)
	if err != nil {
		return nil, err
	}
	rec.ExpiresAt = time.Unix(exp, 0)
	switch {
	case rec.Status.Terminal():
		if rec.Response, err = decodeResponse(item); err != nil {
			return nil, err
		}
	case rec.Status != idem.StatusReleased:
		return nil, fmt.Errorf("idem: record %s has unknown status %q", key.LogHash(), rec.Status)
	}
	return rec, nil
}

func numberAttr(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("idem: record has no number %s", name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("idem: record attribute %s: %w", name, err)
	}
	return n, nil
}
