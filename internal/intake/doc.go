// Package intake provides the charge intake: charges submitted as messages
// on the charge-requests queue (subscription renewals, batch jobs) rather
// than as POST /charges, and the SQS batch handler that creates them.
//
// A message is one JSON object with exactly these members:
//
//	{"tenant":"acme","command_id":"renewal-2026-12-acme-42",
//	 "request":{"amount":1500,"currency":"EUR","source":"tok_visa","description":"December"}}
//
// tenant is the tenant the charge belongs to, command_id the command's id
// (what a client sends as its Idempotency-Key: 1 to 255 printable ASCII
// characters, not starting or ending with a space), and request the body
// POST /charges takes, under the same rules (charge.ParseBody). The
// message names its tenant itself: only producers allowed to send to the
// queue (IAM) can submit charges, for any tenant.
//
// A refund is the same message with two members more. operation is
// "create-refund", and charge_id names the charge; request is the body
// POST /charges/{id}/refunds takes (charge.ParseRefundBody):
//
//	{"tenant":"acme","command_id":"return-77","operation":"create-refund",
//	 "charge_id":"ch_…","request":{"amount":500}}
//
// A message is the command tenant + operation + command_id, the key
// POST /charges claims, with the fingerprint POST /charges computes for
// the same body: an HTTP request with the same Idempotency-Key and body
// replays the charge a message created, and a message replays one the
// API created. A redelivered or duplicated message creates nothing more.
//
// What becomes of each message of a batch:
//
//	outcome                                      message
//	created, replayed, declined, rejected,       settled (deleted): every
//	mismatch (the id was used with another       later delivery would get
//	body), charge conflict, a refund beyond      the same answer
//	what settled refunds leave
//	in flight elsewhere, outcome pending,        reported in BatchItemFailures:
//	lease lost, provider or store unavailable,   delivered again after the
//	an internal error; for a refund, its charge  visibility timeout
//	not found (yet) or not refundable, or held
//	by refunds in flight
//	malformed (not JSON, missing or wrong        sent to the dead-letter queue
//	members, an invalid request)                 at once, then settled
//
// A malformed message is sent to the dead-letter queue by the handler
// rather than left to the queue's redrive policy: no delivery of it can
// ever succeed, and cycling it through MaxReceiveCount deliveries would
// only delay the alarm. If that send fails, the message is reported for
// another delivery, and the redrive policy remains the fallback.
//
// The handler does not use pkg/idem/lambdaidem: charge.Service.Create
// already runs on idem.Do under the command's key, which is what makes an
// HTTP retry and a message meet. A lambdaidem record per message would key
// by message id or body, in another key space, and add a second claim and
// settlement to every message without deduplicating anything more.
package intake
