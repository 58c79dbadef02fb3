package testkit

import (
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// DynamoDBFault is DynamoDB's error answer of kind ("ThrottlingException",
// "InternalServerError", …) to req, as the SDK reads it, for a transport
// that stands in for a failing DynamoDB: throttling is a 400, anything else
// a 500.
func DynamoDBFault(req *http.Request, kind string) *http.Response {
	status := http.StatusInternalServerError
	if kind == "ThrottlingException" {
		status = http.StatusBadRequest
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#` + kind + `","message":"injected by a test"}`
	return &http.Response{
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode: status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Errortype": {kind},
			"X-Amzn-Requestid": {"injected"},
			"Content-Length":   {strconv.Itoa(len(body))},
			"X-Amz-Crc32":      {strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10)},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
