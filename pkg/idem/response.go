package idem

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Response is what a completed command answered: replayed byte for byte to
// every later attempt with the same key and request.
type Response struct {
	Status  int
	Headers map[string]string // a small set, e.g. Content-Type and Location
	Body    []byte
}

// Equal reports whether r and o are the same answer, byte for byte.
func (r Response) Equal(o Response) bool {
	return r.Status == o.Status && bytes.Equal(r.Body, o.Body) && maps.Equal(r.Headers, o.Headers)
}

// MaxHeaders is the most response headers a record holds.
const MaxHeaders = policy.MaxHeaders

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
func encodeResponse(r Response, compressAbove, intentLen int) (respAttrs, error) {
	body, gzipped := policy.StoredBody(r.Body, compressAbove)
	if body == nil {
		body = []byte{} // a nil B is no attribute value at all: DynamoDB refuses it
	}
	if why := policy.TooLarge(r.Headers, body, intentLen); why != "" {
		return respAttrs{}, fmt.Errorf("%w: %s", ErrTooLarge, why)
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

func decodeResponse(item map[string]types.AttributeValue) (*Response, error) {
	status, err := numberAttr(item, attrRespStatus)
	if err != nil {
		return nil, err
	}
	r := &Response{Status: int(status), Headers: map[string]string{}}
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
