package dynamostore

import (
	"bytes"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// fenced is the update expr with names and values, conditioned on l
// holding the record: every write by a lease holder is one (a settlement,
// alone or in Commit's transaction, a heartbeat, a postponement). A failed
// fence answers the record, for the write to tell its own earlier attempt
// from someone else's.
func (s *Store) fenced(l *idem.Lease, expr string, names map[string]string, values map[string]types.AttributeValue) types.Update {
	names["#status"], names["#tok"] = attrStatus, attrLeaseToken
	values[":inflight"], values[":tok"] = inFlight, str(l.Token)
	return types.Update{
		TableName:                           s.tableName,
		Key:                                 s.itemKey(l.Key),
		UpdateExpression:                    aws.String(expr),
		ConditionExpression:                 aws.String("#status = :inflight AND #tok = :tok"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// updateItem is u as a request of its own.
func updateItem(u types.Update) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: u.ReturnValuesOnConditionCheckFailure,
	}
}

// statusAttrs are the statuses as attribute values, shared by every
// request (the SDK only reads its input).
var statusAttrs = map[idem.Status]types.AttributeValue{
	idem.StatusInFlight: str(string(idem.StatusInFlight)), idem.StatusSucceeded: str(string(idem.StatusSucceeded)),
	idem.StatusFailedPermanent: str(string(idem.StatusFailedPermanent)), idem.StatusReleased: str(string(idem.StatusReleased)),
}

// inFlight is the status IN_FLIGHT as an attribute value.
var inFlight = statusAttrs[idem.StatusInFlight]

// fpAttr is fp as a record stores it: its 32 bytes, half the size of the
// hex form.
func fpAttr(fp idem.Fingerprint) types.AttributeValue {
	return &types.AttributeValueMemberB{Value: fp[:]}
}

// sameFingerprint reports whether item was stored for fp.
func sameFingerprint(item map[string]types.AttributeValue, fp idem.Fingerprint) bool {
	v, ok := item[attrFingerprint].(*types.AttributeValueMemberB)
	return ok && bytes.Equal(v.Value, fp[:])
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func millis(t time.Time) types.AttributeValue {
	return num(t.UnixMilli())
}
func seconds(t time.Time) types.AttributeValue { return num(t.Unix()) }

// sameMillis reports whether v is the number t is in epoch milliseconds.
func sameMillis(v types.AttributeValue, t time.Time) bool {
	n, ok := v.(*types.AttributeValueMemberN)
	return ok && n.Value == strconv.FormatInt(t.UnixMilli(), 10)
}
