package main

import (
	"cmp"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"slices"
	"strconv"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// series is one latency distribution to plot, sorted ascending.
type series struct {
	name   string
	color  color.RGBA
	sorted []time.Duration
}

// The chart's geometry, in pixels.
const (
	plotW, plotH         = 860, 500
	marginL, marginR     = 70, 20
	marginT, marginB     = 40, 56
	maxNines             = 3.0 // the x axis ends at the 99.9th percentile
	lineHalfWidth        = 1
	legendRow, legendBox = 16, 10
)

func rgb(r, g, b uint8) color.RGBA { return color.RGBA{r, g, b, 255} }

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{220, 220, 220, 255}
	white = color.RGBA{255, 255, 255, 255}
)

// plotPercentiles draws latency against percentile, with the percentile
// axis stretched towards the tail (0, 50, 90, 99, 99.9 are equally
// spaced after 50), one line per series.
func plotPercentiles(title string, ss []series) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	x0, x1, y0, y1 := marginL, plotW-marginR, plotH-marginB, marginT // y grows downwards

	top := time.Duration(0)
	for _, s := range ss {
		if len(s.sorted) > 0 {
			top = max(top, percentile(s.sorted, 100*(1-math.Pow(10, -maxNines))))
		}
	}
	step, ymax := niceScale(float64(top) / float64(time.Millisecond))
	yOf := func(msec float64) int { return y0 - int(math.Round(msec/ymax*float64(y0-y1))) }
	xOf := func(nines float64) int { return x0 + int(math.Round(nines/maxNines*float64(x1-x0))) }

	for v := 0.0; v <= ymax+step/2; v += step {
		y := yOf(v)
		hline(img, x0, x1, y, grey)
		hline(img, x0-5, x0, y, black)
		label(img, strconv.FormatFloat(v, 'f', -1, 64), x0-8, y+4, alignRight)
	}
	for _, t := range []struct {
		p    float64
		text string
	}{{0, "0"}, {0.5, "50"}, {0.9, "90"}, {0.99, "99"}, {0.999, "99.9"}} {
		x := xOf(-math.Log10(1 - t.p))
		vline(img, x, y1, y0, grey)
		vline(img, x, y0, y0+5, black)
		label(img, t.text, x, y0+18, alignCenter)
	}
	hline(img, x0, x1, y0, black)
	vline(img, x0, y1, y0, black)
	label(img, "percentile", (x0+x1)/2, plotH-12, alignCenter)
	label(img, "ms", x0-8, y1-10, alignRight)
	label(img, title, (x0+x1)/2, 22, alignCenter)

	for i, s := range ss {
		if len(s.sorted) == 0 {
			continue
		}
		prevX, prevY := -1, 0
		for x := x0; x <= x1; x++ {
			nines := float64(x-x0) / float64(x1-x0) * maxNines
			v := percentile(s.sorted, 100*(1-math.Pow(10, -nines)))
			y := max(y1, yOf(float64(v)/float64(time.Millisecond)))
			if prevX >= 0 {
				segment(img, prevX, prevY, x, y, s.color)
			}
			prevX, prevY = x, y
		}
		ly := y1 + 10 + i*legendRow
		fillRect(img, image.Rect(x0+14, ly-legendBox+2, x0+14+legendBox, ly+2), s.color)
		label(img, fmt.Sprintf("%s (n=%d)", s.name, len(s.sorted)), x0+30, ly+2, alignLeft)
	}
	return img
}

// niceScale returns a tick step of 1, 2 or 5 times a power of ten giving
// at most eight ticks up to at least top, and the axis maximum.
func niceScale(top float64) (step, ymax float64) {
	if !(top > 0) {
		return 1, 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(top/8)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * pow
		if top/step <= 8 {
			break
		}
	}
	return step, math.Ceil(top/step) * step
}

type align int

const (
	alignLeft align = iota
	alignCenter
	alignRight
)

// label writes text with its baseline at y, placed at x by a.
func label(img *image.RGBA, text string, x, y int, a align) {
	d := &font.Drawer{Dst: img, Src: &image.Uniform{black}, Face: basicfont.Face7x13}
	w := d.MeasureString(text).Round()
	switch a {
	case alignCenter:
		x -= w / 2
	case alignRight:
		x -= w
	}
	d.Dot = fixed.P(x, y)
	d.DrawString(text)
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

func hline(img *image.RGBA, xa, xb, y int, c color.RGBA) {
	fillRect(img, image.Rect(xa, y, xb+1, y+1), c)
}

func vline(img *image.RGBA, x, ya, yb int, c color.RGBA) {
	fillRect(img, image.Rect(x, ya, x+1, yb+1), c)
}

// segment draws a thick line from (xa, ya) to (xb, yb) (Bresenham).
func segment(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA) {
	dx, dy := abs(xb-xa), -abs(yb-ya)
	sx, sy := sign(xb-xa), sign(yb-ya)
	e := dx + dy
	for {
		fillRect(img, image.Rect(xa-lineHalfWidth, ya-lineHalfWidth, xa+lineHalfWidth+1, ya+lineHalfWidth+1), c)
		if xa == xb && ya == yb {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			xa += sx
		}
		if e2 <= dx {
			e += dx
			ya += sy
		}
	}
}

func abs(n int) int { return max(n, -n) }

func sign(n int) int {
	switch {
	case n > 0:
		return 1
	case n < 0:
		return -1
	}
	return 0
}

// plotRates draws each step of a sustain run as answered against offered
// rate, passing steps filled and failing ones hollow, beside the line
// answered = offered and the ceiling.
func plotRates(s Sustain) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	x0, x1, y0, y1 := marginL, plotW-marginR, plotH-marginB, marginT

	top := max(s.Ceiling, s.MixCeiling)
	for _, st := range s.Steps {
		top = max(top, st.Offered, st.Answered)
	}
	step, axis := niceScale(1.05 * top)
	xOf := func(v float64) int { return x0 + int(math.Round(v/axis*float64(x1-x0))) }
	yOf := func(v float64) int { return y0 - int(math.Round(v/axis*float64(y0-y1))) }
	for v := 0.0; v <= axis+step/2; v += step {
		text := strconv.FormatFloat(v, 'f', -1, 64)
		hline(img, x0, x1, yOf(v), grey)
		hline(img, x0-5, x0, yOf(v), black)
		label(img, text, x0-8, yOf(v)+4, alignRight)
		vline(img, xOf(v), y1, y0, grey)
		vline(img, xOf(v), y0, y0+5, black)
		label(img, text, xOf(v), y0+18, alignCenter)
	}
	hline(img, x0, x1, y0, black)
	vline(img, x0, y1, y0, black)
	label(img, "offered, req/s", (x0+x1)/2, plotH-12, alignCenter)
	label(img, "answered", x0-8, y1-10, alignRight)
	label(img, fmt.Sprintf("The local stack: answered against offered rate, %.0f s a step; sustained %.0f req/s, ceilings %.0f and %.0f",
		s.StepSeconds, s.Sustained, s.Ceiling, s.MixCeiling), (x0+x1)/2, 22, alignCenter)

	ideal, ceiling, mix, ok, failed := rgb(150, 150, 150), rgb(214, 39, 40), rgb(148, 103, 189), rgb(31, 119, 180), rgb(255, 127, 14)
	segment(img, xOf(0), yOf(0), xOf(axis), yOf(axis), ideal)
	for y := y1; y < y0; y += 8 { // dashed
		vline(img, xOf(s.Ceiling), y, min(y+4, y0), ceiling)
		vline(img, xOf(s.MixCeiling), y, min(y+4, y0), mix)
	}
	steps := slices.Clone(s.Steps)
	slices.SortFunc(steps, func(a, b Step) int { return cmp.Compare(a.Offered, b.Offered) })
	for i, st := range steps {
		if i > 0 {
			segment(img, xOf(steps[i-1].Offered), yOf(steps[i-1].Answered), xOf(st.Offered), yOf(st.Answered), ok)
		}
	}
	for _, st := range steps {
		x, y := xOf(st.Offered), yOf(st.Answered)
		if st.OK {
			fillRect(img, image.Rect(x-4, y-4, x+5, y+5), ok)
			continue
		}
		fillRect(img, image.Rect(x-5, y-5, x+6, y+6), failed)
		fillRect(img, image.Rect(x-3, y-3, x+4, y+4), white)
	}
	for i, l := range []struct {
		c    color.RGBA
		text string
	}{
		{ok, "a step sustained (95% answered; no drop, time-out, duplicate or missing charge)"},
		{failed, "a step not sustained"},
		{ideal, "answered = offered"},
		{ceiling, fmt.Sprintf("ceiling: %.0f PutItem/s / %.2f calls per request", s.PutItemPerSecond, s.CallsPerRequest)},
		{mix, fmt.Sprintf("the mix's ceiling: its own calls one at a time (Begin %.2f ms, Commit %.2f ms)", s.BeginMs, s.CommitMs)},
	} {
		ly := y1 + 10 + i*legendRow
		fillRect(img, image.Rect(x0+14, ly-legendBox+2, x0+14+legendBox, ly+2), l.c)
		label(img, l.text, x0+30, ly+2, alignLeft)
	}
	return img
}
