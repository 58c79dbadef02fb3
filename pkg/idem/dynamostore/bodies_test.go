package dynamostore_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestAnswerOutlivesBodyClose holds net/http's write of a request at its
// last body byte until the SDK reads the answer, as a busy machine can.
// The SDK closes the request body before that read. The write must still
// end cleanly: otherwise net/http closes the connection under the read,
// and the SDK's retryer sends the call again, which the server applies.
func TestAnswerOutlivesBodyClose(t *testing.T) {
	const answer = `{}`
	g := &gate{reading: make(chan struct{}), released: make(chan struct{})}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-g.released
		// net/http ends the request's write once the held Write returns.
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()

	held := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			return &holdLastWrite{Conn: c, gate: g}, err
		}
	})
	db := dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(srv.URL), Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
		APIOptions: []func(*middleware.Stack) error{dynamostore.GuardRequestBodies},
		HTTPClient: signalRead{held, g},
	})
	_, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
	})
	if err != nil {
		t.Errorf("PutItem: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server applied %d calls, want 1", n)
	}
}

// gate holds the first request's last Write until its answer is read.
type gate struct {
	reading, released chan struct{}
	read, held        sync.Once
}

// holdLastWrite holds the Write that ends with the body's last brace.
type holdLastWrite struct {
	net.Conn
	gate *gate
}

func (c *holdLastWrite) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.HasSuffix(p, []byte("}")) {
		c.gate.held.Do(func() {
			select {
			case <-c.gate.reading:
			case <-time.After(5 * time.Second):
			}
			close(c.gate.released)
		})
	}
	return n, err
}

// signalRead opens the gate's reading at the first read of an answer.
type signalRead struct {
	next aws.HTTPClient
	gate *gate
}

func (s signalRead) Do(r *http.Request) (*http.Response, error) {
	resp, err := s.next.Do(r)
	if err == nil {
		resp.Body = &firstRead{ReadCloser: resp.Body, gate: s.gate}
	}
	return resp, err
}

type firstRead struct {
	io.ReadCloser
	gate *gate
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.gate.read.Do(func() { close(f.gate.reading) })
	return f.ReadCloser.Read(p)
}
