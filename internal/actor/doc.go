// Package actor carries who asked for a command, and from where. It goes
// from the entry point that knows it to the record that keeps it.
//
// An entry point reads an Actor from its event: the HTTP handler, the
// queue's intake, the webhook. It puts it in the request's context
// (NewContext). The charge service reads it back (FromContext) when it
// claims a key. It keeps it in the record's intent, in a few bytes. The
// audit trail (package audit) reads it from there.
package actor
