package provision_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// lostOnce resets the connection of the first request to target after
// DynamoDB applied it; the SDK then sends it again.
type lostOnce struct {
	target string
	done   atomic.Bool
}

func (l *lostOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), l.target) && l.done.CompareAndSwap(false, true) {
		return idemtest.FaultyConnection{Fault: idemtest.Reset}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestEnableStreamTakesTheStreamItsLostAnswerTurnedOn: the first
// UpdateTable turns the stream on and its answer is lost; DynamoDB
// refuses the SDK's retry, and the stream is there all the same.
func TestEnableStreamTakesTheStreamItsLostAnswerTurnedOn(t *testing.T) {
	t.Parallel()
	table := testkit.TempTable(t, audit.IndexTableInput("stream"))
	db := dynamodb.New(testkit.Clients(t).DynamoDB.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: &lostOnce{target: ".UpdateTable"}}
	})
	arn, err := provision.EnableStream(t.Context(), db, audit.StreamInput(table))
	if err != nil {
		t.Fatal(err)
	}
	out, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil || arn == "" || arn != aws.ToString(out.Table.LatestStreamArn) {
		t.Errorf("EnableStream gave %q, the table's stream is %v (%v)", arn, out.Table.LatestStreamArn, err)
	}
}
