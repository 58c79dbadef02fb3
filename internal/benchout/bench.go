package benchout

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is one benchmark's values by unit, one per run (-count).
type Result struct {
	Name   string
	Values map[string][]float64
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// ReadBench parses the go test -bench output in the file at path.
func ReadBench(path string) ([]Result, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	results, conf, err := ParseBench(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return results, conf, nil
}

// ParseBench reads go test -bench output: result lines, and the
// configuration lines ("cpu: …", "loadavg: …") before them. Results keep
// the order of first appearance.
func ParseBench(r io.Reader) ([]Result, map[string]string, error) {
	var results []Result
	conf := map[string]string{}
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.ContainsAny(k, " \t") && k == strings.ToLower(k) {
			conf[k] = strings.TrimSpace(v)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, nil, fmt.Errorf("malformed result %q", line)
		}
		i, ok := index[m[1]]
		if !ok {
			i = len(results)
			index[m[1]] = i
			results = append(results, Result{Name: m[1], Values: map[string][]float64{}})
		}
		for j := 0; j < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("malformed value in %q", line)
			}
			results[i].Values[f[j+1]] = append(results[i].Values[f[j+1]], v)
		}
	}
	if len(results) == 0 {
		return nil, nil, errors.New("no benchmark results")
	}
	return results, conf, sc.Err()
}

// Median is the median of r's values in unit, if it has any.
func (r Result) Median(unit string) (float64, bool) {
	vs := r.Values[unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// NsPerOp is the median ns/op of the named benchmark.
func NsPerOp(results []Result, name string) (float64, error) {
	if v, ok := Value(results, name, "ns/op"); ok {
		return v, nil
	}
	return 0, fmt.Errorf("no ns/op for %s", name)
}

// Value is the median of the named benchmark's values in unit.
func Value(results []Result, name, unit string) (float64, bool) {
	for _, r := range results {
		if r.Name == name {
			if v, ok := r.Median(unit); ok {
				return v, true
			}
		}
	}
	return 0, false
}
