package regions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// world is the Regions of one test, the provider they share, the tables
// that stand in for multi-Region strong consistency, and the replicator.
type world struct {
	clock        *testkit.Clock
	sim          *providersim.Simulator
	simURL       string
	raw          *dynamodb.Client // the emulator itself: the replicator's and the checks'
	routesTable  string
	ledgerTable  string
	routes       *regions.Routes // the operator's view of the routes
	regions      []*region
	byName       map[string]*region
	design       design
	replications atomic.Int64 // items copied between Regions
	conflicts    atomic.Int64 // writes lost to last writer wins, whichever copy arrived first

	mu  sync.Mutex
	seq uint64 // orders every write, in every Region: last writer wins by it
	// claims are the CreatedAt of every claim any Region wrote, by the
	// record's key: a command's references are derived from them.
	claims map[string]map[int64]bool
}

// region is one Region: its tables on the emulator, its link to them,
// and what the replicator knows of its items.
type region struct {
	name string
	w    *world
	d    *testkit.Deployment
	link *link
	db   *dynamodb.Client // through link
	// sqs reaches the Region's reconcile queue, through link. It sends
	// every message at once: the clock, not SQS's, says when a lease ends.
	sqs *sqs.Client
	// roles names this Region's tables: "idem" and "charges".
	roles map[string]string

	mu sync.Mutex
	// ver is the write each item here holds; pending, by the Region it
	// is bound for, the items written here and not yet copied there.
	ver     map[itemRef]uint64
	pending map[string]map[itemRef]bool
}

// itemRef names an item in any Region: its table's role and its key.
type itemRef struct {
	role string
	key  string // the key attributes, all strings, as sorted name=value pairs
}

// newWorld deploys n Regions on the emulator, sharing one provider
// simulator and the two tables every Region reads strongly consistently.
func newWorld(t *testing.T, n int, d design) *world {
	t.Helper()
	// Ahead of the emulator's clock, which a move never starts before
	// (regions.Routes.Move): the Regions' frozen clock would fall behind.
	clock := testkit.NewClock(time.Now().Add(time.Hour))
	w := &world{clock: clock, design: d, byName: map[string]*region{}, claims: map[string]map[int64]bool{},
		raw: testkit.Clients(t, func(o *dynamodb.Options) { o.Logger = logging.Nop{} }).DynamoDB}
	w.sim = providersim.New(providersim.WithClock(clock.Now))
	srv := httptest.NewServer(w.sim)
	t.Cleanup(srv.Close)
	w.simURL = srv.URL
	w.routesTable, w.ledgerTable = testkit.TempTable(t, regions.TableInput("routes")), testkit.TempTable(t, regions.TableInput("ledger"))
	routes, err := regions.NewRoutes(w.raw, w.routesTable)
	if err != nil {
		t.Fatal(err)
	}
	w.routes = routes
	for i := range n {
		r := &region{name: "r" + strconv.Itoa(i+1), w: w, d: testkit.Deploy(t), ver: map[itemRef]uint64{}, pending: map[string]map[itemRef]bool{}}
		r.roles = map[string]string{r.d.IdempotencyTable: "idem", r.d.ChargesTable: "charges"}
		r.link = &link{r: r}
		r.link.budget.Store(-1)
		r.db = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: r.link}
			o.Logger = logging.Nop{} // a Region that dies mid-answer leaves the SDK a closed body to complain of
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts, so.MaxBackoff, so.RateLimiter = 2, 10*time.Millisecond, ratelimit.None
			})
		}).DynamoDB
		r.sqs = sqs.New(testkit.Clients(t).SQS.Options(), func(o *sqs.Options) {
			o.HTTPClient = &http.Client{Transport: r.link}
			o.Logger = logging.Nop{}
			o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error { return s.Initialize.Add(noDelay, middleware.Before) })
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts, so.MaxBackoff, so.RateLimiter = 2, 10*time.Millisecond, ratelimit.None
			})
		})
		w.regions = append(w.regions, r)
		w.byName[r.name] = r
	}
	for _, r := range w.regions {
		for _, o := range w.others(r) {
			r.pending[o.name] = map[itemRef]bool{}
		}
	}
	return w
}

// noDelay sends a message with no delay. A delay waits out a lease by
// SQS's clock, which the Regions' frozen clock does not follow. So the
// reconcile function may meet a key early, as it may when redelivered.
var noDelay = middleware.InitializeMiddlewareFunc("noDelay", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	switch p := in.Parameters.(type) {
	case *sqs.SendMessageInput:
		p.DelaySeconds = 0
	case *sqs.SendMessageBatchInput:
		for i := range p.Entries {
			p.Entries[i].DelaySeconds = 0
		}
	}
	return next.HandleInitialize(ctx, in)
})

// others are the Regions other than r.
func (w *world) others(r *region) []*region {
	return slices.DeleteFunc(slices.Clone(w.regions), func(o *region) bool { return o == r })
}

// link is a Region's connection to the emulator. A Region that is down
// answers nothing. A Region told to die after n more calls dies at the
// n+1-th, which is applied or not as drawn, and answered never. Every
// write applied is noted for the replicator.
type link struct {
	r      *region
	down   atomic.Bool
	budget atomic.Int64 // calls left before the Region dies; -1: no end
	// applyLast: the call that kills the Region was applied before its
	// answer was lost.
	applyLast atomic.Bool

	mu sync.Mutex
	// calls counts the calls made, by operation and the role of the
	// table ("strong" for the tables of every Region).
	calls map[string]int
}

// strongDelay is added to every call to the tables of every Region: the
// round trip a table in multi-Region strong consistency makes to another
// Region. Zero but in the cost test.
var strongDelay atomic.Int64

// errRegionDown is a Region's failure as its callers see it: no answer.
var errRegionDown = errors.New("region unreachable")

func (l *link) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.down.Load() {
		return nil, errRegionDown
	}
	dying := l.budget.Load() == 0
	if l.budget.Load() > 0 {
		l.budget.Add(-1)
	}
	if dying {
		l.down.Store(true)
		l.budget.Store(-1)
		if !l.applyLast.Load() {
			return nil, errRegionDown
		}
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	if l.count(req.Header.Get("X-Amz-Target"), body) == "strong" {
		time.Sleep(time.Duration(strongDelay.Load()))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		l.r.noteWrites(req.Header.Get("X-Amz-Target"), body)
	}
	if dying {
		if err == nil {
			_ = resp.Body.Close()
		}
		return nil, errRegionDown
	}
	return resp, err
}

// count counts a call, and returns the role of its table.
func (l *link) count(target string, body []byte) string {
	var req struct{ TableName string }
	_ = json.Unmarshal(body, &req)
	role := "own"
	if req.TableName == l.r.w.routesTable || req.TableName == l.r.w.ledgerTable {
		role = "strong"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[target[strings.LastIndex(target, ".")+1:]+" "+role]++
	return role
}

// writeRequest is the part of a DynamoDB write request that names items.
type writeRequest struct {
	TableName     string                                `json:"TableName"`
	Item          map[string]map[string]json.RawMessage `json:"Item"`
	Key           map[string]map[string]json.RawMessage `json:"Key"`
	TransactItems []struct {
		Put, Update, Delete *writeRequest
	} `json:"TransactItems"`
}

// noteWrites notes the items an applied write request changed in r's
// tables: a new version of each, bound for every other Region.
func (r *region) noteWrites(target string, body []byte) {
	op := target[strings.LastIndex(target, ".")+1:]
	var req writeRequest
	if json.Unmarshal(body, &req) != nil {
		return
	}
	var writes []writeRequest
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		writes = append(writes, req)
	case "TransactWriteItems":
		for _, ti := range req.TransactItems {
			for _, wr := range []*writeRequest{ti.Put, ti.Update, ti.Delete} {
				if wr != nil {
					writes = append(writes, *wr)
				}
			}
		}
	}
	for _, wr := range writes {
		role, ok := r.roles[wr.TableName]
		if !ok {
			continue // a table of every Region: the routes, the ledger
		}
		attrs := wr.Key
		if attrs == nil {
			attrs = wr.Item
		}
		ref := itemRef{role: role, key: keyOf(role, attrs)}
		r.w.mu.Lock()
		r.w.seq++
		seq := r.w.seq
		if role == "idem" && wr.Item != nil {
			r.w.noteClaim(attrs)
		}
		r.w.mu.Unlock()
		r.mu.Lock()
		r.ver[ref] = seq
		for _, p := range r.pending {
			p[ref] = true
		}
		r.mu.Unlock()
	}
}

// noteClaim notes the CreatedAt of a record item put: every reference a
// Region derives for the command comes from one. Called with w.mu held.
func (w *world) noteClaim(item map[string]map[string]json.RawMessage) {
	var pk, ct string
	_ = json.Unmarshal(item[dynamostore.AttrPK]["S"], &pk)
	_ = json.Unmarshal(item["ct"]["N"], &ct)
	ms, err := strconv.ParseInt(ct, 10, 64)
	if pk == "" || err != nil {
		return
	}
	if w.claims[pk] == nil {
		w.claims[pk] = map[int64]bool{}
	}
	w.claims[pk][ms] = true
}

// keyAttrs are each role's key attributes.
var keyAttrs = map[string][]string{"idem": {dynamostore.AttrPK}, "charges": {charge.AttrTenant, charge.AttrID}}

func keyOf(role string, attrs map[string]map[string]json.RawMessage) string {
	var parts []string
	for _, name := range keyAttrs[role] {
		var v string
		_ = json.Unmarshal(attrs[name]["S"], &v)
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, "\x00")
}

// key is ref's key as DynamoDB takes it.
func (ref itemRef) dynamoKey() map[string]types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for part := range strings.SplitSeq(ref.key, "\x00") {
		name, v, _ := strings.Cut(part, "=")
		out[name] = &types.AttributeValueMemberS{Value: v}
	}
	return out
}

// table is the name of r's table of role.
func (r *region) table(role string) string {
	for name, ro := range r.roles {
		if ro == role {
			return name
		}
	}
	return ""
}

// replicate copies to every live Region the items r wrote that it has
// not received, those pick keeps of them, as DynamoDB replicates a global
// table's writes: item by item, in no order, the later write winning. A
// Region that is down neither sends nor receives: its writes wait.
func (w *world) replicate(ctx context.Context, r *region, pick func([]itemRef) []itemRef) error {
	if r.link.down.Load() {
		return nil
	}
	for _, o := range w.others(r) {
		if o.link.down.Load() {
			continue
		}
		r.mu.Lock()
		refs := slices.SortedFunc(maps.Keys(r.pending[o.name]), func(a, b itemRef) int { return strings.Compare(a.role+a.key, b.role+b.key) })
		r.mu.Unlock()
		for _, ref := range pick(refs) {
			if err := w.copyItem(ctx, r, o, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyItem copies ref's item from r to o, unless o holds a later write.
// Either way one write is lost: r's, or o's own not yet sent to r.
func (w *world) copyItem(ctx context.Context, r, o *region, ref itemRef) error {
	out, err := w.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table(ref.role)), Key: ref.dynamoKey(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	r.mu.Lock()
	v := r.ver[ref]
	delete(r.pending[o.name], ref)
	r.mu.Unlock()
	o.mu.Lock()
	later := o.ver[ref] > v
	overwritten := !later && o.pending[r.name][ref]
	if !later {
		o.ver[ref] = v
		delete(o.pending[r.name], ref) // o's own write, if any, is gone
	}
	o.mu.Unlock()
	if later || overwritten {
		w.conflicts.Add(1)
	}
	if later {
		return nil
	}
	w.replications.Add(1)
	if len(out.Item) == 0 {
		_, err = w.raw.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(o.table(ref.role)), Key: ref.dynamoKey()})
		return err
	}
	_, err = w.raw.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(o.table(ref.role)), Item: out.Item})
	return err
}

// failOver moves home's tenants to the Region to, and waits out the
// fence: to serves them from then on.
func (w *world) failOver(t fataler, home string, to *region) {
	ctx := context.Background()
	route, err := w.routes.Route(ctx, home)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.routes.Move(ctx, route, to.name, w.clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(regions.FenceDelay)
}

// drainAll replicates every Region's writes to every other until none
// is left: what replication does once every Region is up.
func (w *world) drainAll(ctx context.Context) error {
	all := func(refs []itemRef) []itemRef { return refs }
	for range 3 {
		for _, r := range w.regions {
			if err := w.replicate(ctx, r, all); err != nil {
				return err
			}
		}
	}
	if n := w.unreplicated(); n > 0 {
		return errors.New("writes left unreplicated with every Region up: " + strconv.Itoa(n))
	}
	return nil
}

// unreplicated counts the writes not yet copied everywhere.
func (w *world) unreplicated() int {
	n := 0
	for _, r := range w.regions {
		r.mu.Lock()
		for _, p := range r.pending {
			n += len(p)
		}
		r.mu.Unlock()
	}
	return n
}

// TestTheReplicatorCountsEveryWriteLastWriterWinsDiscards: a newer copy
// that arrives first overwrites the older write before it left. That
// write is lost as surely as one refused, and counted.
func TestTheReplicatorCountsEveryWriteLastWriterWinsDiscards(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, 2, chosen)
	r1, r2 := w.regions[0], w.regions[1]
	put := func(r *region, v string) {
		t.Helper()
		if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.d.ChargesTable), Item: map[string]types.AttributeValue{
			charge.AttrTenant: &types.AttributeValueMemberS{Value: "t"}, charge.AttrID: &types.AttributeValueMemberS{Value: "ch_1"},
			"status": &types.AttributeValueMemberS{Value: v},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	before := w.conflicts.Load()
	put(r2, "succeeded")                    // r2's write, not replicated yet
	put(r1, "requires_capture")             // r1's, later
	if err := w.drainAll(ctx); err != nil { // r1's replicates first
		t.Fatal(err)
	}
	if lost := w.conflicts.Load() - before; lost != 1 {
		t.Errorf("r2's write was discarded by r1's later one; the replicator counted %d lost, want 1", lost)
	}
}
