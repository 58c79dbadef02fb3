// Package benchout holds what make bench's steps write and more than one
// of its programs reads: the go test -bench output, which loadgen sustain
// takes its ceilings from and cmd/benchdoc and cmd/capacity their figures,
// and loadgen's JSON summaries of a load run and of a sustain search,
// which loadgen writes and cmd/benchdoc sets out. Keeping the summaries'
// types here gives writer and reader one definition of the format.
package benchout
