package idemtest

import (
	"bytes"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// LostClaim is a DynamoDB transport for a claim that lands unanswered:
// once armed, the next PutItem is applied and its answer lost (a server
// error), and every request after it is refused as throttled, unsent,
// until Disarm. Other requests pass to http.DefaultTransport.
type LostClaim struct {
	mu                sync.Mutex
	armed, throttling bool
	lost              int
}

// Lost counts the claims it has lost so far.
func (c *LostClaim) Lost() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Arm makes the next PutItem land unanswered.
func (c *LostClaim) Arm() { c.set(true) }

// Disarm ends the throttling, and an arming not yet used.
func (c *LostClaim) Disarm() { c.set(false) }

func (c *LostClaim) set(armed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.throttling = armed, false
}

// RoundTrip implements http.RoundTripper.
func (c *LostClaim) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	armed, throttling := c.armed, c.throttling
	c.mu.Unlock()
	if throttling {
		return DynamoDBFault(req, "ThrottlingException"), nil
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !armed || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	c.mu.Lock()
	c.armed, c.throttling = false, true
	c.lost++
	c.mu.Unlock()
	return DynamoDBFault(req, "InternalServerError"), nil
}

// A ConnectionFault is how the connection of a call to DynamoDB fails.
type ConnectionFault string

// The connection faults. Only a refused connection proves that DynamoDB
// never saw the request.
const (
	// Refused: the connection is refused, and the request never leaves.
	Refused ConnectionFault = "refused"
	// Reset: DynamoDB applies the request, then the connection resets
	// before its answer.
	Reset ConnectionFault = "reset"
	// Truncated: DynamoDB applies the request and answers, and the answer
	// is cut mid-way.
	Truncated ConnectionFault = "truncated"
)

// ConnectionFaults are every ConnectionFault.
var ConnectionFaults = []ConnectionFault{Refused, Reset, Truncated}

// FaultyConnection is a DynamoDB transport whose every request meets
// Fault. Next carries the requests it sends; nil is http.DefaultTransport.
type FaultyConnection struct {
	Fault ConnectionFault
	Next  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (c FaultyConnection) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.Fault == Refused {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	next := c.Next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if c.Fault == Reset || err != nil {
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	// The body ends before its Content-Length, as net/http reads it.
	resp.Body = cutBody{bytes.NewReader(body[:len(body)/2])}
	return resp, nil
}

// cutBody reads its bytes, then io.ErrUnexpectedEOF.
type cutBody struct{ r io.Reader }

func (b cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (cutBody) Close() error { return nil }
