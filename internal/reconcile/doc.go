// Package reconcile provides the handler of the reconcile queue. For each
// message it resolves the charge its key names by asking the provider what
// happened. That is charge.Service.Reconcile: pkg/idem's Recover, with the
// provider lookup as its resolver. It reports to Lambda, as batch item
// failures, only the messages worth delivering again.
//
// Some messages name a provider event's deduplication record
// (charge.NotificationOperation). A webhook delivery that died left it
// IN_FLIGHT. Such a message releases it for the provider's redelivery,
// without asking the provider.
//
// A reconciliation can fail because the provider or the store could not
// answer. Its message is reported and comes back after the queue's
// visibility timeout. It does so up to queue.MaxReceiveCount deliveries
// before the dead-letter queue. Its record stays IN_FLIGHT and in the
// stuck-lease index. So the sweeper queues it again even then, once the
// message's mark ends. A malformed message is logged and dropped: no
// delivery of it can ever succeed. Every other outcome deletes the message.
// That includes "still leased": a live lease holder finishes the command,
// or the sweeper finds it again.
//
// A message deleted has its mark removed from its key's record
// (queue.Marker). While the mark stood, the sweeper queued the key no
// second time. A message reported for redelivery keeps its mark.
//
// Logs carry the message id, the key's hash (idem.Key.LogHash) and the
// outcome. They never carry the key itself.
package reconcile
