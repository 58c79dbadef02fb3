// Package testenv gives tests real DynamoDB and SQS endpoints.
//
// When DYNAMODB_ENDPOINT / SQS_ENDPOINT are set (make test sets them, and so
// can anyone pointing the suite at DynamoDB Local or AWS), those are used
// with the SDK's default credential chain. Otherwise the first test that asks
// starts scripts/emulator.py from the project virtualenv (.venv) on a free
// loopback port, shared by every test in the process, with static dummy
// credentials. The launcher exits when the test process closes its stdin.
package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/awsenv"
)

type endpoints struct {
	dynamo, sqs string
	static      bool // dummy credentials: we started the emulator ourselves
}

var (
	once    sync.Once
	started endpoints
	errInit error
	// Kept open for the life of the process; closing it stops the launcher.
	launcherStdin io.WriteCloser
)

// RepoRoot is the directory holding go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func resolve() (endpoints, error) {
	once.Do(func() {
		ep := endpoints{
			dynamo: os.Getenv(awsenv.EnvDynamoDBEndpoint),
			sqs:    os.Getenv(awsenv.EnvSQSEndpoint),
		}
		if ep.dynamo != "" && ep.sqs != "" {
			started = ep
			return
		}
		url, err := startEmulator()
		if err != nil {
			errInit = err
			return
		}
		if ep.dynamo == "" {
			ep.dynamo = url
		}
		if ep.sqs == "" {
			ep.sqs = url
		}
		ep.static = true
		started = ep
	})
	return started, errInit
}

func startEmulator() (string, error) {
	root := RepoRoot()
	python := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		return "", fmt.Errorf("testenv: no virtualenv at %s (run `make venv`, or set %s and %s): %w",
			python, awsenv.EnvDynamoDBEndpoint, awsenv.EnvSQSEndpoint, err)
	}
	cmd := exec.Command(python, filepath.Join(root, "scripts", "emulator.py"), "--port", "0", "--exit-with-stdin")
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("testenv: start emulator: %w", err)
	}
	launcherStdin = stdin
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- url
			}
		}
	}()
	select {
	case url := <-ready:
		return url, nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return "", fmt.Errorf("testenv: emulator did not start within 60s")
	}
}

// Config returns an SDK configuration for the test endpoints.
func Config(t testing.TB) aws.Config {
	t.Helper()
	ep, err := resolve()
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(regionOr(awsenv.DefaultRegion))}
	if ep.static {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatalf("testenv: load config: %v", err)
	}
	return cfg
}

func regionOr(def string) string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return def
}

// Endpoints returns the DynamoDB and SQS endpoints in use.
func Endpoints(t testing.TB) (dynamo, sqs string) {
	t.Helper()
	ep, err := resolve()
	if err != nil {
		t.Fatal(err)
	}
	return ep.dynamo, ep.sqs
}

// Clients returns SDK clients for the test endpoints, with extra DynamoDB
// options applied (e.g. middleware that counts calls).
func Clients(t testing.TB, dynamoOpts ...func(*dynamodb.Options)) awsenv.Clients {
	t.Helper()
	dynamo, sqs := Endpoints(t)
	c := awsenv.New(Config(t), dynamo, sqs)
	if len(dynamoOpts) > 0 {
		c.DynamoDB = dynamodb.New(c.DynamoDB.Options(), dynamoOpts...)
	}
	return c
}

// UniqueName returns prefix followed by a random suffix, for tables, queues
// and keys that must not collide across parallel tests or runs.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// CreateTable creates a table from def under a unique name, waits until it
// is active and deletes it when the test ends. It returns the name.
func CreateTable(t testing.TB, def *dynamodb.CreateTableInput) string {
	t.Helper()
	ctx := context.Background()
	client := Clients(t).DynamoDB
	in := *def
	in.TableName = aws.String(UniqueName(aws.ToString(def.TableName)))
	if _, err := client.CreateTable(ctx, &in); err != nil {
		t.Fatalf("testenv: create table %s: %v", aws.ToString(in.TableName), err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 2*time.Minute); err != nil {
		t.Fatalf("testenv: wait for table %s: %v", aws.ToString(in.TableName), err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: in.TableName})
	})
	return aws.ToString(in.TableName)
}
