package provider

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
)

// TraceSend returns ctx carrying a trace of every attempt the HTTP
// transport makes at a request built with it, and notSent, which reports,
// once the request has failed, whether none of it can have left.
//
// An error does not tell: Go's HTTP/1.1 transport re-sends a request that
// carries an Idempotency-Key when its kept-alive connection drops after the
// request was written, so a dial error can end a request the provider
// received. Only the connections tell: notSent is true if the transport
// reported trying to get one (GetConn) and got none (GotConn) for any
// attempt. A transport that reports neither proves nothing.
func TraceSend(ctx context.Context) (_ context.Context, notSent func() bool) {
	var tried, connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { tried.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	return ctx, func() bool { return tried.Load() && !connected.Load() }
}
