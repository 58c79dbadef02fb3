package audit_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestAnEntryOutlastsEveryAttemptToDeleteIt: the bucket's Object Lock
// keeps each version of each object until its retention ends, whoever
// asks to delete it: the account itself included.
func TestAnEntryOutlastsEveryAttemptToDeleteIt(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	tr := d.Audit(t)
	send(t, d.ChargeHandler(t), alice.as(testkit.PostCharge(testkit.UniqueName("acme"), testkit.UniqueName("order"), `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)
	tr.Drain(t)
	bucket := aws.String(tr.Config.AuditBucket)
	out, err := tr.S3.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: bucket})
	if err != nil || len(out.Versions) == 0 {
		t.Fatalf("the archive's versions: %v %v", out, err)
	}
	for _, v := range out.Versions {
		if _, err := tr.S3.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: bucket, Key: v.Key, VersionId: v.VersionId}); err == nil {
			t.Errorf("version %s of %s deleted within its retention", aws.ToString(v.VersionId), aws.ToString(v.Key))
		}
		if _, err := tr.S3.GetObject(t.Context(), &s3.GetObjectInput{Bucket: bucket, Key: v.Key, VersionId: v.VersionId}); err != nil {
			t.Errorf("version %s of %s: %v", aws.ToString(v.VersionId), aws.ToString(v.Key), err)
		}
	}
}
