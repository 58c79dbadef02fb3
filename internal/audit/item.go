package audit

import (
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// item is a stream record's image as the SDK's attribute values, which
// the tables' own decoders read.
func item(image map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	if image == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(image))
	for name, v := range image {
		out[name] = value(v)
	}
	return out
}

func value(v events.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeList:
		list := v.List()
		out := make([]types.AttributeValue, len(list))
		for i, e := range list {
			out[i] = value(e)
		}
		return &types.AttributeValueMemberL{Value: out}
	case events.DataTypeMap:
		return &types.AttributeValueMemberM{Value: item(v.Map())}
	default:
		return &types.AttributeValueMemberNULL{Value: true}
	}
}
