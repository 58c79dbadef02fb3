package dynamostore

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// respAttrs are a response's attributes as a record stores them, in a
// fixed order.
type respAttrs struct {
	status, headers, body types.AttributeValue
	// gzipped marks a gzipped body; a plain one is not marked.
	gzipped bool
}

// encodeResponse returns the response attributes, compressing the body when
// it is larger than compressAbove bytes. It refuses, with ErrTooLarge, a
// response that together with the intent would not fit in an item.
func encodeResponse(r idem.Response, compressAbove, intentLen int) (respAttrs, error) {
	body, gzipped := policy.StoredBody(r.Body, compressAbove)
	if body == nil {
		body = []byte{} // a nil B is no attribute value at all: DynamoDB refuses it
	}
	if why := policy.TooLarge(r.Headers, body, intentLen); why != "" {
		return respAttrs{}, fmt.Errorf("%w: %s", idem.ErrTooLarge, why)
	}
	headers := make(map[string]types.AttributeValue, len(r.Headers))
	values := make([]types.AttributeValueMemberS, 0, len(r.Headers)) // one allocation for them all
	for k, v := range r.Headers {
		values = append(values, types.AttributeValueMemberS{Value: v})
		headers[k] = &values[len(values)-1]
	}
	return respAttrs{
		status:  &types.AttributeValueMemberN{Value: strconv.Itoa(r.Status)},
		headers: &types.AttributeValueMemberM{Value: headers},
		body:    &types.AttributeValueMemberB{Value: body},
		gzipped: gzipped,
	}, nil
}

func decodeResponse(item map[string]types.AttributeValue) (*idem.Response, error) {
	status, err := numberAttr(item, attrRespStatus)
	if err != nil {
		return nil, err
	}
	r := &idem.Response{Status: int(status), Headers: map[string]string{}}
	if m, ok := item[attrRespHeaders].(*types.AttributeValueMemberM); ok {
		for k, v := range m.Value {
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				r.Headers[k] = s.Value
			}
		}
	}
	if b, ok := item[attrRespBody].(*types.AttributeValueMemberB); ok {
		r.Body = b.Value
	}
	if g, ok := item[attrRespGzip].(*types.AttributeValueMemberBOOL); ok && g.Value {
		zr, err := gzip.NewReader(bytes.NewReader(r.Body))
		if err != nil {
			return nil, fmt.Errorf("idem: stored response: %w", err)
		}
		if r.Body, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("idem: stored response: %w", err)
		}
	}
	if r.Body == nil {
		r.Body = []byte{}
	}
	return r, nil
}
