package charge_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// FuzzCreate sends arbitrary POST /charges events through the real handler,
// on the in-memory store (memstore, held to the DynamoDB store by the
// conformance suite), with a provider that is always unavailable. Every
// event gets a response (never a Go error or a panic); an event that fails
// any validation step gets a 4xx problem and touches neither the store nor
// the provider; a valid one claims its key with the fingerprint of its
// body, reaches the provider with the parsed values, and gets the 503 of
// an unavailable provider.
func FuzzCreate(f *testing.F) {
	raw, err := os.ReadFile("testdata/bad_requests.json")
	if err != nil {
		f.Fatal(err)
	}
	var corpus struct{ Cases []badCase }
	if err := json.Unmarshal(raw, &corpus); err != nil {
		f.Fatal(err)
	}
	for _, tc := range corpus.Cases {
		tenant, key, ct, body := "acme", "order-1", "application/json", ""
		if tc.Tenant != nil {
			tenant = *tc.Tenant
		}
		if tc.OmitAuth {
			tenant = ""
		}
		if tc.Key != nil {
			key = *tc.Key
		}
		if tc.ContentType != nil {
			ct = *tc.ContentType
		}
		if tc.Body != nil {
			body = *tc.Body
		}
		if tc.Repeat > 0 {
			body = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", min(tc.Repeat, httpapi.MaxBodyBytes)) + `"}`
		}
		f.Add(tenant, key, !tc.OmitKey, ct, tc.Base64, []byte(body))
	}
	f.Add("acme", "order-1", true, "application/json; charset=utf-8", false,
		[]byte(" {\"source\" : \"tok_visa\", \"description\":\"caf\\u00e9\", \"currency\":\"EUR\",\"amount\":1500}\n"))
	f.Add("acme", "order-2", true, "application/json", false, []byte(`{"amount":3.2084e4,"currency":"EUR","source":"tok_visa"}`))
	f.Add("acme", "order-3", true, "application/json", false, []byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":""}`))
	f.Add("acme", "order-4", true, "application/json", false, []byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":"\ud83d\ude00 \udc00"}`))
	f.Add("acme", "k", true, "application/json", true, []byte(base64.StdEncoding.EncodeToString([]byte(`{"amount":1,"currency":"JPY","source":"x"}`))))

	f.Fuzz(func(t *testing.T, tenant, key string, withKey bool, contentType string, isBase64 bool, body []byte) {
		h, prov := fuzzHandler(t)
		fuzzEnv.epoch.Add(1)
		if k, err := idem.NewKey(tenant, charge.ChargeOperation, key); err == nil {
			prov.expect(k)
		} else {
			prov.expect(idem.Key{})
		}
		fuzzEnv.calls.n.Store(0)

		req := post(tenant, "", string(body))
		req.Headers["content-type"] = contentType
		if withKey {
			req.Headers["idempotency-key"] = key
		}
		req.IsBase64Encoded = isBase64
		resp, err := h.Handle(context.Background(), req)
		if err != nil {
			t.Fatalf("Handle returned an error: %v", err)
		}

		want, reason := expectCreate(tenant, key, withKey, contentType, isBase64, body)
		if reason != "" {
			if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.Headers["Content-Type"] != httpapi.ContentTypeProblem {
				t.Fatalf("invalid request (%s) got %d %s", reason, resp.StatusCode, resp.Body)
			}
			if calls := fuzzEnv.calls.n.Load(); calls != 0 || prov.calls() != 0 {
				t.Fatalf("invalid request (%s) made %d store calls and %d provider calls", reason, calls, prov.calls())
			}
			return
		}
		if resp.StatusCode != 503 || !strings.Contains(resp.Body, "provider-unavailable") {
			t.Fatalf("valid request got %d %s, want the 503 of an unavailable provider", resp.StatusCode, resp.Body)
		}
		if got := prov.last(); got.Amount != want.Money.Amount || got.Currency != want.Money.Currency || got.Source != want.Source {
			t.Fatalf("provider got %v, want %+v", got, want)
		}
		fp, _ := idem.FingerprintJSON(want.raw)
		if prov.storedFingerprint() != fp.String() {
			t.Fatalf("the claim does not carry the body's fingerprint %s", fp)
		}
	})
}

// parsed is what a valid create event should reach the provider with.
type parsed struct {
	charge.Request
	raw []byte // the decoded body, its amount written as an integer
}

// expectCreate validates an event step by step with the exported building
// blocks, independently of the handler, and says why it is invalid ("" if
// it is valid).
func expectCreate(tenant, key string, withKey bool, contentType string, isBase64 bool, body []byte) (parsed, string) {
	if _, err := idem.NewKey(tenant, charge.ChargeOperation, "probe"); err != nil {
		return parsed{}, "tenant"
	}
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != httpapi.ContentTypeJSON {
		return parsed{}, "content type"
	}
	if isBase64 {
		var err error
		if body, err = base64.StdEncoding.DecodeString(string(body)); err != nil {
			return parsed{}, "base64"
		}
	}
	if len(body) > httpapi.MaxBodyBytes {
		return parsed{}, "size"
	}
	if !withKey {
		return parsed{}, "no key"
	}
	if _, err := charge.ParseCommandID(key); err != nil {
		return parsed{}, "key"
	}
	c, err := idem.CanonicalJSON(body)
	if err != nil {
		return parsed{}, "json"
	}
	var in struct {
		Currency, Source, Description string
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(c, &members); err != nil {
		return parsed{}, "shape"
	}
	for name, value := range members { // exact names only, whatever encoding/json allows
		switch name {
		case "amount", "currency", "source", "description":
		default:
			return parsed{}, "shape"
		}
		if string(value) == "null" { // a null member is not an absent one
			return parsed{}, "shape"
		}
	}
	if err := json.NewDecoder(bytes.NewReader(c)).Decode(&in); err != nil {
		return parsed{}, "shape"
	}
	var number json.Number // stays empty unless the amount is a JSON number
	if raw := members["amount"]; len(raw) > 0 && raw[0] != '"' {
		_ = json.Unmarshal(raw, &number)
	}
	amount, err := charge.ParseAmount(number)
	if err != nil {
		return parsed{}, "values"
	}
	r, err := charge.NewRequest(amount, in.Currency, in.Source, in.Description)
	if err != nil {
		return parsed{}, "values"
	}
	// The request is fingerprinted with its amount as an integer literal,
	// and without an empty description: that is no description.
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return parsed{}, "shape"
	}
	doc["amount"] = json.Number(strconv.FormatInt(amount, 10))
	if in.Description == "" {
		delete(doc, "description")
	}
	normal, err := json.Marshal(doc)
	if err != nil {
		return parsed{}, "shape"
	}
	return parsed{Request: r, raw: normal}, ""
}

// fuzzEnv is one in-memory store per fuzzing process, with its calls
// counted.
var fuzzEnv struct {
	once  sync.Once
	calls countedStore
	h     *httpapi.Handler
	prov  *unavailableProvider
	err   error
	// epoch moves the store's clock two retentions on per input, so every
	// input meets a table where earlier inputs' keys have expired (a
	// released key keeps its fingerprint until then).
	epoch atomic.Int64
}

func fuzzHandler(t *testing.T) (*httpapi.Handler, *unavailableProvider) {
	t.Helper()
	e := &fuzzEnv
	e.once.Do(func() {
		clock := func() time.Time { return time.Now().Add(time.Duration(e.epoch.Load()) * 48 * time.Hour) }
		e.calls.Store = memstore.New(func(o *memstore.Options) { o.Clock = clock })
		e.prov = &unavailableProvider{store: e.calls.Store}
		// The charges table is never read on this path (the provider
		// charges nothing): a client that reaches no endpoint will do.
		rows, err := charge.NewRows(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "unused")
		if err != nil {
			e.err = err
			return
		}
		svc, err := charge.NewService(charge.Config{Store: &e.calls, Rows: rows, Provider: e.prov, Answers: httpapi.Answers{}})
		if err != nil {
			e.err = err
			return
		}
		e.h, e.err = httpapi.NewHandler(svc)
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.h, e.prov
}

// countedStore counts the calls that reach the store.
type countedStore struct {
	charge.Store
	n atomic.Int64
}

func (c *countedStore) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	c.n.Add(1)
	return c.Store.Begin(ctx, key, fp, intent)
}

func (c *countedStore) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

// unavailableProvider refuses every charge as not processed, after noting
// the request and the fingerprint of the record that claims it (the record
// exists while the provider is called; the refusal then releases it).
type unavailableProvider struct {
	store  charge.Store
	mu     sync.Mutex
	key    idem.Key // the key the next charge is expected for
	reqs   []provider.ChargeRequest
	stored string // the claimed record's fingerprint
}

func (p *unavailableProvider) expect(k idem.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key, p.reqs, p.stored = k, nil, ""
}

func (p *unavailableProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if rec, err := p.store.Get(ctx, p.key); err == nil {
		p.stored = rec.Fingerprint
	}
	return provider.Result{}, fmt.Errorf("fuzz: %w", provider.ErrUnavailable)
}

func (p *unavailableProvider) Lookup(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: lookups are not expected")
}

func (p *unavailableProvider) Refund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: refunds are not expected")
}

func (p *unavailableProvider) LookupRefund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: refunds are not expected")
}

func (p *unavailableProvider) Capture(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: captures are not expected")
}

func (p *unavailableProvider) Cancel(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: cancels are not expected")
}

func (p *unavailableProvider) State(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: states are not expected")
}

func (p *unavailableProvider) Guarantees() provider.Guarantees { return provider.Guarantees{} }

func (p *unavailableProvider) storedFingerprint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stored
}

func (p *unavailableProvider) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

func (p *unavailableProvider) last() provider.ChargeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) == 0 {
		return provider.ChargeRequest{}
	}
	return p.reqs[len(p.reqs)-1]
}

// FuzzCommandID checks that ParseCommandID accepts exactly the keys the
// store accepts, and that the ids derived from one client key differ
// between tenants, so one tenant's charge can never be served to another.
func FuzzCommandID(f *testing.F) {
	f.Add("acme", "globex", "order-42")
	f.Add("acme", "acme2", "a b#c!~")
	f.Add("t", "u", "order\n1")
	f.Add("a", "b", strings.Repeat("k", 256))
	f.Fuzz(func(t *testing.T, tenantA, tenantB, s string) {
		id, err := charge.ParseCommandID(s)
		_, keyErr := idem.NewKey("acme", charge.ChargeOperation, s)
		if (err == nil) != (keyErr == nil) {
			t.Fatalf("ParseCommandID(%q) = %v, but NewKey says %v", s, err, keyErr)
		}
		if err != nil {
			return
		}
		a, errA := idem.NewKey(tenantA, charge.ChargeOperation, string(id))
		b, errB := idem.NewKey(tenantB, charge.ChargeOperation, string(id))
		if errA != nil || errB != nil || tenantA == tenantB {
			return
		}
		created := time.UnixMilli(1_700_000_000_000)
		if charge.ChargeID(a, created) == charge.ChargeID(b, created) || charge.ProviderReference(a, created) == charge.ProviderReference(b, created) {
			t.Fatalf("tenants %q and %q share ids for key %q", tenantA, tenantB, s)
		}
	})
}
