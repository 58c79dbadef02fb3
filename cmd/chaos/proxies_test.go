package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// echo serves, on a loopback port, a server that writes back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through addr and reads it back.
func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 5))
	return err
}

// TestEveryFaultIsAppliedAndLifted: each kind of fault goes on a proxy and
// comes off, and after heal the proxy carries bytes again.
func TestEveryFaultIsAppliedAndLifted(t *testing.T) {
	t.Parallel()
	px, err := startProxies(map[string]string{targetDynamoDB: echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer px.stop()
	addr := px.byName[targetDynamoDB].Listen
	if err := roundTrip(addr); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range faultKinds {
		f := fault{Target: targetDynamoDB, Kind: kind, Toxic: toxic(kind, rng)}
		if err := px.apply(px.byName[targetDynamoDB], f); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if kind == faultCut {
			if err := roundTrip(addr); err == nil {
				t.Fatal("a cut proxy carried bytes")
			}
		}
		if err := px.lift(px.byName[targetDynamoDB], f); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	if _, err := px.outage(targetDynamoDB); err != nil {
		t.Fatal(err)
	}
	px.byName[targetDynamoDB].Stop()
	if err := px.heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(addr); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestProxiesRefuseAnUpstreamOffLoopback(t *testing.T) {
	t.Parallel()
	if _, err := startProxies(map[string]string{targetProvider: "192.0.2.1:443"}); err == nil {
		t.Fatal("a proxy to 192.0.2.1 started")
	}
	if _, err := hostPort("http://dynamodb.us-east-1.amazonaws.com"); err == nil {
		t.Fatal("an AWS endpoint was taken for the emulator")
	}
}
