package viz_test

import (
	"bytes"
	"fmt"
	"image/png"
	"log"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mhalab/mha/viz"
)

// The attention pattern of one head over a short sequence: rows are queries, columns are keys, and
// the causal mask leaves NaN above the diagonal, drawn in grey.
func ExampleHeatmap() {
	nan := math.NaN()
	h := viz.Heatmap{
		Title: "Layer 0, head 1",
		Rows:  3, Cols: 3,
		Values: []float64{
			1, nan, nan,
			0.9, 0.1, nan,
			0.05, 0.85, 0.1,
		},
		RowLabels: []string{"the", "cat", "sat"},
		ColLabels: []string{"the", "cat", "sat"},
		XLabel:    "key", YLabel: "query", ValueLabel: "attention weight",
		Scale:    viz.Sequential{Min: 0, Max: 1},
		Annotate: true,
	}
	var pic bytes.Buffer
	if err := h.PNG(&pic); err != nil {
		log.Fatal(err)
	}
	cfg, err := png.DecodeConfig(&pic)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("PNG %d×%d\n", cfg.Width, cfg.Height)

	var svg bytes.Buffer
	if err := h.SVG(&svg); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Count(svg.String(), `width="64" height="64"`), "cells in the SVG")
	// Output:
	// PNG 674×558
	// 9 cells in the SVG
}

// The model view: every head of every layer, on one colour scale.
func ExampleGrid() {
	const layers, heads, t = 2, 3, 4
	g := viz.Grid{Title: "Model view", Rows: layers, Cols: heads, ValueLabel: "attention weight", Scale: viz.Sequential{Min: 0, Max: 1}}
	for l := range layers {
		g.RowTitles = append(g.RowTitles, fmt.Sprintf("layer %d", l))
		for h := range heads {
			w := make([]float64, t*t)
			for i := range t {
				w[i*t+max(0, i-h)] = 1 // head h looks h tokens back
			}
			g.Cells = append(g.Cells, viz.Heatmap{Title: fmt.Sprintf("L%d H%d", l, h), Rows: t, Cols: t, Values: w})
		}
	}
	var svg bytes.Buffer
	if err := g.SVG(&svg); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Count(svg.String(), `width="24" height="24"`), "cells")
	// Output: 96 cells
}

// A pruning curve with markers at each measured point, on a fixed accuracy axis.
func ExampleChart() {
	lo, hi := 0.0, 1.0
	c := viz.Chart{
		Title: "Pruning heads", XLabel: "fraction of heads removed", YLabel: "accuracy",
		Series: []viz.Series{
			{Name: "by importance", X: []float64{0, 0.25, 0.5, 0.75, 1}, Y: []float64{0.98, 0.97, 0.9, 0.6, 0.1}},
			{Name: "random", X: []float64{0, 0.25, 0.5, 0.75, 1}, Y: []float64{0.98, 0.8, 0.55, 0.3, 0.1}},
		},
		YMin: &lo, YMax: &hi, Markers: true,
	}
	var svg bytes.Buffer
	if err := c.SVG(&svg); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Count(svg.String(), "<circle"), "markers, legend included")
	// Output: 12 markers, legend included
}

// Invalid data is an error that says what came and what is allowed.
func ExampleHeatmap_error() {
	h := viz.Heatmap{Title: "weights", Rows: 2, Cols: 3, Values: []float64{1, 2, 3}}
	fmt.Println(h.PNG(&bytes.Buffer{}))
	// Output: viz: heatmap "weights" has 3 values, want Rows·Cols = 2·3 = 6
}

func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "viz")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b := viz.Bars{Title: "Head importance", Labels: []string{"H0", "H1", "H2"}, Values: []float64{0.2, 0.7, 0.1}}
	for _, name := range []string{"importance.png", "importance.svg", "importance.pdf"} {
		err := viz.WriteFile(filepath.Join(dir, name), b)
		fmt.Println(name, err != nil)
	}
	// Output:
	// importance.png false
	// importance.svg false
	// importance.pdf true
}
