package stripe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// MetadataReference is the metadata key under which a PaymentIntent carries
// our reference.
const MetadataReference = "chargeonce_reference"

// MetadataCommand is the metadata key under which a PaymentIntent carries
// the command it was charged for (provider.ChargeRequest.Command), so a
// webhook event about it leads back to the idempotency record.
const MetadataCommand = "chargeonce_command"

// MetadataRow is the metadata key under which a PaymentIntent or a Refund
// carries its row in our charges table (provider.ChargeRequest.Row). A
// webhook event finds the row by it after the command's record expired.
const MetadataRow = "chargeonce_row"

// The adapter's guarantees; see the package documentation.
const (
	// DedupWindow is how long Stripe keeps an idempotency key.
	DedupWindow = 24 * time.Hour
	// SearchLag is how far Stripe's search may lag during outages.
	SearchLag = time.Hour
	// SettleWindow is how long after the last send a search miss can be
	// trusted.
	SettleWindow = SearchLag + provider.DefaultSettleWindow
	// DedupMargin is how far from expiring a key must be for a request to
	// be sent under it, a replay included: far more than any request takes.
	DedupMargin = time.Hour
	// searchLimit bounds how many PaymentIntents a lookup reads.
	searchLimit = 10
)

// ErrKeyReused: Stripe holds the reference as an idempotency key for a
// request with other parameters.
var ErrKeyReused = errors.New("idempotency key reused with other parameters")

var (
	errBadReference     = errors.New("reference must be 1 to 255 letters, digits, '_', '-', '.' or ':'")
	errNotPaymentMethod = errors.New("source is not a PaymentMethod id (pm_...)")
	errBadAmount        = errors.New("amount must be at least 1")
	errBadCurrency      = errors.New("currency must be a three-letter ISO code")
	errUnreadable       = errors.New("unreadable answer from Stripe")
	errNotSettled       = errors.New("no final outcome yet")
)

var (
	referencePattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)
	currencyPattern  = regexp.MustCompile(`^[A-Za-z]{3}$`)
	// paymentMethodPattern is a PaymentMethod id: "pm_", then letters,
	// digits and underscores (Stripe's test ones: pm_card_visa).
	paymentMethodPattern = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,61}$`)
)

// Error is what Stripe answered to a failed request, without its message,
// which may quote the request. Retrieve it with errors.As.
type Error struct {
	HTTPStatus  int
	Type        string
	Code        string
	DeclineCode string
	Param       string
	RequestID   string
}

// Unauthorized reports whether err is Stripe refusing the adapter's API
// key (401) with the proof that it did not act on the request: not the
// answer to a re-send, which may be another request's.
func Unauthorized(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.HTTPStatus == http.StatusUnauthorized && !errors.Is(err, provider.ErrAmbiguous)
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe answered HTTP %d", e.HTTPStatus)
	for _, f := range []struct{ name, value string }{
		{"type", e.Type}, {"code", e.Code}, {"decline_code", e.DeclineCode}, {"param", e.Param}, {"request_id", e.RequestID},
	} {
		if f.value != "" {
			fmt.Fprintf(&b, " %s=%s", f.name, f.value)
		}
	}
	return b.String()
}

func newError(se *stripego.Error) *Error {
	return &Error{
		HTTPStatus: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code),
		DeclineCode: string(se.DeclineCode), Param: se.Param, RequestID: se.RequestID,
	}
}

// Options configure an Adapter.
type Options struct {
	// BaseURL is Stripe's API (stripe-go's default); tests point it at
	// stripe-mock or stripesim.
	BaseURL string
	// HTTPClient sends the requests; a plain http.Client by default.
	HTTPClient *http.Client
	// Timeout bounds each call (provider.DefaultTimeout by default);
	// <= 0 leaves only the caller's context to bound it.
	Timeout time.Duration
	// Logger gets one record per call, never the source or the key.
	// Discarded by default.
	Logger *slog.Logger
	// Clock tells LookupRequest whether Stripe still holds a key;
	// time.Now by default.
	Clock func() time.Time
}

// Adapter charges cards through Stripe PaymentIntents. It is safe for
// concurrent use.
type Adapter struct {
	intents intents
	refunds refunds
	opts    Options
}

// intents is the part of stripe-go's PaymentIntent service the adapter
// uses.
type intents interface {
	Create(ctx context.Context, params *stripego.PaymentIntentCreateParams) (*stripego.PaymentIntent, error)
	Retrieve(ctx context.Context, id string, params *stripego.PaymentIntentRetrieveParams) (*stripego.PaymentIntent, error)
	Search(ctx context.Context, params *stripego.PaymentIntentSearchParams) stripego.Seq2[*stripego.PaymentIntent, error]
	Capture(ctx context.Context, id string, params *stripego.PaymentIntentCaptureParams) (*stripego.PaymentIntent, error)
	Cancel(ctx context.Context, id string, params *stripego.PaymentIntentCancelParams) (*stripego.PaymentIntent, error)
}

// New returns an Adapter that authenticates with secretKey, a secret
// (sk_…) or restricted (rk_…) API key.
func New(secretKey string, optFns ...func(*Options)) (*Adapter, error) {
	if !strings.HasPrefix(secretKey, "sk_") && !strings.HasPrefix(secretKey, "rk_") {
		return nil, errors.New("stripe: the API key must be a secret (sk_) or restricted (rk_) key")
	}
	o := Options{Timeout: provider.DefaultTimeout}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	cfg := &stripego.BackendConfig{
		HTTPClient: o.HTTPClient,
		// stripe-go's messages quote Stripe's, which quote the request.
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		MaxNetworkRetries: stripego.Int64(0),
	}
	if o.BaseURL != "" {
		cfg.URL = stripego.String(strings.TrimRight(o.BaseURL, "/"))
	}
	sc := stripego.NewClient(secretKey, stripego.WithBackends(stripego.NewBackendsWithConfig(cfg)))
	return &Adapter{intents: sc.V1PaymentIntents, refunds: sc.V1Refunds, opts: o}, nil
}

// Promises are Stripe's guarantees: see the package documentation.
var Promises = provider.Guarantees{DedupWindow: DedupWindow, DedupMargin: DedupMargin, SettleWindow: SettleWindow}

// Guarantees are Stripe's: Promises.
func (a *Adapter) Guarantees() provider.Guarantees { return Promises }

// Charge creates and confirms a PaymentIntent for req, with req.Reference
// as its idempotency key. A decline is a Result, not an error; errors wrap
// provider.ErrUnavailable, ErrAmbiguous or ErrRejected.
func (a *Adapter) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	res, kind, cause := a.charge(ctx, req)
	return a.finish(ctx, "charge", req.Reference, res, kind, cause)
}

// finish logs a call (op) about name and answers its result, or an error
// of kind with its cause.
func (a *Adapter) finish(ctx context.Context, op, name string, res provider.Result, kind, cause error) (provider.Result, error) {
	a.logCall(ctx, op, name, res, kind, cause)
	if kind != nil {
		return provider.Result{}, fmt.Errorf("stripe: %s %s: %w: %w", op, name, kind, cause)
	}
	return res, nil
}

func (a *Adapter) charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error, error) {
	if err := validate(req); err != nil {
		return provider.Result{}, provider.ErrRejected, err
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return provider.Result{}, provider.ErrUnavailable, err
	}
	res, kind, cause := outcome(a.create(ctx, req))
	if kind == nil && res.Status == "" {
		return provider.Result{}, provider.ErrAmbiguous, cause
	}
	res.Reference = req.Reference
	return res, kind, cause
}

// Lookup searches for the PaymentIntents that carry reference. A miss is
// StatusNotFound, trustworthy only after SettleWindow. Every error wraps
// provider.ErrUnavailable.
func (a *Adapter) Lookup(ctx context.Context, reference string) (provider.Result, error) {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := a.search(ctx, reference)
	return a.lookupDone(ctx, "lookup_search", reference, res, err)
}

// LookupRequest looks req up by replaying it under its reference while
// Stripe still holds the key, which is authoritative at once and may
// charge an intent whose first request never reached Stripe (see the
// package documentation); otherwise it searches, as Lookup. A replay
// refused with an answer that proves it cannot succeed (refusedForGood)
// wraps provider.ErrRejected: nothing was or will be charged. Every other
// error wraps provider.ErrUnavailable.
func (a *Adapter) LookupRequest(ctx context.Context, req provider.LookupRequest) (provider.Result, error) {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	if req.FirstSent.IsZero() || !a.Guarantees().Deduplicates(req.FirstSent, a.opts.Clock()) {
		res, err := a.search(ctx, req.Reference)
		return a.lookupDone(ctx, "lookup_search", req.Reference, res, err)
	}
	res, err := a.replay(ctx, req.ChargeRequest)
	var e *Error
	if errors.Is(err, errRefusedForGood) {
		a.logCall(ctx, "lookup_replay", req.Reference, res, provider.ErrRejected, err)
		return provider.Result{}, fmt.Errorf("stripe: lookup %s: %w: %w", req.Reference, provider.ErrRejected, err)
	}
	if errors.Is(err, ErrKeyReused) || errors.As(err, &e) && e.HTTPStatus >= 500 {
		// Stripe holds the key for other parameters, or answered (or
		// replayed its saved) server error: only the PaymentIntent's
		// state can tell.
		res, err = a.search(ctx, req.Reference)
		return a.lookupDone(ctx, "lookup_search", req.Reference, res, err)
	}
	return a.lookupDone(ctx, "lookup_replay", req.Reference, res, err)
}

func (a *Adapter) lookupDone(ctx context.Context, op, reference string, res provider.Result, err error) (provider.Result, error) {
	if err != nil {
		a.logCall(ctx, op, reference, res, provider.ErrUnavailable, err)
		return provider.Result{}, fmt.Errorf("stripe: lookup %s: %w: %w", reference, provider.ErrUnavailable, err)
	}
	res.Reference = reference
	a.logCall(ctx, op, reference, res, nil, nil)
	return res, nil
}

// CheckSource refuses a source that is not a PaymentMethod id: the charge
// path keeps the source with the intent, to replay its request, only once
// the adapter has accepted it, so card data is never stored. The error
// wraps provider.ErrRejected.
func (a *Adapter) CheckSource(source string) error { return CheckSource(source) }

// CheckSource is the adapter's check of a source, which needs no key.
func CheckSource(source string) error {
	if !paymentMethodPattern.MatchString(source) {
		return fmt.Errorf("stripe: %w: %w", provider.ErrRejected, errNotPaymentMethod)
	}
	return nil
}

// errRefusedForGood marks a replay's create that Stripe refused for the
// request itself (refusedForGood); no other error of a replay (the read of
// the PaymentIntent after it, say) is such proof.
var errRefusedForGood = errors.New("stripe refused the request itself")

// replay sends req again under its reference and reads the PaymentIntent's
// present state if the saved answer is not final.
func (a *Adapter) replay(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	if err := validate(req); err != nil {
		return provider.Result{}, err
	}
	pi, sent, err := a.create(ctx, req)
	res, kind, cause := outcome(pi, sent, err)
	switch {
	case errors.Is(kind, provider.ErrRejected) && refusedForGood(cause):
		return provider.Result{}, fmt.Errorf("%w: %w", errRefusedForGood, cause)
	case kind != nil:
		return provider.Result{}, cause
	case res.Status != "":
		return res, nil
	}
	return a.current(ctx, pi.ID)
}

// refusedForGood reports whether a create's error is Stripe refusing the
// request itself: an invalid_request_error naming a parameter of it (such
// as 400 resource_missing on payment_method), which Stripe answers the same
// to every send: the key's saved answer to a first request that failed so,
// or a fresh refusal of a request it never saw. Either way nothing was
// charged. An error that names no parameter (404 "Unrecognized request
// URL" from a misrouted request) says nothing of the request, nor do 401
// and 403 (another API key may have run the original), 409, 429, and a
// key held for other parameters.
func refusedForGood(err error) bool {
	var e *Error
	if !errors.As(err, &e) || errors.Is(err, ErrKeyReused) || e.Type != string(stripego.ErrorTypeInvalidRequest) || e.Param == "" {
		return false
	}
	switch e.HTTPStatus {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict, http.StatusTooManyRequests:
		return false
	}
	return e.HTTPStatus >= 400 && e.HTTPStatus < 500
}

// search finds the PaymentIntents that carry reference and answers the
// present state of the best: a succeeded one, else the newest.
func (a *Adapter) search(ctx context.Context, reference string) (provider.Result, error) {
	if !referencePattern.MatchString(reference) {
		return provider.Result{}, errBadReference
	}
	params := &stripego.PaymentIntentSearchParams{SearchParams: stripego.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", MetadataReference, reference),
		Limit: stripego.Int64(searchLimit),
	}}
	var (
		best *stripego.PaymentIntent
		n    int
	)
	for hit, err := range a.intents.Search(ctx, params) {
		if err != nil {
			return provider.Result{}, causeOf(err)
		}
		// Search results may be stale; a read by id is not.
		pi, err := a.intents.Retrieve(ctx, hit.ID, nil)
		if err != nil {
			return provider.Result{}, causeOf(err)
		}
		if best == nil || better(pi, best) {
			best = pi
		}
		if n++; n == searchLimit {
			break
		}
	}
	if best == nil {
		return provider.Result{Status: provider.StatusNotFound}, nil
	}
	if res, ok := settled(best); ok {
		return res, nil
	}
	return provider.Result{}, fmt.Errorf("%w: %s is %s", errNotSettled, best.ID, best.Status)
}

// better reports whether pi is a better answer for a reference than best.
func better(pi, best *stripego.PaymentIntent) bool {
	ok, bestOK := pi.Status == stripego.PaymentIntentStatusSucceeded, best.Status == stripego.PaymentIntentStatusSucceeded
	if ok != bestOK {
		return ok
	}
	return pi.Created > best.Created
}

// current reads the PaymentIntent id and answers its outcome if final.
func (a *Adapter) current(ctx context.Context, id string) (provider.Result, error) {
	pi, err := a.intents.Retrieve(ctx, id, nil)
	if err != nil {
		return provider.Result{}, causeOf(err)
	}
	if res, ok := settled(pi); ok {
		return res, nil
	}
	return provider.Result{}, fmt.Errorf("%w: %s is %s", errNotSettled, pi.ID, pi.Status)
}

// create sends req as a PaymentIntent under its reference, with what the
// transport did with it (provider.TraceSend); stripe-go builds its
// http.Request from ctx, so the trace follows the transport's own re-sends
// too.
func (a *Adapter) create(ctx context.Context, req provider.ChargeRequest) (pi *stripego.PaymentIntent, sent *provider.Sent, err error) {
	params := &stripego.PaymentIntentCreateParams{
		Amount:                stripego.Int64(req.Amount),
		Currency:              stripego.String(strings.ToLower(req.Currency)),
		PaymentMethod:         stripego.String(req.Source),
		PaymentMethodTypes:    []*string{stripego.String("card")},
		Confirm:               stripego.Bool(true),
		ErrorOnRequiresAction: stripego.Bool(true),
		Metadata:              map[string]string{MetadataReference: req.Reference},
	}
	addMetadata(params.Metadata, req.Command, req.Row)
	if req.AuthorizeOnly {
		params.CaptureMethod = stripego.String(string(stripego.PaymentIntentCaptureMethodManual))
	}
	params.SetIdempotencyKey(req.Reference)
	ctx, sent = provider.TraceSend(ctx)
	pi, err = a.intents.Create(ctx, params)
	return pi, sent, err
}

// outcome reads the answer to a create: a Result (a zero Status when the
// PaymentIntent has no final outcome yet), or the kind of error and its
// cause (classify).
func outcome(pi *stripego.PaymentIntent, sent *provider.Sent, err error) (provider.Result, error, error) {
	if err == nil {
		if res, ok := settled(pi); ok {
			return res, nil, nil
		}
		return provider.Result{}, nil, fmt.Errorf("%w: %s is %s", errNotSettled, pi.ID, pi.Status)
	}
	var se *stripego.Error
	if errors.As(err, &se) && se.Type == stripego.ErrorTypeCard {
		res := provider.Result{Status: provider.StatusDeclined, DeclineCode: declineCode(se)}
		if se.PaymentIntent != nil {
			res.ChargeID = se.PaymentIntent.ID
		}
		return res, nil, nil
	}
	kind, cause := classify(err, sent)
	return provider.Result{}, kind, cause
}

// classify reads a create's error other than a card error into the kind
// of error (one of the provider's sentinels) and its cause. A failed send
// is unavailable only if none of it left, and an error answer to a
// re-send tells nothing.
func classify(err error, sent *provider.Sent) (kind, cause error) {
	var se *stripego.Error
	if !errors.As(err, &se) {
		cause := causeOf(err)
		if sent.NotSent() {
			return provider.ErrUnavailable, cause
		}
		return provider.ErrAmbiguous, cause
	}
	e := newError(se)
	switch code := se.HTTPStatusCode; {
	case sent.Resent():
		// The re-send's answer, not one the key saved for the first send.
		return provider.ErrAmbiguous, e
	case code == http.StatusTooManyRequests:
		return provider.ErrUnavailable, e
	case code == http.StatusConflict:
		return provider.ErrAmbiguous, e
	case se.Type == stripego.ErrorTypeIdempotency:
		return provider.ErrRejected, fmt.Errorf("%w: %w", ErrKeyReused, e)
	case code >= 400 && code < 500:
		return provider.ErrRejected, e
	default:
		return provider.ErrAmbiguous, e
	}
}

// settled answers a PaymentIntent's outcome, or false if it has none yet.
func settled(pi *stripego.PaymentIntent) (provider.Result, bool) {
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return provider.Result{Status: provider.StatusCharged, ChargeID: pi.ID}, true
	case stripego.PaymentIntentStatusRequiresCapture:
		return provider.Result{Status: provider.StatusAuthorized, ChargeID: pi.ID}, true
	case stripego.PaymentIntentStatusRequiresAction:
		return provider.Result{Status: provider.StatusDeclined, ChargeID: pi.ID, DeclineCode: string(stripego.ErrorCodeAuthenticationRequired)}, true
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError == nil {
			return provider.Result{}, false
		}
		return provider.Result{Status: provider.StatusDeclined, ChargeID: pi.ID, DeclineCode: declineCode(pi.LastPaymentError)}, true
	case stripego.PaymentIntentStatusCanceled:
		return provider.Result{Status: provider.StatusDeclined, ChargeID: pi.ID, DeclineCode: "canceled"}, true
	default:
		return provider.Result{}, false
	}
}

func declineCode(se *stripego.Error) string {
	switch {
	case se.DeclineCode != "":
		return string(se.DeclineCode)
	case se.Code != "":
		return string(se.Code)
	default:
		return string(stripego.ErrorCodeCardDeclined)
	}
}

// causeOf turns what stripe-go returned into an error that quotes nothing
// of the request or of Stripe's message: a translated *Error, the transport
// error, or errUnreadable.
func causeOf(err error) error {
	var (
		se     *stripego.Error
		urlErr *url.Error
	)
	switch {
	case errors.As(err, &se):
		return newError(se)
	case errors.As(err, &urlErr):
		return urlErr
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return err
	default:
		// stripe-go's decoding errors quote the answer's body.
		return errUnreadable
	}
}

func validate(req provider.ChargeRequest) error {
	switch {
	case !referencePattern.MatchString(req.Reference):
		return errBadReference
	case req.Amount < 1:
		return errBadAmount
	case !currencyPattern.MatchString(req.Currency):
		return errBadCurrency
	case !paymentMethodPattern.MatchString(req.Source):
		return errNotPaymentMethod
	}
	return nil
}

func (a *Adapter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.opts.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.opts.Timeout)
}

// logCall logs one call: its outcome, or the kind of error with Stripe's
// codes and request id.
func (a *Adapter) logCall(ctx context.Context, op, reference string, res provider.Result, kind, cause error) {
	attrs := []slog.Attr{slog.String("op", op), slog.String("reference", reference)}
	if kind == nil {
		attrs = append(attrs, slog.String("status", string(res.Status)), slog.String("charge_id", res.ChargeID))
		if res.DeclineCode != "" {
			attrs = append(attrs, slog.String("decline_code", res.DeclineCode))
		}
		a.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "stripe call", attrs...)
		return
	}
	attrs = append(attrs, slog.String("error", kind.Error()))
	var e *Error
	if errors.As(cause, &e) {
		attrs = append(attrs, slog.Int("http_status", e.HTTPStatus), slog.String("stripe_type", e.Type),
			slog.String("stripe_code", e.Code), slog.String("request_id", e.RequestID))
	}
	a.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "stripe call failed", attrs...)
}

// addMetadata adds a request's command and row to the metadata Stripe
// keeps with the object, each only if set.
func addMetadata(md map[string]string, command, row string) {
	if command != "" {
		md[MetadataCommand] = command
	}
	if row != "" {
		md[MetadataRow] = row
	}
}
