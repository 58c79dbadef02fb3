// Package provision creates the resources a deployment would, where nothing
// deploys them. It serves the local stack and the tests. It works on the
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
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// CreateTable creates a table and waits until it is active. A table of that
// name that already exists is waited for and kept as it is. It is reported
// with created false. It may be a reused DynamoDB Local. Or an SDK retry
// met the table its first attempt created, its answer lost.
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

// CreateBucket creates a bucket (create) and sets its Object Lock
// configuration (lock). A bucket of that name that is already ours is kept.
// Its configuration is set again.
func CreateBucket(ctx context.Context, api *s3.Client, create *s3.CreateBucketInput, lock *s3.PutObjectLockConfigurationInput) error {
	name := aws.ToString(create.Bucket)
	_, err := api.CreateBucket(ctx, create)
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("provision: create bucket %s: %w", name, err)
	}
	if _, err := api.PutObjectLockConfiguration(ctx, lock); err != nil {
		return fmt.Errorf("provision: object lock on %s: %w", name, err)
	}
	return nil
}

// EnableStream turns on a table's stream (update, a StreamSpecification)
// and returns its ARN. A stream already on is kept. So is one an SDK retry
// finds on, its first attempt's answer lost. DynamoDB refuses the retry.
func EnableStream(ctx context.Context, db *dynamodb.Client, update *dynamodb.UpdateTableInput) (string, error) {
	name := aws.ToString(update.TableName)
	stream := func() (string, error) {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: update.TableName})
		if err != nil {
			return "", fmt.Errorf("provision: describe %s: %w", name, err)
		}
		if spec := out.Table.StreamSpecification; spec != nil && aws.ToBool(spec.StreamEnabled) {
			return aws.ToString(out.Table.LatestStreamArn), nil
		}
		return "", nil
	}
	if arn, err := stream(); err != nil || arn != "" {
		return arn, err
	}
	up, err := db.UpdateTable(ctx, update)
	if _, inUse := errors.AsType[*types.ResourceInUseException](err); inUse {
		if arn, serr := stream(); serr == nil && arn != "" {
			return arn, nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("provision: stream on %s: %w", name, err)
	}
	return aws.ToString(up.TableDescription.LatestStreamArn), nil
}
