// Package provision creates the resources a deployment would, where
// nothing deploys them: for the local stack and the tests, on the
// emulator, DynamoDB Local or an AWS account.
package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates a table and waits until it is active. A table of that
// name that already exists is waited for and kept as it is, and reported
// with created false: a reused DynamoDB Local, or an SDK retry of a call
// whose first attempt created the table but whose answer was lost.
func CreateTable(ctx context.Context, db *dynamodb.Client, in *dynamodb.CreateTableInput) (created bool, err error) {
	name := aws.ToString(in.TableName)
	_, err = db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return false, fmt.Errorf("provision: create table %s: %w", name, err)
	}
	created = err == nil
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 2*time.Minute); err != nil {
		return false, fmt.Errorf("provision: wait for table %s: %w", name, err)
	}
	return created, nil
}
