// Package awsenv builds the AWS SDK clients the service uses, honouring the
// endpoint overrides that point them at an emulator, DynamoDB Local or AWS.
package awsenv

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"

	//lint:ignore SA1019 otelaws is the instrumentation issue 12 chose; it still works with SDK v1.48 (the trace tests hold its spans). Its successor is the SDK's own tracing (smithy-go's smithyoteltracing).
	"go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws"
	"go.opentelemetry.io/otel/trace"
)

// Environment variables that redirect the SDK clients. Unset means AWS.
const (
	EnvDynamoDBEndpoint       = "DYNAMODB_ENDPOINT"
	EnvSQSEndpoint            = "SQS_ENDPOINT"
	EnvSecretsManagerEndpoint = "SECRETSMANAGER_ENDPOINT"
	EnvS3Endpoint             = "S3_ENDPOINT"
)

// Endpoints are where the clients send their requests; an empty one is
// AWS's.
type Endpoints struct {
	DynamoDB, SQS, SecretsManager, S3 string
}

// EndpointsFrom reads the four endpoint variables.
func EndpointsFrom(getenv func(string) string) Endpoints {
	return Endpoints{
		DynamoDB: getenv(EnvDynamoDBEndpoint), SQS: getenv(EnvSQSEndpoint),
		SecretsManager: getenv(EnvSecretsManagerEndpoint), S3: getenv(EnvS3Endpoint),
	}
}

// Emulator is every endpoint at url: an emulator that serves the four
// services.
func Emulator(url string) Endpoints {
	return Endpoints{DynamoDB: url, SQS: url, SecretsManager: url, S3: url}
}

// DefaultRegion is used when neither AWS_REGION nor a profile names one.
const DefaultRegion = "us-east-1"

// Clients holds one client per service, built once per process.
type Clients struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	// SecretsManager reads the functions' secrets (package secrets).
	SecretsManager *secretsmanager.Client
}

// Config reads the SDK's default configuration chain, in DefaultRegion when
// it names none. With dummyCredentials, it uses static dummy credentials
// instead of the chain's: an emulator on loopback takes any. Its clients
// guard their request bodies (dynamostore.GuardRequestBodies). So no
// applied call's answer is lost to a closed body.
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
	cfg.APIOptions = append(cfg.APIOptions, dynamostore.GuardRequestBodies)
	return cfg, nil
}

// Load builds the clients from the default chain, using DYNAMODB_ENDPOINT,
// SQS_ENDPOINT and SECRETSMANAGER_ENDPOINT when they are set. An operator's tools use it; the
// functions use FromLambdaEnv.
func Load(ctx context.Context) (Clients, error) {
	cfg, err := Config(ctx, false)
	if err != nil {
		return Clients{}, err
	}
	return New(cfg, EndpointsFrom(os.Getenv)), nil
}

// LoadS3 is an S3 client from the default chain, at S3_ENDPOINT when it
// is set. The command chargectl admin audit reads the trail's bucket with it.
func LoadS3(ctx context.Context) (*s3.Client, error) {
	cfg, err := Config(ctx, false)
	if err != nil {
		return nil, err
	}
	return S3(cfg, os.Getenv(EnvS3Endpoint)), nil
}

// FromLambdaEnv builds a function's clients from what Lambda, SAM CLI and the
// RIE give every function. That is the region, the execution role's
// credentials as variables, and the endpoints. The default chain would link the SSO,
// STS and sign-in clients for profiles a function never has: 1.2 MiB of
// each bootstrap.
func FromLambdaEnv(getenv func(string) string) Clients {
	return New(LambdaConfig(getenv), EndpointsFrom(getenv))
}

// LambdaConfig is the configuration FromLambdaEnv builds its clients on.
// It carries Config's guard too.
func LambdaConfig(getenv func(string) string) aws.Config {
	region := getenv("AWS_REGION")
	if region == "" {
		region = DefaultRegion
	}
	creds := credentials.NewStaticCredentialsProvider(getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"))
	return aws.Config{
		Region: region, Credentials: aws.NewCredentialsCache(creds),
		APIOptions: []func(*middleware.Stack) error{dynamostore.GuardRequestBodies},
	}
}

// S3 is an S3 client on cfg, at url unless it is empty (AWS's). An
// emulator serves every bucket on its one host: its requests name the
// bucket in the path.
func S3(cfg aws.Config, url string) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = endpoint(url), url != "" })
}

// New builds the clients from cfg; an empty endpoint keeps the AWS default.
func New(cfg aws.Config, ep Endpoints) Clients {
	return Clients{
		DynamoDB: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = endpoint(ep.DynamoDB) }),
		SQS:      sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = endpoint(ep.SQS) }),
		SecretsManager: secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
			o.BaseEndpoint = endpoint(ep.SecretsManager)
		}),
	}
}

// endpoint is a client's BaseEndpoint: nil, AWS's, when url is empty.
func endpoint(url string) *string {
	if url == "" {
		return nil
	}
	return aws.String(url)
}

// Traced returns copies of c whose every call is a client span of tp
// (otelaws), DynamoDB's and SQS's attributes included: table and queue,
// never an item, a message body or a secret's value.
func Traced(c Clients, tp trace.TracerProvider) Clients {
	instrument := func(apiOptions *[]func(*middleware.Stack) error) {
		// A clone: the copied options share the original's backing array.
		*apiOptions = slices.Clone(*apiOptions)
		otelaws.AppendMiddlewares(apiOptions, otelaws.WithTracerProvider(tp))
	}
	return Clients{
		DynamoDB:       dynamodb.New(c.DynamoDB.Options(), func(o *dynamodb.Options) { instrument(&o.APIOptions) }),
		SQS:            sqs.New(c.SQS.Options(), func(o *sqs.Options) { instrument(&o.APIOptions) }),
		SecretsManager: secretsmanager.New(c.SecretsManager.Options(), func(o *secretsmanager.Options) { instrument(&o.APIOptions) }),
	}
}
