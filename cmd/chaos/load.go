package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chargeonce/chargeonce/pkg/client"
)

// The kinds of intent.
const (
	kindCharge    = "charge"
	kindAuthorize = "authorize"
	kindRefund    = "refund"
	kindCapture   = "capture"
	kindCancel    = "cancel"
)

// How an intent ended.
const (
	// endDone: answered done (201, or 200 for a capture or a cancel).
	endDone = "done"
	// endRefused: answered final, nothing done (a provider refusal, a
	// state conflict, a refund beyond the charge).
	endRefused = "refused"
	// endAbandoned: every answer said that nothing was done, and the
	// client gave up.
	endAbandoned = "abandoned"
	// endUnfinished: no final answer before the run's end.
	endUnfinished = "unfinished"
)

// currency is every intent's.
const currency = "EUR"

// answer is one HTTP answer an intent's client received, or its failure.
type answer struct {
	At       time.Time `json:"at"`
	Status   int       `json:"status"` // 0: no answer (Err says why)
	Problem  string    `json:"problem,omitempty"`
	Replayed bool      `json:"replayed,omitempty"`
	// RetryAfter is the Retry-After header: a refund held back by the
	// refunds in flight has one, a refusal stored for good none.
	RetryAfter string `json:"retry_after,omitempty"`
	Body       []byte `json:"-"`
	Err        string `json:"error,omitempty"`
}

// name is how the report counts an answer: "201", "503 outcome-pending",
// "no answer".
func (a answer) name() string {
	switch {
	case a.Status == 0:
		return "no answer"
	case a.Problem != "":
		return fmt.Sprintf("%d %s", a.Status, a.Problem)
	}
	return strconv.Itoa(a.Status)
}

// nothingDone reports whether the answer says that nothing was done: a
// problem the contract gives only with proof.
func (a answer) nothingDone() bool {
	switch a.Problem {
	case "service-unavailable", "provider-unavailable", "provider-rejected", "card-declined", "refund-exceeds-charge",
		"refund-limit-reached", "charge-state-conflict", "refund-declined", "idempotency-key-reused", "invalid-request":
		return true
	}
	return false
}

// stored reports whether the answer is one the service stores for the
// command and replays to every retry.
func (a answer) stored() bool {
	switch a.Problem {
	case "":
		return a.Status == http.StatusCreated
	case "card-declined", "refund-declined", "charge-conflict":
		return true
	case "refund-exceeds-charge", "refund-limit-reached":
		return a.RetryAfter == ""
	}
	return false
}

// intent is one thing a client means to do, carried out to its end.
type intent struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
	// ID is a charge's or a refund's command id.
	ID client.CommandID `json:"id,omitempty"`
	// Amount is unique among charges, so the ledger tells each intent's
	// charges apart; a refund's is unique among its charge's refunds. A
	// capture's is what it asks for, 0 for all.
	Amount int64 `json:"amount"`
	// parent is the charge a refund, a capture or a cancel acts on.
	parent *intent

	mu      sync.Mutex
	answers []answer
	// mayHaveRun: a call ended in a way that leaves open that the
	// intent was carried out.
	mayHaveRun bool
	End        string `json:"end"`
	// Err is the last call's error, for a report.
	Err string `json:"error,omitempty"`
	// charge is the charge a done charge, authorization, capture or
	// cancel answered; refund the refund a done refund answered.
	charge client.Charge
	refund client.Refund
	// final is the answer that ended the intent; repeat, a capture's or
	// a cancel's answer when made again after the run.
	final, repeat answer
}

func (in *intent) record(a answer) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.answers = append(in.answers, a)
}

// recorded is a copy of the answers so far.
func (in *intent) recorded() []answer {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]answer(nil), in.answers...)
}

// recorder is an intent's client's transport: it keeps every answer.
type recorder struct {
	hc *http.Client
	in *intent
}

func (r recorder) Do(req *http.Request) (*http.Response, error) {
	resp, err := r.hc.Do(req)
	if err != nil {
		r.in.record(answer{At: time.Now(), Err: err.Error()})
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		r.in.record(answer{At: time.Now(), Err: err.Error()})
		return nil, err
	}
	r.in.record(answer{At: time.Now(), Status: resp.StatusCode, Problem: problemSlug(resp.Header, body),
		Replayed: resp.Header.Get(client.HeaderReplayed) == "true", RetryAfter: resp.Header.Get(client.HeaderRetryAfter), Body: body})
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// problemSlug is the problem type's last segment of a problem answer.
func problemSlug(h http.Header, body []byte) string {
	if !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return strings.TrimPrefix(p.Type, client.ProblemBase)
}

// load runs intents against the API, each in its goroutine, until every
// one has ended.
type load struct {
	api, token string
	hc         *http.Client
	// followUntil: an intent done before it may be followed by another
	// (a refund of a charge, a capture of an authorization).
	followUntil time.Time
	// abandonShare is the chance that a client told nothing was done
	// gives up there.
	abandonShare float64

	mu      sync.Mutex
	rng     *rand.Rand
	intents []*intent
	// n numbers the intents, charges the charges and authorizations.
	n, charges atomic.Int64
	wg         sync.WaitGroup
}

func (l *load) draw() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64()
}

// spawn starts in, as the n-th intent.
func (l *load) spawn(ctx context.Context, in *intent) {
	in.N = int(l.n.Add(1))
	l.mu.Lock()
	l.intents = append(l.intents, in)
	l.mu.Unlock()
	l.wg.Go(func() { l.carry(ctx, in) })
}

// root starts a new charge or authorization: 65 in 100 charges.
func (l *load) root(ctx context.Context) {
	kind := kindCharge
	if l.draw() >= 0.65 {
		kind = kindAuthorize
	}
	l.spawn(ctx, &intent{Kind: kind, ID: client.NewCommandID(), Amount: 1000 + l.charges.Add(1)})
}

// carry calls the API for in until it has a final answer, the client
// gives up, or ctx ends.
func (l *load) carry(ctx context.Context, in *intent) {
	c, err := client.New(l.api, client.WithHTTPClient(recorder{l.hc, in}), client.WithToken(l.token),
		client.WithMaxAttempts(4), client.WithBackoff(250*time.Millisecond, 4*time.Second), client.WithAttemptTimeout(15*time.Second))
	if err != nil {
		in.End, in.Err = endUnfinished, err.Error()
		return
	}
	for {
		err := l.call(ctx, c, in)
		end := in.ends(err, l.draw() < l.abandonShare)
		if end == "" && !sleep(ctx, 2*time.Second) {
			end = endUnfinished
		}
		if end == "" {
			continue
		}
		in.End = end
		if err != nil {
			in.Err = err.Error()
		}
		if as := in.recorded(); len(as) > 0 {
			in.final = as[len(as)-1]
		}
		if end == endDone {
			l.follow(ctx, in)
		}
		return
	}
}

// ends is how a call's err ends in, or "" to call again. abandon: a
// client told nothing was done gives up, unless a call of its may have
// run.
func (in *intent) ends(err error, abandon bool) string {
	var p *client.ProblemError
	held := errors.As(err, &p) && p.RetryAfter > 0 &&
		(errors.Is(err, client.ErrRefundExceedsCharge) || errors.Is(err, client.ErrRefundLimit))
	switch {
	case err == nil:
		return endDone
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, client.ErrOutcomeUnknown):
		return endUnfinished
	case errors.Is(err, client.ErrOutcomeUnknown), errors.Is(err, client.ErrOutcomePending), errors.Is(err, client.ErrInProgress),
		errors.Is(err, client.ErrInternal) && !errors.As(err, &p):
		in.mayHaveRun = true
		return ""
	case errors.Is(err, client.ErrUnavailable) || held:
		if abandon && !in.mayHaveRun {
			return endAbandoned
		}
		return ""
	}
	return endRefused
}

// call makes in's call once, through pkg/client's retries.
func (l *load) call(ctx context.Context, c *client.Client, in *intent) error {
	var err error
	money := client.Money{Amount: in.Amount, Currency: currency}
	switch in.Kind {
	case kindCharge:
		var res client.Result
		res, err = c.Create(ctx, in.ID, money, "tok_visa")
		in.charge = res.Charge
	case kindAuthorize:
		var res client.Result
		res, err = c.Create(ctx, in.ID, money, "tok_visa", client.WithCaptureLater())
		in.charge = res.Charge
	case kindRefund:
		var res client.RefundResult
		res, err = c.Refund(ctx, in.parent.charge.ID, in.ID, client.WithRefundAmount(in.Amount))
		in.refund = res.Refund
	case kindCapture:
		var opts []client.CaptureOption
		if in.Amount > 0 {
			opts = append(opts, client.WithCaptureAmount(in.Amount))
		}
		in.charge, err = c.Capture(ctx, in.parent.charge.ID, opts...)
	case kindCancel:
		in.charge, err = c.Cancel(ctx, in.parent.charge.ID)
	}
	return err
}

// follow starts what follows a done charge or authorization, while the
// load runs. A charge gets one refund in two, and a second in five, at
// once. An authorization is captured (all of it, or half) or canceled.
func (l *load) follow(ctx context.Context, in *intent) {
	if time.Now().After(l.followUntil) {
		return
	}
	switch in.Kind {
	case kindCharge:
		if l.draw() < 0.5 {
			l.spawn(ctx, &intent{Kind: kindRefund, ID: client.NewCommandID(), Amount: 1, parent: in})
			if l.draw() < 0.4 {
				l.spawn(ctx, &intent{Kind: kindRefund, ID: client.NewCommandID(), Amount: 2, parent: in})
			}
		}
	case kindAuthorize:
		switch r := l.draw(); {
		case r < 0.3:
			l.spawn(ctx, &intent{Kind: kindCapture, parent: in})
		case r < 0.6:
			l.spawn(ctx, &intent{Kind: kindCapture, Amount: in.Amount / 2, parent: in})
		default:
			l.spawn(ctx, &intent{Kind: kindCancel, parent: in})
		}
	}
}

// all are the intents started so far.
func (l *load) all() []*intent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*intent(nil), l.intents...)
}
