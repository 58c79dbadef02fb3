// Package eventsource provides a local stand-in for Lambda's SQS event
// source mapping: a Poller that long-polls a queue, hands each batch to a
// handler as an events.SQSEvent, and settles the batch the way Lambda does
// with ReportBatchItemFailures.
//
// The messages the handler does not report in BatchItemFailures are
// deleted. The reported ones are left alone: they reappear after the
// queue's visibility timeout, and the queue's redrive policy moves them to
// its dead-letter queue after maxReceiveCount deliveries. A failed
// invocation (an error, a panic, a handler that outlives the function
// timeout, or a batch item failure naming no message of the batch) deletes
// nothing, so the whole batch is delivered again.
package eventsource
