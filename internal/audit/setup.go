package audit

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The trail's resources, as the local stack and the tests create them;
// test/deploy checks template.yaml against the same definitions.

// DefaultRetentionDays is how long the archive keeps an entry, unless the
// template's AuditRetentionDays says otherwise. PCI DSS asks for twelve
// months.
const DefaultRetentionDays = 400

// MinRetentionDays is the shortest retention the template's
// AuditRetentionDays takes: the twelve months PCI DSS asks for.
const MinRetentionDays = 365

// StreamView is what the tables' streams carry: every change, with the
// item before and after it.
const StreamView = types.StreamViewTypeNewAndOldImages

// StreamInput is the UpdateTable request that turns table's stream on.
func StreamInput(table string) *dynamodb.UpdateTableInput {
	return &dynamodb.UpdateTableInput{
		TableName:           aws.String(table),
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: StreamView},
	}
}

// BucketInput creates the archive's bucket with Object Lock, which
// versions every object.
func BucketInput(bucket string) *s3.CreateBucketInput {
	return &s3.CreateBucketInput{Bucket: aws.String(bucket), ObjectLockEnabledForBucket: aws.Bool(true)}
}

// LockInput sets the bucket's default retention. Every object written is
// locked for days in compliance mode. No one may shorten or lift it, the
// account's root included.
func LockInput(bucket string, days int32) *s3.PutObjectLockConfigurationInput {
	return &s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(bucket),
		ObjectLockConfiguration: &s3types.ObjectLockConfiguration{
			ObjectLockEnabled: s3types.ObjectLockEnabledEnabled,
			Rule: &s3types.ObjectLockRule{DefaultRetention: &s3types.DefaultRetention{
				Mode: s3types.ObjectLockRetentionModeCompliance, Days: aws.Int32(days),
			}},
		},
	}
}
