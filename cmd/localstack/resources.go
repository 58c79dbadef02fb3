package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Names of the local stack's tables and queue.
const (
	idempotencyTable = "chargeonce-idempotency"
	chargesTable     = "chargeonce-charges"
	reconcileQueue   = "chargeonce-reconcile"
)

// resources are what the template's resources are locally.
type resources struct {
	idempotencyTable, chargesTable string
	queue                          queue.Queues
}

// createResources creates the tables, the idempotency table's TTL and the
// queues from the same definitions the template is checked against. Tables
// that already exist (a reused DynamoDB Local) are kept as they are.
func createResources(ctx context.Context, c awsenv.Clients) (resources, error) {
	created, err := createTable(ctx, c.DynamoDB, idem.TableInput(idempotencyTable))
	if err != nil {
		return resources{}, err
	}
	if created {
		if _, err := c.DynamoDB.UpdateTimeToLive(ctx, idem.TTLInput(idempotencyTable)); err != nil {
			return resources{}, fmt.Errorf("ttl on %s: %w", idempotencyTable, err)
		}
	}
	if _, err := createTable(ctx, c.DynamoDB, charge.TableInput(chargesTable)); err != nil {
		return resources{}, err
	}
	q, err := queue.Create(ctx, c.SQS, reconcileQueue)
	if err != nil {
		return resources{}, err
	}
	return resources{idempotencyTable: idempotencyTable, chargesTable: chargesTable, queue: q}, nil
}

// createTable creates the table and waits until it is active. It reports
// false for a table that already existed.
func createTable(ctx context.Context, db *dynamodb.Client, in *dynamodb.CreateTableInput) (bool, error) {
	name := aws.ToString(in.TableName)
	_, err := db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	created := err == nil
	if err != nil && !errors.As(err, &inUse) {
		return false, fmt.Errorf("create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 2*time.Minute); err != nil {
		return false, fmt.Errorf("wait for table %s: %w", name, err)
	}
	return created, nil
}
