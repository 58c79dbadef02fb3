// Package intake provides the charge intake. Charges come as messages on
// the charge-requests queue rather than as POST /charges. Subscription
// renewals and batch jobs send them. The package's SQS batch handler
// creates them.
//
// A message is one JSON object with exactly these members:
//
//	{"tenant":"acme","command_id":"renewal-2026-12-acme-42",
//	 "request":{"amount":1500,"currency":"EUR","source":"tok_visa","description":"December"}}
//
// tenant is the tenant the charge belongs to. command_id is the command's
// id, what a client sends as its Idempotency-Key. That is 1 to 255
// printable ASCII characters, not starting or ending with a space. request
// is the body POST /charges takes, under the same rules (charge.ParseBody).
// The message names its tenant itself. Only producers allowed to send to
// the queue (IAM) can submit charges, for any tenant.
//
// A refund is the same message with two members more. operation is
// "create-refund", and charge_id names the charge. request is the body POST
// /charges/{id}/refunds takes (charge.ParseRefundBody):
//
//	{"tenant":"acme","command_id":"return-77","operation":"create-refund",
//	 "charge_id":"ch_…","request":{"amount":500}}
//
// A message is the command tenant + operation + command_id, the key POST
// /charges claims. It carries the fingerprint POST /charges computes for
// the same body. So an HTTP request with the same Idempotency-Key and body
// replays the charge a message created. A message replays one the API
// created. A redelivered or duplicated message creates nothing more.
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
// The handler sends a malformed message to the dead-letter queue itself. It
// does not leave it to the queue's redrive policy. No delivery of it can
// ever succeed. Cycling it through MaxReceiveCount deliveries would only
// delay the alarm. If that send fails, the message is reported for another
// delivery. The redrive policy remains the fallback.
//
// The handler does not use pkg/idem/lambdaidem. charge.Service.Create
// already runs on idem.Do under the command's key. That is what makes an
// HTTP retry and a message meet. A lambdaidem record per message would key
// by message id or body, in another key space. It would add a second claim
// and settlement to every message. It would deduplicate nothing more.
package intake
