// Package regions simulates docs/regions.md's design: the charge path in
// two Regions, and in three. Each Region has its own tables and its own
// reconcile queue on the emulator. A replicator copies each Region's
// writes to the others, later, item by item. It resolves a conflict by
// last writer wins, as multi-Region eventual consistency does. The
// routes table and the ledger are one table each, read by every Region.
// They stand in for tables in multi-Region strong consistency.
//
// Histories draw clients' charges, refunds, captures and cancels, their
// retries, and their reads. A Region fails, at once or in the middle of
// a request. Its writes stay there until it returns. An operator fails
// its tenants over to another Region. Once the Region is back and
// replicated, the operator drains it. Clients fail over as real ones do.
// They try the next Region when theirs does not answer, and go where a
// 421 names. The replicator copies a drawn part of the writes at each
// step. Each Region's sweeper queues its stuck keys on its own queue.
// Its reconcile function takes them, and what its charge function
// queued.
//
// The invariants are the model's (test/model). The provider acts at most
// once per intent, over every reference any Region sent. Every answer
// that said nothing was charged or refunded stays true. A read never
// says 404 of what a client saw made, nor shows what the provider did
// not do. At the end every Region is back and drained, and replication
// and reconciliation run out. Then every command is settled and the
// Regions hold the same items. The records, the rows, every read and the
// provider agree: nothing lost.
//
// TestRegions runs the design of docs/regions.md, in two Regions and in
// three (-regions.n picks one). -regions.design=naive runs the naive
// one: every Region takes every tenant's writes, with no fence and no
// ledger. It fails, and prints a seed that reproduces it.
// TestAFailedRegionsChargeIsNotMadeAgain holds a short failing history
// in every run. make test runs a short TestRegions; make soak runs it on
// fresh seeds.
//
// world_test.go builds the Regions, their links to the emulator and the
// replicator. model_test.go holds the histories: actions, clients and
// invariants. reads_test.go holds the clients' reads and what they may
// say.
package regions
