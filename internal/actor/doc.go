// Package actor carries who asked for a command and from where, from the
// entry point that knows it to the record that keeps it.
//
// An entry point (the HTTP handler, the queue's intake, the webhook) reads
// an Actor from its event and puts it in the request's context
// (NewContext). The charge service reads it back (FromContext) when it
// claims a key, and keeps it in the record's intent, a few bytes long.
// The audit trail (package audit) reads it from there.
package actor
