package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// The proxies' names: what the stack reaches through each.
const (
	targetDynamoDB = "dynamodb"
	targetSQS      = "sqs"
	targetProvider = "provider"
)

// The kinds of fault.
const (
	// faultCut closes the proxy: open connections drop, new ones are
	// refused.
	faultCut = "cut"
	// faultDelay holds every byte one way for up to 3 s.
	faultDelay = "delay"
	// faultReset resets a share of the connections once data flows.
	faultReset = "reset"
	// faultTruncate closes a share of the connections after a few bytes
	// of the answer.
	faultTruncate = "truncate"
)

var faultKinds = []string{faultCut, faultDelay, faultReset, faultTruncate}

// proxies are the Toxiproxy proxies between the stack and what it calls,
// run in this process.
type proxies struct {
	mu     sync.Mutex // one change of a proxy at a time
	byName map[string]*toxiproxy.Proxy
}

// startProxies starts a proxy on a free loopback port in front of each
// upstream, by name. Every upstream must be on loopback.
func startProxies(upstreams map[string]string) (*proxies, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := &proxies{byName: map[string]*toxiproxy.Proxy{}}
	for name, upstream := range upstreams {
		if err := loopback(upstream); err != nil {
			p.stop()
			return nil, fmt.Errorf("proxy %s: %w", name, err)
		}
		px := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
		if err := px.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("proxy %s: %w", name, err)
		}
		p.byName[name] = px
	}
	return p, nil
}

// loopback refuses an address off the loopback interface: the faults
// are for this machine's connections alone.
func loopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s is not a loopback address", hostport)
	}
	return nil
}

// hostPort is the host:port of an http URL on loopback.
func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return "", fmt.Errorf("%q: want http://host:port", raw)
	}
	if err := loopback(u.Host); err != nil {
		return "", err
	}
	return u.Host, nil
}

// url is where the stack reaches name.
func (p *proxies) url(name string) string { return "http://" + p.byName[name].Listen }

func (p *proxies) names() []string {
	names := make([]string, 0, len(p.byName))
	for name := range p.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// heal takes every fault away: toxics removed, closed proxies open.
func (p *proxies) heal(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, px := range p.byName {
		px.Toxics.ResetToxics(ctx)
		if !px.Enabled {
			if err := px.Start(); err != nil {
				return fmt.Errorf("reopen proxy %s: %w", px.Name, err)
			}
		}
	}
	return nil
}

func (p *proxies) stop() {
	for _, px := range p.byName {
		px.Stop()
	}
}

// fault is one fault injected.
type fault struct {
	Target string        `json:"target"`
	Kind   string        `json:"kind"`
	At     time.Time     `json:"at"`
	Length time.Duration `json:"length"`
	// Toxic is the toxic's definition, empty for a cut.
	Toxic string `json:"toxic,omitempty"`
}

// toxicName names the one toxic a proxy has at a time.
const toxicName = "chaos"

// toxic is the Toxiproxy definition of a fault of kind, drawn from rng.
func toxic(kind string, rng *rand.Rand) string {
	stream := []string{"upstream", "downstream"}[rng.IntN(2)]
	toxicity := 0.2 + 0.8*rng.Float64()
	switch kind {
	case faultDelay:
		ms := 200 + rng.IntN(2800)
		return fmt.Sprintf(`{"name":%q,"type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`, toxicName, stream, ms, ms/5)
	case faultReset:
		return fmt.Sprintf(`{"name":%q,"type":"reset_peer","stream":%q,"toxicity":%.2f,"attributes":{"timeout":%d}}`, toxicName, stream, toxicity, rng.IntN(200))
	case faultTruncate:
		return fmt.Sprintf(`{"name":%q,"type":"limit_data","stream":"downstream","toxicity":%.2f,"attributes":{"bytes":%d}}`, toxicName, toxicity, 16+rng.IntN(1024))
	}
	return ""
}

// inject faults target until ctx ends. It pauses 2 to 10 s, then puts a
// fault of a kind drawn from rng for 2 to 8 s, again and again. Each fault
// is taken away before the next, and when ctx ends. It returns the faults
// it injected.
func (p *proxies) inject(ctx context.Context, target string, rng *rand.Rand) ([]fault, error) {
	var faults []fault
	px := p.byName[target]
	for {
		if !sleep(ctx, between(rng, 2*time.Second, 10*time.Second)) {
			return faults, nil
		}
		f := fault{Target: target, Kind: faultKinds[rng.IntN(len(faultKinds))], At: time.Now(), Length: between(rng, 2*time.Second, 8*time.Second)}
		f.Toxic = toxic(f.Kind, rng)
		if err := p.apply(px, f); err != nil {
			return faults, err
		}
		faults = append(faults, f)
		sleep(ctx, f.Length)
		if err := p.lift(px, f); err != nil {
			return faults, err
		}
	}
}

// outageToxics fail half of a proxy's connections: reset as the request
// arrives, or the answer cut short.
var outageToxics = []string{
	`{"name":"outage-reset","type":"reset_peer","stream":"upstream","toxicity":0.3,"attributes":{"timeout":0}}`,
	`{"name":"outage-truncate","type":"limit_data","stream":"downstream","toxicity":0.3,"attributes":{"bytes":64}}`,
}

// outage fails half of target's connections until heal.
func (p *proxies) outage(target string) (fault, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := fault{Target: target, Kind: "outage", At: time.Now(), Toxic: strings.Join(outageToxics, " ")}
	for _, t := range outageToxics {
		if _, err := p.byName[target].Toxics.AddToxicJson(strings.NewReader(t)); err != nil {
			return f, fmt.Errorf("proxy %s: %s: %w", target, t, err)
		}
	}
	return f, nil
}

func (p *proxies) apply(px *toxiproxy.Proxy, f fault) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.Kind == faultCut {
		px.Stop()
		return nil
	}
	if _, err := px.Toxics.AddToxicJson(strings.NewReader(f.Toxic)); err != nil {
		return fmt.Errorf("proxy %s: %s: %w", px.Name, f.Toxic, err)
	}
	return nil
}

func (p *proxies) lift(px *toxiproxy.Proxy, f fault) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.Kind == faultCut {
		if err := px.Start(); err != nil {
			return fmt.Errorf("reopen proxy %s: %w", px.Name, err)
		}
		return nil
	}
	if err := px.Toxics.RemoveToxic(context.Background(), toxicName); err != nil {
		return fmt.Errorf("proxy %s: remove the toxic: %w", px.Name, err)
	}
	return nil
}

// between is a duration drawn from [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleep waits d, or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
