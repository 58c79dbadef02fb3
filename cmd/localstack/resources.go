package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Names of the local stack's tables, queues and secrets.
const (
	idempotencyTable    = "chargeonce-idempotency"
	chargesTable        = "chargeonce-charges"
	limitsTable         = "chargeonce-limits"
	reconcileQueue      = "chargeonce-reconcile"
	chargeRequestsQueue = "chargeonce-charge-requests"
	providerSecret      = "chargeonce/provider-api-key"
	webhookSecret       = "chargeonce/stripe-webhook-secret"
	auditBucket         = "chargeonce-audit"
	auditIndexTable     = "chargeonce-audit-index"
)

// The secrets' first values: the provider simulator's key, the Stripe
// simulator's, and the secret that signs the Stripe simulator's webhooks.
const (
	simKey                 = "sk_local_providersim"
	stripeSimKey           = "sk_test_localstack"
	stripeSimWebhookSecret = "whsec_localstack"
)

// resources are what the template's resources are locally.
type resources struct {
	idempotencyTable, chargesTable, limitsTable string
	queue, chargeRequests                       queue.Queues
	// streams are the tables' streams' ARNs, which the audit function
	// reads.
	streams []string
}

// createSecrets creates the provider's API key (key its first value) and
// the webhook signing secret in Secrets Manager, as an operator creates a
// deployment's (docs/operations.md). A secret that already exists (a
// reused endpoint) is kept as it is.
func createSecrets(ctx context.Context, c awsenv.Clients, key string) error {
	for name, value := range map[string]string{providerSecret: key, webhookSecret: stripeSimWebhookSecret} {
		_, err := c.SecretsManager.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
		if _, exists := errors.AsType[*smtypes.ResourceExistsException](err); err != nil && !exists {
			return fmt.Errorf("secret %s: %w", name, err)
		}
	}
	return nil
}

// createResources creates the tables and their TTLs, the queues, and the
// audit trail's bucket, and turns the tables' streams on. It uses the same
// definitions the template is checked against. Tables that already exist
// (a reused DynamoDB Local) are kept as they are.
func createResources(ctx context.Context, c awsenv.Clients, store *s3.Client) (resources, error) {
	for _, t := range []struct {
		table *dynamodb.CreateTableInput
		ttl   *dynamodb.UpdateTimeToLiveInput
	}{
		{dynamostore.TableInput(idempotencyTable), dynamostore.TTLInput(idempotencyTable)},
		{charge.TableInput(chargesTable), nil},
		{limit.TableInput(limitsTable), limit.TTLInput(limitsTable)},
		{audit.IndexTableInput(auditIndexTable), audit.IndexTTLInput(auditIndexTable)},
	} {
		created, err := provision.CreateTable(ctx, c.DynamoDB, t.table)
		if err != nil {
			return resources{}, err
		}
		if created && t.ttl != nil {
			if _, err := c.DynamoDB.UpdateTimeToLive(ctx, t.ttl); err != nil {
				return resources{}, fmt.Errorf("ttl on %s: %w", aws.ToString(t.ttl.TableName), err)
			}
		}
	}
	q, err := queue.Create(ctx, c.SQS, reconcileQueue)
	if err != nil {
		return resources{}, err
	}
	cr, err := queue.Create(ctx, c.SQS, chargeRequestsQueue)
	if err != nil {
		return resources{}, err
	}
	res := resources{idempotencyTable: idempotencyTable, chargesTable: chargesTable, limitsTable: limitsTable, queue: q, chargeRequests: cr}
	if err := provision.CreateBucket(ctx, store, audit.BucketInput(auditBucket), audit.LockInput(auditBucket, audit.DefaultRetentionDays)); err != nil {
		return resources{}, err
	}
	for _, table := range []string{idempotencyTable, chargesTable} {
		arn, err := provision.EnableStream(ctx, c.DynamoDB, audit.StreamInput(table))
		if err != nil {
			return resources{}, err
		}
		res.streams = append(res.streams, arn)
	}
	return res, nil
}
