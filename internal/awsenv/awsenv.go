// Package awsenv builds the AWS SDK clients the service uses, honouring the
// endpoint overrides that point them at an emulator, DynamoDB Local or AWS,
// and creates tables on them for the local stack and the tests.
package awsenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Environment variables that redirect the SDK clients. Unset means AWS.
const (
	EnvDynamoDBEndpoint = "DYNAMODB_ENDPOINT"
	EnvSQSEndpoint      = "SQS_ENDPOINT"
)

// DefaultRegion is used when neither AWS_REGION nor a profile names one.
const DefaultRegion = "us-east-1"

// Clients holds one client per service, built once per process.
type Clients struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
}

// Config reads the SDK's default configuration chain, in DefaultRegion when
// it names none. With dummyCredentials, it uses static dummy credentials
// instead of the chain's: an emulator on loopback takes any.
func Config(ctx context.Context, dummyCredentials bool) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if dummyCredentials {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("awsenv: load config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	return cfg, nil
}

// Load builds the clients from the default chain, using DYNAMODB_ENDPOINT
// and SQS_ENDPOINT when they are set.
func Load(ctx context.Context) (Clients, error) {
	cfg, err := Config(ctx, false)
	if err != nil {
		return Clients{}, err
	}
	return New(cfg, os.Getenv(EnvDynamoDBEndpoint), os.Getenv(EnvSQSEndpoint)), nil
}

// New builds the clients from cfg; an empty endpoint keeps the AWS default.
func New(cfg aws.Config, dynamoEndpoint, sqsEndpoint string) Clients {
	return Clients{
		DynamoDB: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			if dynamoEndpoint != "" {
				o.BaseEndpoint = aws.String(dynamoEndpoint)
			}
		}),
		SQS: sqs.NewFromConfig(cfg, func(o *sqs.Options) {
			if sqsEndpoint != "" {
				o.BaseEndpoint = aws.String(sqsEndpoint)
			}
		}),
	}
}

// CreateTable creates a table and waits until it is active. A table of that
// name that already exists is waited for and kept as it is, and reported
// with created false: a reused DynamoDB Local, or an SDK retry of a call
// whose first attempt created the table but whose answer was lost.
func CreateTable(ctx context.Context, db *dynamodb.Client, in *dynamodb.CreateTableInput) (created bool, err error) {
	name := aws.ToString(in.TableName)
	_, err = db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return false, fmt.Errorf("awsenv: create table %s: %w", name, err)
	}
	created = err == nil
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 2*time.Minute); err != nil {
		return false, fmt.Errorf("awsenv: wait for table %s: %w", name, err)
	}
	return created, nil
}
