package sweeper

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// The metrics, in CloudWatch embedded metric format. The SAM template's
// StuckLeasesAlarm and ReconcileAttemptsAlarm match them with no
// dimensions, so the lines carry none.
const (
	metricNamespace      = "chargeonce"
	metricStuckLeases    = "StuckLeases"
	metricOldestLeaseAge = "OldestLeaseAgeSeconds"
	// metricMaxAttempts is the most reconcile attempts any stuck key seen
	// has had: a key that keeps failing shows here, not in the DLQ.
	metricMaxAttempts = "MaxReconcileAttempts"
)

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace string `json:"Namespace"`
	// One empty dimension set: the metrics are published without dimensions.
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"` // epoch milliseconds
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// metricWriter writes one embedded-metric-format document per line, in a
// single Write, so lines from concurrent runs never interleave.
type metricWriter struct {
	w io.Writer
}

func (m metricWriter) write(at time.Time, sum Summary) error {
	// Strings and finite numbers only: Marshal cannot fail.
	line, _ := json.Marshal(map[string]any{
		"_aws": emfMetadata{
			Timestamp: at.UnixMilli(),
			CloudWatchMetrics: []emfDirective{{
				Namespace:  metricNamespace,
				Dimensions: [][]string{{}},
				Metrics: []emfMetric{
					{Name: metricStuckLeases, Unit: "Count"},
					{Name: metricOldestLeaseAge, Unit: "Seconds"},
					{Name: metricMaxAttempts, Unit: "Count"},
				},
			}},
		},
		metricStuckLeases:    sum.Found,
		metricOldestLeaseAge: sum.OldestAge.Seconds(),
		metricMaxAttempts:    sum.MaxAttempts,
	})
	if _, err := m.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("sweeper: metrics: %w", err)
	}
	return nil
}
