package dynamostore

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// AsUnavailable returns err so that errors.Is(err, idem.ErrUnavailable)
// holds if DynamoDB could not do the request now, or could not be heard.
// That is throttling, a server error, a deadline, a connection that failed
// (refused, reset) or an answer cut short. Any other error is returned as
// it is. The store applies it to every SDK error it returns. A caller's own
// DynamoDB calls beside the store may use it too. For a write it does not
// say whether the write was applied: Attempts does.
func AsUnavailable(err error) error {
	var (
		api    smithy.APIError
		resp   *awshttp.ResponseError
		send   *smithyhttp.RequestSendError
		unread *smithy.DeserializationError
	)
	switch {
	case err == nil:
		return nil
	case transientlyCanceled(err):
		return &unavailableError{err}
	case errors.As(err, &api) && transientCodes[api.ErrorCode()],
		errors.As(err, &resp) && resp.HTTPStatusCode() >= 500,
		errors.As(err, &send), errors.As(err, &unread),
		errors.Is(err, context.DeadlineExceeded):
		return &unavailableError{err}
	}
	return err
}

// transientCodes are DynamoDB's error codes for a request it could not do
// now, whatever the request.
var transientCodes = map[string]bool{
	"ThrottlingException": true, "ProvisionedThroughputExceededException": true, "RequestLimitExceeded": true,
	"TransactionConflictException": true, "TransactionInProgressException": true, "InternalServerError": true,
	"InternalFailure": true, "ServiceUnavailable": true,
	// An MRSC table refuses a write racing another Region's on one
	// item. Nothing is applied.
	"ReplicatedWriteConflictException": true,
}

// transientlyCanceled reports whether err is a transaction canceled for a
// transient reason only: it wrote nothing, and may succeed if retried.
func transientlyCanceled(err error) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return false
	}
	transient := false
	for _, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "", "None":
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded", "InternalServerError":
			transient = true
		default:
			return false // a condition failed, or the request was invalid
		}
	}
	return transient
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == idem.ErrUnavailable }
