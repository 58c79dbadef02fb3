package bench

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// phaseProxy stands between every contender of TestSideBySide and the
// emulator: it counts each DynamoDB call by operation and adds up the time
// from the call's arrival to the end of its answer, by phase. The same
// count and clock serve the Go, Python and TypeScript handlers, whatever
// their SDK. A contender in another process names the phase it starts by
// a POST to /phase?name=NAME.
type phaseProxy struct {
	URL string

	mu     sync.Mutex
	phase  string
	phases map[string]*phaseUse
}

// phaseUse is what one phase cost the emulator.
type phaseUse struct {
	Calls  map[string]int // by operation: "PutItem"
	Waited time.Duration  // the calls' time at the emulator, added up
}

// startPhaseProxy proxies to the emulator at target until the test ends.
func startPhaseProxy(t *testing.T, target string) *phaseProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	p := &phaseProxy{phases: map[string]*phaseUse{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/phase" {
			p.Start(r.URL.Query().Get("name"))
			return
		}
		start := time.Now()
		rp.ServeHTTP(w, r)
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		p.add(op, time.Since(start))
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Start makes name the phase later calls count to.
func (p *phaseProxy) Start(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = name
}

func (p *phaseProxy) add(op string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.phases[p.phase]
	if u == nil {
		u = &phaseUse{Calls: map[string]int{}}
		p.phases[p.phase] = u
	}
	u.Calls[op]++
	u.Waited += d
}

// Use is what the phase name cost (zero if it made no call).
func (p *phaseProxy) Use(name string) phaseUse {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.phases[name]; u != nil {
		return *u
	}
	return phaseUse{}
}
