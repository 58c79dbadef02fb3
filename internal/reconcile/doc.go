// Package reconcile provides the handler of the reconcile queue: for each
// message it resolves the charge its key names by asking the provider what
// happened (charge.Service.Reconcile, pkg/idem's Recover with the
// provider lookup as its resolver), and it reports to Lambda, as batch
// item failures, only the messages worth delivering again. A message for
// a provider event's deduplication record (charge.NotificationOperation),
// left IN_FLIGHT by a webhook delivery that died, releases it for the
// provider's redelivery, without asking the provider.
//
// A message whose reconciliation failed (the provider or the store could
// not answer) is reported and comes back after the queue's visibility
// timeout, up to queue.MaxReceiveCount deliveries before the dead-letter
// queue. Its record stays IN_FLIGHT and in the stuck-lease index. So the
// sweeper queues it again even then, once the message's mark ends. A
// malformed message is logged and dropped, since no delivery of it can
// ever succeed. Every other outcome, "still leased" among them (a live
// lease holder finishes the command, or the sweeper finds it again),
// deletes the message.
//
// A message deleted has its mark removed from its key's record
// (queue.Marker). While the mark stood, the sweeper queued the key no
// second time. A message reported for redelivery keeps its mark.
//
// Logs carry the message id, the key's hash (idem.Key.LogHash) and the
// outcome, never the key itself.
package reconcile
