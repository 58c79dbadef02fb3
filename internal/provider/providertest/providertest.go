// Package providertest provides the contract suite every card provider
// adapter must pass: Run checks, against a fresh backend per check, the
// promises package provider's documentation lists.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// Provider is the adapter under test: what the charge path calls.
type Provider interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
	Lookup(ctx context.Context, reference string) (provider.Result, error)
	Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	State(ctx context.Context, charge string) (provider.Result, error)
	Guarantees() provider.Guarantees
}

// Payment is what the backend did with one authorization.
type Payment struct {
	// Authorized is what it held; Captured what its captures took.
	Authorized, Captured int64
	// Captures counts the captures the backend performed.
	Captures int
	// Canceled: it was canceled or expired.
	Canceled bool
}

// Sources are card sources the backend under test recognises.
type Sources struct {
	// Charge is charged.
	Charge string
	// Decline is declined with a decline code.
	Decline string
	// Unavailable is refused every time, with the backend's guarantee
	// that it processed nothing.
	Unavailable string
	// LostAnswer is charged, and the answer never arrives.
	LostAnswer string
	// Late is accepted and the answer never arrives; the charge lands
	// only when Subject.Settle runs (an edge that timed out while its
	// backend goes on).
	Late string
	// Unknown is a source the backend has never heard of, whatever it
	// does with it.
	Unknown string
}

// Subject is one adapter on its own backend.
type Subject struct {
	Provider Provider
	// Unreachable is the same adapter pointed at an address where
	// nothing listens.
	Unreachable Provider
	Sources     Sources
	// Charged counts the charges that took money for reference at the
	// backend.
	Charged func(reference string) int
	// Refunded counts the refunds the backend made under the refund
	// reference; RefundedAmount sums the refunds of the charge whose id
	// (the Result's ChargeID) is charge.
	Refunded       func(reference string) int
	RefundedAmount func(charge string) int64
	// Payment is what the backend did with the authorization whose id
	// (the Result's ChargeID) is charge.
	Payment func(charge string) Payment
	// Expire ends the authorization charge as its expiry at the backend
	// does.
	Expire func(charge string)
	// Down, if set, starts (true) or ends an outage in which the backend
	// processes nothing and says so.
	Down func(down bool)
	// Settle lands whatever the backend still has in flight and lets the
	// adapter's settle window pass (on the backend's clock).
	Settle func()
	// Logs returns what the adapter and the backend have logged.
	Logs func() string
}

// Run runs the contract suite; newSubject builds a fresh Subject for each
// check, which runs in parallel with the others.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	checks := []struct {
		name  string
		check func(t *testing.T, s Subject)
	}{
		{"Guarantees", checkGuarantees},
		{"ChargedAtMostOnce", checkChargedAtMostOnce},
		{"ConcurrentSendsChargeOnce", checkConcurrentSends},
		{"LookupFindsTheCharge", checkLookupFindsCharge},
		{"LookupOfUnknownIsNotFound", checkLookupUnknown},
		{"DeclineIsAResult", checkDecline},
		{"RefusedRequestsAreRejected", checkRejected},
		{"UnavailableProcessedNothing", checkUnavailable},
		{"UnreachableIsUnavailable", checkUnreachable},
		{"DoneContextIsUnavailable", checkDoneContext},
		{"LostAnswerIsAmbiguous", checkLostAnswer},
		{"LateChargeLandsWithinTheSettleWindow", checkLate},
		{"SourceNeverLeaks", checkSourceNeverLeaks},
		{"RefundedOncePerReference", checkRefundedOnce},
		{"LookupFindsTheRefund", checkLookupFindsRefund},
		{"LookupRefundOfUnknownIsNotFound", checkLookupRefundUnknown},
		{"PartialRefundsUpToTheAmount", checkPartialRefunds},
		{"OverRefundIsRejected", checkOverRefund},
		{"RefundOfNoChargeIsRejected", checkRefundOfNoCharge},
		{"AuthorizedThenCapturedOnce", checkCapturedOnce},
		{"ConcurrentCapturesCaptureOnce", checkConcurrentCaptures},
		{"PartialCaptureTakesPartOfTheAuthorization", checkPartialCapture},
		{"CaptureBeyondTheAuthorizationIsRejected", checkOverCapture},
		{"CanceledOnce", checkCanceledOnce},
		{"CancelAfterCaptureAnswersCharged", checkCancelAfterCapture},
		{"CaptureAfterCancelAnswersCanceled", checkCaptureAfterCancel},
		{"ExpiredAuthorizationIsCanceled", checkExpired},
		{"StateOfUnknownIsNotFound", checkStateUnknown},
		{"PaymentsWhileDownProcessNothing", checkPaymentsWhileDown},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSubject(t)
			c.check(t, s)
			if logs := s.Logs(); leaks(logs, s.Sources) {
				t.Errorf("a card source appears in the logs:\n%s", logs)
			}
		})
	}
}

// newRequest returns a charge of 1500 EUR minor units with a fresh
// reference.
func newRequest(source string) provider.ChargeRequest {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return provider.ChargeRequest{Reference: "ref_" + hex.EncodeToString(b[:]), Amount: 1500, Currency: "EUR", Source: source}
}

// lookupSettled looks reference up, and again after the settle window if
// the first answer is not trustworthy yet. Before the window only
// not_found or ErrUnavailable may stand for a charge that exists.
func lookupSettled(t *testing.T, s Subject, reference string) provider.Result {
	t.Helper()
	return settled(t, s, "lookup "+reference, func(ctx context.Context) (provider.Result, error) {
		return s.Provider.Lookup(ctx, reference)
	})
}

// lookupRefundSettled looks req up as lookupSettled looks up a charge.
func lookupRefundSettled(t *testing.T, s Subject, req provider.RefundRequest) provider.Result {
	t.Helper()
	return settled(t, s, "refund lookup "+req.Reference, func(ctx context.Context) (provider.Result, error) {
		return s.Provider.LookupRefund(ctx, req)
	})
}

// settled runs lookup, and again after the settle window unless the first
// answer found something.
func settled(t *testing.T, s Subject, what string, lookup func(context.Context) (provider.Result, error)) provider.Result {
	t.Helper()
	res, err := lookup(t.Context())
	switch {
	case err != nil:
		assertKind(t, what, err, provider.ErrUnavailable)
	case res.Status != provider.StatusNotFound:
		return res
	}
	s.Settle()
	res, err = lookup(t.Context())
	if err != nil {
		t.Fatalf("%s after the settle window: %v", what, err)
	}
	return res
}

// assertKind fails unless err wraps want and no other sentinel.
func assertKind(t *testing.T, what string, err error, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, want)
	}
	var got []error
	for _, kind := range []error{provider.ErrUnavailable, provider.ErrAmbiguous, provider.ErrRejected} {
		if errors.Is(err, kind) {
			got = append(got, kind)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("%s: error %q wraps %v, want exactly %v", what, err, got, want)
	}
}

func assertCharged(t *testing.T, s Subject, reference string, want int) {
	t.Helper()
	if got := s.Charged(reference); got != want {
		t.Fatalf("the backend charged %s %d times, want %d", reference, got, want)
	}
}

func checkGuarantees(t *testing.T, s Subject) {
	g := s.Provider.Guarantees()
	if g.SettleWindow <= 0 {
		t.Errorf("SettleWindow %v: an adapter must state how long a not_found takes to be trustworthy", g.SettleWindow)
	}
	if g.DedupWindow < 0 {
		t.Errorf("DedupWindow %v is negative", g.DedupWindow)
	}
	if g.DedupWindow > 0 && g.DedupWindow < g.SettleWindow {
		t.Errorf("DedupWindow %v is shorter than SettleWindow %v: a reference released after a trusted not_found could charge twice", g.DedupWindow, g.SettleWindow)
	}
}

func checkChargedAtMostOnce(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Charge)
	var first provider.Result
	for i := range 3 {
		res, err := s.Provider.Charge(context.Background(), req)
		if err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
		if res.Status != provider.StatusCharged || res.ChargeID == "" || res.Reference != req.Reference {
			t.Fatalf("send %d: %+v, want charged with an id for %s", i+1, res, req.Reference)
		}
		if i == 0 {
			first = res
		} else if res != first {
			t.Fatalf("send %d answered %+v, the first %+v", i+1, res, first)
		}
	}
	assertCharged(t, s, req.Reference, 1)
}

func checkConcurrentSends(t *testing.T, s Subject) {
	const n = 8
	req := newRequest(s.Sources.Charge)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]provider.Result, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Provider.Charge(context.Background(), req)
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			// Another send in progress: unknown for this one, or not processed.
			if !errors.Is(errs[i], provider.ErrAmbiguous) && !errors.Is(errs[i], provider.ErrUnavailable) {
				t.Errorf("send %d: %v, want charged, ErrAmbiguous or ErrUnavailable", i, errs[i])
			}
			continue
		}
		if results[i].Status != provider.StatusCharged {
			t.Errorf("send %d: %+v", i, results[i])
		}
		ids[results[i].ChargeID] = true
	}
	if len(ids) > 1 {
		t.Errorf("concurrent sends answered %d charge ids: %v", len(ids), ids)
	}
	if got := lookupSettled(t, s, req.Reference); got.Status != provider.StatusCharged || (len(ids) == 1 && !ids[got.ChargeID]) {
		t.Errorf("lookup after concurrent sends: %+v, sends answered %v", got, ids)
	}
	assertCharged(t, s, req.Reference, 1)
}

func checkLookupFindsCharge(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Charge)
	charged, err := s.Provider.Charge(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := lookupSettled(t, s, req.Reference); got != charged {
		t.Fatalf("lookup answered %+v, the charge %+v", got, charged)
	}
}

func checkLookupUnknown(t *testing.T, s Subject) {
	ref := newRequest("").Reference
	res, err := s.Provider.Lookup(context.Background(), ref)
	if err != nil {
		t.Fatalf("lookup of an unknown reference: %v", err)
	}
	if res.Status != provider.StatusNotFound {
		t.Fatalf("lookup of an unknown reference: %+v", res)
	}
	if got := lookupSettled(t, s, ref); got.Status != provider.StatusNotFound {
		t.Fatalf("lookup of an unknown reference after the settle window: %+v", got)
	}
	assertCharged(t, s, ref, 0)
}

func checkDecline(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Decline)
	first, err := s.Provider.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("a decline must be a result: %v", err)
	}
	if first.Status != provider.StatusDeclined || first.DeclineCode == "" {
		t.Fatalf("decline: %+v, want declined with a code", first)
	}
	again, err := s.Provider.Charge(context.Background(), req)
	if err != nil || again != first {
		t.Fatalf("the decline sent again: %+v, %v; first %+v", again, err, first)
	}
	if got := lookupSettled(t, s, req.Reference); got.Status != provider.StatusDeclined || got.DeclineCode != first.DeclineCode {
		t.Fatalf("lookup of the decline: %+v, the charge answered %+v", got, first)
	}
	assertCharged(t, s, req.Reference, 0)
}

func checkRejected(t *testing.T, s Subject) {
	for name, mutate := range map[string]func(*provider.ChargeRequest){
		"empty reference": func(r *provider.ChargeRequest) { r.Reference = "" },
		"zero amount":     func(r *provider.ChargeRequest) { r.Amount = 0 },
		"no source":       func(r *provider.ChargeRequest) { r.Source = "" },
	} {
		req := newRequest(s.Sources.Charge)
		mutate(&req)
		_, err := s.Provider.Charge(context.Background(), req)
		assertKind(t, name, err, provider.ErrRejected)
		if req.Reference != "" {
			assertCharged(t, s, req.Reference, 0)
		}
	}
}

func checkUnavailable(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Unavailable)
	for i := range 2 {
		_, err := s.Provider.Charge(context.Background(), req)
		assertKind(t, fmt.Sprintf("send %d", i+1), err, provider.ErrUnavailable)
	}
	if got := lookupSettled(t, s, req.Reference); got.Status != provider.StatusNotFound {
		t.Fatalf("lookup after ErrUnavailable: %+v", got)
	}
	assertCharged(t, s, req.Reference, 0)
}

func checkUnreachable(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Charge)
	_, err := s.Unreachable.Charge(context.Background(), req)
	assertKind(t, "charge", err, provider.ErrUnavailable)
	_, err = s.Unreachable.Lookup(context.Background(), req.Reference)
	assertKind(t, "lookup", err, provider.ErrUnavailable)
	refund := newRefund(charged(t, s), 500)
	_, err = s.Unreachable.Refund(t.Context(), refund)
	assertKind(t, "refund", err, provider.ErrUnavailable)
	_, err = s.Unreachable.LookupRefund(t.Context(), refund)
	assertKind(t, "refund lookup", err, provider.ErrUnavailable)
	id := authorized(t, s)
	assertPaymentsUnavailable(t, s.Unreachable, id)
	assertPayment(t, s, id, Payment{Authorized: 1500})
}

// assertPaymentsUnavailable requires a capture, a cancel and a state of
// the authorization id through p to fail with ErrUnavailable.
func assertPaymentsUnavailable(t *testing.T, p Provider, id string) {
	t.Helper()
	_, err := p.Capture(t.Context(), newPayment(id, 0))
	assertKind(t, "capture", err, provider.ErrUnavailable)
	_, err = p.Cancel(t.Context(), newPayment(id, 0))
	assertKind(t, "cancel", err, provider.ErrUnavailable)
	_, err = p.State(t.Context(), id)
	assertKind(t, "state", err, provider.ErrUnavailable)
}

func checkDoneContext(t *testing.T, s Subject) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := newRequest(s.Sources.Charge)
	_, err := s.Provider.Charge(ctx, req)
	assertKind(t, "charge", err, provider.ErrUnavailable)
	_, err = s.Provider.Lookup(ctx, req.Reference)
	assertKind(t, "lookup", err, provider.ErrUnavailable)
	assertCharged(t, s, req.Reference, 0)
	refund := newRefund(charged(t, s), 500)
	_, err = s.Provider.Refund(ctx, refund)
	assertKind(t, "refund", err, provider.ErrUnavailable)
	_, err = s.Provider.LookupRefund(ctx, refund)
	assertKind(t, "refund lookup", err, provider.ErrUnavailable)
	assertRefunded(t, s, refund, 0, 0)
	id := authorized(t, s)
	for name, call := range map[string]func(context.Context, provider.PaymentRequest) (provider.Result, error){
		"capture": s.Provider.Capture, "cancel": s.Provider.Cancel,
	} {
		_, err = call(ctx, newPayment(id, 0))
		assertKind(t, name, err, provider.ErrUnavailable)
	}
	_, err = s.Provider.State(ctx, id)
	assertKind(t, "state", err, provider.ErrUnavailable)
	assertPayment(t, s, id, Payment{Authorized: 1500})
}

func checkLostAnswer(t *testing.T, s Subject) {
	req := newRequest(s.Sources.LostAnswer)
	_, err := s.Provider.Charge(context.Background(), req)
	assertKind(t, "charge", err, provider.ErrAmbiguous)
	found := lookupSettled(t, s, req.Reference)
	if found.Status != provider.StatusCharged {
		t.Fatalf("lookup after a lost answer: %+v", found)
	}
	// The reference deduplicates whatever the delivery of this send.
	if res, err := s.Provider.Charge(context.Background(), req); err == nil && res.ChargeID != found.ChargeID {
		t.Fatalf("the reference sent again answered %+v, the lookup %+v", res, found)
	}
	assertCharged(t, s, req.Reference, 1)
}

func checkLate(t *testing.T, s Subject) {
	req := newRequest(s.Sources.Late)
	_, err := s.Provider.Charge(context.Background(), req)
	assertKind(t, "charge", err, provider.ErrAmbiguous)
	// In flight: a resend must not charge a second time, and a lookup
	// may not know yet, which is what the settle window is for.
	if res, err := s.Provider.Charge(context.Background(), req); err == nil {
		t.Fatalf("a resend while the first is in flight answered %+v", res)
	} else {
		assertKind(t, "resend in flight", err, provider.ErrAmbiguous)
	}
	if res, err := s.Provider.Lookup(context.Background(), req.Reference); err == nil && res.Status != provider.StatusNotFound {
		t.Fatalf("lookup while in flight: %+v", res)
	}
	s.Settle()
	res, err := s.Provider.Lookup(context.Background(), req.Reference)
	if err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("lookup after the settle window: %+v, %v", res, err)
	}
	again, err := s.Provider.Charge(context.Background(), req)
	if err != nil || again.ChargeID != res.ChargeID {
		t.Fatalf("the reference sent again after landing: %+v, %v; lookup %+v", again, err, res)
	}
	assertCharged(t, s, req.Reference, 1)
}

func checkSourceNeverLeaks(t *testing.T, s Subject) {
	var errs []error
	collect := func(_ provider.Result, err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, src := range []string{s.Sources.Unknown, s.Sources.Unavailable, s.Sources.LostAnswer, s.Sources.Decline} {
		req := newRequest(src)
		collect(s.Provider.Charge(context.Background(), req))
		collect(s.Unreachable.Charge(context.Background(), req))
		req.Amount = -1
		collect(s.Provider.Charge(context.Background(), req))
	}
	for _, err := range errs {
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if leaks(text, s.Sources) {
				t.Errorf("a card source appears in the error %q", text)
			}
		}
	}
}

// newRefund returns a refund of amount of the charge whose id is charge,
// with a fresh reference.
func newRefund(charge string, amount int64) provider.RefundRequest {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return provider.RefundRequest{Reference: "rfd_" + hex.EncodeToString(b[:]), Charge: charge, Amount: amount, Currency: "EUR"}
}

// charged charges newRequest's 1500 and returns the charge's id.
func charged(t *testing.T, s Subject) string {
	t.Helper()
	res, err := s.Provider.Charge(t.Context(), newRequest(s.Sources.Charge))
	if err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("charge: %+v, %v", res, err)
	}
	return res.ChargeID
}

// assertRefunded fails unless the backend made n refunds under req's
// reference and refunded total of its charge in all.
func assertRefunded(t *testing.T, s Subject, req provider.RefundRequest, n int, total int64) {
	t.Helper()
	if got := s.Refunded(req.Reference); got != n {
		t.Fatalf("the backend refunded under %s %d times, want %d", req.Reference, got, n)
	}
	if got := s.RefundedAmount(req.Charge); got != total {
		t.Fatalf("the backend refunded %d of %s, want %d", got, req.Charge, total)
	}
}

// mustRefund refunds req and requires it refunded.
func mustRefund(t *testing.T, s Subject, req provider.RefundRequest) provider.Result {
	t.Helper()
	res, err := s.Provider.Refund(t.Context(), req)
	if err != nil {
		t.Fatalf("refund %d under %s: %v", req.Amount, req.Reference, err)
	}
	if res.Status != provider.StatusRefunded || res.ChargeID == "" || res.Reference != req.Reference {
		t.Fatalf("refund %d under %s: %+v, want refunded with an id", req.Amount, req.Reference, res)
	}
	return res
}

func checkRefundedOnce(t *testing.T, s Subject) {
	req := newRefund(charged(t, s), 500)
	first := mustRefund(t, s, req)
	for i := range 2 {
		if res := mustRefund(t, s, req); res != first {
			t.Fatalf("send %d answered %+v, the first %+v", i+2, res, first)
		}
	}
	assertRefunded(t, s, req, 1, 500)
}

func checkLookupFindsRefund(t *testing.T, s Subject) {
	req := newRefund(charged(t, s), 500)
	refunded := mustRefund(t, s, req)
	if got := lookupRefundSettled(t, s, req); got != refunded {
		t.Fatalf("refund lookup answered %+v, the refund %+v", got, refunded)
	}
}

func checkLookupRefundUnknown(t *testing.T, s Subject) {
	id := charged(t, s)
	// Another refund of the charge, which the lookup must not take for it.
	mustRefund(t, s, newRefund(id, 500))
	req := newRefund(id, 500)
	res, err := s.Provider.LookupRefund(t.Context(), req)
	if err != nil || res.Status != provider.StatusNotFound {
		t.Fatalf("refund lookup of an unknown reference: %+v, %v", res, err)
	}
	if got := lookupRefundSettled(t, s, req); got.Status != provider.StatusNotFound {
		t.Fatalf("refund lookup of an unknown reference after the settle window: %+v", got)
	}
	assertRefunded(t, s, req, 0, 500)
}

func checkPartialRefunds(t *testing.T, s Subject) {
	id := charged(t, s)
	first, second := newRefund(id, 1000), newRefund(id, 500)
	a, b := mustRefund(t, s, first), mustRefund(t, s, second)
	if a.ChargeID == b.ChargeID {
		t.Fatalf("two refunds answered one id %s", a.ChargeID)
	}
	assertRefunded(t, s, first, 1, 1500)
	assertRefunded(t, s, second, 1, 1500)
	more := newRefund(id, 1)
	_, err := s.Provider.Refund(t.Context(), more)
	assertKind(t, "a refund of a fully refunded charge", err, provider.ErrRejected)
	assertRefunded(t, s, more, 0, 1500)
}

func checkOverRefund(t *testing.T, s Subject) {
	id := charged(t, s)
	over := newRefund(id, 1501)
	_, err := s.Provider.Refund(t.Context(), over)
	assertKind(t, "a refund beyond the charge", err, provider.ErrRejected)
	assertRefunded(t, s, over, 0, 0)
	mustRefund(t, s, newRefund(id, 1000))
	over = newRefund(id, 501)
	_, err = s.Provider.Refund(t.Context(), over)
	assertKind(t, "a refund beyond what is left", err, provider.ErrRejected)
	assertRefunded(t, s, over, 0, 1000)
	if got := lookupRefundSettled(t, s, over); got.Status != provider.StatusNotFound {
		t.Fatalf("refund lookup of a refused refund: %+v", got)
	}
}

func checkRefundOfNoCharge(t *testing.T, s Subject) {
	id := charged(t, s)
	unknown := newRefund(id[:3]+"0unknown0"+id[3:], 500)
	_, err := s.Provider.Refund(t.Context(), unknown)
	assertKind(t, "a refund of an unknown charge", err, provider.ErrRejected)
	assertRefunded(t, s, unknown, 0, 0)

	declined, err := s.Provider.Charge(t.Context(), newRequest(s.Sources.Decline))
	if err != nil || declined.Status != provider.StatusDeclined || declined.ChargeID == "" {
		t.Fatalf("decline: %+v, %v; want declined with an id", declined, err)
	}
	ofDecline := newRefund(declined.ChargeID, 500)
	_, err = s.Provider.Refund(t.Context(), ofDecline)
	assertKind(t, "a refund of a declined charge", err, provider.ErrRejected)
	assertRefunded(t, s, ofDecline, 0, 0)
}

// authorized authorizes newRequest's 1500 and returns the charge's id.
func authorized(t *testing.T, s Subject) string {
	t.Helper()
	req := newRequest(s.Sources.Charge)
	req.AuthorizeOnly = true
	res, err := s.Provider.Charge(t.Context(), req)
	if err != nil || res.Status != provider.StatusAuthorized || res.ChargeID == "" || res.Reference != req.Reference {
		t.Fatalf("authorize: %+v, %v; want authorized with an id", res, err)
	}
	assertState(t, s, res.ChargeID, provider.Result{Status: provider.StatusAuthorized, Reference: req.Reference, ChargeID: res.ChargeID, Amount: 1500})
	return res.ChargeID
}

// newPayment returns a capture of amount (0: all), or a cancel, of the
// authorization charge with a fresh reference.
func newPayment(charge string, amount int64) provider.PaymentRequest {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return provider.PaymentRequest{Reference: "pay_" + hex.EncodeToString(b[:]), Charge: charge, Amount: amount}
}

// assertPayment fails unless the backend did want with the authorization
// charge.
func assertPayment(t *testing.T, s Subject, charge string, want Payment) {
	t.Helper()
	if got := s.Payment(charge); got != want {
		t.Fatalf("the backend did %+v with %s, want %+v", got, charge, want)
	}
}

// assertState fails unless State answers want for charge; the reference
// is not compared when want names none.
func assertState(t *testing.T, s Subject, charge string, want provider.Result) {
	t.Helper()
	got, err := s.Provider.State(t.Context(), charge)
	if want.Reference == "" {
		got.Reference = ""
	}
	if err != nil || got != want {
		t.Fatalf("state of %s: %+v, %v; want %+v", charge, got, err, want)
	}
}

// mustPayment runs a capture or a cancel and requires the answer want,
// for req.
func mustPayment(t *testing.T, what string, call func(context.Context, provider.PaymentRequest) (provider.Result, error), req provider.PaymentRequest, want provider.Result) provider.Result {
	t.Helper()
	want.Reference, want.ChargeID = req.Reference, req.Charge
	res, err := call(t.Context(), req)
	if err != nil || res != want {
		t.Fatalf("%s under %s: %+v, %v; want %+v", what, req.Reference, res, err, want)
	}
	return res
}

var (
	charged1500 = provider.Result{Status: provider.StatusCharged, Amount: 1500}
	canceled    = provider.Result{Status: provider.StatusCanceled}
)

func checkCapturedOnce(t *testing.T, s Subject) {
	id := authorized(t, s)
	req := newPayment(id, 0)
	for i := range 3 {
		mustPayment(t, fmt.Sprintf("capture %d", i+1), s.Provider.Capture, req, charged1500)
	}
	// Another reference finds the charge captured, and captures nothing.
	mustPayment(t, "capture under another reference", s.Provider.Capture, newPayment(id, 0), charged1500)
	assertPayment(t, s, id, Payment{Authorized: 1500, Captured: 1500, Captures: 1})
	assertState(t, s, id, provider.Result{Status: provider.StatusCharged, ChargeID: id, Amount: 1500})
}

func checkConcurrentCaptures(t *testing.T, s Subject) {
	const n = 8
	id := authorized(t, s)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]provider.Result, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Provider.Capture(context.Background(), newPayment(id, 0))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].Status != provider.StatusCharged || results[i].Amount != 1500 {
			t.Errorf("capture %d: %+v, %v; want charged 1500", i, results[i], errs[i])
		}
	}
	assertPayment(t, s, id, Payment{Authorized: 1500, Captured: 1500, Captures: 1})
}

func checkPartialCapture(t *testing.T, s Subject) {
	id := authorized(t, s)
	charged1000 := provider.Result{Status: provider.StatusCharged, Amount: 1000}
	mustPayment(t, "capture of 1000", s.Provider.Capture, newPayment(id, 1000), charged1000)
	// The rest is released: a capture of it answers what was taken.
	mustPayment(t, "capture of the rest", s.Provider.Capture, newPayment(id, 500), charged1000)
	assertPayment(t, s, id, Payment{Authorized: 1500, Captured: 1000, Captures: 1})
	assertState(t, s, id, provider.Result{Status: provider.StatusCharged, ChargeID: id, Amount: 1000})
	// What a refund may take back is what the capture took.
	over := newRefund(id, 1001)
	_, err := s.Provider.Refund(t.Context(), over)
	assertKind(t, "a refund beyond the capture", err, provider.ErrRejected)
	mustRefund(t, s, newRefund(id, 1000))
}

func checkOverCapture(t *testing.T, s Subject) {
	id := authorized(t, s)
	over := newPayment(id, 1501)
	_, err := s.Provider.Capture(t.Context(), over)
	assertKind(t, "a capture beyond the authorization", err, provider.ErrRejected)
	assertPayment(t, s, id, Payment{Authorized: 1500})
	assertState(t, s, id, provider.Result{Status: provider.StatusAuthorized, ChargeID: id, Amount: 1500})
	mustPayment(t, "capture of all", s.Provider.Capture, newPayment(id, 1500), charged1500)
}

func checkCanceledOnce(t *testing.T, s Subject) {
	id := authorized(t, s)
	req := newPayment(id, 0)
	for i := range 2 {
		mustPayment(t, fmt.Sprintf("cancel %d", i+1), s.Provider.Cancel, req, canceled)
	}
	mustPayment(t, "cancel under another reference", s.Provider.Cancel, newPayment(id, 0), canceled)
	assertPayment(t, s, id, Payment{Authorized: 1500, Canceled: true})
	assertState(t, s, id, provider.Result{Status: provider.StatusCanceled, ChargeID: id})
	// Nothing was captured, so nothing can be refunded.
	_, err := s.Provider.Refund(t.Context(), newRefund(id, 500))
	assertKind(t, "a refund of a canceled authorization", err, provider.ErrRejected)
}

func checkCancelAfterCapture(t *testing.T, s Subject) {
	id := authorized(t, s)
	mustPayment(t, "capture", s.Provider.Capture, newPayment(id, 0), charged1500)
	mustPayment(t, "cancel after the capture", s.Provider.Cancel, newPayment(id, 0), charged1500)
	assertPayment(t, s, id, Payment{Authorized: 1500, Captured: 1500, Captures: 1})
	assertState(t, s, id, provider.Result{Status: provider.StatusCharged, ChargeID: id, Amount: 1500})
}

func checkCaptureAfterCancel(t *testing.T, s Subject) {
	id := authorized(t, s)
	mustPayment(t, "cancel", s.Provider.Cancel, newPayment(id, 0), canceled)
	mustPayment(t, "capture after the cancel", s.Provider.Capture, newPayment(id, 0), canceled)
	assertPayment(t, s, id, Payment{Authorized: 1500, Canceled: true})
	assertState(t, s, id, provider.Result{Status: provider.StatusCanceled, ChargeID: id})
}

func checkExpired(t *testing.T, s Subject) {
	id := authorized(t, s)
	s.Expire(id)
	assertState(t, s, id, provider.Result{Status: provider.StatusCanceled, ChargeID: id})
	mustPayment(t, "capture after the expiry", s.Provider.Capture, newPayment(id, 0), canceled)
	mustPayment(t, "cancel after the expiry", s.Provider.Cancel, newPayment(id, 0), canceled)
	assertPayment(t, s, id, Payment{Authorized: 1500, Canceled: true})
}

func checkStateUnknown(t *testing.T, s Subject) {
	id := authorized(t, s)
	unknown := id[:3] + "0unknown0" + id[3:]
	assertState(t, s, unknown, provider.Result{Status: provider.StatusNotFound})
	_, err := s.Provider.Capture(t.Context(), newPayment(unknown, 0))
	assertKind(t, "a capture of an unknown charge", err, provider.ErrRejected)
	_, err = s.Provider.Cancel(t.Context(), newPayment(unknown, 0))
	assertKind(t, "a cancel of an unknown charge", err, provider.ErrRejected)
}

func checkPaymentsWhileDown(t *testing.T, s Subject) {
	if s.Down == nil {
		t.Skip("the backend has no outage to start")
	}
	id := authorized(t, s)
	s.Down(true)
	assertPaymentsUnavailable(t, s.Provider, id)
	s.Down(false)
	assertPayment(t, s, id, Payment{Authorized: 1500})
	mustPayment(t, "capture after the outage", s.Provider.Capture, newPayment(id, 0), charged1500)
}

// leaks reports whether text quotes any of the sources.
func leaks(text string, src Sources) bool {
	for _, s := range []string{src.Charge, src.Decline, src.Unavailable, src.LostAnswer, src.Late, src.Unknown} {
		if s != "" && strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// ClosedAddr returns a loopback address where nothing listens: where to
// point a Subject's Unreachable adapter.
func ClosedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// DropServer starts a server that passes requests to h until one for
// which drop is true. That one h executes, its answer thrown away; then
// the server stops listening and closes the connection without answering.
// The client sees its connection drop after the request went out, and
// every later dial is refused: a transport that re-sends the request on
// its own fails to dial, though the backend acted on it.
func DropServer(t *testing.T, h http.Handler, drop func(*http.Request) bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !drop(r) {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		_ = srv.Listener.Close()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		_ = conn.Close()
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
