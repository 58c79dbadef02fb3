package providersim

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// DefaultSlowDelay is how long a slow charge waits before answering unless
// WithSlowDelay or the Sim-Delay header says otherwise.
const DefaultSlowDelay = 2 * time.Second

// Request headers that inject faults into a single charge request.
const (
	HeaderFault = "Sim-Fault" // one of the Fault values
	HeaderDelay = "Sim-Delay" // a Go duration overriding the slow delay
)

// Values of HeaderFault; each behaves like the matching test source.
const (
	FaultUnavailable = "unavailable"
	FaultTimeout     = "timeout"
	FaultSlow        = "slow"
)

// Test sources. Any source not listed here is charged.
const (
	SourceVisa            = "tok_visa"
	SourceDecline         = "tok_decline"
	SourceUnavailableOnce = "tok_unavailable_once"
	SourceUnavailable     = "tok_unavailable"
	SourceTimeoutOnce     = "tok_timeout_once"
	SourceTimeout         = "tok_timeout"
	SourceSlow            = "tok_slow"
	SourceLateOnce        = "tok_late_once"
)

// DeclineCode is the decline_code of a SourceDecline charge.
const DeclineCode = "card_declined"

// maxBodyBytes caps the size of a request body.
const maxBodyBytes = 1 << 20

// Options configure a Simulator.
type Options struct {
	// Secret, if not empty, is the bearer token every charge and lookup
	// must carry (401 otherwise).
	Secret string
	// SlowDelay is how long slow charges wait before answering; negative
	// counts as zero. Default DefaultSlowDelay.
	SlowDelay time.Duration
	// Logger receives one record per request: method, path, reference and
	// outcome, never the source. Default: discard.
	Logger *slog.Logger
}

// WithSecret makes the simulator answer 401 to every charge and lookup
// that does not carry secret as its bearer token. An empty secret accepts
// every request.
func WithSecret(secret string) func(*Options) {
	return func(o *Options) { o.Secret = secret }
}

// WithSlowDelay sets how long slow charges wait before answering.
func WithSlowDelay(d time.Duration) func(*Options) {
	return func(o *Options) { o.SlowDelay = d }
}

// WithLogger makes the simulator log one record per request (nil keeps
// the default).
func WithLogger(l *slog.Logger) func(*Options) {
	return func(o *Options) {
		if l != nil {
			o.Logger = l
		}
	}
}

// Simulator is a stateful, in-memory card provider. It implements
// http.Handler and is safe for concurrent use.
type Simulator struct {
	secret    atomic.Pointer[string]
	slowDelay time.Duration
	log       *slog.Logger
	mux       *http.ServeMux

	mu      sync.Mutex
	down    bool
	refs    map[string]*reference
	refunds map[string]*refund // by the refund's reference
	byID    map[string]string  // a charge's reference by its id
}

// reference is the simulator's state for one reference.
type reference struct {
	calls    int
	amount   int64            // of the stored or pending result
	currency string           // of the stored or pending result
	result   *provider.Result // nil until the reference is charged or declined
	pending  *provider.Result // accepted, not landed yet (see SourceLateOnce)
	refunded int64            // the sum of the charge's refunds
}

// refund is the simulator's state for one refund reference.
type refund struct {
	calls  int
	charge string                 // the refunded charge's reference
	req    provider.RefundRequest // the request that refunded
	result *provider.Result       // nil until the reference is refunded
}

// LedgerEntry is what happened to one reference.
type LedgerEntry struct {
	// Charges is 1 once the reference has a stored result, charged or
	// declined (Status tells which), and 0 before; never more.
	Charges int `json:"charges"`
	// Calls counts the POST /v1/charges received for the reference,
	// including those answered with an error or a dropped connection.
	Calls int `json:"calls"`
	// Status is the stored result's status, or not_found.
	Status provider.Status `json:"status"`
	// Amount is what the stored result charged (or declined).
	Amount int64 `json:"amount,omitempty"`
	// Pending: a charge was accepted and has not landed yet.
	Pending bool `json:"pending,omitempty"`
	// Refunded is the sum of the charge's refunds: never more than
	// Amount.
	Refunded int64 `json:"refunded,omitempty"`
}

// LedgerRefund is what happened to one refund reference.
type LedgerRefund struct {
	// Refunds is 1 once the reference has refunded, and 0 before; never
	// more.
	Refunds int `json:"refunds"`
	// Calls counts the POST /v1/refunds received for the reference,
	// including those refused or answered with an error.
	Calls int `json:"calls"`
	// Charge and ChargeID are the reference and the id of the charge it
	// refunded; ID is the refund's id and Amount what it refunded. All
	// are empty until it refunds.
	Charge   string `json:"charge,omitempty"`
	ChargeID string `json:"charge_id,omitempty"`
	ID       string `json:"id,omitempty"`
	Amount   int64  `json:"amount,omitempty"`
}

// Ledger is what happened to every reference a charge or refund request
// named.
type Ledger struct {
	References   map[string]LedgerEntry `json:"references"`
	TotalCharges int                    `json:"total_charges"`
	TotalCalls   int                    `json:"total_calls"`
	// Refunds are by the refund's reference; left out while there are
	// none.
	Refunds map[string]LedgerRefund `json:"refunds,omitempty"`
}

// RefundsOf returns the refunds of the charge whose reference is charge.
func (l Ledger) RefundsOf(charge string) map[string]LedgerRefund {
	out := map[string]LedgerRefund{}
	for name, r := range l.Refunds {
		if r.Charge == charge {
			out[name] = r
		}
	}
	return out
}

// New returns a Simulator with no charges, up and running.
func New(optFns ...func(*Options)) *Simulator {
	o := Options{SlowDelay: DefaultSlowDelay, Logger: slog.New(slog.DiscardHandler)}
	for _, fn := range optFns {
		fn(&o)
	}
	s := &Simulator{
		slowDelay: max(o.SlowDelay, 0),
		log:       o.Logger,
		refs:      make(map[string]*reference),
		refunds:   make(map[string]*refund),
		byID:      make(map[string]string),
	}
	s.secret.Store(&o.Secret)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/charges", s.handleCharge)
	s.mux.HandleFunc("GET /v1/charges/{reference}", s.lookup(func(name string) *provider.Result {
		if ref := s.refs[name]; ref != nil {
			return ref.result
		}
		return nil
	}))
	s.mux.HandleFunc("POST /v1/refunds", s.handleRefund)
	s.mux.HandleFunc("GET /v1/refunds/{reference}", s.lookup(func(name string) *provider.Result {
		if rf := s.refunds[name]; rf != nil {
			return rf.result
		}
		return nil
	}))
	s.mux.HandleFunc("GET /v1/ledger", s.handleLedger)
	s.mux.HandleFunc("POST /v1/faults", s.handleFaults)
	return s
}

// ServeHTTP serves the simulated provider API. The ledger and the fault
// switch are the simulator's own, not the provider API's: they take no
// key, so a tool that checks the ledger needs none.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if (strings.HasPrefix(r.URL.Path, "/v1/charges") || strings.HasPrefix(r.URL.Path, "/v1/refunds")) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="providersim"`)
		s.reply(w, r, http.StatusUnauthorized, errorBody{"missing or wrong bearer token"}, "", outcomeUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Ledger returns what happened to every reference so far.
func (s *Simulator) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := Ledger{References: make(map[string]LedgerEntry, len(s.refs))}
	for name, ref := range s.refs {
		e := LedgerEntry{Calls: ref.calls, Status: provider.StatusNotFound, Pending: ref.pending != nil}
		if ref.result != nil {
			e.Charges = 1
			e.Status = ref.result.Status
			e.Amount = ref.amount
			e.Refunded = ref.refunded
		}
		l.References[name] = e
		l.TotalCharges += e.Charges
		l.TotalCalls += e.Calls
	}
	if len(s.refunds) > 0 {
		l.Refunds = make(map[string]LedgerRefund, len(s.refunds))
	}
	for name, rf := range s.refunds {
		e := LedgerRefund{Calls: rf.calls}
		if rf.result != nil {
			e.Refunds, e.Charge, e.ChargeID, e.ID, e.Amount = 1, rf.charge, rf.req.Charge, rf.result.ChargeID, rf.req.Amount
		}
		l.Refunds[name] = e
	}
	return l
}

// Land lands every pending charge (see SourceLateOnce), as the provider's
// backend finishes them, and returns how many landed.
func (s *Simulator) Land() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ref := range s.refs {
		if ref.pending != nil {
			ref.result, ref.pending = ref.pending, nil
			n++
		}
	}
	return n
}

// SetDown starts (true) or ends (false) a whole-provider outage, during which
// charges, refunds and lookups answer 503 with the Provider-Not-Processed header.
func (s *Simulator) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// outcome is what the simulator did with a request, for the logs.
type outcome string

const (
	outcomeUnauthorized outcome = "unauthorized"
	outcomeRejected     outcome = "rejected"
	outcomeRefused      outcome = "refused"
	outcomeDown         outcome = "down"
	outcomeNotProcessed outcome = "not_processed"
	outcomeCreated      outcome = "created"
	outcomeReplayed     outcome = "replayed"
	outcomeAccepted     outcome = "accepted"
	outcomeInProgress   outcome = "in_progress"
	outcomeFound        outcome = "found"
	outcomeNotFound     outcome = "not_found"
	outcomeOK           outcome = "ok"
)

// delivery is how the simulator answers a charge request.
type delivery int

const (
	answer          delivery = iota // answer at once
	unavailable                     // 503 not processed, nothing stored
	unavailableOnce                 // unavailable on the reference's first call
	drop                            // store, then close the connection unanswered
	dropOnce                        // drop on the reference's first call
	slow                            // store, then wait before answering
	lateOnce                        // first call: accept, close unanswered, land later
)

// forCall resolves the once-only deliveries for a reference's n-th call.
func (d delivery) forCall(n int) delivery {
	switch d {
	case unavailableOnce:
		if n == 1 {
			return unavailable
		}
		return answer
	case dropOnce:
		if n == 1 {
			return drop
		}
		return answer
	case lateOnce:
		if n == 1 {
			return lateOnce
		}
		return answer
	default:
		return d
	}
}

func sourceDelivery(source string) delivery {
	switch source {
	case SourceUnavailableOnce:
		return unavailableOnce
	case SourceUnavailable:
		return unavailable
	case SourceTimeoutOnce:
		return dropOnce
	case SourceTimeout:
		return drop
	case SourceSlow:
		return slow
	case SourceLateOnce:
		return lateOnce
	default:
		return answer
	}
}

type errorBody struct {
	Error string `json:"error"`
}

func (s *Simulator) handleCharge(w http.ResponseWriter, r *http.Request) {
	var req provider.ChargeRequest
	if err := decodeBody(w, r, &req); err != nil {
		// The decoder's message could quote the body, and so the source.
		s.reply(w, r, http.StatusBadRequest, errorBody{"malformed JSON body"}, "", outcomeRejected)
		return
	}
	d, delay, invalid := s.checkCharge(r.Header, req)
	res, d, out := s.record(req, d, invalid)
	var no *refusal
	if invalid != nil {
		no = &refusal{http.StatusBadRequest, invalid.Error()}
	}
	s.deliver(w, r, req.Reference, res, d, delay, out, no)
}

// refusal is a request refused with a 4xx answer and a message.
type refusal struct {
	code    int
	message string
}

// deliver answers a charge or refund request as its outcome and delivery
// say: no is the refusal of a rejected or refused one.
func (s *Simulator) deliver(w http.ResponseWriter, r *http.Request, reference string, res provider.Result, d delivery, delay time.Duration, out outcome, no *refusal) {
	switch {
	case out == outcomeRejected || out == outcomeRefused:
		s.reply(w, r, no.code, errorBody{no.message}, reference, out)
	case out == outcomeDown || out == outcomeNotProcessed:
		s.replyNotProcessed(w, r, reference, out)
	case out == outcomeInProgress:
		s.reply(w, r, http.StatusConflict, errorBody{"a request for this reference is in progress"}, reference, out)
	case out == outcomeAccepted:
		s.logRequest(r, reference, out, slog.String("delivery", "dropped"))
		dropConnection(w)
	case d == drop:
		s.logRequest(r, reference, out, slog.String("result", string(res.Status)), slog.String("delivery", "dropped"))
		dropConnection(w)
	case d == slow && !sleep(r.Context(), delay):
		s.logRequest(r, reference, out, slog.String("result", string(res.Status)), slog.String("delivery", "abandoned"))
	case d == slow:
		s.reply(w, r, http.StatusOK, res, reference, out, slog.String("result", string(res.Status)), slog.String("delivery", "slow"))
	default:
		s.reply(w, r, http.StatusOK, res, reference, out, slog.String("result", string(res.Status)))
	}
}

// checkCharge validates a charge request and works out how to deliver it.
func (s *Simulator) checkCharge(h http.Header, req provider.ChargeRequest) (delivery, time.Duration, error) {
	switch {
	case req.Reference == "":
		return 0, 0, errors.New("reference is required")
	case req.Amount < 1:
		return 0, 0, errors.New("amount must be at least 1")
	case req.Currency == "":
		return 0, 0, errors.New("currency is required")
	case req.Source == "":
		return 0, 0, errors.New("source is required")
	}
	return s.faults(h, sourceDelivery(req.Source))
}

// faults reads a request's fault headers: how to deliver it (d unless
// Sim-Fault says otherwise) and the slow delay.
func (s *Simulator) faults(h http.Header, d delivery) (delivery, time.Duration, error) {
	switch fault := h.Get(HeaderFault); fault {
	case "":
	case FaultUnavailable:
		d = unavailable
	case FaultTimeout:
		d = drop
	case FaultSlow:
		d = slow
	default:
		return 0, 0, fmt.Errorf("%s must be %s, %s or %s", HeaderFault, FaultUnavailable, FaultTimeout, FaultSlow)
	}
	delay := s.slowDelay
	if v := h.Get(HeaderDelay); v != "" {
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed < 0 {
			return 0, 0, fmt.Errorf("%s must be a non-negative Go duration", HeaderDelay)
		}
		delay = parsed
	}
	return d, delay, nil
}

// record counts the call and, unless the request fails, stores the
// reference's result on its first successful call. It returns the stored
// result, the delivery resolved for this call, and the outcome.
func (s *Simulator) record(req provider.ChargeRequest, d delivery, invalid error) (provider.Result, delivery, outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ref *reference
	if req.Reference != "" {
		ref = s.refs[req.Reference]
		if ref == nil {
			ref = &reference{}
			s.refs[req.Reference] = ref
		}
		ref.calls++
	}
	if s.down {
		return provider.Result{}, d, outcomeDown
	}
	if invalid != nil {
		return provider.Result{}, d, outcomeRejected
	}
	// A valid request names a reference, so ref is set.
	d = d.forCall(ref.calls)
	if d == unavailable {
		return provider.Result{}, d, outcomeNotProcessed
	}
	switch {
	case ref.result != nil:
		return *ref.result, d, outcomeReplayed
	case ref.pending != nil:
		return provider.Result{}, d, outcomeInProgress
	}
	res := &provider.Result{
		Status:    provider.StatusCharged,
		Reference: req.Reference,
		ChargeID:  newID("pc_"),
	}
	if req.Source == SourceDecline {
		res.Status = provider.StatusDeclined
		res.DeclineCode = DeclineCode
	}
	ref.amount, ref.currency = req.Amount, req.Currency
	s.byID[res.ChargeID] = req.Reference
	if d == lateOnce {
		ref.pending = res
		return provider.Result{}, d, outcomeAccepted
	}
	ref.result = res
	return *ref.result, d, outcomeCreated
}

// lookup returns the handler of a lookup, which answers the result stored
// for a reference: stored reads it under the lock, nil if none.
func (s *Simulator) lookup(stored func(name string) *provider.Result) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("reference")
		s.mu.Lock()
		down := s.down
		var res *provider.Result
		if p := stored(name); p != nil {
			found := *p
			res = &found
		}
		s.mu.Unlock()
		switch {
		case down:
			s.replyNotProcessed(w, r, name, outcomeDown)
		case res == nil:
			s.reply(w, r, http.StatusNotFound, provider.Result{Status: provider.StatusNotFound}, name, outcomeNotFound)
		default:
			s.reply(w, r, http.StatusOK, res, name, outcomeFound, slog.String("result", string(res.Status)))
		}
	}
}

func (s *Simulator) handleRefund(w http.ResponseWriter, r *http.Request) {
	var req provider.RefundRequest
	if err := decodeBody(w, r, &req); err != nil {
		s.reply(w, r, http.StatusBadRequest, errorBody{"malformed JSON body"}, "", outcomeRejected)
		return
	}
	d, delay, invalid := s.faults(r.Header, answer)
	if invalid == nil {
		invalid = checkRefund(req)
	}
	res, d, out, no := s.recordRefund(req, d, invalid)
	s.deliver(w, r, req.Reference, res, d, delay, out, no)
}

func checkRefund(req provider.RefundRequest) error {
	switch {
	case req.Reference == "":
		return errors.New("reference is required")
	case req.Charge == "":
		return errors.New("charge is required")
	case req.Amount < 1:
		return errors.New("amount must be at least 1")
	case req.Currency == "":
		return errors.New("currency is required")
	}
	return nil
}

// recordRefund counts the call and, unless the request fails or is
// refused, refunds the charge on the reference's first successful call.
// Every refusal refunds nothing: a reference used for another refund, an
// unknown or declined charge, another currency, or more than the charge
// has left to refund.
func (s *Simulator) recordRefund(req provider.RefundRequest, d delivery, invalid error) (provider.Result, delivery, outcome, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rf *refund
	if req.Reference != "" {
		rf = s.refunds[req.Reference]
		if rf == nil {
			rf = &refund{}
			s.refunds[req.Reference] = rf
		}
		rf.calls++
	}
	refuse := func(code int, format string, args ...any) (provider.Result, delivery, outcome, *refusal) {
		return provider.Result{}, d, outcomeRefused, &refusal{code, fmt.Sprintf(format, args...)}
	}
	switch {
	case s.down:
		return provider.Result{}, d, outcomeDown, nil
	case invalid != nil:
		return provider.Result{}, d, outcomeRejected, &refusal{http.StatusBadRequest, invalid.Error()}
	}
	if d = d.forCall(rf.calls); d == unavailable {
		return provider.Result{}, d, outcomeNotProcessed, nil
	}
	if rf.result != nil {
		if rf.req != req {
			return refuse(http.StatusUnprocessableEntity, "reference already used for another refund")
		}
		return *rf.result, d, outcomeReplayed, nil
	}
	name, ok := s.byID[req.Charge]
	c := s.refs[name]
	switch {
	case !ok || c.result == nil:
		return refuse(http.StatusNotFound, "no such charge")
	case c.result.Status != provider.StatusCharged:
		return refuse(http.StatusBadRequest, "the charge was declined: nothing to refund")
	case !strings.EqualFold(c.currency, req.Currency):
		return refuse(http.StatusBadRequest, "currency differs from the charge's")
	case req.Amount > c.amount-c.refunded:
		return refuse(http.StatusBadRequest, "amount exceeds what the charge has left to refund (%d)", c.amount-c.refunded)
	}
	res := provider.Result{Status: provider.StatusRefunded, Reference: req.Reference, ChargeID: newID("rf_")}
	rf.charge, rf.req, rf.result = name, req, &res
	c.refunded += req.Amount
	return res, d, outcomeCreated, nil
}

func (s *Simulator) handleLedger(w http.ResponseWriter, r *http.Request) {
	s.reply(w, r, http.StatusOK, s.Ledger(), "", outcomeOK)
}

func (s *Simulator) handleFaults(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Down *bool `json:"down"`
	}
	if err := decodeBody(w, r, &body); err != nil || body.Down == nil {
		s.reply(w, r, http.StatusBadRequest, errorBody{`body must be {"down": true|false}`}, "", outcomeRejected)
		return
	}
	s.SetDown(*body.Down)
	s.reply(w, r, http.StatusOK, body, "", outcomeOK, slog.Bool("down", *body.Down))
}

// SetSecret makes secret the bearer token every request must carry from
// now on, as a provider's key roll that expires the old key at once: the
// local stack follows a rotation of its secret with it.
func (s *Simulator) SetSecret(secret string) { s.secret.Store(&secret) }

func (s *Simulator) authorized(r *http.Request) bool {
	secret := *s.secret.Load()
	if secret == "" {
		return true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(token), []byte(secret)) == 1
}

func (s *Simulator) replyNotProcessed(w http.ResponseWriter, r *http.Request, reference string, out outcome) {
	w.Header().Set(provider.HeaderNotProcessed, "true")
	s.reply(w, r, http.StatusServiceUnavailable, errorBody{"provider unavailable, request not processed"}, reference, out)
}

// reply writes body as JSON with the status code and logs the request.
func (s *Simulator) reply(w http.ResponseWriter, r *http.Request, code int, body any, reference string, out outcome, attrs ...slog.Attr) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		attrs = append(attrs, slog.String("write_error", err.Error()))
	}
	s.logRequest(r, reference, out, append(attrs, slog.Int("code", code))...)
}

func (s *Simulator) logRequest(r *http.Request, reference string, out outcome, attrs ...slog.Attr) {
	base := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("reference", reference),
		slog.String("outcome", string(out)),
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", append(base, attrs...)...)
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(v); err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	return nil
}

// dropConnection closes the connection without writing a response, as a
// provider that crashed after charging would.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the response, which resets the stream.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// sleep waits for d and reports whether it did, false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newID returns prefix and 16 random hex digits: "pc_…" for a charge,
// "rf_…" for a refund.
func newID(prefix string) string {
	var b [8]byte
	// crypto/rand.Read never returns an error: it crashes the program instead.
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
