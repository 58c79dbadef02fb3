// Package regions provides the simulation that holds docs/regions.md's
// design: the charge path in two Regions, each with its own tables on the
// emulator, and a replicator between them. The replicator copies each
// Region's writes to the other later, as a global table in multi-Region
// eventual consistency does, and resolves a conflict by last writer wins,
// item by item. The routes table and the ledger of claims are one table
// each, read by both Regions: they stand in for tables in multi-Region
// strong consistency.
//
// Histories draw clients' charges, refunds, captures and cancels, and their
// retries. A Region fails, at once or in the middle of a request, and its
// writes stay there until it returns. An operator fails its tenants over,
// and, once the Region is back and its writes have replicated, drains it.
// Clients fail over as real ones do: to the other Region when theirs does
// not answer, and where a 421 names. The replicator copies a drawn part of
// the writes at each step. Each Region's sweeper and reconciler run.
//
// The invariants are the model's (test/model). The provider acts at most
// once per intent, over every reference any Region sent for it. Every
// answer that said nothing was charged or refunded stays true. Once every
// Region is back and drained, and replication and reconciliation have run
// out, every command is settled, the Regions hold the same items, and the
// records, the rows and the provider agree: nothing lost.
//
// TestRegions runs the design of docs/regions.md. -regions.design=naive
// runs the naive design instead: every Region takes every tenant's
// writes, with no fence and no ledger. It fails, and the seed it prints
// reproduces the failure. TestNaiveDesignChargesTwice is its shortest
// history, which holds the failure in every run. make test runs a short
// TestRegions; make soak runs it on fresh seeds.
//
// world_test.go builds the Regions, their links to the emulator and the
// replicator. model_test.go holds the histories: actions, clients and
// invariants.
package regions
