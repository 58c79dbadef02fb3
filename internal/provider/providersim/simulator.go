package providersim

import (
	"cmp"
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

// DefaultAuthorizationTTL is how long an authorization holds the amount
// unless WithAuthorizationTTL says otherwise: seven days, as card
// networks and Stripe hold one.
const DefaultAuthorizationTTL = 7 * 24 * time.Hour

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
	// Clock reads the time authorizations expire by. Default time.Now.
	Clock func() time.Time
	// AuthorizationTTL is how long an uncaptured authorization lasts
	// before it expires, as if canceled. Default DefaultAuthorizationTTL.
	AuthorizationTTL time.Duration
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

// WithClock makes clock the time authorizations expire by (nil keeps
// the default).
func WithClock(clock func() time.Time) func(*Options) {
	return func(o *Options) {
		if clock != nil {
			o.Clock = clock
		}
	}
}

// WithAuthorizationTTL makes authorizations expire d after they are
// made; d <= 0 keeps the default.
func WithAuthorizationTTL(d time.Duration) func(*Options) {
	return func(o *Options) {
		if d > 0 {
			o.AuthorizationTTL = d
		}
	}
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
	clock     func() time.Time
	ttl       time.Duration

	mu       sync.Mutex
	down     bool
	refs     map[string]*reference
	refunds  map[string]*refund  // by the refund's reference
	payments map[string]*payment // captures and cancels, by their reference
	byID     map[string]string   // a charge's reference by its id
}

// reference is the simulator's state for one reference.
type reference struct {
	calls    int
	amount   int64            // of the stored or pending result
	currency string           // of the stored or pending result
	result   *provider.Result // nil until the reference is charged or declined
	pending  *provider.Result // accepted, not landed yet (see SourceLateOnce)
	refunded int64            // the sum of the charge's refunds

	// An authorize-only charge holds amount until expiresAt, unless a
	// capture takes captured of it first or a cancel ends it.
	authorizeOnly bool
	expiresAt     time.Time
	captures      int // captures performed: never more than 1
	captured      int64
	canceled      bool
}

// ended reports whether an uncaptured authorization was canceled or has
// expired at now.
func (ref *reference) ended(now time.Time) bool {
	return ref.captures == 0 && (ref.canceled || !now.Before(ref.expiresAt))
}

// state is the present state of the stored charge ref at now, as a
// capture, a cancel or GET /v1/payments/{id} answers it.
func (ref *reference) state(now time.Time) provider.Result {
	res := provider.Result{Status: provider.StatusCharged, Reference: ref.result.Reference, ChargeID: ref.result.ChargeID, Amount: ref.amount}
	switch {
	case ref.result.Status == provider.StatusDeclined:
		return *ref.result
	case !ref.authorizeOnly:
	case ref.captures > 0:
		res.Amount = ref.captured
	case ref.ended(now):
		res.Status, res.Amount = provider.StatusCanceled, 0
	default:
		res.Status = provider.StatusAuthorized
	}
	return res
}

// payment is the simulator's state for one capture or cancel reference.
type payment struct {
	tally
	op     string // "capture" or "cancel"
	charge string // the charge's id
	amount int64  // what a capture asked for; 0 for all
}

// refund is the simulator's state for one refund reference.
type refund struct {
	tally
	charge string                 // the refunded charge's reference
	req    provider.RefundRequest // the request that refunded
}

// tally is what the simulator keeps of every reference a refund, a
// capture or a cancel names: its calls, and its answer (nil until it
// has one).
type tally struct {
	calls  int
	result *provider.Result
}

func (t *tally) counted() *tally { return t }

// admit counts a call of reference in m, its state made on first use,
// and finds what answers it before it is carried out: an outage, an
// invalid request, its delivery's fault, or the answer the reference
// already has. That answer is replayed only if same says the request is
// the first one's; else it is refused as one for other. ok: nothing
// answers it yet.
func admit[T any, P interface {
	*T
	counted() *tally
}](s *Simulator, m map[string]P, reference string, d delivery, invalid error, other string, same func(P) bool) (P, provider.Result, delivery, outcome, *refusal, bool) {
	var st P
	calls := 0
	if reference != "" {
		if st = m[reference]; st == nil {
			st = new(T)
			m[reference] = st
		}
		st.counted().calls++
		calls = st.counted().calls
	}
	switch {
	case s.down:
		return st, provider.Result{}, d, outcomeDown, nil, false
	case invalid != nil:
		return st, provider.Result{}, d, outcomeRejected, &refusal{http.StatusBadRequest, invalid.Error()}, false
	}
	if d = d.forCall(calls); d == unavailable {
		return st, provider.Result{}, d, outcomeNotProcessed, nil, false
	}
	if t := st.counted(); t.result != nil {
		if !same(st) {
			res, d, out, no := refused(d, http.StatusUnprocessableEntity, "reference already used for %s", other)
			return st, res, d, out, no, false
		}
		return st, *t.result, d, outcomeReplayed, nil, false
	}
	return st, provider.Result{}, d, "", nil, true
}

// refused is the answer to a request refused with code: nothing done.
func refused(d delivery, code int, format string, args ...any) (provider.Result, delivery, outcome, *refusal) {
	return provider.Result{}, d, outcomeRefused, &refusal{code, fmt.Sprintf(format, args...)}
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
	// ID is the charge's id, once it has a stored result.
	ID string `json:"id,omitempty"`
	// Authorized is what an authorize-only charge held: Amount. It is
	// zero for a charge captured at once.
	Authorized int64 `json:"authorized,omitempty"`
	// Captures counts the captures performed: never more than 1.
	// Captured is what the capture took: never more than Authorized.
	Captures int   `json:"captures,omitempty"`
	Captured int64 `json:"captured,omitempty"`
	// Canceled: the authorization was canceled, or expired, uncaptured.
	Canceled bool `json:"canceled,omitempty"`
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
	o := Options{SlowDelay: DefaultSlowDelay, Logger: slog.New(slog.DiscardHandler), Clock: time.Now, AuthorizationTTL: DefaultAuthorizationTTL}
	for _, fn := range optFns {
		fn(&o)
	}
	s := &Simulator{
		slowDelay: max(o.SlowDelay, 0),
		log:       o.Logger,
		clock:     o.Clock,
		ttl:       o.AuthorizationTTL,
		refs:      make(map[string]*reference),
		refunds:   make(map[string]*refund),
		payments:  make(map[string]*payment),
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
	s.mux.HandleFunc("POST /v1/payments/{id}/capture", s.handlePayment(opCapture))
	s.mux.HandleFunc("POST /v1/payments/{id}/cancel", s.handlePayment(opCancel))
	s.mux.HandleFunc("GET /v1/payments/{reference}", s.lookup(func(id string) *provider.Result {
		if ref := s.refs[s.byID[id]]; ref != nil && ref.result != nil {
			state := ref.state(s.clock())
			return &state
		}
		return nil
	}))
	s.mux.HandleFunc("POST /v1/authorizations/{id}/expire", s.handleExpire)
	s.mux.HandleFunc("GET /v1/ledger", s.handleLedger)
	s.mux.HandleFunc("POST /v1/faults", s.handleFaults)
	return s
}

// ServeHTTP serves the simulated provider API. The ledger and the fault
// switch are the simulator's own, not the provider API's: they take no
// key, so a tool that checks the ledger needs none.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isProviderAPI(r.URL.Path) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="providersim"`)
		s.reply(w, r, http.StatusUnauthorized, errorBody{"missing or wrong bearer token"}, "", outcomeUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// isProviderAPI reports whether path is the provider API's, which takes
// the secret, rather than the simulator's own.
func isProviderAPI(path string) bool {
	for _, prefix := range []string{"/v1/charges", "/v1/refunds", "/v1/payments"} {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// Ledger returns what happened to every reference so far.
func (s *Simulator) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	l := Ledger{References: make(map[string]LedgerEntry, len(s.refs))}
	for name, ref := range s.refs {
		e := LedgerEntry{Calls: ref.calls, Status: provider.StatusNotFound, Pending: ref.pending != nil}
		if ref.result != nil {
			e.Charges = 1
			e.Status = ref.result.Status
			e.Amount = ref.amount
			e.Refunded = ref.refunded
			e.ID = ref.result.ChargeID
		}
		if ref.result != nil && ref.authorizeOnly && ref.result.Status == provider.StatusAuthorized {
			e.Authorized, e.Captures, e.Captured, e.Canceled = ref.amount, ref.captures, ref.captured, ref.ended(now)
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
	outcomeUnchanged    outcome = "unchanged"
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

// deliver answers a charge, refund, capture or cancel request as its
// outcome and delivery say: no is the refusal of a rejected or refused
// one.
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
	switch {
	case req.Source == SourceDecline:
		res.Status = provider.StatusDeclined
		res.DeclineCode = DeclineCode
	case req.AuthorizeOnly:
		res.Status = provider.StatusAuthorized
	}
	ref.amount, ref.currency = req.Amount, req.Currency
	ref.authorizeOnly, ref.expiresAt = req.AuthorizeOnly, s.clock().Add(s.ttl)
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
	rf, res, d, out, no, ok := admit(s, s.refunds, req.Reference, d, invalid, "another refund", func(rf *refund) bool { return rf.req == req })
	if !ok {
		return res, d, out, no
	}
	refuse := func(code int, format string, args ...any) (provider.Result, delivery, outcome, *refusal) {
		return refused(d, code, format, args...)
	}
	name, ok := s.byID[req.Charge]
	c := s.refs[name]
	if !ok || c.result == nil {
		return refuse(http.StatusNotFound, "no such charge")
	}
	// An authorization refunds only what its capture took.
	charged := c.state(s.clock())
	switch {
	case charged.Status == provider.StatusDeclined:
		return refuse(http.StatusBadRequest, "the charge was declined: nothing to refund")
	case charged.Status != provider.StatusCharged:
		return refuse(http.StatusBadRequest, "the charge is not captured: nothing to refund")
	case !strings.EqualFold(c.currency, req.Currency):
		return refuse(http.StatusBadRequest, "currency differs from the charge's")
	case req.Amount > charged.Amount-c.refunded:
		return refuse(http.StatusBadRequest, "amount exceeds what the charge has left to refund (%d)", charged.Amount-c.refunded)
	}
	res = provider.Result{Status: provider.StatusRefunded, Reference: req.Reference, ChargeID: newID("rf_")}
	rf.charge, rf.req, rf.result = name, req, &res
	c.refunded += req.Amount
	return res, d, outcomeCreated, nil
}

// The operations on an authorization.
const (
	opCapture = "capture"
	opCancel  = "cancel"
)

// paymentBody is a capture's or a cancel's request; the path names the
// charge.
type paymentBody struct {
	Reference string `json:"reference"`
	Amount    int64  `json:"amount"`
}

// handlePayment returns the handler of a capture or a cancel (op).
func (s *Simulator) handlePayment(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req paymentBody
		if err := decodeBody(w, r, &req); err != nil {
			s.reply(w, r, http.StatusBadRequest, errorBody{"malformed JSON body"}, "", outcomeRejected)
			return
		}
		d, delay, invalid := s.faults(r.Header, answer)
		switch {
		case invalid != nil:
		case req.Reference == "":
			invalid = errors.New("reference is required")
		case req.Amount < 0:
			invalid = errors.New("amount must not be negative")
		case op == opCancel && req.Amount != 0:
			invalid = errors.New("a cancel takes no amount")
		}
		res, d, out, no := s.recordPayment(op, r.PathValue("id"), req, d, invalid)
		s.deliver(w, r, req.Reference, res, d, delay, out, no)
	}
}

// recordPayment counts the call and, unless the request fails or is
// refused, answers it on the reference's first successful call with the
// charge's state after the operation: a capture captures an authorization
// still held, a cancel cancels it, and neither changes a charge that is
// captured or ended. So an authorization is captured or canceled at most
// once, whatever the references. Every refusal changes nothing: a
// reference used for another request, an unknown or declined charge, or
// a capture beyond the amount authorized.
func (s *Simulator) recordPayment(op, id string, req paymentBody, d delivery, invalid error) (provider.Result, delivery, outcome, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, res, d, out, no, ok := admit(s, s.payments, req.Reference, d, invalid, "another request", func(p *payment) bool {
		return p.op == op && p.charge == id && p.amount == req.Amount
	})
	if !ok {
		return res, d, out, no
	}
	refuse := func(code int, format string, args ...any) (provider.Result, delivery, outcome, *refusal) {
		return refused(d, code, format, args...)
	}
	c := s.refs[s.byID[id]]
	switch {
	case c == nil || c.result == nil:
		return refuse(http.StatusNotFound, "no such charge")
	case c.result.Status == provider.StatusDeclined:
		return refuse(http.StatusBadRequest, "the charge was declined: nothing to %s", op)
	}
	now := s.clock()
	out = outcomeUnchanged
	if c.state(now).Status == provider.StatusAuthorized {
		amount := cmp.Or(req.Amount, c.amount)
		switch {
		case op == opCancel:
			c.canceled = true
		case amount > c.amount:
			return refuse(http.StatusBadRequest, "amount exceeds the amount authorized (%d)", c.amount)
		default:
			c.captures++
			c.captured = amount
		}
		out = outcomeCreated
	}
	res = c.state(now)
	res.Reference = req.Reference
	p.op, p.charge, p.amount, p.result = op, id, req.Amount, &res
	return res, d, out, nil
}

// Expire ends the authorization whose id is charge now, as its expiry
// would, unless it was captured or has ended. It reports whether it
// ended it.
func (s *Simulator) Expire(charge string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.refs[s.byID[charge]]
	if c == nil || c.result == nil || c.state(s.clock()).Status != provider.StatusAuthorized {
		return false
	}
	c.canceled = true
	return true
}

func (s *Simulator) handleExpire(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	expired := s.Expire(id)
	s.reply(w, r, http.StatusOK, map[string]any{"id": id, "expired": expired}, "", outcomeOK, slog.Bool("expired", expired))
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
