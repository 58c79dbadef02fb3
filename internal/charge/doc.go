// Package charge provides the charge service: creating a card charge at
// most once per customer intent, reading charges back, and resolving
// charges whose outcome was left unknown, by the reconciler's lookup or by
// the provider's own notification (a webhook, Notify), all on top of
// pkg/idem.
//
// The intent's identity is the client's Idempotency-Key, carried as a
// CommandID that every entry point requires. The provider reference and
// the charge id are derived from the scoped key and the record's creation,
// so every re-execution of one intent, by a retry or by the reconciler,
// reaches the provider's deduplication and names the same charge, and a
// key reused after its retention names a new one.
//
// The service knows nothing of HTTP: it returns typed outcomes (Result),
// which internal/charge/httpapi renders, and it stores the answers that
// package's Answers build.
//
// # How a notification settles a command (Notify)
//
//	Notification                                   What Notify does
//	first delivery of an event                     claims the event's key (NotificationOperation), then settles the command
//	later delivery of a settled event              OutcomeReplayed, nothing settled again
//	delivery while another one is processed        OutcomeConflict (RetryAt: that one's lease end)
//	store failing                                  OutcomeBusy; nothing recorded, the redelivery settles it
//	delivery that dies                             event record left IN_FLIGHT: a redelivery takes it over once its lease ends, Reconcile releases it
//	charge or decline of an IN_FLIGHT command      waits up to InflightWait for a running attempt, preempts the lease, settles as Reconcile would
//	charge or decline of a RELEASED command        preempts and settles it: the release was wrong
//	anything else                                  OutcomeNothingToDo (unknown or settled command, an older intent under the key, an event that settles nothing)
package charge
