package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// outcome is what became of one send.
type outcome struct {
	sent     bool          // false: dropped at the in-flight cap, or never due
	status   int           // the HTTP status; 0 if the request failed
	replayed bool          // Idempotent-Replayed: true
	failure  string        // why there is no status
	latency  time.Duration // from handing the request to the client to the end of the body
	lag      time.Duration // how late it left against the plan
}

// answer names an outcome for the report: "201", "201 replayed", "409",
// "dropped", "error: timeout".
func (o outcome) answer() string {
	switch {
	case !o.sent:
		return "dropped"
	case o.status == 0:
		return "error: " + o.failure
	case o.replayed:
		return fmt.Sprintf("%d replayed", o.status)
	}
	return fmt.Sprint(o.status)
}

// request is what a send carries.
type request struct {
	key, body string
}

// runner sends a plan open-loop. Each send leaves when its time comes,
// whatever the earlier ones are doing. If maxInFlight requests are already
// outstanding, it is dropped and counted instead.
type runner struct {
	client      *http.Client
	url         string // POST target
	tenant      string
	maxInFlight int
	progress    io.Writer // a live progress line; nil for none
}

func (r *runner) run(ctx context.Context, plan []send, req func(op int) request) ([]outcome, time.Duration) {
	out := make([]outcome, len(plan))
	var (
		wg                    sync.WaitGroup
		sent, done, dropped   atomic.Int64
		slots                 = make(chan struct{}, r.maxInFlight)
		start                 = time.Now()
		stopProgress, stopped = make(chan struct{}), make(chan struct{})
	)
	go func() {
		defer close(stopped)
		r.showProgress(stopProgress, start, len(plan), &sent, &done, &dropped)
	}()

	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	next := 0
dispatch:
	for next < len(plan) {
		select {
		case <-ctx.Done():
			break dispatch
		case <-tick.C:
		}
		now := time.Since(start)
		for ; next < len(plan) && plan[next].at <= now; next++ {
			select {
			case slots <- struct{}{}:
			default:
				dropped.Add(1)
				continue
			}
			sent.Add(1)
			wg.Add(1)
			go func(i int, lag time.Duration) {
				defer wg.Done()
				defer func() { <-slots }()
				o := r.send(ctx, req(plan[i].op))
				o.lag = lag
				out[i] = o
				done.Add(1)
			}(next, now-plan[next].at)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-stopped
	return out, elapsed
}

func (r *runner) send(ctx context.Context, q request) outcome {
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(q.body))
	if err != nil {
		return outcome{sent: true, failure: "bad request"}
	}
	httpReq.Header.Set("Authorization", "Bearer dev:"+r.tenant)
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Idempotency-Key", q.key)
	t0 := time.Now()
	resp, err := r.client.Do(httpReq)
	if err != nil {
		return outcome{sent: true, failure: failure(err), latency: time.Since(t0)}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	o := outcome{sent: true, status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", latency: time.Since(t0)}
	if err != nil {
		o.status, o.failure = 0, failure(err)
	}
	return o
}

// failure classifies a transport error without its details.
func failure(err error) string {
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	}
	return "transport"
}

// showProgress redraws one line on r.progress until stop is closed:
//
//	[#########...........]  45%  9450/21000 sent  9400 done  50 in flight  0 dropped  2080 req/s
func (r *runner) showProgress(stop <-chan struct{}, start time.Time, total int, sent, done, dropped *atomic.Int64) {
	if r.progress == nil {
		<-stop
		return
	}
	draw := func() {
		s, d, x := sent.Load(), done.Load(), dropped.Load()
		_, _ = fmt.Fprintf(r.progress, "\r%s %3d%% %6d/%d sent %6d done %4d in flight %6d dropped %5.0f req/s ",
			bar(int(s+x), total, 20), int(100*(s+x))/max(total, 1), s, total, d, s-d, x, float64(d)/time.Since(start).Seconds())
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			draw()
			_, _ = fmt.Fprintln(r.progress)
			return
		case <-t.C:
			draw()
		}
	}
}

// bar draws [####......] of width cells, n of total done.
func bar(n, total, width int) string {
	full := 0
	if total > 0 {
		full = min(width, n*width/total)
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}
