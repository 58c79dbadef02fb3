// Package dynamotest gives pkg/idem's own tests a DynamoDB, and tables that
// live for one test. It uses the endpoint DYNAMODB_ENDPOINT names. make
// test starts an emulator and sets it. Point it at DynamoDB on AWS to run
// the suite there. Without the variable the tests fail, saying so: nothing
// is skipped. Env is a DynamoDB store on such a table, with the steps its
// tests share. It needs the AWS SDK only, so the module's tests pull in
// nothing else.
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// EnvEndpoint names the DynamoDB endpoint the tests use.
const EnvEndpoint = "DYNAMODB_ENDPOINT"

// Client returns a client of the endpoint, with optFns applied. Its
// credentials are the environment's AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY. Any will do for an emulator. Its region is
// AWS_REGION or us-east-1. It guards its request bodies, as an adopter's
// client should (dynamostore.GuardRequestBodies).
func Client(t testing.TB, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	endpoint := os.Getenv(EnvEndpoint)
	if endpoint == "" {
		t.Fatalf("dynamotest: %s is not set: run the tests with make test, or point it at an emulator or DynamoDB on AWS", EnvEndpoint)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: env("AWS_ACCESS_KEY_ID", "test"), SecretAccessKey: env("AWS_SECRET_ACCESS_KEY", "test"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}, nil
	})
	return dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(endpoint), Region: region, Credentials: creds,
		APIOptions: []func(*middleware.Stack) error{dynamostore.GuardRequestBodies},
	}, optFns...)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Table creates def under a unique name, waits until it is active, and
// deletes it when the test ends.
func Table(t testing.TB, def *dynamodb.CreateTableInput) string {
	t.Helper()
	db := Client(t)
	in := *def
	in.TableName = aws.String(UniqueName(aws.ToString(def.TableName)))
	ctx := context.Background()
	_, err := db.CreateTable(ctx, &in)
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		// The name is unique: the SDK retried a create whose answer was lost.
		err = nil
	}
	if err != nil {
		t.Fatalf("dynamotest: create table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: in.TableName})
	})
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, time.Minute); err != nil {
		t.Fatalf("dynamotest: table %s: %v", aws.ToString(in.TableName), err)
	}
	return aws.ToString(in.TableName)
}

// UniqueName returns prefix and a random suffix. Tables and keys take it,
// so they do not collide across parallel tests or runs.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
