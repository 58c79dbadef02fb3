// Package regions provides what a deployment in several Regions needs
// beside pkg/idem's Ledger (docs/regions.md): which Region serves each
// tenant, and the fence that keeps every other Region from acting for it.
//
// routes.go holds the routes table, one item per home Region, kept in a
// table every Region reads strongly consistently; failover and drain
// change it. fence.go holds the Fence, which a Region's functions read
// under a lease to know which tenants they serve, and which yields a
// failed Region's claims once its writes have replicated.
package regions
