// Package audit keeps the audit trail: every change to the idempotency
// records and to the charges table's rows. It outlives a record's key.
//
// DynamoDB Streams hand each change of both tables to the audit function
// (Handler, handler.go), with the item before and after it. It turns each
// into an Entry (entry.go, decode.go). An entry names the tenant, the
// operation and the key's hash. It says who asked and from where, as the
// claim kept it (package actor). It holds the request, the answer's status
// and problem type, the charge and refund ids, and the times. It never
// holds a raw key, a card source or a secret.
//
// A batch's entries become one object of the Archive (archive.go). That
// is an S3 bucket under Object Lock, with a folder a day for Athena. The
// Index (index.go) is a DynamoDB table. It files each object under the
// key hashes of the commands it holds, for three months. The Trail
// (trail.go) reads a command's or a charge's history back, for chargectl
// admin audit. It orders it as it happened (order.go): DynamoDB stamps a
// change to the second only.
//
// None of this is on the request path: the streams cost the functions no
// call. A batch that cannot be written fails whole. The stream delivers it
// again until it is written.
package audit
