// Package regions says which Region serves each tenant
// (docs/regions.md). It is what several Regions need beside pkg/idem's
// Ledger.
//
// routes.go holds the routes table: one item per home Region, read
// strongly consistently. Failover and drain change it. One item per
// tenant holds its home, which every stack obeys. fence.go holds
// the Fence. A Region's functions read it under a lease to know whom
// they serve. It yields a failed Region's claims once its writes have
// replicated.
package regions
