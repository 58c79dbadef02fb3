package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// stack is the local stack the run drives, a process of its own.
type stack struct {
	cmd  *exec.Cmd
	done chan error
	// ready is what its "localstack ready" line said.
	ready readyLine
	tally *tally
}

// readyLine is the local stack's "localstack ready" log line.
type readyLine struct {
	API              string `json:"api"`
	Provider         string `json:"provider"`
	ReconcileQueue   string `json:"reconcile_queue"`
	ReconcileDLQ     string `json:"reconcile_dlq"`
	IdempotencyTable string `json:"idempotency_table"`
	ChargesTable     string `json:"charges_table"`
}

// startStack starts the binary at path with args and env. It copies the
// output to log, tallies its log lines, and waits until it serves.
func startStack(ctx context.Context, path string, args, env []string, log io.Writer) (*stack, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	s := &stack{cmd: cmd, done: make(chan error, 1), tally: newTally()}
	ready := make(chan readyLine, 1)
	go func() {
		s.read(out, log, ready)
		s.done <- cmd.Wait()
	}()
	select {
	case s.ready = <-ready:
		return s, nil
	case err := <-s.done:
		return nil, fmt.Errorf("%s exited before it served: %v", path, err)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	case <-time.After(2 * time.Minute):
		s.stop()
		return nil, fmt.Errorf("%s did not serve within 2 minutes", path)
	}
}

// read copies the stack's log lines to log and tallies them, handing the
// ready line to ready.
func (s *stack) read(out io.Reader, log io.Writer, ready chan<- readyLine) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = log.Write(append(line, '\n'))
		var r readyLine
		if strings.Contains(string(line), `"msg":"localstack ready"`) && json.Unmarshal(line, &r) == nil {
			ready <- r
			continue
		}
		s.tally.add(line, time.Now())
	}
}

// stop asks the stack to stop, as Ctrl-C does, and waits for it.
func (s *stack) stop() error {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return errors.New("the stack did not stop within 30s; killed")
	}
}

// tally is what the stack's log says of the reconcile queue's traffic.
type tally struct {
	mu sync.Mutex
	// deliveries counts the reconcile messages handled, by outcome,
	// redeliveries included; keys, each key's messages (by its hash) by
	// their ids.
	deliveries map[string]int
	keys       map[string]map[string]bool
	// afterHeal counts the messages handled after healing, and last is
	// when the last one was.
	healed    time.Time
	afterHeal int
	last      time.Time
	// sweepQueued and sweepSkipped sum the sweeps' keys queued and those
	// passed over with a message already in flight.
	sweepQueued, sweepSkipped int
	// internal counts the lines of error class internal, but failed
	// enqueues: a bug or a misconfiguration.
	internal int
	// enqueueFailed counts the reconcile messages a request could not
	// send (the sweeper finds their keys).
	enqueueFailed int
}

func newTally() *tally {
	return &tally{deliveries: map[string]int{}, keys: map[string]map[string]bool{}}
}

// logLine is the part of a log line the tally reads.
type logLine struct {
	Msg        string `json:"msg"`
	Function   string `json:"function"`
	MessageID  string `json:"message_id"`
	KeyHash    string `json:"key_hash"`
	Outcome    string `json:"outcome"`
	Queued     int    `json:"queued"`
	Skipped    int    `json:"already_queued"`
	ErrorClass string `json:"error_class"`
}

func (t *tally) add(line []byte, at time.Time) {
	var l logLine
	if json.Unmarshal(line, &l) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case l.Msg == "enqueue reconcile failed":
		t.enqueueFailed++
	case l.ErrorClass == "internal":
		t.internal++
	}
	switch {
	case l.Function == "reconcile" && l.Msg == "reconcile":
		t.deliveries[l.Outcome]++
		if t.keys[l.KeyHash] == nil {
			t.keys[l.KeyHash] = map[string]bool{}
		}
		t.keys[l.KeyHash][l.MessageID] = true
		t.last = at
		if !t.healed.IsZero() {
			t.afterHeal++
		}
	case l.Function == "sweeper" && l.Msg == "sweep":
		t.sweepQueued += l.Queued
		t.sweepSkipped += l.Skipped
	}
}

// heal marks the moment the faults were taken away.
func (t *tally) heal(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.healed = at
}

// queueFigures is what the tally says of the reconcile queue.
type queueFigures struct {
	// Deliveries are the reconcile messages handled, redeliveries
	// included, and Messages the distinct ones. Keys are the keys they
	// named; PerKey, the messages a key.
	Deliveries int     `json:"deliveries"`
	Messages   int     `json:"messages"`
	Keys       int     `json:"keys"`
	PerKey     float64 `json:"messages_per_key"`
	MostKey    int     `json:"most_messages_a_key"`
	// NothingToDo are the deliveries that found their key settled.
	NothingToDo int            `json:"nothing_to_do"`
	ByOutcome   map[string]int `json:"by_outcome"`
	AfterHeal   int            `json:"after_heal"`
	SweepQueued int            `json:"sweep_queued"`
	// SweepSkipped are the keys sweeps found stuck with a message for
	// them in flight, and did not queue again.
	SweepSkipped int `json:"sweep_skipped"`
	// InternalErrors are the stack's log lines of error class internal;
	// EnqueueFailed its requests' reconcile messages not sent.
	InternalErrors int `json:"internal_errors"`
	EnqueueFailed  int `json:"enqueue_failed"`
}

func (t *tally) figures() queueFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := queueFigures{Keys: len(t.keys), ByOutcome: map[string]int{}, AfterHeal: t.afterHeal,
		SweepQueued: t.sweepQueued, SweepSkipped: t.sweepSkipped, InternalErrors: t.internal, EnqueueFailed: t.enqueueFailed,
		NothingToDo: t.deliveries["nothing_to_do"]}
	for outcome, n := range t.deliveries {
		f.ByOutcome[outcome] = n
		f.Deliveries += n
	}
	for _, ids := range t.keys {
		f.Messages += len(ids)
		f.MostKey = max(f.MostKey, len(ids))
	}
	if f.Keys > 0 {
		f.PerKey = float64(f.Messages) / float64(f.Keys)
	}
	return f
}
