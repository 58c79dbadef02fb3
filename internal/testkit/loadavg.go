package testkit

import (
	"os"
	"strings"
)

// LoadAvg is /proc/loadavg's first three fields, or "" where there is
// none: what benchmark reports note beside their figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
