package main

import (
	"testing"
	"time"
)

func TestTallyCountsTheReconcileQueuesTraffic(t *testing.T) {
	t.Parallel()
	tl := newTally()
	now := time.Now()
	for _, line := range []string{
		`{"msg":"reconcile","function":"reconcile","message_id":"1","key_hash":"a","outcome":"error","error_class":"store_unavailable"}`,
		`{"msg":"reconcile","function":"reconcile","message_id":"1","key_hash":"a","outcome":"deferred"}`,
		`{"msg":"reconcile","function":"reconcile","message_id":"2","key_hash":"a","outcome":"still_leased"}`,
		`{"msg":"sweep","function":"sweeper","queued":3,"already_queued":2}`,
		`{"msg":"enqueue reconcile failed","function":"charge","error_class":"queue_unavailable"}`,
		`{"msg":"charge","function":"charge","error_class":"internal"}`,
		`{"Function":"sweeper","Queued":3,"_aws":{}}`,
		`not json`,
	} {
		tl.add([]byte(line), now)
	}
	tl.heal(now)
	tl.add([]byte(`{"msg":"reconcile","function":"reconcile","message_id":"3","key_hash":"b","outcome":"nothing_to_do"}`), now)
	f := tl.figures()
	if f.Deliveries != 4 || f.Messages != 3 || f.Keys != 2 || f.MostKey != 2 || f.PerKey != 1.5 || f.NothingToDo != 1 || f.AfterHeal != 1 {
		t.Errorf("messages: %+v", f)
	}
	if f.SweepQueued != 3 || f.SweepSkipped != 2 || f.InternalErrors != 1 || f.EnqueueFailed != 1 {
		t.Errorf("sweeps and errors: %+v", f)
	}
}
