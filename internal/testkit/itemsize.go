package testkit

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemSize is an item's size as DynamoDB counts it: each attribute's name
// in UTF-8 bytes plus its value's size.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

// valueSize follows DynamoDB's item size rules. Strings and binaries count
// their length. Numbers count one byte per two significant digits, plus
// one. Booleans and nulls count one byte. Lists and maps count three bytes,
// plus one per element, plus the elements. A map's element names count too.
func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += 1 + len(name) + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += numberSize(e)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	}
	return 0
}

// numberSize is 1 byte per two significant digits, plus 1.
func numberSize(s string) int {
	mantissa, _, _ := strings.Cut(strings.ToLower(strings.TrimLeft(s, "+-")), "e")
	digits := strings.Trim(strings.Replace(mantissa, ".", "", 1), "0")
	return (len(digits)+1)/2 + 1
}
