// Package audit keeps the audit trail: every change to the idempotency
// records and the charges table's rows, long after a record's key has
// expired. What was asked, by whom and from where, and what came back.
//
// DynamoDB Streams hand each change of both tables, with the item before
// and after it, to the audit function (Handler, handler.go). It turns
// each into an Entry (entry.go, decode.go): tenant, operation, the key's
// hash, the principal and origin the claim kept (package actor), the
// request, the answer's status and problem type, the charge and refund
// ids, the times. No raw key, card source or secret is ever kept. A
// batch's entries become one object of the Archive (archive.go), an S3
// bucket under Object Lock, a folder a day for Athena. The Index
// (index.go), a DynamoDB table, files each object under the key hashes
// of the commands it holds, for three months. The Trail (trail.go) reads
// a command's or a charge's history back: chargectl admin audit.
//
// Nothing of this is on the request path: the streams cost the functions
// no call. A batch that cannot be written fails whole, and the stream
// delivers it again until it is.
package audit
