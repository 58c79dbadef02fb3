package idem

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The table layout. This is the one definition of it: the tests, the local
// stack and the SAM template (checked by a test) all follow these names.
const (
	// AttrPK is the default partition key (Options.KeyAttribute):
	// Options.KeyPrefix + Key.String().
	AttrPK = "pk"
	// AttrExpiresAt is the record's retention deadline in epoch seconds,
	// the attribute DynamoDB's TTL is enabled on.
	AttrExpiresAt = "expires_at"
	// AttrLeaseShard and AttrLeaseExpiresAt exist only while a record is
	// IN_FLIGHT; they are the keys of the sparse stuck-lease index.
	AttrLeaseShard     = "lease_shard"
	AttrLeaseExpiresAt = "lease_expires_at"
	// IndexStuckLeases is the sparse GSI of in-flight records by lease expiry.
	IndexStuckLeases = "stuck-leases"

	// The other attributes have short names: a record pays for each name's
	// bytes in every write (doc.go lists them, "Record layout").
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
)

// TableInput returns the CreateTable request for an idempotency table named
// name with the default attribute names. TTL is not part of CreateTable:
// enable it on AttrExpiresAt with UpdateTimeToLive (see TTLInput).
func TableInput(name string) *dynamodb.CreateTableInput { return tableInput(name, AttrPK) }

// TableInput returns the CreateTable request for the store's table, with
// its key attribute (Options.KeyAttribute).
func (s *Store) TableInput() *dynamodb.CreateTableInput {
	return tableInput(s.table, s.pkAttr)
}

func tableInput(name, keyAttr string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(keyAttr), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrLeaseShard), AttributeType: types.ScalarAttributeTypeN},
			{AttributeName: aws.String(AttrLeaseExpiresAt), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(keyAttr), KeyType: types.KeyTypeHash},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(IndexStuckLeases),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrLeaseShard), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrLeaseExpiresAt), KeyType: types.KeyTypeRange},
			},
			// The attempts ride along so a sweep sees which keys keep failing.
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{attrAttempts}},
		}},
	}
}

// TTLInput enables DynamoDB's TTL on AttrExpiresAt for the named table.
func TTLInput(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(AttrExpiresAt),
			Enabled:       aws.Bool(true),
		},
	}
}
