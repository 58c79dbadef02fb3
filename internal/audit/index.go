package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The index table: one item per command and object holding its entries.
const (
	// AttrSubject is the command's key hash, or a refund claim's charge
	// (chargeSubject). AttrObject is the object's name.
	AttrSubject = "subject"
	AttrObject  = "object"
	// AttrExpires is when DynamoDB's TTL deletes the item, in epoch
	// seconds: Options.IndexRetention after the batch's first change.
	AttrExpires = "expires"
)

// IndexTableInput is the CreateTable request of an index table.
func IndexTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrSubject), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrObject), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrSubject), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrObject), KeyType: types.KeyTypeRange},
		},
	}
}

// IndexTTLInput enables TTL on AttrExpires of the index table name.
func IndexTTLInput(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(AttrExpires), Enabled: aws.Bool(true)},
	}
}

// IndexAPI is the part of *dynamodb.Client the index uses.
type IndexAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ IndexAPI = (*dynamodb.Client)(nil)

// Index finds the archive's objects that hold a command's entries, by
// the command's key hash, while its items last. It is a way in, not the
// trail: the archive holds every entry whatever the index says.
type Index struct {
	api   IndexAPI
	table *string
}

// NewIndex returns the index in table.
func NewIndex(api IndexAPI, table string) (*Index, error) {
	if api == nil || table == "" {
		return nil, errors.New("audit: the index needs a client and a table")
	}
	return &Index{api: api, table: aws.String(table)}, nil
}

// put files object under subject until expires. Filing it again writes
// the same item.
func (x *Index) put(ctx context.Context, subject, object string, expires time.Time) error {
	_, err := x.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: x.table,
		Item: map[string]types.AttributeValue{
			AttrSubject: &types.AttributeValueMemberS{Value: subject},
			AttrObject:  &types.AttributeValueMemberS{Value: object},
			AttrExpires: &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Unix(), 10)},
		},
	})
	if err != nil {
		return fmt.Errorf("audit: index %s: %w", subject, err)
	}
	return nil
}

// objects are the names of the objects filed under subject.
func (x *Index) objects(ctx context.Context, subject string) ([]string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 x.table,
		KeyConditionExpression:    aws.String("#s = :s"),
		ProjectionExpression:      aws.String("#o"),
		ExpressionAttributeNames:  map[string]string{"#s": AttrSubject, "#o": AttrObject},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: subject}},
	}
	var names []string
	for p := dynamodb.NewQueryPaginator(x.api, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("audit: index %s: %w", subject, err)
		}
		for _, it := range page.Items {
			if o, ok := it[AttrObject].(*types.AttributeValueMemberS); ok {
				names = append(names, o.Value)
			}
		}
	}
	return names, nil
}
