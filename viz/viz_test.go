package viz

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	one, zero, neg := 1.0, 0.0, -1.0
	cell := Heatmap{Rows: 2, Cols: 2, Values: []float64{1, 2, 3, 4}}
	line := []Series{{X: []float64{1, 2}, Y: []float64{1, 2}}}
	many := func(n int) []float64 { return make([]float64, n) }
	for _, c := range []struct {
		name string
		pic  Picture
		want string // a piece of the error message
	}{
		{"no rows", Heatmap{Rows: 0, Cols: 3}, "0×3 cells"},
		{"negative cols", Heatmap{Rows: 2, Cols: -1}, "2×-1 cells"},
		{"too many rows", Heatmap{Rows: MaxCells + 1, Cols: 1, Values: many(MaxCells + 1)}, "want 1…512"},
		{"huge sizes", Heatmap{Rows: math.MaxInt, Cols: math.MaxInt}, "want 1…512"},
		{"values ≠ rows·cols", Heatmap{Title: "t", Rows: 2, Cols: 3, Values: many(5)}, `heatmap "t" has 5 values, want Rows·Cols = 2·3 = 6`},
		{"row labels", Heatmap{Rows: 2, Cols: 2, Values: many(4), RowLabels: []string{"a"}}, "1 row labels for 2 rows"},
		{"empty col labels", Heatmap{Rows: 2, Cols: 2, Values: many(4), ColLabels: []string{}}, "0 column labels for 2 columns"},
		{"sequential min = max", Heatmap{Rows: 1, Cols: 1, Values: many(1), Scale: Sequential{Min: 1, Max: 1}}, "want finite Min < Max"},
		{"sequential NaN", Heatmap{Rows: 1, Cols: 1, Values: many(1), Scale: Sequential{Min: nan, Max: 1}}, "want finite Min < Max"},
		{"diverging negative", Heatmap{Rows: 1, Cols: 1, Values: many(1), Scale: Diverging{Limit: -1}}, "want a finite Limit > 0"},
		{"diverging Inf", Heatmap{Rows: 1, Cols: 1, Values: many(1), Scale: Diverging{Limit: inf}}, "want a finite Limit > 0"},

		{"grid 0×1", Grid{Rows: 0, Cols: 1}, "0×1 panels"},
		{"grid too big", Grid{Rows: MaxGrid + 1, Cols: 1}, "want 1…64"},
		{"grid cells", Grid{Rows: 2, Cols: 2, Cells: []Heatmap{cell, cell, cell}}, "3 cells, want Rows·Cols = 2·2 = 4"},
		{"grid bad cell", Grid{Rows: 1, Cols: 2, Cells: []Heatmap{cell, {Rows: 1, Cols: 1}}}, "grid cell 1 has 0 values"},
		{"grid row titles", Grid{Rows: 1, Cols: 1, Cells: []Heatmap{cell}, RowTitles: []string{"a", "b"}}, "2 row titles for 1 rows"},
		{"grid col titles", Grid{Rows: 1, Cols: 1, Cells: []Heatmap{cell}, ColTitles: []string{}}, "0 column titles for 1 columns"},
		{"grid scale", Grid{Rows: 1, Cols: 1, Cells: []Heatmap{cell}, Scale: Sequential{Min: 2, Max: 1}}, "want finite Min < Max"},
		{"grid too many cells", Grid{Rows: 5, Cols: 1, Cells: slices.Repeat([]Heatmap{{Rows: 512, Cols: 512, Values: many(512 * 512)}}, 5)}, "more than the 1048576 allowed"},
		{"grid too large", Grid{Rows: 1, Cols: 64, Cells: slices.Repeat([]Heatmap{{Rows: 128, Cols: 128, Values: many(128 * 128)}}, 64)}, "more than the 4096×4096 allowed"},

		{"empty chart", Chart{}, "0 series, want 1…64"},
		{"too many series", Chart{Series: slices.Repeat(line, MaxSeries+1)}, "65 series"},
		{"x ≠ y", Chart{Series: []Series{{Name: "loss", X: many(3), Y: many(2)}}}, `series 0 ("loss") has 3 x values and 2 y values`},
		{"too many points", Chart{Series: []Series{{X: many(MaxPoints + 1), Y: many(MaxPoints + 1)}}}, "more than 1048576 points"},
		{"no points", Chart{Series: []Series{{}}}, "no point with finite x and y"},
		{"only NaN", Chart{Series: []Series{{X: []float64{nan, 1}, Y: []float64{1, inf}}}}, "no point with finite x and y"},
		{"log x zero", Chart{LogX: true, Series: []Series{{X: []float64{0, 1}, Y: []float64{1, 2}}}}, "(0, 1) at 0; a log axis needs values > 0"},
		{"log y negative", Chart{LogY: true, Series: []Series{{X: []float64{1, 2}, Y: []float64{1, -2}}}}, "(2, -2) at 1"},
		{"YMin NaN", Chart{Series: line, YMin: &nan}, "YMin = NaN"},
		{"YMax Inf", Chart{Series: line, YMax: &inf}, "YMax = +Inf"},
		{"YMin ≥ YMax", Chart{Series: line, YMin: &one, YMax: &zero}, "YMin = 1 ≥ YMax = 0"},
		{"log YMin ≤ 0", Chart{Series: line, LogY: true, YMin: &neg}, "YMin = -1"},

		{"no bars", Bars{}, "0 values, want 1…1024"},
		{"too many bars", Bars{Values: many(MaxBars + 1)}, "1025 values"},
		{"bar labels", Bars{Values: many(2), Labels: []string{"a"}}, "1 labels for 2 values"},
		{"bar NaN", Bars{Values: []float64{1, nan}}, "value 1 is NaN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, format := range []string{"PNG", "SVG"} {
				var b bytes.Buffer
				var err error
				if format == "PNG" {
					err = c.pic.PNG(&b)
				} else {
					err = c.pic.SVG(&b)
				}
				if err == nil {
					t.Fatalf("%s: no error, want one containing %q", format, c.want)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "viz: ") {
					t.Errorf("%s: error %q, want \"viz: …\" containing %q", format, err, c.want)
				}
				if b.Len() != 0 {
					t.Errorf("%s: %d bytes written before the error", format, b.Len())
				}
			}
		})
	}
}

func TestSamplesAreValidSVG(t *testing.T) {
	for _, smp := range samples() {
		var b bytes.Buffer
		if err := smp.pic.SVG(&b); err != nil {
			t.Fatalf("%s: %v", smp.name, err)
		}
		root := parseSVG(t, b.Bytes())[0]
		if root.attr["viewBox"] != "0 0 "+root.attr["width"]+" "+root.attr["height"] {
			t.Errorf("%s: viewBox %q for a %s × %s picture", smp.name, root.attr["viewBox"], root.attr["width"], root.attr["height"])
		}
		if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
			t.Errorf("%s: the SVG has a NaN or Inf coordinate", smp.name)
		}
		if strings.Contains(b.String(), "href") || strings.Count(b.String(), "http") != 1 {
			t.Errorf("%s: the SVG refers to something outside itself", smp.name)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	h := Heatmap{Rows: 1, Cols: 1, Values: []float64{1}}
	for name, magic := range map[string]string{"a.png": "\x89PNG\r\n", "b.SVG": "<?xml"} {
		path := filepath.Join(dir, name)
		if err := WriteFile(path, h); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(magic)) {
			t.Errorf("%s starts with %q, want %q", name, b[:min(8, len(b))], magic)
		}
	}
	if err := WriteFile(filepath.Join(dir, "c.jpg"), h); err == nil || !strings.Contains(err.Error(), `".jpg", want .png or .svg`) {
		t.Errorf("WriteFile to .jpg: %v", err)
	}
	bad := filepath.Join(dir, "bad.png")
	if err := WriteFile(bad, Heatmap{}); err == nil {
		t.Error("WriteFile of an invalid heatmap: no error")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("WriteFile of an invalid heatmap created the file (%v)", err)
	}
}

func TestLinearTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		n      int
		want   []float64
		dec    int
	}{
		{0, 1, 5, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, 1},
		{-1, 1, 8, []float64{-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1}, 2},
		{0.013, 0.87, 4, []float64{0.25, 0.5, 0.75}, 2},
		{-3, 7, 4, []float64{-2.5, 0, 2.5, 5}, 1},
		{0, 4000, 7, []float64{0, 1000, 2000, 3000, 4000}, 0},
		{5, 5, 4, []float64{5}, 0},                           // no range
		{1, 1 + 5e-324, 4, []float64{1}, 0},                  // no usable step
		{-math.MaxFloat64, math.MaxFloat64, 4, nil, 0},       // overflowing range: checked below
		{1e15, 1e15 + 1, 4, []float64{1e15, 1e15 + 0.25}, 2}, // ticks stay exact multiples
	} {
		got, dec := linearTicks(c.lo, c.hi, c.n)
		if c.want == nil {
			for _, v := range got {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("linearTicks(%g, %g) gave %v", c.lo, c.hi, got)
				}
			}
			continue
		}
		if len(got) < len(c.want) || !slices.EqualFunc(got[:len(c.want)], c.want, func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*max(1, math.Abs(b)) }) || dec != c.dec {
			t.Errorf("linearTicks(%g, %g, %d) = %v, %d; want %v…, %d", c.lo, c.hi, c.n, got, dec, c.want, c.dec)
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{1, 1000, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}},
		{0.9, 12000, []float64{1, 10, 100, 1000, 10000}},
		{1e-8, 1e8, []float64{1e-6, 1e-3, 1, 1e3, 1e6}}, // every third decade, 1 among them
		{3, 7, []float64{5}}, // fewer than two: linear instead, checked below
	} {
		got := logTicks(c.lo, c.hi, 6)
		if c.lo == 3 {
			if len(got) < 2 || got[0] < 3 || got[len(got)-1] > 7 {
				t.Errorf("logTicks(3, 7) = %v, want linear ticks inside", got)
			}
			continue
		}
		if !slices.EqualFunc(got, c.want, func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }) {
			t.Errorf("logTicks(%g, %g) = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for _, c := range []struct {
		v    float64
		dec  int
		want string
	}{
		{0.5, 2, "0.50"},
		{-0.25, 2, "−0.25"},
		{-0.001, 2, "0.00"}, // not −0.00
		{1234, 0, "1234"},
		{2.5e6, 0, "2.5e6"},
		{-1e-5, 5, "−1e−5"},
		{1e-5, 2, "0.00"}, // annotations keep their decimals
		{math.Inf(1), 2, "∞"},
		{math.Inf(-1), 2, "−∞"},
	} {
		if got := formatNumber(c.v, c.dec); got != c.want {
			t.Errorf("formatNumber(%g, %d) = %q, want %q", c.v, c.dec, got, c.want)
		}
	}
	if got := formatLogTick(0.001); got != "0.001" {
		t.Errorf("formatLogTick(0.001) = %q", got)
	}
	if got := formatLogTick(1e-6); got != "1e−6" {
		t.Errorf("formatLogTick(1e-6) = %q", got)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"cat":         "cat",
		"a\nb\tc":     `a\nb\tc`,
		"\x00":        `\x00`,
		"bad\xffutf8": "bad\uFFFDutf8",
		"\uFFFE":      "\uFFFD",
		"<a&b>":       "<a&b>", // escaping is the SVG writer's job
		"猫 ρ_ij −1 ∞": "猫 ρ_ij −1 ∞",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
	long := clean(strings.Repeat("é", 1000))
	if n := len([]rune(long)); n != maxRunes+1 || !strings.HasSuffix(long, "…") {
		t.Errorf("clean of 1000 runes gave %d runes ending %q", n, long[len(long)-6:])
	}
}

func TestFit(t *testing.T) {
	f := newFonts()
	for _, maxW := range []float64{0, 5, 30, 80} {
		got := f.fit("a rather long token label", 11, false, maxW)
		if w := f.width(got, 11, false); w > maxW && got != "…" {
			t.Errorf("fit to %g: %q is %g wide", maxW, got, w)
		}
		if !strings.HasSuffix(got, "…") {
			t.Errorf("fit to %g: %q has no ellipsis", maxW, got)
		}
	}
	if got := f.fit("short", 11, false, 100); got != "short" {
		t.Errorf("fit of a short label: %q", got)
	}
	// Widths add up: kerning aside, two strings side by side are as wide as their concatenation.
	a, b := f.width("Head", 11, false), f.width("Tail", 11, false)
	if ab := f.width("HeadTail", 11, false); math.Abs(ab-(a+b)) > 0.5 {
		t.Errorf("width(HeadTail) = %g, width(Head) + width(Tail) = %g", ab, a+b)
	}
	if w := f.width("M", 20, true) / f.width("M", 10, true); math.Abs(w-2) > 1e-9 {
		t.Errorf("doubling the size multiplies widths by %g, want 2", w)
	}
}

func TestEvery(t *testing.T) {
	for _, c := range []struct {
		need, pitch float64
		want        int
	}{
		{10, 40, 1}, {10, 10, 1}, {10, 6, 2}, {10, 3, 5}, {10, 1, 10}, {25, 1, 50}, {100, 1, 100},
	} {
		if got := every(c.need, c.pitch); got != c.want {
			t.Errorf("every(%g, %g) = %d, want %d", c.need, c.pitch, got, c.want)
		}
	}
}

func TestClipSegment(t *testing.T) {
	a, b, ok := clipSegment(point{-1, 0.5}, point{2, 0.5}, 0, 0, 1, 1)
	if !ok || a != (point{0, 0.5}) || b != (point{1, 0.5}) {
		t.Errorf("clip of a horizontal line: %v %v %v", a, b, ok)
	}
	if _, _, ok := clipSegment(point{-1, 2}, point{2, 2}, 0, 0, 1, 1); ok {
		t.Error("a line above the box was kept")
	}
	parts := clipPolyline([]point{{0.5, 0.5}, {0.5, 2}, {0.7, 2}, {0.7, 0.5}, {0.9, 0.5}}, 0, 0, 1, 1)
	if len(parts) != 2 || len(parts[1]) != 3 {
		t.Errorf("a polyline leaving and re-entering the box: %v, want two parts, the second of 3 points", parts)
	}
}
