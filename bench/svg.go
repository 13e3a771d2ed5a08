package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The chart's layout (pixels) and the copy() line's style.
const (
	width, panelH   = 760, 400
	left, right     = 70, 200 // plot margins (the legend sits on the right)
	top, bottom     = 40, 50
	plotW, plotH    = width - left - right, panelH - top - bottom
	copyColor       = "#000000"
	copyDash        = "6,4"
	defaultDashes   = ""
	markerRadius    = 3.5
	legendLineWidth = 28
)

// SVG draws GB/s against B (log scale) for every (kernel, workers) in res, one panel per layer,
// with copy() of the same bytes as the memory-speed line. Hand-written SVG, no dependencies.
func SVG(res []Result) string {
	// Panels: one per layer, in order of appearance.
	var layers []string
	byLayer := map[string][]Result{}
	for _, r := range res {
		l := r.Shape.Layer()
		if _, ok := byLayer[l]; !ok {
			layers = append(layers, l)
		}
		byLayer[l] = append(byLayer[l], r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, panelH*len(layers), width, panelH*len(layers))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for p, layer := range layers {
		svgPanel(&b, layer, byLayer[layer], p*panelH)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// svgAxes are a panel's scales: B on a log axis from 2^lb0 to 2^lb1, GB/s from 0 to yTop in
// steps of yStep, the panel at vertical offset oy.
type svgAxes struct {
	oy                    int
	lb0, lb1, yTop, yStep float64
}

// newSVGAxes returns the axes fitting the panel of rs at vertical offset oy.
func newSVGAxes(rs []Result, oy int) svgAxes {
	bMin, bMax, yMax := math.Inf(1), math.Inf(-1), 0.0
	for _, r := range rs {
		x := float64(r.Shape.B)
		bMin, bMax = math.Min(bMin, x), math.Max(bMax, x)
		yMax = math.Max(yMax, math.Max(r.GBps(), r.CopyGBps()))
	}
	yStep := niceStep(yMax / 5)
	yTop := math.Ceil(yMax*1.05/yStep) * yStep
	lb0, lb1 := math.Log2(bMin), math.Log2(bMax)
	if lb1 == lb0 {
		lb0, lb1 = lb0-1, lb1+1
	}
	return svgAxes{oy: oy, lb0: lb0, lb1: lb1, yTop: yTop, yStep: yStep}
}

// px is the x coordinate of B = bv.
func (a svgAxes) px(bv int) float64 {
	return left + (math.Log2(float64(bv))-a.lb0)/(a.lb1-a.lb0)*plotW
}

// py is the y coordinate of g GB/s.
func (a svgAxes) py(g float64) float64 { return float64(a.oy+top) + plotH - g/a.yTop*plotH }

// svgSeries is one line of a panel: its legend label, color, dash pattern and points (pixels).
type svgSeries struct {
	label, color, dash string
	pts                [][2]float64
}

// svgPanel draws the panel of layer (its results rs) at vertical offset oy: title, grid, axes,
// the series and their legend.
func svgPanel(b *strings.Builder, layer string, rs []Result, oy int) {
	ax := newSVGAxes(rs, oy)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">GDN decode step, %s: state GB/s (read + written) against B</text>`+"\n",
		left, oy+22, html.EscapeString(layer))
	// Grid and y labels.
	for g := 0.0; g <= ax.yTop+ax.yStep/2; g += ax.yStep {
		y := ax.py(g)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`+"\n", left, y, left+plotW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y+4, g)
	}
	// X ticks at every measured B.
	seenB := map[int]bool{}
	for _, r := range rs {
		if seenB[r.Shape.B] {
			continue
		}
		seenB[r.Shape.B] = true
		x := ax.px(r.Shape.B)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n", x, oy+top, x, oy+top+plotH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, oy+top+plotH+16, r.Shape.B)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", left, oy+top, plotW, plotH)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">B (sequences, log scale)</text>`+"\n", left+plotW/2, oy+top+plotH+36)
	fmt.Fprintf(b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">GB/s</text>`+"\n", 22, oy+top+plotH/2)

	for i, s := range panelSeries(rs, ax) {
		drawSeries(b, s, oy+top+10+i*20)
	}
}

// panelSeries returns a panel's series: (kernel, workers) in order of appearance, then copy()
// (median per B).
func panelSeries(rs []Result, ax svgAxes) []*svgSeries {
	colors := map[string]string{"avx512": "#d62728", "avx2": "#ff7f0e", "neon": "#2ca02c", "generic": "#1f77b4"}
	dashes := []string{"", "2,3", "8,3,2,3", "10,5"}
	fallback := []string{"#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	var ss []*svgSeries
	idx := map[string]*svgSeries{}
	workersSeen := map[int]int{}
	copies := map[int][]float64{}
	var copyBs []int
	for _, r := range rs {
		if _, ok := workersSeen[r.Workers]; !ok {
			workersSeen[r.Workers] = len(workersSeen)
		}
		key := fmt.Sprintf("%s, workers %d", r.Kernel, r.Workers)
		s := idx[key]
		if s == nil {
			c, ok := colors[r.Kernel]
			if !ok {
				c = fallback[len(ss)%len(fallback)]
			}
			s = &svgSeries{label: key, color: c, dash: dashes[workersSeen[r.Workers]%len(dashes)]}
			idx[key] = s
			ss = append(ss, s)
		}
		s.pts = append(s.pts, [2]float64{ax.px(r.Shape.B), ax.py(r.GBps())})
		if _, ok := copies[r.Shape.B]; !ok {
			copyBs = append(copyBs, r.Shape.B)
		}
		copies[r.Shape.B] = append(copies[r.Shape.B], r.CopyGBps())
	}
	cs := &svgSeries{label: "copy(), same bytes", color: copyColor, dash: copyDash}
	for _, bv := range copyBs {
		cs.pts = append(cs.pts, [2]float64{ax.px(bv), ax.py(median(copies[bv]))})
	}
	return append(ss, cs)
}

// drawSeries draws s's line and markers, and its legend entry at height ly.
func drawSeries(b *strings.Builder, s *svgSeries, ly int) {
	var pts []string
	for _, pt := range s.pts {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", pt[0], pt[1]))
	}
	dash := ""
	if s.dash != defaultDashes {
		dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
	}
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
	for _, pt := range s.pts {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%g" fill="%s"/>`+"\n", pt[0], pt[1], markerRadius, s.color)
	}
	// Legend entry.
	lx := left + plotW + 14
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+legendLineWidth, ly, s.color, dash)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", lx+legendLineWidth+6, ly+4, html.EscapeString(s.label))
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
