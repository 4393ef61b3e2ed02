package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plots are drawn with gonum.org/v1/plot: a maintained library that writes
// both SVG and PNG from one description, with log axes and legends, which
// hand-written SVG would have to reimplement (and PNG would need a
// rasteriser besides).

// plotTables draws the tables as one chart to file (.svg or .png): message
// size on a log2 axis, the value on a log axis, one line per table. Rows
// with size 0 or a value ≤ 0 have no place on log axes and are left out.
func plotTables(file, title string, tables []*table) error {
	if err := checkPlotName(file); err != nil {
		return err
	}
	if len(tables) == 0 {
		return errors.New("no tables to plot")
	}
	b := lookup(tables[0].bench)
	if b == nil {
		return fmt.Errorf("unknown benchmark %q", tables[0].bench)
	}
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = "Message size (bytes)"
	p.Y.Label.Text = metric(b.kind)
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(powerOfTwoTicks)
	p.Y.Tick.Marker = plot.TickerFunc(decadeTicks)
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	drawn := 0
	for i, t := range tables {
		xys := make(plotter.XYs, 0, len(t.rows))
		for _, r := range t.rows {
			if r.size > 0 && r.value > 0 && !math.IsInf(r.value, 0) {
				xys = append(xys, plotter.XY{X: float64(r.size), Y: r.value})
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("series %s: %w", t.label, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(t.label, line, points)
		drawn++
	}
	if drawn == 0 {
		return errors.New("nothing to plot: no row has a size and a value above 0 (a barrier has no sizes)")
	}
	// Pad the data range: gonum widens an empty range (one size, or one
	// value) by ±1, which puts a log axis through 0.
	p.X.Min, p.X.Max = logPad(p.X.Min, p.X.Max, 1.25)
	p.Y.Min, p.Y.Max = logPad(p.Y.Min, p.Y.Max, 1.1)
	p.Y.Max = legendRoom(p.Y.Min, p.Y.Max, drawn)
	return p.Save(8*vg.Inch, 5*vg.Inch, file)
}

// logPad widens [min, max] by factor f on each side (by 2 when the range
// is empty), keeping it positive.
func logPad(min, max, f float64) (float64, float64) {
	if min == max {
		f = 2
	}
	return min / f, max * f
}

// legendRoom raises a log axis's max so that the top band, where the
// legend sits, holds no data: about 6% of the height per legend line, at
// most 40%. Placing the legend by the data instead would have to guess
// where curves of several implementations do not run.
func legendRoom(min, max float64, lines int) float64 {
	f := math.Min(0.06*float64(lines)+0.02, 0.4)
	span := math.Log(max) - math.Log(min)
	return math.Exp(math.Log(max) + span*f/(1-f))
}

// powerOfTwoTicks marks every power of two in range and labels a spread of
// them (at most about ten labels) as 1, 4, 16, ..., 1K, ..., 1M.
func powerOfTwoTicks(min, max float64) []plot.Tick {
	lo := int(math.Floor(math.Log2(min)))
	hi := int(math.Ceil(math.Log2(max)))
	step := 1
	for (hi-lo)/step > 10 {
		step *= 2
	}
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		t := plot.Tick{Value: math.Exp2(float64(e))}
		if t.Value < min || t.Value > max || e < 0 {
			continue
		}
		if e%step == 0 {
			t.Label = formatSize(1 << e)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// decadeTicks marks every digit of every decade in range and labels 1, 2
// and 5 of each (1 only, over more than four decades), so that a range
// within one decade still has labels: gonum's LogTicks labels powers of ten
// only.
func decadeTicks(min, max float64) []plot.Tick {
	lo := int(math.Floor(math.Log10(min)))
	hi := int(math.Ceil(math.Log10(max)))
	wide := hi-lo > 4
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		base := math.Pow10(e)
		for d := 1; d < 10; d++ {
			t := plot.Tick{Value: float64(d) * base}
			if t.Value < min || t.Value > max {
				continue
			}
			if d == 1 || (!wide && (d == 2 || d == 5)) {
				t.Label = tickLabel(t.Value)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// tickLabel writes a value-axis label without exponents: 20000, 0.05.
func tickLabel(v float64) string {
	if v >= 1 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
