package main

import (
	"context"
	"fmt"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Names of the local stack's tables and queues.
const (
	idempotencyTable    = "chargeonce-idempotency"
	chargesTable        = "chargeonce-charges"
	reconcileQueue      = "chargeonce-reconcile"
	chargeRequestsQueue = "chargeonce-charge-requests"
)

// resources are what the template's resources are locally.
type resources struct {
	idempotencyTable, chargesTable string
	queue, chargeRequests          queue.Queues
}

// createResources creates the tables, the idempotency table's TTL and the
// queues from the same definitions the template is checked against. Tables
// that already exist (a reused DynamoDB Local) are kept as they are.
func createResources(ctx context.Context, c awsenv.Clients) (resources, error) {
	created, err := provision.CreateTable(ctx, c.DynamoDB, dynamostore.TableInput(idempotencyTable))
	if err != nil {
		return resources{}, err
	}
	if created {
		if _, err := c.DynamoDB.UpdateTimeToLive(ctx, dynamostore.TTLInput(idempotencyTable)); err != nil {
			return resources{}, fmt.Errorf("ttl on %s: %w", idempotencyTable, err)
		}
	}
	if _, err := provision.CreateTable(ctx, c.DynamoDB, charge.TableInput(chargesTable)); err != nil {
		return resources{}, err
	}
	q, err := queue.Create(ctx, c.SQS, reconcileQueue)
	if err != nil {
		return resources{}, err
	}
	cr, err := queue.Create(ctx, c.SQS, chargeRequestsQueue)
	if err != nil {
		return resources{}, err
	}
	return resources{idempotencyTable: idempotencyTable, chargesTable: chargesTable, queue: q, chargeRequests: cr}, nil
}
