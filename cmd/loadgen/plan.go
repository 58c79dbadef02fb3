package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// kind says why a request is sent.
type kind int

const (
	kindFirst      kind = iota // the first attempt of a logical charge
	kindRetry                  // a later attempt, same key and body
	kindConcurrent             // a twin sent at the same instant as the first
)

var kindNames = [...]string{kindFirst: "first", kindRetry: "retry", kindConcurrent: "concurrent"}

func (k kind) String() string { return kindNames[k] }

// send is one request of the plan.
type send struct {
	at   time.Duration // when to send it, from the start of the run
	op   int           // the logical charge it belongs to
	kind kind
}

// workload is the seeds' worked example, parameterised. It has Ops logical
// charges. The share RetryOnce of them is retried once. A separate share
// RetryTwice is retried twice. Another separate share Concurrent gets a twin
// sent at the same instant as its first attempt. Requests leave at Rate per
// second, whatever the answers. A retry leaves RetryDelay after the attempt
// before it, or later when that slot is taken.
type workload struct {
	Ops                               int
	RetryOnce, RetryTwice, Concurrent float64
	Rate                              float64
	RetryDelay                        time.Duration
	Seed                              uint64
}

// counts returns how many logical charges are retried once, twice, and
// get a concurrent twin.
func (w workload) counts() (once, twice, concurrent int) {
	share := func(f float64) int { return int(math.Round(f * float64(w.Ops))) }
	return share(w.RetryOnce), share(w.RetryTwice), share(w.Concurrent)
}

func (w workload) validate() error {
	once, twice, concurrent := w.counts()
	switch {
	case w.Ops < 1:
		return errors.New("at least one logical charge is needed")
	case w.RetryOnce < 0 || w.RetryTwice < 0 || w.Concurrent < 0:
		return errors.New("shares cannot be negative")
	case once+twice+concurrent > w.Ops:
		return fmt.Errorf("the retried and concurrent shares add up to more than the %d logical charges", w.Ops)
	case !(w.Rate > 0) || math.IsInf(w.Rate, 0):
		return errors.New("the rate must be positive")
	case w.RetryDelay < 0:
		return errors.New("the retry delay cannot be negative")
	}
	return nil
}

// plan lays the workload out in time: one send per slot of 1/Rate seconds.
// A concurrent twin shares its first attempt's slot. Which charges are
// retried or doubled is drawn from Seed. So a plan can be repeated exactly.
func (w workload) plan() []send {
	once, twice, concurrent := w.counts()
	retries := make([]int, w.Ops)
	twin := make([]bool, w.Ops)
	for i, op := range rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15)).Perm(w.Ops) {
		switch {
		case i < once:
			retries[op] = 1
		case i < once+twice:
			retries[op] = 2
		case i < once+twice+concurrent:
			twin[op] = true
		}
	}
	interval := float64(time.Second) / w.Rate
	delay := max(1, int(math.Round(float64(w.RetryDelay)/interval))) // in slots
	at := func(slot int) time.Duration { return time.Duration(math.Round(float64(slot) * interval)) }

	// Pending retries, by the first slot each may take. Delays are equal,
	// so each queue stays in order: first retries, and second retries.
	type pending struct{ slot, op, left int }
	var queues [2][]pending
	earliest := func() int {
		q := -1
		for i := range queues {
			if len(queues[i]) > 0 && (q < 0 || queues[i][0].slot < queues[q][0].slot) {
				q = i
			}
		}
		return q
	}
	var sends []send
	next := 0
	for slot := 0; ; slot++ {
		q := earliest()
		switch {
		case q >= 0 && (queues[q][0].slot <= slot || next == w.Ops):
			p := queues[q][0]
			queues[q] = queues[q][1:]
			slot = max(slot, p.slot)
			sends = append(sends, send{at: at(slot), op: p.op, kind: kindRetry})
			if p.left > 0 {
				queues[1] = append(queues[1], pending{slot: slot + delay, op: p.op, left: p.left - 1})
			}
		case next < w.Ops:
			sends = append(sends, send{at: at(slot), op: next, kind: kindFirst})
			if twin[next] {
				sends = append(sends, send{at: at(slot), op: next, kind: kindConcurrent})
			}
			if retries[next] > 0 {
				queues[0] = append(queues[0], pending{slot: slot + delay, op: next, left: retries[next] - 1})
			}
			next++
		default:
			return sends
		}
	}
}
