package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Header names of the API's idempotency contract.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotencyExpires = "Idempotency-Expires"
	HeaderReplayed           = "Idempotent-Replayed"
	HeaderRetryAfter         = "Retry-After"
)

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

// CommandID identifies one intent, to charge or to refund, across every
// attempt to carry it out. It is sent as the Idempotency-Key. Mint it once,
// with NewCommandID, when the intent is formed. Keep it with the intent, so
// that a retry, or a resumed run after a crash, reuses it.
type CommandID string

// NewCommandID returns a new random id (a version 4 UUID from crypto/rand).
func NewCommandID() CommandID { return CommandID(uuid.NewString()) }

// Validate reports whether id can be an Idempotency-Key: 1 to 255
// printable ASCII characters. The error matches ErrInvalid.
func (id CommandID) Validate() error {
	if len(id) == 0 || len(id) > 255 {
		return fmt.Errorf("command id must be 1 to 255 characters, got %d: %w", len(id), ErrInvalid)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return fmt.Errorf("command id %q has a character that is not printable ASCII: %w", id, ErrInvalid)
		}
	}
	return nil
}

// Money is an amount in a currency's minor units (cents for EUR).
type Money struct {
	Amount   int64
	Currency string // ISO 4217 alphabetic code, upper case
}

// ChargeStatus is where a charge stands.
type ChargeStatus string

// The statuses of a charge.
const (
	// StatusRequiresCapture: authorized (WithCaptureLater), the amount held.
	StatusRequiresCapture ChargeStatus = "requires_capture"
	// StatusCapturing: a capture's provider call is not settled yet.
	StatusCapturing ChargeStatus = "capturing"
	// StatusSucceeded: charged, or captured.
	StatusSucceeded ChargeStatus = "succeeded"
	// StatusCanceling: a cancel's provider call is not settled yet.
	StatusCanceling ChargeStatus = "canceling"
	// StatusCanceled: the authorization was canceled, or expired at the
	// provider; nothing was charged.
	StatusCanceled ChargeStatus = "canceled"
)

// Charge is a charge as the API describes it.
type Charge struct {
	ID string `json:"id"`
	// Amount is what is charged or held: the amount authorized before a
	// capture, the amount captured after.
	Amount            int64        `json:"amount"`
	Currency          string       `json:"currency"`
	Description       string       `json:"description,omitempty"`
	Status            ChargeStatus `json:"status"`
	ProviderReference string       `json:"provider_reference"`
	CreatedAt         time.Time    `json:"created_at"`
	// AmountAuthorized is the amount the provider held; 0 unless the
	// charge was created with WithCaptureLater.
	AmountAuthorized int64 `json:"amount_authorized,omitempty"`
	// AmountRefunded is the sum of the charge's succeeded refunds.
	AmountRefunded int64 `json:"amount_refunded"`
	// Refunds are the charge's oldest refunds, at most 10, as Get reads
	// them; Create's charge has none. RefundsHasMore says it has more:
	// ListRefunds and AllRefunds read them all.
	Refunds        []Refund `json:"refunds,omitempty"`
	RefundsHasMore bool     `json:"refunds_has_more,omitempty"`
}

// Receipt says how a command's answer came: Create and Refund return one.
type Receipt struct {
	// Replayed is true when the answer is the stored outcome of an earlier
	// request with the same command id. This call, or another, already
	// carried the command out. It was not carried out again.
	Replayed bool `json:"replayed"`
	// KeyExpiresAt is until when the command id deduplicates
	// (Idempotency-Expires). Zero if the answer did not say.
	KeyExpiresAt time.Time `json:"key_expires_at,omitzero"`
	// Attempts is how many HTTP requests the call made.
	Attempts int `json:"attempts"`
}

// Result is the outcome of a successful Create.
type Result struct {
	Charge Charge
	Receipt
}

// Doer sends one HTTP request; *http.Client is one.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

var _ Doer = (*http.Client)(nil)

// Client calls the charge API. It is safe for concurrent use.
type Client struct {
	base string // without a trailing slash
	o    options
}

// New returns a Client for the API at baseURL (e.g.
// "https://abc123.execute-api.eu-west-1.amazonaws.com" or
// "http://127.0.0.1:3000").
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base url %q: want http(s)://host[/path]", baseURL)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), o: o}, nil
}

// CreateOption sets an optional member of a charge request.
type CreateOption func(*chargeRequest)

// WithDescription sets the charge's free-text description. It is part of
// the request: a retry with the same id must carry the same description.
func WithDescription(d string) CreateOption {
	return func(r *chargeRequest) { r.Description = d }
}

type chargeRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Source      string `json:"source"`
	Description string `json:"description,omitempty"`
	Capture     *bool  `json:"capture,omitempty"` // nil: true, the API's default
}

// Create charges source amount.Amount in amount.Currency, at most once for
// id. It retries on network errors, timeouts, 409, 429 and 5xx answers. It
// always sends id and the same body bytes. It stops at a final answer, at
// the last attempt, or when ctx ends. A declined card is a *ProblemError
// matching ErrDeclined. See the package sentinels for the others. Calling
// Create again later with the same id and arguments resumes the intent. It
// never charges twice. With WithCaptureLater it authorizes only.
func (c *Client) Create(ctx context.Context, id CommandID, amount Money, source string, opts ...CreateOption) (Result, error) {
	req := chargeRequest{Amount: amount.Amount, Currency: amount.Currency, Source: source}
	for _, opt := range opts {
		opt(&req)
	}
	ch, rc, err := command[Charge](ctx, c, "create", id, "/charges", req)
	return Result{Charge: ch, Receipt: rc}, err
}

// Get reads the charge with the given id, with its oldest refunds. It
// retries on network errors, timeouts, 429 and 5xx answers. An unknown id,
// or another tenant's charge, is a *ProblemError matching ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Charge, error) {
	return exchange[Charge](ctx, c, "get "+id, http.MethodGet, chargePath(id), nil, nil)
}

func chargePath(id string) string { return "/charges/" + url.PathEscape(id) }

// command carries out one command, Create's or Refund's. It POSTs req as
// JSON to path, with id as the Idempotency-Key, through send's retries. It
// decodes the 201 answer into T. op names the call in errors.
func command[T any](ctx context.Context, c *Client, op string, id CommandID, path string, req any) (T, Receipt, error) {
	var v T
	if err := id.Validate(); err != nil {
		return v, Receipt{}, fmt.Errorf("client: %s: %w", op, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return v, Receipt{}, fmt.Errorf("client: %s %s: %w", op, id, err)
	}
	header := http.Header{}
	header.Set(HeaderIdempotencyKey, string(id))
	header.Set("Content-Type", "application/json")
	resp, attempts, err := c.send(ctx, http.MethodPost, c.base+path, header, body, storedOutcomes)
	rc := Receipt{Attempts: attempts}
	if err != nil {
		return v, rc, fmt.Errorf("client: %s %s: %w", op, id, err)
	}
	rc.Replayed = resp.header.Get(HeaderReplayed) == "true"
	if exp := resp.header.Get(HeaderIdempotencyExpires); exp != "" {
		if rc.KeyExpiresAt, err = http.ParseTime(exp); err != nil {
			return v, rc, fmt.Errorf("client: %s %s: %s %q: %w", op, id, HeaderIdempotencyExpires, exp, &unknownError{err})
		}
	}
	if err := resp.decode(http.StatusCreated, &v); err != nil {
		return v, rc, fmt.Errorf("client: %s %s: %w", op, id, err)
	}
	return v, rc, nil
}

// exchange sends method to path, with body as JSON unless it is nil,
// through send's retries. It decodes the 200 answer into T. Reads use it,
// and so do Capture and Cancel. They set a state, so the same request sent
// again is safe without a key. proofs are send's. op names the call in
// errors.
func exchange[T any](ctx context.Context, c *Client, op, method, path string, body []byte, proofs map[string]bool) (T, error) {
	var v T
	header := http.Header{}
	if body != nil {
		header.Set("Content-Type", "application/json")
	}
	resp, _, err := c.send(ctx, method, c.base+path, header, body, proofs)
	if err == nil {
		err = resp.decode(http.StatusOK, &v)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("client: %s: %w", op, err)
	}
	return v, nil
}

// response is one answer, read in full.
type response struct {
	status     int
	header     http.Header
	body       []byte
	retryAfter time.Duration // its Retry-After, read when it came
}

// decode unmarshals a success body, or returns the answer's error.
func (r *response) decode(want int, v any) error {
	if r.status != want {
		return r.problem()
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		return &unknownError{fmt.Errorf("decode %d answer: %w", r.status, err)}
	}
	return nil
}

// problem is the answer as a *ProblemError.
func (r *response) problem() *ProblemError {
	p := &ProblemError{}
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	if mt != "application/problem+json" || json.Unmarshal(r.body, p) != nil || p.Type == "" {
		p = &ProblemError{Type: "about:blank", Title: http.StatusText(r.status), Detail: snippet(r.body)}
	}
	p.Status, p.RetryAfter = r.status, r.retryAfter
	return p
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// retryable reports whether an answer may be retried: 409, 429 and 5xx. The
// problems the service states are final are not. A refund may exceed what
// remains of its charge, or its limit of refunds. It is retried only when
// the answer asks for it: other refunds were in flight, and may fail.
func (r *response) retryable() bool {
	if r.status != http.StatusConflict && r.status != http.StatusTooManyRequests && r.status < 500 {
		return false
	}
	slug := r.problem().Slug()
	if slug == slugRefundExceedsCharge || slug == slugRefundLimit {
		return r.retryAfter > 0
	}
	return !finalProblems[slug]
}

// send makes the request until it gets a final answer (any status but
// retryable ones). It returns it with the number of attempts. It gives up
// with the last attempt's error when attempts run out or ctx ends. It also
// gives up when ctx would end before the next attempt could start. Once an
// attempt may have run (mayHaveRun), every later error matches
// ErrOutcomeUnknown. None then matches ErrUnavailable. proofs are the
// problem types that still prove what the call did after such an attempt.
// They are returned as they are.
func (c *Client) send(ctx context.Context, method, url string, header http.Header, body []byte, proofs map[string]bool) (*response, int, error) {
	// unknown records that an attempt may have run, so no later answer
	// may say that nothing ran.
	unknown := false
	fail := func(err error) error {
		if unknown {
			return &unknownError{err}
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.attempt(ctx, method, url, header, body)
		var retryAfter time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, attempt, &unknownError{fmt.Errorf("attempt %d: %w", attempt, err)}
		case err == nil && !resp.retryable():
			if unknown && resp.status >= 400 {
				if p := resp.problem(); !proofs[p.Slug()] {
					return nil, attempt, fail(p)
				}
			}
			return resp, attempt, nil
		case err == nil:
			retryAfter, err = resp.retryAfter, resp.problem()
		}
		unknown = unknown || mayHaveRun(err)
		if attempt >= c.o.maxAttempts {
			return nil, attempt, fail(fmt.Errorf("gave up after %d attempts: %w", attempt, err))
		}
		wait := max(c.o.backoff(attempt-1), retryAfter)
		if deadline, ok := ctx.Deadline(); ok && c.o.clock().Add(wait).After(deadline) {
			return nil, attempt, fail(fmt.Errorf("gave up after %d attempts, next in %v is past the deadline: %w: %w",
				attempt, wait, err, context.DeadlineExceeded))
		}
		if c.o.onRetry != nil {
			c.o.onRetry(attempt, wait, err)
		}
		if serr := c.o.sleep(ctx, wait); serr != nil {
			return nil, attempt, fail(fmt.Errorf("gave up after %d attempts: %w: %w", attempt, err, serr))
		}
	}
}

// mayHaveRun reports whether a retried attempt's error leaves open that the
// command ran. A network error or a bare 5xx does. So do outcome-pending
// and internal-error. So does request-in-progress: another request with the
// id, or the same capture or cancel, is running. So does any answer not
// known to the client. Only a refusal proves that the attempt did nothing.
// That is ErrUnavailable, ErrRateLimited, or a refund held back by the
// refunds in flight.
func mayHaveRun(err error) bool {
	return !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrRateLimited) &&
		!errors.Is(err, ErrRefundExceedsCharge) && !errors.Is(err, ErrRefundLimit)
}

// attempt makes one request and reads its answer.
func (c *Client) attempt(ctx context.Context, method, url string, header http.Header, body []byte) (*response, error) {
	if c.o.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.attemptTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.o.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.o.token)
	}
	resp, err := c.o.http.Do(req)
	if err != nil {
		return nil, &unknownError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, &unknownError{fmt.Errorf("read %d answer: %w", resp.StatusCode, err)}
	}
	return &response{
		status: resp.StatusCode, header: resp.Header, body: b,
		retryAfter: parseRetryAfter(resp.Header.Get(HeaderRetryAfter), c.o.clock()),
	}, nil
}

// parseRetryAfter reads a Retry-After value, delay-seconds or HTTP-date,
// as a wait from now; 0 if v is empty or unusable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
