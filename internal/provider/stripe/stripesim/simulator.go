package stripesim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Test payment methods; see the package documentation.
const (
	PMVisa                   = "pm_card_visa"
	PMDeclined               = "pm_card_chargeDeclined"
	PMInsufficientFunds      = "pm_card_chargeDeclinedInsufficientFunds"
	PMAuthenticationRequired = "pm_card_authenticationRequired"
	PMRateLimited            = "pm_sim_rate_limited"
	PMAPIError               = "pm_sim_api_error"
	PMTimeout                = "pm_sim_timeout"
	PMLate                   = "pm_sim_late"
	// PMRefundFail charges; its refunds succeed, then fail when
	// FailRefunds runs, as Stripe's test card 4000 0000 0000 5126 does.
	PMRefundFail = "pm_card_refundFail"
)

// DefaultKeyWindow is how long Stripe keeps an idempotency key: at least
// 24 hours.
const DefaultKeyWindow = 24 * time.Hour

// Options configure a Simulator.
type Options struct {
	// SecretKey is the API key every request must carry. Required.
	SecretKey string
	// Clock reads the simulator's time; time.Now by default.
	Clock func() time.Time
	// KeyWindow is how long an idempotency key lives; DefaultKeyWindow
	// by default.
	KeyWindow time.Duration
	// SearchLag is how long a new PaymentIntent stays out of search
	// results; zero shows it at once.
	SearchLag time.Duration
	// Logger gets one record per request (method, path, idempotency key,
	// status), never a parameter. Discarded by default.
	Logger *slog.Logger
	// WebhookURL, if set, receives a signed webhook event whenever a
	// PaymentIntent settles. The events are payment_intent.succeeded and
	// payment_intent.payment_failed. A charge that lands after its edge
	// timed out raises one too.
	WebhookURL, WebhookSecret string
	WebhookRetry              time.Duration
	WebhookAttempts           int
	WebhookClient             *http.Client
}

// Simulator is a stateful, in-memory Stripe. It implements http.Handler and
// is safe for concurrent use.
type Simulator struct {
	opts Options
	mux  *http.ServeMux
	// secretKey is the API key requests must carry: opts.SecretKey
	// until SetSecretKey.
	secretKey atomic.Pointer[string]

	mu       sync.Mutex
	intents  map[string]*intent // by id
	order    []*intent          // in creation order
	refunds  []*refund          // in creation order
	keys     map[string]*key    // by idempotency key
	pending  []*pendingCharge   // pm_sim_late charges not landed yet
	requests int
	hooks    *webhooks
}

// intent is a stored PaymentIntent.
type intent struct {
	Object           string `json:"object"`
	ID               string `json:"id"`
	Amount           int64  `json:"amount"`
	Currency         string `json:"currency"`
	Status           string `json:"status"`
	CaptureMethod    string `json:"capture_method"`
	AmountCapturable int64  `json:"amount_capturable"`
	AmountReceived   int64  `json:"amount_received"`
	CanceledAt       int64  `json:"canceled_at,omitempty"`
	// CancellationReason is "automatic" for an expired authorization.
	CancellationReason string            `json:"cancellation_reason,omitempty"`
	Metadata           map[string]string `json:"metadata"`
	PaymentMethod      string            `json:"payment_method"`
	LatestCharge       string            `json:"latest_charge,omitempty"`
	Created            int64             `json:"created"`
	LastPaymentError   *apiError         `json:"last_payment_error,omitempty"`
	Livemode           bool              `json:"livemode"`

	idempotencyKey string
	createdAt      time.Time
	captures       int // captures performed: never more than 1
}

// key is the state of one idempotency key.
type key struct {
	fingerprint string
	firstUsed   time.Time
	inProgress  bool
	status      int
	body        []byte
}

type pendingCharge struct {
	key    string // "" without an idempotency key
	intent *intent
}

type apiError struct {
	Type          string  `json:"type"`
	Code          string  `json:"code,omitempty"`
	DeclineCode   string  `json:"decline_code,omitempty"`
	Message       string  `json:"message,omitempty"`
	Param         string  `json:"param,omitempty"`
	PaymentIntent *intent `json:"payment_intent,omitempty"`
}

// New returns a Simulator with no PaymentIntents.
func New(optFns ...func(*Options)) *Simulator {
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.KeyWindow <= 0 {
		o.KeyWindow = DefaultKeyWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WebhookRetry <= 0 {
		o.WebhookRetry = DefaultWebhookRetry
	}
	if o.WebhookAttempts <= 0 {
		o.WebhookAttempts = DefaultWebhookAttempts
	}
	if o.WebhookClient == nil {
		o.WebhookClient = http.DefaultClient
	}
	s := &Simulator{opts: o, intents: map[string]*intent{}, keys: map[string]*key{}, hooks: &webhooks{opts: o}}
	s.secretKey.Store(&o.SecretKey)
	s.hooks.secret.Store(&o.WebhookSecret)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/payment_intents", s.handleCreate)
	s.mux.HandleFunc("GET /v1/payment_intents/search", s.handleSearch)
	s.mux.HandleFunc("GET /v1/payment_intents/{id}", s.handleRetrieve)
	s.mux.HandleFunc("POST /v1/payment_intents/{id}/capture", s.handleCapture)
	s.mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.handleCancel)
	s.mux.HandleFunc("POST /v1/refunds", s.handleRefund)
	s.mux.HandleFunc("GET /v1/refunds", s.handleListRefunds)
	return s
}

// SetSecretKey makes key the API key every request must carry from now on.
// It acts as a roll of the key in Stripe's dashboard that expires the old
// one at once. SetWebhookSecret makes whsec the secret that signs the
// webhooks sent from now on. The local stack follows a rotation of its
// secrets with them.
func (s *Simulator) SetSecretKey(key string) { s.secretKey.Store(&key) }

// SetWebhookSecret: see SetSecretKey.
func (s *Simulator) SetWebhookSecret(whsec string) { s.hooks.secret.Store(&whsec) }

// ServeHTTP serves the simulated API.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.expire(s.opts.Clock())
	s.mu.Unlock()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if secret := *s.secretKey.Load(); !ok || secret == "" || subtle.ConstantTimeCompare([]byte(token), []byte(secret)) != 1 {
		s.writeError(w, r, http.StatusUnauthorized, apiError{Type: "invalid_request_error", Message: "Invalid API Key provided."})
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Requests counts the requests served so far.
func (s *Simulator) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Charged counts the succeeded PaymentIntents created under the
// idempotency key: more than one means a charge was duplicated.
func (s *Simulator) Charged(idempotencyKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, pi := range s.order {
		if pi.idempotencyKey == idempotencyKey && pi.Status == "succeeded" {
			n++
		}
	}
	return n
}

// Land lands every pm_sim_late charge, as Stripe's backend finishes it:
// the PaymentIntent is created now and its key's answer saved. It returns
// how many landed.
func (s *Simulator) Land() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	for _, p := range s.pending {
		s.store(p.intent, now)
		if k := s.keys[p.key]; p.key != "" && k != nil {
			k.inProgress, k.status, k.body = false, http.StatusOK, mustJSON(p.intent)
		}
	}
	n := len(s.pending)
	s.pending = nil
	return n
}

// delivery is how a create request is answered once executed.
type delivery int

const (
	answer delivery = iota
	hang            // answer nothing until the client gives up
)

// maxHang bounds how long a hung request waits for its client to give up
// before the connection is closed unanswered.
const maxHang = 30 * time.Second

func (s *Simulator) handleCreate(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body."})
		return
	}
	idemKey := r.Header.Get("Idempotency-Key")
	code, body, d, replayed := s.create(idemKey, r.PostForm)
	if d == hang {
		s.log(r, idemKey, 0, "unanswered")
		hangUp(w, r)
		return
	}
	s.writeIdempotent(w, r, idemKey, code, body, replayed)
}

// writeIdempotent writes the answer to a request under idemKey, marked
// if it is a replay of the key's saved answer.
func (s *Simulator) writeIdempotent(w http.ResponseWriter, r *http.Request, idemKey string, code int, body []byte, replayed bool) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if idemKey != "" {
		w.Header().Set("Idempotency-Key", idemKey)
	}
	s.write(w, r, code, body)
}

// create runs a create request under the simulator's lock and returns the
// answer, how to deliver it, and whether it is a replay.
func (s *Simulator) create(idemKey string, form map[string][]string) (int, []byte, delivery, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	fp := fingerprint(form)
	if code, body, replayed, held := s.held(idemKey, fp, now); held {
		return code, body, answer, replayed
	}

	pi, invalid := newIntent(form, now)
	if invalid != nil {
		// Validation failed: nothing executed, nothing saved.
		return http.StatusBadRequest, errorBody(*invalid), answer, false
	}
	if pi.PaymentMethod == PMRateLimited {
		return http.StatusTooManyRequests, errorBody(apiError{Type: "invalid_request_error", Code: "rate_limit",
			Message: "Too many requests hit the API too quickly."}), answer, false
	}
	pi.idempotencyKey = idemKey
	if pi.PaymentMethod == PMLate {
		s.pending = append(s.pending, &pendingCharge{key: idemKey, intent: pi})
		if idemKey != "" {
			s.keys[idemKey] = &key{fingerprint: fp, firstUsed: now, inProgress: true}
		}
		return 0, nil, hang, false
	}
	code, body := s.execute(pi, form, now)
	if idemKey != "" {
		s.keys[idemKey] = &key{fingerprint: fp, firstUsed: now, status: code, body: body}
	}
	if pi.PaymentMethod == PMTimeout {
		return code, body, hang, false
	}
	return code, body, answer, false
}

// held answers a request under idemKey, whose parameters' fingerprint is
// fp, if Stripe holds the key (held). It answers the saved answer
// (replayed). Or it refuses a request with other parameters, or one while
// the first is still executing. A key KeyWindow old is forgotten first. The
// caller holds the lock.
func (s *Simulator) held(idemKey, fp string, now time.Time) (code int, body []byte, replayed, held bool) {
	if k := s.keys[idemKey]; k != nil && now.Sub(k.firstUsed) >= s.opts.KeyWindow {
		delete(s.keys, idemKey)
	}
	k := s.keys[idemKey]
	switch {
	case k == nil:
		return 0, nil, false, false
	case k.fingerprint != fp:
		return http.StatusBadRequest, errorBody(apiError{Type: "idempotency_error",
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", idemKey)}), false, true
	case k.inProgress:
		return http.StatusConflict, errorBody(apiError{Type: "invalid_request_error", Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key. Please try again later."}), false, true
	default:
		return k.status, k.body, true, true
	}
}

// execute confirms pi with its payment method and stores it.
func (s *Simulator) execute(pi *intent, form map[string][]string, now time.Time) (int, []byte) {
	decline := func(code, declineCode string) (int, []byte) {
		pi.Status = "requires_payment_method"
		pi.LastPaymentError = &apiError{Type: "card_error", Code: code, DeclineCode: declineCode, Message: "Your card was declined."}
		s.store(pi, now)
		e := *pi.LastPaymentError
		e.PaymentIntent = pi
		return http.StatusPaymentRequired, errorBody(e)
	}
	switch pi.PaymentMethod {
	case PMDeclined:
		return decline("card_declined", "generic_decline")
	case PMInsufficientFunds:
		return decline("card_declined", "insufficient_funds")
	case PMAuthenticationRequired:
		if first(form, "error_on_requires_action") == "true" {
			return decline("authentication_required", "authentication_required")
		}
		pi.Status = "requires_action"
		s.store(pi, now)
		return http.StatusOK, mustJSON(pi)
	case PMAPIError:
		s.store(pi, now)
		return http.StatusInternalServerError, errorBody(apiError{Type: "api_error", Message: "An unknown error occurred."})
	default:
		s.store(pi, now)
		return http.StatusOK, mustJSON(pi)
	}
}

// store records pi, created now; a succeeded one gets its charge and
// receives its amount, an authorized one gets its charge and holds it.
func (s *Simulator) store(pi *intent, now time.Time) {
	switch pi.Status {
	case "succeeded":
		pi.LatestCharge, pi.AmountReceived = newID("ch_"), pi.Amount
	case "requires_capture":
		pi.LatestCharge, pi.AmountCapturable = newID("ch_"), pi.Amount
	}
	pi.Created, pi.createdAt = now.Unix(), now
	s.intents[pi.ID] = pi
	s.order = append(s.order, pi)
	s.hooks.settled(pi, now)
}

// newIntent validates a create request's parameters into a PaymentIntent
// about to succeed, or returns the validation error Stripe would answer.
func newIntent(form map[string][]string, now time.Time) (*intent, *apiError) {
	invalid := func(param, msg string) (*intent, *apiError) {
		return nil, &apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: param, Message: msg}
	}
	amount, err := strconv.ParseInt(first(form, "amount"), 10, 64)
	if err != nil || amount < 1 {
		return invalid("amount", "Amount must be a positive integer.")
	}
	currency := first(form, "currency")
	if !currencyPattern.MatchString(currency) {
		return invalid("currency", "Invalid currency: must be a three-letter ISO code in lower case.")
	}
	if first(form, "confirm") != "true" {
		return invalid("confirm", "This simulator only creates and confirms in one call.")
	}
	if pt := form["payment_method_types[0]"]; len(pt) != 1 || pt[0] != "card" {
		return invalid("payment_method_types", "This simulator only takes payment_method_types[]=card.")
	}
	pm := first(form, "payment_method")
	if !strings.HasPrefix(pm, "pm_card_") && !strings.HasPrefix(pm, "pm_sim_") {
		return nil, &apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "payment_method",
			Message: fmt.Sprintf("No such PaymentMethod: '%s'", pm)}
	}
	pi := &intent{
		Object: "payment_intent", ID: newID("pi_"), Amount: amount, Currency: currency, Status: "succeeded",
		CaptureMethod: "automatic", Metadata: metadata(form), PaymentMethod: pm, Created: now.Unix(),
	}
	switch first(form, "capture_method") {
	case "", "automatic":
	case "manual":
		pi.Status, pi.CaptureMethod = "requires_capture", "manual"
	default:
		return invalid("capture_method", "This simulator only takes capture_method automatic or manual.")
	}
	return pi, nil
}

// metadata reads a request's metadata[KEY] parameters.
func metadata(form map[string][]string) map[string]string {
	m := map[string]string{}
	for name, v := range form {
		if k, ok := strings.CutPrefix(name, "metadata["); ok && strings.HasSuffix(k, "]") && len(v) == 1 {
			m[strings.TrimSuffix(k, "]")] = v[0]
		}
	}
	return m
}

var (
	currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)
	queryPattern    = regexp.MustCompile(`^metadata\['([^'\\]+)'\]:'((?:[^'\\]|\\.)*)'$`)
	unescapePattern = regexp.MustCompile(`\\(.)`)
)

func (s *Simulator) handleSearch(w http.ResponseWriter, r *http.Request) {
	m := queryPattern.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		s.writeError(w, r, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: "query",
			Message: "This simulator only searches metadata['KEY']:'VALUE'."})
		return
	}
	name, value := m[1], unescapePattern.ReplaceAllString(m[2], "$1")
	s.mu.Lock()
	now := s.opts.Clock()
	data := []*intent{}
	for _, pi := range slices.Backward(s.order) {
		if pi.Metadata[name] == value && !now.Before(pi.createdAt.Add(s.opts.SearchLag)) {
			data = append(data, pi)
		}
	}
	body := mustJSON(map[string]any{"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false, "data": data})
	s.mu.Unlock()
	s.write(w, r, http.StatusOK, body)
}

func (s *Simulator) handleRetrieve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	pi := s.intents[r.PathValue("id")]
	var body []byte
	if pi != nil {
		body = mustJSON(pi)
	}
	s.mu.Unlock()
	if pi == nil {
		s.writeError(w, r, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "intent",
			Message: "No such payment_intent."})
		return
	}
	s.write(w, r, http.StatusOK, body)
}

func (s *Simulator) writeError(w http.ResponseWriter, r *http.Request, code int, e apiError) {
	s.write(w, r, code, errorBody(e))
}

func (s *Simulator) write(w http.ResponseWriter, r *http.Request, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", newID("req_"))
	w.WriteHeader(code)
	_, _ = w.Write(body)
	s.log(r, r.Header.Get("Idempotency-Key"), code, "answered")
}

func (s *Simulator) log(r *http.Request, idemKey string, code int, delivery string) {
	s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("idempotency_key", idemKey), slog.Int("code", code), slog.String("delivery", delivery))
}

// fingerprint identifies a request's parameters, whatever their order.
func fingerprint(form map[string][]string) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(form)) {
		fmt.Fprintf(&b, "%q=%q;", name, form[name])
	}
	return b.String()
}

func first(form map[string][]string, name string) string {
	if v := form[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func errorBody(e apiError) []byte {
	return mustJSON(map[string]apiError{"error": e})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("stripesim: encode: %v", err))
	}
	return b
}

// hangUp answers nothing until the client gives up (or maxHang passes),
// then closes the connection. Closing at once would not do: Go's
// transport re-sends a request that carries an Idempotency-Key when a
// reused connection closes before any answer.
func hangUp(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(maxHang)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// newID returns prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
