package charge_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

var listRefunds = testkit.ListRefunds

// refundPage is GET /charges/{id}/refunds as a client reads it.
type refundPage struct {
	Data []struct {
		ID        string
		CreatedAt string `json:"created_at"`
	}
	HasMore bool `json:"has_more"`
}

func (h *harness) refundPage(t *testing.T, tenant, id, query string) refundPage {
	t.Helper()
	resp := h.do(listRefunds(tenant, id, query))
	wantStatus(t, resp, http.StatusOK)
	var p refundPage
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Data == nil {
		t.Fatalf("list body %s: %v", resp.Body, err)
	}
	return p
}

// refunded makes n refunds of 1 of the charge id and returns their ids.
func (h *harness) refunded(t *testing.T, tenant, id string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for range n {
		resp := h.do(postRefund(tenant, newKey(), id, `{"amount":1}`))
		wantStatus(t, resp, http.StatusCreated)
		ids = append(ids, strings.TrimPrefix(resp.Headers["Location"], "/charges/"+id+"/refunds/"))
	}
	return ids
}

// TestChargeWithMoreRefundsThanAPageIsReadAPageAtATime: a charge embeds
// its 10 oldest refunds and says more follow. Every refund is reached by
// paging the list, once each, oldest first. Before, GET answered every
// refund in one body: 30,000 of them outgrew Lambda's 6 MB answer.
func TestChargeWithMoreRefundsThanAPageIsReadAPageAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	made := h.refunded(t, "acme", id, 25)

	resp := h.do(get("acme", id))
	wantStatus(t, resp, http.StatusOK)
	var c struct {
		Refunds []struct{ ID string }
		More    bool `json:"refunds_has_more"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Refunds) != 10 || !c.More {
		t.Fatalf("GET of a charge with 25 refunds embeds %d, refunds_has_more %t; want 10 and true", len(c.Refunds), c.More)
	}

	var listed []string
	var created []string
	var more []bool
	for query := "limit=10"; ; {
		p := h.refundPage(t, "acme", id, query)
		for _, r := range p.Data {
			listed, created = append(listed, r.ID), append(created, r.CreatedAt+" "+r.ID)
		}
		more = append(more, p.HasMore)
		if !p.HasMore {
			break
		}
		query = "limit=10&starting_after=" + p.Data[len(p.Data)-1].ID
	}
	if !slices.Equal(more, []bool{true, true, false}) {
		t.Errorf("pages' has_more %v, want three pages: true, true, false", more)
	}
	for i, r := range c.Refunds {
		if listed[i] != r.ID {
			t.Fatalf("the charge embeds %s at %d, the list's first page %s", r.ID, i, listed[i])
		}
	}
	if !slices.IsSorted(created) {
		t.Errorf("the list is not oldest first: %v", created)
	}
	slices.Sort(listed)
	slices.Sort(made)
	if !slices.Equal(listed, made) {
		t.Fatalf("paging listed %d refunds %v, want each of the %d made once: %v", len(listed), listed, len(made), made)
	}
	if p := h.refundPage(t, "acme", id, ""); len(p.Data) != 10 || !p.HasMore {
		t.Errorf("no limit: %d refunds, has_more %t; want 10, true", len(p.Data), p.HasMore)
	}
	if p := h.refundPage(t, "acme", id, "limit=100"); len(p.Data) != 25 || p.HasMore {
		t.Errorf("limit=100: %d refunds, has_more %t; want 25, false", len(p.Data), p.HasMore)
	}
}

// TestRefundListRefusesWhatNamesNoPlaceInIt: a limit out of range or a
// starting_after that is no refund of the charge is a 400. A malformed
// query costs no read. Another tenant's charge is not found, whatever
// the cursor, so the answer tells nothing of it.
func TestRefundListRefusesWhatNamesNoPlaceInIt(t *testing.T) {
	t.Parallel()
	var calls testkit.CallCounter
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, calls.Option())
	}})
	id := h.charged(t, "acme", 1000)
	mine := h.refunded(t, "acme", id, 2)
	other := h.charged(t, "acme", 1000)
	theirs := h.refunded(t, "acme", other, 1)[0]

	for _, query := range []string{
		"limit=0", "limit=101", "limit=-1", "limit=abc", "limit=1.5", "limit=", "limit=010", "limit=+5", "limit=5&limit=6",
		"starting_after=", "starting_after=re_x", "starting_after=" + id,
	} {
		calls.Snapshot()
		resp := h.do(listRefunds("acme", id, query))
		if resp.StatusCode != http.StatusBadRequest || problemType(t, resp) != "invalid-request" {
			t.Errorf("%s: %d %s, want 400 invalid-request", query, resp.StatusCode, resp.Body)
		}
		if got := calls.Snapshot(); len(got) != 0 {
			t.Errorf("%s: refused after DynamoDB calls %v, want none", query, got)
		}
	}
	for name, after := range map[string]string{"unknown": "re_000000000000000000000000", "another charge's": theirs} {
		resp := h.do(listRefunds("acme", id, "starting_after="+after))
		if resp.StatusCode != http.StatusBadRequest || problemType(t, resp) != "invalid-request" || !strings.Contains(resp.Body, "starting_after") {
			t.Errorf("starting_after %s refund: %d %s, want 400 invalid-request naming starting_after", name, resp.StatusCode, resp.Body)
		}
	}
	for name, req := range map[string]struct{ tenant, id, query string }{
		"another tenant's":           {"globex", id, ""},
		"another tenant's, a cursor": {"globex", id, "starting_after=" + mine[0]},
		"unknown":                    {"acme", "ch_000000000000000000000000", ""},
		"malformed":                  {"acme", "ch_x", ""},
	} {
		if resp := h.do(listRefunds(req.tenant, req.id, req.query)); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s charge: %d %s, want 404", name, resp.StatusCode, resp.Body)
		}
	}

	last := h.refundPage(t, "acme", id, "")
	if len(last.Data) != 2 || last.HasMore {
		t.Fatalf("a charge with 2 refunds lists %d, has_more %t", len(last.Data), last.HasMore)
	}
	if p := h.refundPage(t, "acme", id, "starting_after="+last.Data[1].ID); len(p.Data) != 0 || p.HasMore {
		t.Errorf("after the last refund: %d refunds, has_more %t; want none, false", len(p.Data), p.HasMore)
	}
	none := h.charged(t, "acme", 1000)
	if p := h.refundPage(t, "acme", none, ""); len(p.Data) != 0 || p.HasMore {
		t.Errorf("a charge without refunds: %d refunds, has_more %t; want none, false", len(p.Data), p.HasMore)
	}
	if resp := h.do(get("acme", none)); strings.Contains(resp.Body, "refunds") {
		t.Errorf("GET of a charge without refunds: %s, want no refunds member", resp.Body)
	}
}

// TestGetWithAnIDOfAnotherFormIsNotFound: any id that is not "ch_" and 24
// hex digits answers 404 without a call to the store. DynamoDB refuses a
// sort key over 1,024 bytes with a ValidationException, which was a 500.
func TestGetWithAnIDOfAnotherFormIsNotFound(t *testing.T) {
	t.Parallel()
	var calls testkit.CallCounter
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, calls.Option())
	}})
	for name, id := range map[string]string{
		"over 1,024 bytes":   "ch_" + strings.Repeat("a", 2000),
		"one digit short":    "ch_00000000000000000000000",
		"one digit too many": "ch_0000000000000000000000000",
		"upper-case hex":     "ch_00000000000000000000000A",
		"another prefix":     "re_000000000000000000000000",
		"not hex":            "ch_00000000000000000000000g",
	} {
		calls.Snapshot()
		wantStatus(t, h.do(get("acme", id)), 404)
		if got := calls.Snapshot(); len(got) != 0 {
			t.Errorf("%s: the GET made DynamoDB calls %v, want none", name, got)
		}
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	a := h.do(post("tenant-a", key, visa))
	b := h.do(post("tenant-b", key, visa))
	wantStatus(t, a, 201)
	wantStatus(t, b, 201) // not a replay of tenant-a's answer
	if b.Headers["Idempotent-Replayed"] != "" || a.Body == b.Body {
		t.Fatalf("tenant-b got tenant-a's answer: %v %s", b.Headers, b.Body)
	}
	if charges, _ := h.ledger(t); charges != 2 {
		t.Fatalf("provider charges %d, want 2", charges)
	}
	// A mismatch in one tenant is not seen from the other.
	if r := h.do(post("tenant-b", key, strings.Replace(visa, "1500", "1", 1))); r.StatusCode != 422 {
		t.Fatalf("tenant-b mismatch: %d", r.StatusCode)
	}
	var ca struct{ ID string }
	_ = json.Unmarshal([]byte(a.Body), &ca)
	wantStatus(t, h.do(get("tenant-a", ca.ID)), 200)
	nf := h.do(get("tenant-b", ca.ID))
	wantStatus(t, nf, 404)
	wantStatus(t, h.do(get("tenant-a", "ch_000000000000000000000000")), 404)
}
