package viz

import (
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
)

// fonts measures and outlines text in the Go fonts: regular for most text, bold for titles. A
// fonts is used by one goroutine (its Buffer is scratch space); the fonts themselves are read-only.
type fonts struct {
	regular, bold   *sfnt.Font
	regularM, boldM vmetrics
	buf             sfnt.Buffer
}

// Vertical metrics of the Go fonts as fractions of the em (both fonts share them).
type vmetrics struct {
	ascent, descent, capHeight float64
}

// newFonts parses the embedded Go fonts (fast: sfnt reads tables lazily).
func newFonts() *fonts {
	regular, err := opentype.Parse(goregular.TTF)
	if err != nil {
		panic("viz: parsing the embedded Go Regular font: " + err.Error())
	}
	bold, err := opentype.Parse(gobold.TTF)
	if err != nil {
		panic("viz: parsing the embedded Go Bold font: " + err.Error())
	}
	f := &fonts{regular: regular, bold: bold}
	f.regularM, f.boldM = f.measure(regular), f.measure(bold)
	return f
}

func (f *fonts) face(bold bool) *sfnt.Font {
	if bold {
		return f.bold
	}
	return f.regular
}

// emPPEM asks sfnt for sizes in font units: one pixel per font unit, in 26.6 fixed point.
func emPPEM(fnt *sfnt.Font) fixed.Int26_6 {
	return fixed.Int26_6(fnt.UnitsPerEm()) << 6
}

// metrics returns the vertical metrics of the face, in ems.
func (f *fonts) metrics(bold bool) vmetrics {
	if bold {
		return f.boldM
	}
	return f.regularM
}

func (f *fonts) measure(fnt *sfnt.Font) vmetrics {
	m, err := fnt.Metrics(&f.buf, emPPEM(fnt), font.HintingNone)
	if err != nil {
		panic("viz: metrics of an embedded Go font: " + err.Error())
	}
	upem := float64(fnt.UnitsPerEm()) * 64
	return vmetrics{
		ascent:    float64(m.Ascent) / upem,
		descent:   float64(m.Descent) / upem,
		capHeight: float64(m.CapHeight) / upem,
	}
}

// A glyph placed on a line of text: x is its origin along the baseline, in ems from the start.
type glyph struct {
	index sfnt.GlyphIndex
	x     float64
}

// shape places the runes of s in the face, with kerning, and returns the glyphs and the advance
// width of the whole line, in ems. A rune the font lacks is drawn as the font's missing-glyph box.
func (f *fonts) shape(s string, bold bool) ([]glyph, float64) {
	fnt := f.face(bold)
	ppem := emPPEM(fnt)
	upem := float64(fnt.UnitsPerEm()) * 64
	glyphs := make([]glyph, 0, len(s))
	var x fixed.Int26_6
	prev := sfnt.GlyphIndex(0)
	for i, r := range s {
		idx, err := fnt.GlyphIndex(&f.buf, r)
		if err != nil {
			idx = 0
		}
		if i > 0 {
			// Fonts without a kerning table, and pairs without an entry, answer ErrNotFound.
			if k, err := fnt.Kern(&f.buf, prev, idx, ppem, font.HintingNone); err == nil {
				x += k
			}
		}
		glyphs = append(glyphs, glyph{index: idx, x: float64(x) / upem})
		adv, err := fnt.GlyphAdvance(&f.buf, idx, ppem, font.HintingNone)
		if err != nil && !errors.Is(err, sfnt.ErrNotFound) {
			panic("viz: advance of a glyph of an embedded Go font: " + err.Error())
		}
		x += adv
		prev = idx
	}
	return glyphs, float64(x) / upem
}

// width returns the advance width of s set at size units per em.
func (f *fonts) width(s string, size float64, bold bool) float64 {
	_, w := f.shape(s, bold)
	return w * size
}

// fit returns s, or s cut short with an ellipsis, so that it is at most maxW units wide at size.
func (f *fonts) fit(s string, size float64, bold bool, maxW float64) string {
	if f.width(s, size, bold) <= maxW {
		return s
	}
	runes := []rune(strings.TrimSuffix(s, "…"))
	// Binary search for the longest prefix that fits with the ellipsis.
	lo, hi := 0, len(runes)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if f.width(string(runes[:mid])+"…", size, bold) <= maxW {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return "…"
	}
	return strings.TrimRightFunc(string(runes[:lo]), unicode.IsSpace) + "…"
}

// maxRunes bounds the text viz ever shapes: clean cuts longer text.
const maxRunes = 200

// clean makes a user's text safe to draw and to write in XML, the same in PNG and SVG: invalid
// UTF-8 and characters XML forbids become U+FFFD, control characters are written as Go escapes (a
// newline token shows as \n), and text beyond maxRunes is cut off with an ellipsis.
func clean(s string) string {
	var b strings.Builder
	for runes := 0; len(s) > 0; runes++ {
		if runes == maxRunes {
			b.WriteString("…")
			break
		}
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1, r == 0xFFFE, r == 0xFFFF:
			b.WriteRune(utf8.RuneError)
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}
