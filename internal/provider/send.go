package provider

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
)

// Sent is what the HTTP transport did with one request, as a trace of its
// attempts saw it. An error or an answer alone does not tell: Go's
// HTTP/1.1 transport re-sends a request that carries an Idempotency-Key
// when its kept-alive connection drops after the request was written, so
// a dial error can end a request the provider received, and an answer can
// be the re-send's, not the first send's.
type Sent struct {
	tried, connected, wrote, resentAfterWrite atomic.Bool
}

// TraceSend returns ctx carrying a trace of every attempt the transport
// makes at a request built with it, and what that trace saw.
func TraceSend(ctx context.Context) (context.Context, *Sent) {
	s := &Sent{}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) {
			if s.wrote.Load() {
				s.resentAfterWrite.Store(true)
			}
			s.tried.Store(true)
		},
		GotConn: func(httptrace.GotConnInfo) { s.connected.Store(true) },
		// Written in part, a request may still have reached the provider.
		WroteRequest: func(httptrace.WroteRequestInfo) { s.wrote.Store(true) },
	})
	return ctx, s
}

// NotSent reports, once the request has failed, whether none of it can
// have left: the transport tried to get a connection (GetConn) and got
// none (GotConn) for any attempt. A transport that reports neither proves
// nothing.
func (s *Sent) NotSent() bool { return s.tried.Load() && !s.connected.Load() }

// Resent reports whether the transport sent the request again after an
// attempt had written it: an error answer is then the re-send's, turned
// away before the provider's deduplication could answer for the first
// send (a rate limit, an edge's refusal), and says nothing of whether the
// first was executed.
func (s *Sent) Resent() bool { return s.resentAfterWrite.Load() }
