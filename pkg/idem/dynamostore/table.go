package dynamostore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// The table layout. This is the one definition of it: the tests, the local
// stack and the SAM template (checked by a test) all follow these names.
const (
	// AttrPK is the default partition key (Options.KeyAttribute):
	// Options.KeyPrefix + Key.String().
	AttrPK = "pk"
	// AttrExpiresAt is the record's retention deadline in epoch seconds.
	// DynamoDB's TTL is enabled on it. Options.TTLAttribute renames it.
	AttrExpiresAt = "expires_at"
	// AttrLeaseShard and AttrLeaseExpiresAt exist only while a record is
	// IN_FLIGHT. They are the keys of the sparse stuck-lease index.
	// Options.LeaseShardAttribute and LeaseExpiresAtAttribute rename them.
	AttrLeaseShard     = "lease_shard"
	AttrLeaseExpiresAt = "lease_expires_at"
	// IndexStuckLeases is the sparse GSI of in-flight records by lease
	// expiry (Options.StuckLeaseIndex renames it).
	IndexStuckLeases = "stuck-leases"

	// The other attributes have short names. A record pays for each name's
	// bytes in every write. doc.go lists them ("Record layout").
	attrStatus          = "st"
	attrFingerprint     = "fp"
	attrCreatedAt       = "ct"
	attrLeaseToken      = "tok"
	attrIntent          = "in"
	attrRespStatus      = "rs"
	attrRespHeaders     = "rh"
	attrRespBody        = "rb"
	attrRespGzip        = "rz"
	attrAttempts        = "attempts" // projected into the stuck-lease index: template.yaml names it
	attrAttemptDeadline = "ad"
	attrRegion          = "rg" // the Region whose store last took a lease (Options.Region)
	attrQueuedUntil     = "qu"
	attrQueuedRenewed   = "qr"
)

// DefaultSortKeyValue is every record's sort key in a table with a sort
// key whose partition key holds the key (Options.SortKeyValue).
const DefaultSortKeyValue = "idem"

// recordAttrs are the attributes a record writes besides its key, its TTL
// attribute and the index's keys. The table's own names must not take
// them.
var recordAttrs = []string{
	attrStatus, attrFingerprint, attrCreatedAt, attrLeaseToken, attrIntent,
	attrAttemptDeadline, attrAttempts, attrRespStatus, attrRespHeaders, attrRespBody, attrRespGzip, attrRegion,
	attrQueuedUntil, attrQueuedRenewed,
}

// layout is where a store's records go in its table: the table fields of
// Options, defaults applied and checked.
type layout struct {
	pk, sk string // the key schema's attributes; sk is empty without a sort key
	// keyIn holds KeyPrefix + Key.String(). fixedIn, the other key
	// attribute, holds fixed in every record; it is empty without a sort
	// key.
	keyIn, fixedIn string
	fixed          types.AttributeValue
	prefix         string
	ttl            string
	index          string // empty: StuckLeases scans
	// shard and lexp name the index's keys, which every IN_FLIGHT record
	// carries, index or not.
	shard, lexp string
}

// defaultLayout is the table TableInput and TTLInput describe.
var defaultLayout = layout{pk: AttrPK, keyIn: AttrPK, ttl: AttrExpiresAt, index: IndexStuckLeases, shard: AttrLeaseShard, lexp: AttrLeaseExpiresAt}

func newLayout(o Options) (layout, error) {
	l := layout{
		pk: cmp.Or(o.KeyAttribute, AttrPK), sk: o.SortKeyAttribute, prefix: o.KeyPrefix,
		ttl: cmp.Or(o.TTLAttribute, AttrExpiresAt), index: cmp.Or(o.StuckLeaseIndex, IndexStuckLeases),
		shard: cmp.Or(o.LeaseShardAttribute, AttrLeaseShard), lexp: cmp.Or(o.LeaseExpiresAtAttribute, AttrLeaseExpiresAt),
	}
	switch {
	case l.sk == "" && (o.PartitionKeyValue != "" || o.SortKeyValue != ""):
		return layout{}, errors.New("idem: Options.PartitionKeyValue and SortKeyValue need a SortKeyAttribute")
	case o.PartitionKeyValue != "" && o.SortKeyValue != "":
		return layout{}, errors.New("idem: Options.PartitionKeyValue and SortKeyValue exclude each other: the key goes in the sort key or in the partition key")
	case o.ScanStuckLeases && o.StuckLeaseIndex != "":
		return layout{}, errors.New("idem: Options.ScanStuckLeases is for a table without a stuck-lease index, and StuckLeaseIndex names one")
	case o.KeyPrefix != "" && !validPrefix(o.KeyPrefix):
		return layout{}, fmt.Errorf("idem: Options.KeyPrefix %q: want up to 128 letters, digits and . _ - : @, then one # at the end", o.KeyPrefix)
	case o.PartitionKeyValue != "":
		l.keyIn, l.fixedIn, l.fixed = l.sk, l.pk, str(o.PartitionKeyValue)
	case l.sk != "":
		l.keyIn, l.fixedIn, l.fixed = l.pk, l.sk, str(cmp.Or(o.SortKeyValue, DefaultSortKeyValue))
	default:
		l.keyIn = l.pk
	}
	if o.ScanStuckLeases {
		l.index = ""
	}
	names := []string{l.pk, l.sk, l.ttl, l.shard, l.lexp}
	for i, name := range names {
		if name != "" && (slices.Contains(recordAttrs, name) || slices.Contains(names[:i], name)) {
			return layout{}, fmt.Errorf("idem: Options: attribute name %q is taken by the record layout or another option", name)
		}
	}
	return l, nil
}

// validPrefix reports whether p is a tenant-like name followed by one '#'.
// Two such prefixes never begin one another. So a store that lists its
// records by its prefix never takes another store's for its own. With
// "idem#" and "idem#v2#", the first would read "idem#v2#acme#op#k" as the
// key v2#acme#op#k. Its client part may hold a '#'.
func validPrefix(p string) bool {
	name, ok := strings.CutSuffix(p, "#")
	if !ok || name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:@", r)) {
			return false
		}
	}
	return true
}

// putKey sets the primary key of k's record in item.
func (l *layout) putKey(item map[string]types.AttributeValue, k idem.Key) {
	item[l.keyIn] = str(l.prefix + k.String())
	if l.fixedIn != "" {
		item[l.fixedIn] = l.fixed
	}
}

// TableInput returns the CreateTable request for an idempotency table named
// name with the default attribute names. TTL is not part of CreateTable:
// enable it on AttrExpiresAt with UpdateTimeToLive (see TTLInput).
func TableInput(name string) *dynamodb.CreateTableInput { return defaultLayout.tableInput(name) }

// TableInput returns the CreateTable request for the store's table, laid
// out as its options say. It has the key attributes, and the stuck-lease
// index unless Options.ScanStuckLeases.
func (s *Store) TableInput() *dynamodb.CreateTableInput { return s.layout.tableInput(s.table) }

func (l *layout) tableInput(name string) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(l.pk), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(l.pk), KeyType: types.KeyTypeHash}},
	}
	if l.sk != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(l.sk), AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(l.sk), KeyType: types.KeyTypeRange})
	}
	if l.index == "" {
		return in
	}
	in.AttributeDefinitions = append(in.AttributeDefinitions, l.indexAttributes()...)
	in.GlobalSecondaryIndexes = []types.GlobalSecondaryIndex{{IndexName: aws.String(l.index), KeySchema: l.indexKeySchema(), Projection: indexProjection()}}
	return in
}

// IndexInput returns the UpdateTable request that adds the stuck-lease
// index to the store's existing table. The options name the index and its
// keys. Records carry the index's keys whether or not it exists. So
// DynamoDB backfills it with the commands already in flight. A table with
// provisioned capacity needs the index's ProvisionedThroughput set on the
// request. With Options.ScanStuckLeases there is no index to add: it
// returns an error.
func (s *Store) IndexInput() (*dynamodb.UpdateTableInput, error) {
	l := &s.layout
	if l.index == "" {
		return nil, errors.New("idem: IndexInput: Options.ScanStuckLeases names no index")
	}
	return &dynamodb.UpdateTableInput{
		TableName:            aws.String(s.table),
		AttributeDefinitions: l.indexAttributes(),
		GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
			IndexName: aws.String(l.index), KeySchema: l.indexKeySchema(), Projection: indexProjection(),
		}}},
	}, nil
}

// indexAttributes are the stuck-lease index's key attributes: numbers.
func (l *layout) indexAttributes() []types.AttributeDefinition {
	return []types.AttributeDefinition{
		{AttributeName: aws.String(l.shard), AttributeType: types.ScalarAttributeTypeN},
		{AttributeName: aws.String(l.lexp), AttributeType: types.ScalarAttributeTypeN},
	}
}

func (l *layout) indexKeySchema() []types.KeySchemaElement {
	return []types.KeySchemaElement{
		{AttributeName: aws.String(l.shard), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(l.lexp), KeyType: types.KeyTypeRange},
	}
}

// indexProjection carries the attempts along, so a sweep sees which keys
// keep failing.
func indexProjection() *types.Projection {
	return &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{attrAttempts}}
}

// TTLInput enables DynamoDB's TTL on AttrExpiresAt for the named table.
func TTLInput(name string) *dynamodb.UpdateTimeToLiveInput { return defaultLayout.ttlInput(name) }

// TTLInput enables DynamoDB's TTL on the store's table, on its TTL
// attribute (Options.TTLAttribute).
func (s *Store) TTLInput() *dynamodb.UpdateTimeToLiveInput { return s.layout.ttlInput(s.table) }

func (l *layout) ttlInput(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(l.ttl),
			Enabled:       aws.Bool(true),
		},
	}
}
