package main

import (
	"slices"
	"testing"
)

func TestGrowthFlags(t *testing.T) {
	env := func(string) string { return "" }
	c, err := parseGrowthFlags(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	// Its own defaults, not a load run's.
	if !slices.Equal(c.sizes, []int{0, 10000, 50000}) || c.Ops != 1800 || c.Rate != 60 || c.RetryOnce != 0.2 || c.out != "out/growth" {
		t.Fatalf("defaults: sizes %v, n %d, rate %v, retry-once %v, out %q", c.sizes, c.Ops, c.Rate, c.RetryOnce, c.out)
	}
	if c.reference.target != "" {
		t.Fatalf("a reference stack by default: %q", c.reference.target)
	}

	c, err = parseGrowthFlags([]string{"-sizes", "0, 500", "-n", "10", "-reference-target", "http://127.0.0.1:3003",
		"-reference-provider", "http://127.0.0.1:4013", "-reference-dynamodb", "http://127.0.0.1:4569"}, env)
	if err != nil {
		t.Fatal(err)
	}
	// The reference runs the same load on its own stack.
	ref := c.reference
	if !slices.Equal(c.sizes, []int{0, 500}) || ref.Ops != 10 || ref.Rate != 60 || ref.target != "http://127.0.0.1:3003" ||
		ref.provider != "http://127.0.0.1:4013" || ref.dynamoDB != "http://127.0.0.1:4569" || c.target != "http://127.0.0.1:3000" {
		t.Fatalf("sizes %v, reference %+v, target %q", c.sizes, ref, c.target)
	}

	for _, args := range [][]string{
		{"-sizes", "10000,0"},
		{"-sizes", "0,0"},
		{"-sizes", "ten"},
		{"-fillers", "0"},
		{"-reconciles", "0"},
		{"-reference-target", "http://127.0.0.1:3003"},
		{"-reference-target", "http://example.com", "-reference-provider", "http://127.0.0.1:1", "-reference-dynamodb", "http://127.0.0.1:2"},
	} {
		if _, err := parseGrowthFlags(args, env); err == nil {
			t.Errorf("%q passed", args)
		}
	}
}
