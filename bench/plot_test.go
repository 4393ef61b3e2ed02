package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlotPNG(t *testing.T) {
	tables := sampleTables()
	other := &table{bench: "latency", label: "openmpi", rows: []row{{size: 1, value: 0.15}, {size: 4194304, value: 696.5}}}
	file := filepath.Join(t.TempDir(), "latency.png")
	if err := plotTables(file, "latency", []*table{tables["latency"], other}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 400 || b.Dy() < 200 {
		t.Errorf("PNG is %dx%d; want a real chart", b.Dx(), b.Dy())
	}
	// A chart has lines and text in several colours, not a blank canvas.
	colours := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if len(colours) < 4 {
		t.Errorf("PNG has %d colours; want a drawing", len(colours))
	}
}

func TestPlotSVGAndEdgeCases(t *testing.T) {
	dir := t.TempDir()
	// One row: gonum would widen the empty range through 0 on a log axis.
	one := &table{bench: "bw", label: "weft", rows: []row{{size: 64, value: 12.5}}}
	svg := filepath.Join(dir, "bw.svg")
	if err := plotTables(svg, "bw", []*table{one}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(data), "<svg") {
		t.Errorf("bw.svg is not SVG (%v)", err)
	}
	if err := plotTables(filepath.Join(dir, "b.png"), "barrier", []*table{sampleTables()["barrier"]}); err == nil || !strings.Contains(err.Error(), "nothing to plot") {
		t.Errorf("plotting a barrier: %v; want nothing to plot", err)
	}
	if err := plotTables(filepath.Join(dir, "x.pdf"), "x", []*table{one}); err == nil {
		t.Error("plotting to .pdf succeeded; want .svg or .png only")
	}
}
