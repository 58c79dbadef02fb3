package awsenv

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

func TestFromLambdaEnv(t *testing.T) {
	env := map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
		EnvDynamoDBEndpoint: "http://127.0.0.1:4566", EnvSecretsManagerEndpoint: "http://127.0.0.1:4567",
	}
	c := FromLambdaEnv(func(name string) string { return env[name] })
	d, q := c.DynamoDB.Options(), c.SQS.Options()
	if d.Region != DefaultRegion || q.Region != DefaultRegion {
		t.Errorf("regions %q, %q without AWS_REGION; want %q", d.Region, q.Region, DefaultRegion)
	}
	if got := aws.ToString(d.BaseEndpoint); got != env[EnvDynamoDBEndpoint] {
		t.Errorf("DynamoDB endpoint %q, want %q", got, env[EnvDynamoDBEndpoint])
	}
	if got := aws.ToString(c.SecretsManager.Options().BaseEndpoint); got != env[EnvSecretsManagerEndpoint] {
		t.Errorf("Secrets Manager endpoint %q, want %q", got, env[EnvSecretsManagerEndpoint])
	}
	if q.BaseEndpoint != nil {
		t.Errorf("SQS endpoint %q without SQS_ENDPOINT, want the AWS default", *q.BaseEndpoint)
	}
	creds, err := d.Credentials.Retrieve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if creds.AccessKeyID != "AKIDEXAMPLE" || creds.SecretAccessKey != "secret" || creds.SessionToken != "token" {
		t.Errorf("credentials %+v, want the role's from the environment", creds)
	}

	env["AWS_REGION"] = "eu-west-1"
	if got := FromLambdaEnv(func(name string) string { return env[name] }).DynamoDB.Options().Region; got != "eu-west-1" {
		t.Errorf("region %q, want AWS_REGION's eu-west-1", got)
	}
}

// TestConfigsGuardRequestBodies: every client awsenv builds keeps the SDK
// from resending a call DynamoDB applied (dynamostore.GuardRequestBodies).
func TestConfigsGuardRequestBodies(t *testing.T) {
	cfg, err := Config(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]aws.Config{"Config": cfg, "LambdaConfig": LambdaConfig(func(string) string { return "" })}
	for name, cfg := range configs {
		// The check stops the call before it is sent.
		checked := errors.New("stack checked")
		check := func(stack *middleware.Stack) error {
			if _, ok := stack.Deserialize.Get("GuardRequestBodies"); !ok {
				t.Errorf("%s: the stack lacks dynamostore.GuardRequestBodies", name)
			}
			return checked
		}
		db := New(cfg, Emulator("http://127.0.0.1:1")).DynamoDB
		_, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{}, func(o *dynamodb.Options) {
			o.APIOptions = append(o.APIOptions, check)
		})
		if !errors.Is(err, checked) {
			t.Errorf("%s: ListTables: %v, want the check's error", name, err)
		}
	}
}
