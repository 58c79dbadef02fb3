// Package testkit gives tests real DynamoDB, SQS, Secrets Manager and S3
// endpoints. It also gives whole deployments of the service on them:
// Deployment, in deployment.go, and its audit trail, in audit.go.
//
// DYNAMODB_ENDPOINT, SQS_ENDPOINT, SECRETSMANAGER_ENDPOINT and S3_ENDPOINT
// may be set. make test sets them, and so can anyone pointing the suite at
// DynamoDB Local or AWS. Those set are used with the SDK's default
// credential chain. For the ones unset, the first test that asks starts
// scripts/emulator.py. It runs from the project virtualenv (.venv) on a
// free loopback port. Every test in the process shares it, with static
// dummy credentials. The launcher exits when the test process closes its
// stdin.
package testkit

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/local/emulator"
	"github.com/chargeonce/chargeonce/internal/local/provision"
)

type endpoints struct {
	awsenv.Endpoints
	static bool // dummy credentials: we started the emulator ourselves
}

var (
	once    sync.Once
	started endpoints
	errInit error
)

// RepoRoot is the directory holding go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func resolve() (endpoints, error) {
	once.Do(func() {
		ep := endpoints{Endpoints: awsenv.EndpointsFrom(os.Getenv)}
		if ep.DynamoDB != "" && ep.SQS != "" && ep.SecretsManager != "" && ep.S3 != "" {
			started = ep
			return
		}
		url, err := startEmulator()
		if err != nil {
			errInit = err
			return
		}
		for _, e := range []*string{&ep.DynamoDB, &ep.SQS, &ep.SecretsManager, &ep.S3} {
			*e = cmp.Or(*e, url)
		}
		ep.static = true
		started = ep
	})
	return started, errInit
}

func startEmulator() (string, error) {
	e, err := emulator.Start(RepoRoot(), 0)
	if err != nil {
		return "", fmt.Errorf("testkit: %w (run `make venv`, or set %s, %s and %s)", err, awsenv.EnvDynamoDBEndpoint, awsenv.EnvSQSEndpoint, awsenv.EnvSecretsManagerEndpoint)
	}
	// The goroutine keeps e, and so its stdin pipe, referenced for the life
	// of the process. An emulator that dies early is said out loud.
	go func() {
		<-e.Exited()
		fmt.Fprintln(os.Stderr, "testkit: the emulator exited")
	}()
	return e.URL(), nil
}

// loadConfig returns an SDK configuration for the test endpoints.
func loadConfig() (aws.Config, error) {
	ep, err := resolve()
	if err != nil {
		return aws.Config{}, err
	}
	return awsenv.Config(context.Background(), ep.static)
}

// NewClients returns SDK clients for the test endpoints, with extra
// DynamoDB options applied (e.g. middleware that counts calls).
func NewClients(dynamoOpts ...func(*dynamodb.Options)) (awsenv.Clients, error) {
	cfg, err := loadConfig()
	if err != nil {
		return awsenv.Clients{}, err
	}
	c := awsenv.New(cfg, started.Endpoints)
	if os.Getenv(emulator.EnvKind) == "fakecloud" {
		// fakecloud sends x-amz-crc32: 0 with every answer. So the SDK's
		// check of it could only log a warning per call, in the middle of
		// benchmark lines. The answers are read as they are either way.
		dynamoOpts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}, dynamoOpts...)
	}
	if len(dynamoOpts) > 0 {
		c.DynamoDB = dynamodb.New(c.DynamoDB.Options(), dynamoOpts...)
	}
	return c, nil
}

// Config is the SDK configuration of the test endpoints, for a client
// NewClients does not build.
func Config(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Clients is NewClients for a test: it fails the test on error.
func Clients(t testing.TB, dynamoOpts ...func(*dynamodb.Options)) awsenv.Clients {
	t.Helper()
	c, err := NewClients(dynamoOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Endpoints returns the endpoints in use.
func Endpoints(t testing.TB) awsenv.Endpoints {
	t.Helper()
	ep, err := resolve()
	if err != nil {
		t.Fatal(err)
	}
	return ep.Endpoints
}

// CreateSecret creates the secret name holding value, as an operator
// creates the deployment's (docs/operations.md). It is deleted when the
// test ends.
func CreateSecret(t testing.TB, name, value string) {
	t.Helper()
	sm := Clients(t).SecretsManager
	if _, err := sm.CreateSecret(t.Context(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)}); err != nil {
		t.Fatalf("testkit: create secret: %v", err)
	}
	t.Cleanup(func() {
		_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{
			SecretId: aws.String(name), ForceDeleteWithoutRecovery: aws.Bool(true),
		})
	})
}

// Secret is CreateSecret under a unique name, which it returns.
func Secret(t testing.TB, value string) string {
	t.Helper()
	name := UniqueName("chargeonce/test")
	CreateSecret(t, name, value)
	return name
}

// RotateSecret puts value as the secret's current version, as a rotation
// does.
func RotateSecret(t testing.TB, name, value string) {
	t.Helper()
	if _, err := Clients(t).SecretsManager.PutSecretValue(t.Context(), &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(name), SecretString: aws.String(value),
	}); err != nil {
		t.Fatal(err)
	}
}

// UniqueName returns prefix followed by a random suffix. Tables, queues and
// keys take it, so they do not collide across parallel tests or runs.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// NewTable creates a table from def under a unique name and waits until it
// is active. It returns the name and a function that deletes the table.
func NewTable(ctx context.Context, def *dynamodb.CreateTableInput) (string, func(), error) {
	c, err := NewClients()
	if err != nil {
		return "", nil, err
	}
	in := *def
	in.TableName = aws.String(UniqueName(aws.ToString(def.TableName)))
	if _, err := provision.CreateTable(ctx, c.DynamoDB, &in); err != nil {
		return "", nil, fmt.Errorf("testkit: %w", err)
	}
	drop := func() {
		_, _ = c.DynamoDB.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: in.TableName})
	}
	return aws.ToString(in.TableName), drop, nil
}

// TempTable is NewTable for a test: the table is deleted when it ends.
func TempTable(t testing.TB, def *dynamodb.CreateTableInput) string {
	t.Helper()
	name, drop, err := NewTable(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return name
}
