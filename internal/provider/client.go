package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultTimeout bounds each call unless WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// maxResponseBytes caps how much of a response body the client reads.
const maxResponseBytes = 1 << 20

var (
	errEmptyReference = errors.New("empty reference")
	errEmptyCharge    = errors.New("empty charge id")
	errNoChargeID     = errors.New("result without the provider's id")
	errBadAmount      = errors.New("negative amount")
	errOtherCharge    = errors.New("result for another charge")
)

// Client talks to the card provider's HTTP API. It is safe for concurrent use.
type Client struct {
	chargesURL string
	refundsURL string
	// paymentsURL names a charge by the provider's id, where
	// chargesURL names it by our reference.
	paymentsURL string
	secret      string
	hc          *http.Client
	timeout     time.Duration
	guarantees  Guarantees
}

// transport is the default Clients' transport: net/http's default, but
// keeping as many idle connections to the provider as requests may run at
// once in a process (the local stack, a load test), not 2, so a busy
// process reuses its connections instead of dialing one per call.
var transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

// Options configure a Client.
type Options struct {
	// HTTPClient sends the requests; the Client works on a copy that never
	// follows redirects. Default: an http.Client on a transport that keeps
	// up to 64 idle connections to the provider.
	HTTPClient *http.Client
	// Timeout bounds each call; <= 0 leaves only the caller's context to
	// bound it. Default DefaultTimeout.
	Timeout time.Duration
	// Guarantees are the provider's declared guarantees. Default:
	// deduplication for ever, DefaultSettleWindow.
	Guarantees Guarantees
}

// WithHTTPClient makes the Client send its requests through hc (nil keeps the
// default).
func WithHTTPClient(hc *http.Client) func(*Options) {
	return func(o *Options) {
		if hc != nil {
			o.HTTPClient = hc
		}
	}
}

// WithTimeout bounds each call to d instead of DefaultTimeout; d <= 0 leaves
// only the caller's context to bound it.
func WithTimeout(d time.Duration) func(*Options) {
	return func(o *Options) { o.Timeout = d }
}

// WithGuarantees declares the provider's guarantees instead of the
// defaults.
func WithGuarantees(g Guarantees) func(*Options) {
	return func(o *Options) { o.Guarantees = g }
}

// NewClient returns a Client for the provider at baseURL (scheme and host,
// optionally a path prefix). A non-empty secret is sent as a bearer token.
func NewClient(baseURL, secret string, optFns ...func(*Options)) *Client {
	o := Options{HTTPClient: &http.Client{Transport: transport}, Timeout: DefaultTimeout, Guarantees: Guarantees{SettleWindow: DefaultSettleWindow}}
	for _, fn := range optFns {
		fn(&o)
	}
	base := strings.TrimRight(baseURL, "/")
	c := &Client{
		chargesURL:  base + "/v1/charges",
		refundsURL:  base + "/v1/refunds",
		paymentsURL: base + "/v1/payments",
		secret:      secret,
		hc:          o.HTTPClient,
		timeout:     o.Timeout,
		guarantees:  o.Guarantees,
	}
	// Following a 307/308 would send the charge a second time, and any other
	// redirect would turn it into a GET: answer with the redirect instead.
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	return c
}

// Guarantees are the provider's declared guarantees.
func (c *Client) Guarantees() Guarantees { return c.guarantees }

// Charge asks the provider to charge req. It sends the request exactly once.
// A declined card is not an error: the Result has StatusDeclined and its
// DeclineCode. An authorize-only charge answers StatusAuthorized, never
// StatusCharged, and a charge the reverse. Errors wrap ErrUnavailable,
// ErrAmbiguous or ErrRejected.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Result, error) {
	var invalid error
	if req.Reference == "" {
		// Without a reference the provider cannot deduplicate.
		invalid = errEmptyReference
	}
	success := StatusCharged
	if req.AuthorizeOnly {
		success = StatusAuthorized
	}
	return c.send(ctx, "charge", c.chargesURL, req.Reference, req, invalid, success, StatusDeclined)
}

// paymentBody is what a capture or a cancel sends; the path names the
// charge.
type paymentBody struct {
	Reference string `json:"reference"`
	Amount    int64  `json:"amount,omitempty"`
}

// Capture asks the provider to capture req.Amount (0: all) of the
// authorization req.Charge. It sends the request exactly once, and the
// provider deduplicates it by req.Reference. The Result has StatusCharged
// and the Amount the charge took, or StatusCanceled if the authorization
// was canceled or expired: nothing captured. Errors wrap ErrUnavailable,
// ErrAmbiguous or ErrRejected, as Charge's do: a capture beyond the
// amount authorized, or of an unknown or declined charge, is ErrRejected.
func (c *Client) Capture(ctx context.Context, req PaymentRequest) (Result, error) {
	return c.payment(ctx, "capture", req, req.Amount, StatusCharged, StatusCanceled)
}

// Cancel asks the provider to cancel the authorization req.Charge, as
// Capture asks to capture it; req.Amount is not sent. The Result has
// StatusCanceled, or StatusCharged with the Amount taken if the charge
// was captured: nothing canceled.
func (c *Client) Cancel(ctx context.Context, req PaymentRequest) (Result, error) {
	return c.payment(ctx, "cancel", req, 0, StatusCanceled, StatusCharged)
}

// payment posts a capture or a cancel (op) of req.Charge and requires
// the answer to be about that charge.
func (c *Client) payment(ctx context.Context, op string, req PaymentRequest, amount int64, want ...Status) (Result, error) {
	invalid := unnamed(req.Reference, req.Charge)
	if invalid == nil && amount < 0 {
		invalid = errBadAmount
	}
	endpoint := c.paymentsURL + "/" + url.PathEscape(req.Charge) + "/" + op
	res, err := c.send(ctx, op, endpoint, req.Reference, paymentBody{req.Reference, amount}, invalid, want...)
	if err == nil && res.ChargeID != req.Charge {
		return Result{}, fmt.Errorf("provider: %s %s: %w: %w %q", op, req.Reference, ErrAmbiguous, errOtherCharge, res.ChargeID)
	}
	return res, err
}

// Refund asks the provider to refund req.Amount of the charge whose id is
// req.Charge. It sends the request exactly once, and the provider
// deduplicates it by req.Reference. The Result has StatusRefunded and the
// refund's id, or StatusDeclined for a refund the provider failed for
// good. Errors wrap ErrUnavailable, ErrAmbiguous or ErrRejected, as
// Charge's do: a refund beyond what the charge has left, of an unknown
// charge, or under a reference used for another refund is ErrRejected.
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Result, error) {
	invalid := unnamed(req.Reference, req.Charge)
	return c.send(ctx, "refund", c.refundsURL, req.Reference, req, invalid, StatusRefunded, StatusDeclined)
}

// unnamed refuses, before anything is sent, a request on a charge that
// lacks its reference or the charge's id.
func unnamed(reference, charge string) error {
	switch {
	case reference == "":
		return errEmptyReference
	case charge == "":
		return errEmptyCharge
	}
	return nil
}

// send posts body to endpoint once, unless invalid refuses it first, and
// reads a result whose status is one of want.
func (c *Client) send(ctx context.Context, op, endpoint, reference string, body any, invalid error, want ...Status) (Result, error) {
	fail := func(kind, cause error) (Result, error) {
		return Result{}, fmt.Errorf("provider: %s %s: %w: %w", op, reference, kind, cause)
	}
	if invalid != nil {
		return fail(ErrRejected, invalid)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fail(ErrRejected, err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return fail(ErrUnavailable, err)
	}
	ctx, sent := TraceSend(ctx)
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(data))
	if err != nil {
		return fail(ErrRejected, err)
	}
	httpReq.Header.Set("Content-Type", "application/json")

	resp, err := c.do(httpReq)
	if err != nil {
		if sent.NotSent() {
			return fail(ErrUnavailable, err)
		}
		return fail(ErrAmbiguous, err)
	}
	defer drainAndClose(resp.Body)

	switch code := resp.StatusCode; {
	case code != http.StatusOK && sent.Resent():
		return fail(ErrAmbiguous, &StatusError{StatusCode: code})
	case code == http.StatusOK:
		res, err := decodeResult(resp.Body, reference, want...)
		if err != nil {
			return fail(ErrAmbiguous, err)
		}
		return res, nil
	case notProcessed(resp):
		return fail(ErrUnavailable, &StatusError{StatusCode: code})
	case code == http.StatusConflict:
		// Another request for the reference is in flight; its outcome is ours.
		return fail(ErrAmbiguous, &StatusError{StatusCode: code})
	case code >= 400 && code < 500:
		return fail(ErrRejected, &StatusError{StatusCode: code})
	default:
		return fail(ErrAmbiguous, &StatusError{StatusCode: code})
	}
}

// Lookup asks the provider what became of reference: StatusCharged,
// StatusAuthorized or StatusDeclined with the stored result (the first
// answer, whatever a capture or cancel did since: State tells that), or
// StatusNotFound (not an error) if it never charged it. Every error wraps
// ErrUnavailable.
func (c *Client) Lookup(ctx context.Context, reference string) (Result, error) {
	return c.lookup(ctx, "lookup", c.chargesURL, reference, reference, StatusCharged, StatusAuthorized, StatusDeclined)
}

// LookupRefund asks the provider what became of the refund sent under
// req.Reference: StatusRefunded or StatusDeclined with the stored result,
// or StatusNotFound (not an error) if it never refunded under it. It sends
// nothing that could refund. Every error wraps ErrUnavailable.
func (c *Client) LookupRefund(ctx context.Context, req RefundRequest) (Result, error) {
	return c.lookup(ctx, "lookup refund", c.refundsURL, req.Reference, req.Reference, StatusRefunded, StatusDeclined)
}

// State asks the provider for the present state of the charge whose id
// is charge: StatusAuthorized (the Amount held), StatusCharged (the
// Amount taken), StatusCanceled, StatusDeclined for a declined charge, or
// StatusNotFound (not an error). The Result's Reference is the charge's.
// It sends nothing that changes anything. Every error wraps
// ErrUnavailable.
func (c *Client) State(ctx context.Context, charge string) (Result, error) {
	res, err := c.lookup(ctx, "state", c.paymentsURL, charge, "", StatusAuthorized, StatusCharged, StatusCanceled, StatusDeclined)
	if err == nil && res.Status != StatusNotFound && res.ChargeID != charge {
		return Result{}, fmt.Errorf("provider: state %s: %w: %w %q", charge, ErrUnavailable, errOtherCharge, res.ChargeID)
	}
	return res, err
}

// lookup reads the result stored under endpoint for name, whose status is
// one of want, or StatusNotFound. The result must be for reference, when
// one is given.
func (c *Client) lookup(ctx context.Context, op, endpoint, name, reference string, want ...Status) (Result, error) {
	fail := func(cause error) (Result, error) {
		return Result{}, fmt.Errorf("provider: %s %s: %w: %w", op, name, ErrUnavailable, cause)
	}
	if name == "" {
		return fail(errEmptyReference)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/"+url.PathEscape(name), nil)
	if err != nil {
		return fail(err)
	}

	resp, err := c.do(httpReq)
	if err != nil {
		return fail(err)
	}
	defer drainAndClose(resp.Body)

	switch resp.StatusCode {
	case http.StatusOK:
		res, err := decodeResult(resp.Body, reference, want...)
		if err != nil {
			return fail(err)
		}
		return res, nil
	case http.StatusNotFound:
		// Only the provider's own not_found answer counts: a bare 404 from a
		// wrong base URL must not pass for "never charged".
		res, err := decodeResult(resp.Body, reference, StatusNotFound)
		if err != nil {
			return fail(fmt.Errorf("%w: %w", &StatusError{StatusCode: resp.StatusCode}, err))
		}
		return res, nil
	default:
		return fail(&StatusError{StatusCode: resp.StatusCode})
	}
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Accept", "application/json")
	if c.secret != "" {
		req.Header.Set("Authorization", "Bearer "+c.secret)
	}
	return c.hc.Do(req)
}

// notProcessed reports whether the provider guarantees, by its answer, that it
// did not act on the request.
func notProcessed(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		return strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderNotProcessed)), "true")
	case http.StatusTooManyRequests:
		return true
	default:
		return false
	}
}

// decodeResult reads a Result for reference whose status must be one of want.
// A result that names no reference is taken to be for reference. An empty
// reference takes the result's.
func decodeResult(body io.Reader, reference string, want ...Status) (Result, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxResponseBytes))
	if err != nil {
		return Result{}, fmt.Errorf("read response: %w", err)
	}
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		return Result{}, fmt.Errorf("decode response: %w", err)
	}
	if !slices.Contains(want, res.Status) {
		return Result{}, fmt.Errorf("unexpected status %q in response", res.Status)
	}
	switch {
	case res.Reference == "":
		res.Reference = reference
	case reference != "" && res.Reference != reference:
		return Result{}, fmt.Errorf("response is for reference %q", res.Reference)
	}
	if res.Status != StatusDeclined && res.Status != StatusNotFound && res.ChargeID == "" {
		return Result{}, errNoChargeID
	}
	return res, nil
}

// drainAndClose lets the connection be reused for the next call.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxResponseBytes))
	_ = body.Close()
}
