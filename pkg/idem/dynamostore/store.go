package dynamostore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// DynamoDBAPI is the part of *dynamodb.Client the store uses.
type DynamoDBAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// Options configure a Store. Zero fields take the defaults.
type Options struct {
	// Retention is how long a key deduplicates once its command is
	// settled (SUCCEEDED or FAILED_PERMANENT), counted from the end of the
	// lease that settled it. An IN_FLIGHT record has no expiry: TTL never
	// deletes it. Expired records read as absent. Default 24h.
	Retention time.Duration
	// ReleaseRetention is how long a RELEASED command's key still names
	// it, counted from its creation: a release does not restart it. A
	// caller that derives a provider's idempotency reference from (Key,
	// CreatedAt) sets it within the provider's deduplication window.
	// Default Retention.
	ReleaseRetention time.Duration
	// LeaseMargin is added to the context's remaining time to make a lease.
	// Default 5s.
	LeaseMargin time.Duration
	// MaxLease caps any lease. Default 15m.
	MaxLease time.Duration
	// DefaultLease is the lease when the context has no deadline. Default 30s.
	DefaultLease time.Duration
	// Shards spreads in-flight records over the stuck-lease index. Every
	// process writing or sweeping one table must agree. Default 16.
	Shards int
	// CompressAbove gzips stored response bodies larger than this. Default 1 KiB.
	CompressAbove int
	// Clock is the store's clock, which every function of package idem
	// reads through Backend.Now: give a test clock here alone. Default
	// time.Now.
	Clock func() time.Time
	// Random is the source of lease tokens. Default crypto/rand.Reader.
	Random io.Reader
	// The table's layout, for records in an existing table
	// (docs/tables.md); Store.TableInput and Store.TTLInput follow it.
	//
	// KeyAttribute names the table's partition key, a string attribute.
	// It holds KeyPrefix + Key.String(), or PartitionKeyValue. Default
	// AttrPK.
	KeyAttribute string
	// KeyPrefix is put before every record's key (KeyPrefix +
	// Key.String()), to tell the records apart from the table's other
	// items: a name of letters, digits and . _ - : @ (as a tenant, at most
	// 128 of them), then '#', so that no two stores' prefixes begin one
	// another. Default none; stores that share a table's stuck-lease index
	// each need a prefix of their own.
	KeyPrefix string
	// SortKeyAttribute names the table's sort key, a string attribute,
	// for a table that has one. Default none: a table without a sort key.
	SortKeyAttribute string
	// SortKeyValue is every record's sort key when the partition key
	// holds the key. Default DefaultSortKeyValue.
	SortKeyValue string
	// PartitionKeyValue, with a SortKeyAttribute, is every record's
	// partition key, and the key goes in the sort key: for a table whose
	// items share a static partition key. Default none.
	PartitionKeyValue string
	// TTLAttribute names the attribute DynamoDB's TTL is enabled on: a
	// settled record's end of retention, in epoch seconds. Default
	// AttrExpiresAt.
	TTLAttribute string
	// StuckLeaseIndex names the sparse GSI StuckLeases queries. Default
	// IndexStuckLeases.
	StuckLeaseIndex string
	// LeaseShardAttribute and LeaseExpiresAtAttribute name the index's
	// partition and sort keys, both numbers, which only IN_FLIGHT records
	// carry: to reuse an index the table has. Default AttrLeaseShard and
	// AttrLeaseExpiresAt.
	LeaseShardAttribute, LeaseExpiresAtAttribute string
	// ScanStuckLeases makes StuckLeases scan the table, for a table
	// without the stuck-lease index: every sweep then reads the whole
	// table. Default false.
	ScanStuckLeases bool
	// Region names the Region this store writes in, for a global
	// table. Every lease it takes marks the record with it
	// (Record.Region). Default none.
	Region string
	// Ledger, with Region, makes the store safe in a table that
	// replicates only eventually. A fresh claim goes to the Ledger
	// first. A record another Region claimed is written only once
	// the Ledger yields that Region. Begin then reads the record
	// before it writes (docs/backend.md, Regions). Default none: one
	// Region writes the table.
	Ledger idem.Ledger
}

// policy is the part of o every store applies alike, with its defaults.
func (o Options) policy() policy.Policy {
	return policy.WithDefaults(policy.Policy{
		Retention: o.Retention, ReleaseRetention: o.ReleaseRetention,
		LeaseMargin: o.LeaseMargin, MaxLease: o.MaxLease, DefaultLease: o.DefaultLease, Shards: o.Shards, CompressAbove: o.CompressAbove, Clock: o.Clock, Random: o.Random,
	})
}

// Store is an idempotency store on one DynamoDB table. It is safe for
// concurrent use.
type Store struct {
	db    DynamoDBAPI
	table string
	// pol holds every option but the table layout's, defaults applied.
	pol    policy.Policy
	layout layout
	// The parts of the requests that are the same for every call, built
	// once: the SDK only reads its input.
	tableName  *string
	beginNames map[string]string
	region     string
	ledger     idem.Ledger
}

// New returns a Store on table. optFns adjust the defaults.
func New(db DynamoDBAPI, table string, optFns ...func(*Options)) (*Store, error) {
	if db == nil {
		return nil, errors.New("idem: nil DynamoDB client")
	}
	if table == "" {
		return nil, errors.New("idem: empty table name")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Ledger != nil && o.Region == "" {
		return nil, errors.New("idem: a Ledger needs the store's Region")
	}
	l, err := newLayout(o)
	if err != nil {
		return nil, err
	}
	return &Store{
		db: db, table: table, pol: o.policy(), layout: l, tableName: aws.String(table),
		beginNames: map[string]string{"#pk": l.pk, "#exp": l.ttl},
		region:     o.Region, ledger: o.Ledger,
	}, nil
}

var _ idem.Backend = (*Store)(nil)

// Now is the store's clock, Options.Clock.
func (s *Store) Now() time.Time { return s.pol.Clock() }

// Shards is the number of stuck-lease index shards.
func (s *Store) Shards() int { return s.pol.Shards }

// Retention is how long a key deduplicates once settled.
func (s *Store) Retention() time.Duration { return s.pol.Retention }

// shard is key's stuck-lease shard. It hashes Key.String() whatever the
// KeyPrefix, so every store agrees on it.
func (s *Store) shard(key idem.Key) int { return s.pol.Shard(key.String()) }

func (s *Store) itemKey(k idem.Key) map[string]types.AttributeValue {
	key := make(map[string]types.AttributeValue, 2)
	s.layout.putKey(key, k)
	return key
}
