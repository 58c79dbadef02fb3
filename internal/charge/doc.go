// Package charge provides the charge service: creating a card charge at
// most once per customer intent, refunding it, capturing or cancelling an
// authorization, reading charges back, and resolving commands whose
// outcome was left unknown, by the reconciler's lookup or by the
// provider's own notification (a webhook, Notify), all on top of pkg/idem.
//
// # Operations
//
// Each command the service sends to the provider is an operation: a
// charge (create.go) or a refund (refund.go). An operation is registered
// in one map (operations, in service.go). The shared paths reach it only
// through the operation interface (reconcile.go): the reconciler,
// notifications and an operator's settlement. A new operation costs its
// own file and that line.
//
// # Refunds
//
// A refund is keyed like a charge, under RefundOperation, so one key on a
// charge and on a refund names two intents. Its constraint is on the
// charge's row: its refunds never exceed its amount. Before the provider
// is asked, a conditional update holds the refund's amount on the row. The
// refund's record, its row and the hold's settlement then commit in one
// transaction. A refund proven not made frees its hold first, then is
// released. A refusal that rests on settled refunds is stored, final for
// its key. One that rests on refunds in flight is not: they may fail.
// The same update bounds a charge's refunds (DefaultMaxRefunds), and its
// reads return them a page at a time (refundlist.go).
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
// # Captures and cancels
//
// Capture and Cancel (transitions.go) are not operations: they set a
// state, and append nothing. Setting a state twice sets it once, so they
// need no key and no record. The charge's row is the record. A
// conditional update moves it from StatusRequiresCapture to
// StatusCapturing or StatusCanceling, with an attempt deadline. Only the
// request that made the move asks the provider; any other waits for it.
// A repeat of a settled one finds the state it set. The provider call's
// reference is derived from the charge and the operation, so a re-sent
// call is deduplicated. A move left unsettled is found in the sparse
// transitions index, and settled from the provider's State, never by a
// timer. A new state-setting operation is a move and its entry point.
//
// # How the reconciler resolves a command (Reconcile)
//
//	The provider's answer, or the record                 What Reconcile does
//	lease still running, or nothing IN_FLIGHT            nothing (OutcomeStillLeased, OutcomeNothingToDo)
//	charged                                              commits the charge row with the exact 201 the API would have answered
//	refunded                                             commits the refund row, settling its hold, with the 201
//	refund declined                                      frees the hold, stores the 409
//	declined                                             stores the 402
//	a replay whose request never reached the provider    executes it now, once, under the same reference, and commits it (rolled forward, never "not found")
//	replay refused for the request itself (a 4xx naming  releases the key: nothing was or will be charged; the next retry is answered provider-rejected
//	  a request parameter)
//	not found, inside the settle window of the last send postpones to the window's end (OutcomeNotSettled)
//	not found, settle window passed                      releases the key (a refund's hold freed first)
//	not found, older than the dedup window less margin   parks it (OutcomeParked, an ERROR log line): never re-sent nor released; looked at every RetryCap until an operator settles it
//	provider cannot be asked                             postpones by a backoff doubling per attempt, up to RetryCap (OutcomeDeferred)
//	a capture or cancel (settle-charge) past its         settles the row as the provider's State says: captured, canceled,
//	  deadline                                           or, still authorized once the settle window passed, not made
//	an event's deduplication record whose delivery died  releases it for the provider's redelivery, asking nothing
//
// Postponed keys come back through the sweeper, never through redelivery
// of the message; an error leaves the message to be retried.
//
// # How a notification settles a command (Notify)
//
//	Notification                                   What Notify does
//	first delivery of an event                     claims the event's key (NotificationOperation), then settles the command
//	later delivery of a settled event              OutcomeReplayed, nothing settled again
//	delivery while another one is processed        OutcomeConflict (RetryAt: that one's lease end)
//	store failing                                  OutcomeBusy; nothing recorded, the redelivery settles it
//	delivery that dies                             event record left IN_FLIGHT: a redelivery takes it over once its lease ends, Reconcile releases it
//	event naming a written row (Notification.Row)  settles the row, whatever the age of the command's record: an authorization captured or canceled, a refund failed later
//	charge or decline of an IN_FLIGHT command      waits up to InflightWait for a running attempt, preempts the lease, settles as Reconcile would
//	charge or decline of a RELEASED command        preempts and settles it: the release was wrong
//	done, with no row and no record left           OutcomeNothingToDo, and an ERROR log line for an operator
//	anything else                                  OutcomeNothingToDo (unknown or settled command, an older intent under the key, a row under another reference, an event that settles nothing)
package charge
