package lambdaidem

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// KeyMigration is the migration mode (Options.Migration) for an API whose
// callers do not all send an idempotency key yet: a request without one
// runs unprotected, is counted and logged, and is answered with headers
// saying that the key will be required. It runs under a key of its own
// that no retry sends, so its business writes still commit with a record.
// Unset Options.Migration to require the key; pkg/idem's
// docs/adopting.md has the steps.
type KeyMigration struct {
	// Since is when requests without a key became deprecated, the
	// Deprecation header's date (RFC 9745). Default: the answer's own
	// time, "deprecated as of now".
	Since time.Time
	// Sunset, if set, is when the key becomes required: the Sunset header
	// (RFC 8594).
	Sunset time.Time
	// Link is a page explaining the change, the target of the Link
	// header's rel="deprecation". Default: the invalid-idempotency-key
	// problem type's URI, the answer such a request will get.
	Link string
	// OnMissingKey is called for each request run without a key, to
	// count them (by route, by caller) until none is left.
	OnMissingKey func(ctx context.Context, r Request)
	// Logger gets a warning for each request run without a key, naming
	// the operation and the route, never the body or a header. Default
	// slog.Default().
	Logger *slog.Logger
}

// ranWithoutKey counts and logs a request run without a key, and adds to
// its answer's headers h those that say the key will be required.
func (m *KeyMigration) ranWithoutKey(ctx context.Context, o *api, operation string, r Request, h map[string]string) {
	if m.OnMissingKey != nil {
		m.OnMissingKey(ctx, r)
	}
	logger := m.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, slog.LevelWarn, "lambdaidem: request without an idempotency key ran unprotected",
		slog.String("operation", operation), slog.String("route", r.Route))
	since := m.Since
	if since.IsZero() {
		since = o.now()
	}
	h["Deprecation"] = "@" + strconv.FormatInt(since.Unix(), 10)
	link := m.Link
	if link == "" {
		link = o.ProblemBase + problemInvalidKey.slug
	}
	link = "<" + link + `>; rel="deprecation"`
	if l, ok := h["Link"]; ok {
		link = l + ", " + link
	}
	h["Link"] = link
	if !m.Sunset.IsZero() {
		h["Sunset"] = m.Sunset.UTC().Format(http.TimeFormat)
	}
}
