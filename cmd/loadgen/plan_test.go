package main

import (
	"slices"
	"testing"
	"time"
)

func TestPlanFollowsTheWorkedExample(t *testing.T) {
	w := workload{Ops: 2000, RetryOnce: 0.03, RetryTwice: 0.005, Concurrent: 0.01, Rate: 2080, RetryDelay: 500 * time.Millisecond, Seed: 7}
	if err := w.validate(); err != nil {
		t.Fatal(err)
	}
	plan := w.plan()
	// 2,000 × (1 + 0.03 + 2 × 0.005) = 2,080, plus 20 concurrent twins.
	if len(plan) != 2080+20 {
		t.Fatalf("%d sends, want 2100", len(plan))
	}
	attempts := map[int][]send{}
	for _, s := range plan {
		attempts[s.op] = append(attempts[s.op], s)
	}
	if len(attempts) != w.Ops {
		t.Fatalf("%d logical charges planned, want %d", len(attempts), w.Ops)
	}
	var once, twice, twins int
	for op, as := range attempts {
		if as[0].kind != kindFirst {
			t.Fatalf("op %d starts with a %s", op, as[0].kind)
		}
		retries := 0
		for i, a := range as[1:] {
			switch a.kind {
			case kindConcurrent:
				if a.at != as[0].at {
					t.Errorf("op %d: twin at %v, first at %v", op, a.at, as[0].at)
				}
				twins++
			case kindRetry:
				retries++
				if prev := as[i]; a.at-prev.at < w.RetryDelay-time.Millisecond {
					t.Errorf("op %d: retry %v after the attempt before it", op, a.at-prev.at)
				}
			default:
				t.Errorf("op %d: a second first attempt", op)
			}
		}
		switch retries {
		case 1:
			once++
		case 2:
			twice++
		}
		if retries > 0 && len(as) != retries+1 {
			t.Errorf("op %d is both retried and doubled", op)
		}
	}
	if once != 60 || twice != 10 || twins != 20 {
		t.Fatalf("retried once %d, twice %d, twins %d; want 60, 10, 20", once, twice, twins)
	}
	if !slices.IsSortedFunc(plan, func(a, b send) int { return int(a.at - b.at) }) {
		t.Fatal("the plan is not in time order")
	}
	// One send per slot at the rate, twins apart, as long as first
	// attempts remain; the last retries then wait for their delay.
	slot := 0
	for _, s := range plan {
		if s.kind == kindConcurrent {
			continue
		}
		if want := time.Duration(float64(slot) * float64(time.Second) / w.Rate); s.at-want > time.Microsecond || want-s.at > time.Microsecond {
			t.Fatalf("send %d at %v, want %v", slot, s.at, want)
		}
		slot++
		if s.op == w.Ops-1 && s.kind == kindFirst {
			break
		}
	}
}

func TestPlanIsRepeatableBySeed(t *testing.T) {
	w := workload{Ops: 500, RetryOnce: 0.1, RetryTwice: 0.1, Concurrent: 0.1, Rate: 100, RetryDelay: 50 * time.Millisecond, Seed: 3}
	a, b := w.plan(), w.plan()
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	w.Seed = 4
	if slices.Equal(a, w.plan()) {
		t.Fatal("another seed gave the same plan")
	}
}

func TestPlanTrailingRetriesWaitForTheirDelay(t *testing.T) {
	w := workload{Ops: 1, RetryTwice: 1, Rate: 1000, RetryDelay: time.Second}
	plan := w.plan()
	want := []send{{0, 0, kindFirst}, {time.Second, 0, kindRetry}, {2 * time.Second, 0, kindRetry}}
	if !slices.Equal(plan, want) {
		t.Fatalf("plan %v, want %v", plan, want)
	}
}

func TestWorkloadValidate(t *testing.T) {
	ok := workload{Ops: 10, Rate: 1}
	for name, w := range map[string]workload{
		"no charges":     {Rate: 1},
		"negative share": {Ops: 10, Rate: 1, RetryOnce: -0.1},
		"shares over 1":  {Ops: 10, Rate: 1, RetryOnce: 0.6, Concurrent: 0.5},
		"zero rate":      {Ops: 10},
		"negative delay": {Ops: 10, Rate: 1, RetryDelay: -time.Second},
	} {
		if w.validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := ok.validate(); err != nil {
		t.Errorf("refused %+v: %v", ok, err)
	}
}
