package queue

import (
	"sync"

	"github.com/aws/aws-lambda-go/events"
)

// HandleBatch is the skeleton of an SQS batch handler. It calls settle for
// every record of ev. The records of one group go in order, and at most
// limit groups run at once. It returns the records settle did not settle
// as batch item failures, for Lambda to deliver again. groups lists record
// indexes; nil makes every record a group of its own.
func HandleBatch(ev events.SQSEvent, groups [][]int, limit int, settle func(i int) bool) events.SQSEventResponse {
	if groups == nil {
		groups = make([][]int, len(ev.Records))
		for i := range groups {
			groups[i] = []int{i}
		}
	}
	retry := make([]bool, len(ev.Records))
	slots := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for _, g := range groups {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for _, i := range g {
				retry[i] = !settle(i)
			}
		})
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for i, r := range retry {
		if r {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	return resp
}
