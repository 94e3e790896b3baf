package viz

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"strconv"
	"testing"
)

// bits returns vs as little-endian float64 bytes, a fuzzer's seed.
func bits(vs ...float64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// drawBoth draws p as a PNG and as an SVG: the two must accept it alike, and an accepted SVG must
// be well-formed.
func drawBoth(t *testing.T, p Picture) {
	t.Helper()
	pngErr := p.PNG(io.Discard)
	var svg bytes.Buffer
	svgErr := p.SVG(&svg)
	if (pngErr == nil) != (svgErr == nil) {
		t.Fatalf("PNG error %v, SVG error %v: they must agree", pngErr, svgErr)
	}
	if svgErr == nil {
		parseSVG(t, svg.Bytes())
	}
}

// FuzzHeatmap draws heatmaps of any size, values, labels, scale and overlay: it must never panic, and
// whatever it accepts must come out as a PNG and as well-formed SVG.
func FuzzHeatmap(f *testing.F) {
	f.Add(int8(2), int8(2), bits(0, 1, 0.5, math.NaN()), "tok", true, uint8(0), 0.0, 0.0)
	f.Add(int8(3), int8(1), bits(math.Inf(1), math.Inf(-1), math.Copysign(0, -1)), "<a&b>\n\xff", true, uint8(1), -1.0, 1.0)
	f.Add(int8(1), int8(3), bits(1e308, -1e308, 5e-324), "", false, uint8(2), 0.0, 0.0)
	f.Add(int8(0), int8(5), []byte{}, "x", false, uint8(2), 3.0, 0.0)
	f.Add(int8(40), int8(40), []byte("not floats at all"), "a very long token label indeed", true, uint8(1), 0.0, 0.0)
	f.Add(int8(-3), int8(2), bits(1), "", true, uint8(3), 0.0, 0.0)
	f.Add(int8(8), int8(8), []byte{0, 1, 2, 1, 0, 2, 3, 1, 5}, "blocks", false, uint8(1), 0.0, 1.0)
	f.Add(int8(30), int8(30), []byte{4, 2, 1, 0, 1, 2, 2, 0}, "", false, uint8(0), 0.0, 0.0)
	f.Fuzz(func(t *testing.T, rows, cols int8, data []byte, label string, annotate bool, scale uint8, a, b float64) {
		h := Heatmap{Title: label, Rows: int(rows % 40), Cols: int(cols % 40), XLabel: label, YLabel: label, ValueLabel: label, Annotate: annotate}
		n := max(0, h.Rows) * max(0, h.Cols)
		if len(data)%5 == 4 {
			n++ // sometimes one value too many
		}
		h.Values = make([]float64, n)
		for i := range h.Values {
			if len(data) >= 8 {
				k := 8 * (i % (len(data) / 8))
				h.Values[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[k:]))
			} else if len(data) > 0 {
				h.Values[i] = float64(data[i%len(data)]) / 255
			}
		}
		if label != "" {
			for i := range max(0, h.Rows) {
				h.RowLabels = append(h.RowLabels, label+strconv.Itoa(i))
			}
			for range max(0, h.Cols) + len(label)%2 { // sometimes one label too many
				h.ColLabels = append(h.ColLabels, label)
			}
		}
		// An overlay from the data's bytes: a block map of blocks up to 5 × 4 (kinds past
		// BlockFull, a kind too many sometimes) and marks where a byte is odd.
		if len(data) > 0 && data[0]%3 != 2 {
			m := &BlockMap{Size: [2]int{int(data[0] % 6), len(data) % 5}}
			if m.Size[0] > 0 && m.Size[1] > 0 {
				nk := ceilDiv(max(0, h.Rows), m.Size[0])*ceilDiv(max(0, h.Cols), m.Size[1]) + int(data[0]%7)/6
				for i := range max(0, nk) {
					m.Kinds = append(m.Kinds, BlockKind(data[i%len(data)]%4))
				}
			}
			h.Blocks = m
		}
		if len(data) > 0 && data[0]%2 == 0 {
			h.Marks = make([]bool, n)
			for i := range h.Marks {
				h.Marks[i] = data[i%len(data)]%2 == 1
			}
		}
		switch scale % 4 {
		case 1:
			h.Scale = Sequential{Min: a, Max: b}
		case 2:
			h.Scale = Diverging{Limit: a}
		case 3:
			h.Scale = Scale(nil)
		}
		drawBoth(t, h)
	})
}

// FuzzChart draws charts of any points, log axes and fixed y range: it must never panic or hang,
// and whatever it accepts must come out as a PNG and as well-formed SVG.
func FuzzChart(f *testing.F) {
	f.Add(bits(0, 1, 1, 2, 2, 4), uint8(0), 0.0, 0.0)
	f.Add(bits(1, 1, 1e300, 2), uint8(1), 0.0, 0.0)      // a log x axis over 300 decades
	f.Add(bits(5e-324, 1, 1, 1e308), uint8(3), 0.0, 0.0) // both log axes at the floats' ends
	f.Add(bits(1, math.NaN(), 2, math.Inf(1), 3, 3), uint8(2), 0.5, 9.0)
	f.Add(bits(-1e308, 1e308, 1e308, -1e308), uint8(4), -1.0, 1.0)
	f.Add(bits(3, 3), uint8(6), 1.0, 1.0)
	f.Add([]byte("seven b"), uint8(7), math.NaN(), math.Inf(1))
	f.Fuzz(func(t *testing.T, data []byte, flags uint8, ymin, ymax float64) {
		var xs, ys []float64
		for i := 0; i+16 <= len(data); i += 16 {
			xs = append(xs, math.Float64frombits(binary.LittleEndian.Uint64(data[i:])))
			ys = append(ys, math.Float64frombits(binary.LittleEndian.Uint64(data[i+8:])))
		}
		if len(data)%16 >= 8 {
			xs = append(xs, 1) // sometimes one x too many
		}
		c := Chart{Title: "t", Series: []Series{{Name: "s", X: xs, Y: ys}}, LogX: flags&1 != 0, LogY: flags&2 != 0, Markers: flags&8 != 0}
		if flags&4 != 0 {
			c.YMin, c.YMax = &ymin, &ymax
		}
		if flags&16 != 0 { // a second series, the first one's points swapped
			c.Series = append(c.Series, Series{X: ys, Y: xs})
		}
		drawBoth(t, c)
	})
}
