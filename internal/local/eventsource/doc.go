// Package eventsource provides local stand-ins for Lambda's event source
// mappings: a Poller for an SQS queue (poller.go) and a StreamPoller for
// a DynamoDB table's stream (stream.go). Each hands batches to a handler
// as Lambda's events.
//
// A Poller long-polls its queue and settles each batch the way Lambda
// does with ReportBatchItemFailures. The messages the handler does not
// report in BatchItemFailures are deleted. The reported ones are left
// alone: they reappear after the queue's visibility timeout, and the
// queue's redrive policy moves them to its dead-letter queue after
// maxReceiveCount deliveries. A failed invocation (an error, a panic, a
// handler that outlives the function timeout, or a batch item failure
// naming no message of the batch) deletes nothing, so the whole batch is
// delivered again.
//
// A StreamPoller reads each shard of its stream in order, as Lambda does
// with MaximumRetryAttempts -1: a failed invocation hands the same batch
// over again until it succeeds, and nothing after it goes first.
package eventsource
