package main

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"text/template"
)

// capacityDoc renders the document from the three files it is made from.
func capacityDoc(measuredPath, inputsPath, templatePath string) (string, error) {
	var m measurement
	if err := readJSON(measuredPath, &m); err != nil {
		return "", err
	}
	in, err := readInputs(inputsPath)
	if err != nil {
		return "", err
	}
	src, err := os.ReadFile(templatePath)
	if err != nil {
		return "", err
	}
	d, err := readDeployment(src)
	if err != nil {
		return "", fmt.Errorf("%s: %w", templatePath, err)
	}
	c, err := model(m, in, d)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := capacityTemplate.Execute(&b, c); err != nil {
		return "", err
	}
	return b.String(), nil
}

//go:embed capacity.md.tmpl
var capacityText string

var capacityTemplate = template.Must(template.New("capacity").Funcs(template.FuncMap{
	"n":    func(v float64) string { return grouped(v, 0) },
	"n1":   func(v float64) string { return grouped(v, 1) },
	"n2":   func(v float64) string { return grouped(v, 2) },
	"usd":  func(v float64) string { return "$" + grouped(v, 0) },
	"pct":  func(v float64) string { return strconv.FormatFloat(v*100, 'f', -1, 64) + "%" },
	"pct1": func(v float64) string { return strconv.FormatFloat(v*100, 'f', 0, 64) + "%" },
	"add":  func(a, b int) int { return a + b },
	"sum":  func(a, b float64) float64 { return a + b },
	"neg":  func(a float64) float64 { return -a },
	"join": strings.Join,
	"bytes": func(n int) string {
		if n == 0 {
			return "–"
		}
		return strconv.Itoa(n) + " B"
	},
	"i": func(v int) string { return grouped(float64(v), 0) },
	"and": func(items []string) string {
		if len(items) < 2 {
			return strings.Join(items, "")
		}
		return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
	},
	"price": func(f figure) string {
		if len(f.Tiers) == 0 {
			if f.Value >= 1000 {
				return grouped(f.Value, 0)
			}
			return strconv.FormatFloat(f.Value, 'f', -1, 64)
		}
		var parts []string
		from := 0.0
		for _, t := range f.Tiers {
			p := strconv.FormatFloat(t.Price, 'f', -1, 64)
			if t.UpTo == 0 {
				parts = append(parts, fmt.Sprintf("%s beyond %s", p, grouped(from, 0)))
			} else {
				parts = append(parts, fmt.Sprintf("%s to %s", p, grouped(t.UpTo, 0)))
			}
			from = t.UpTo
		}
		return strings.Join(parts, ", ")
	},
}).Parse(capacityText))

// grouped formats v with the given decimals and thousands separators.
func grouped(v float64, decimals int) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', decimals, 64)
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if v < 0 && strings.Trim(s, "0.") != "" {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}
