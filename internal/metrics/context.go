package metrics

import "context"

type recorderKey struct{}

// NewContext returns a copy of ctx carrying rec, for the code an
// invocation calls to record into the invocation's Recorder.
func NewContext(ctx context.Context, rec *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, rec)
}

// FromContext returns the Recorder ctx carries, or nil, whose methods
// record nothing.
func FromContext(ctx context.Context) *Recorder {
	rec, _ := ctx.Value(recorderKey{}).(*Recorder)
	return rec
}
