package viz

import "strconv"

// tokenAxis is the labels along one side of a matrix (rows on the left, columns below): which
// cells get one, their text and style, and how deep the labels reach from the matrix's edge.
type tokenAxis struct {
	idx    []int
	text   []string
	style  textStyle
	turned bool // column labels read upwards
	depth  float64
}

const (
	labelGap  = 5   // between a matrix and its labels
	maxLabelW = 120 // longer labels are cut short
)

// labelText returns the label of cell i, cleaned and cut to maxLabelW: labels[i], or i when
// labels is nil.
func labelText(s *scene, labels []string, i int, st textStyle) string {
	if labels == nil {
		return strconv.Itoa(i)
	}
	return s.fonts.fit(clean(labels[i]), st.size, st.bold, maxLabelW)
}

// labelStyleFor returns the label style for cells pitch pixels apart: labelStyle, smaller (down to
// 8 pixels) for small cells.
func labelStyleFor(pitch float64) textStyle {
	st := labelStyle
	st.size = min(st.size, max(8, pitch-2))
	return st
}

// labelPitch returns the pitch labels in style st need along a side: the indices (labels == nil)
// are spaced more widely than tokens, which are worth showing all.
func labelPitch(labels []string, st textStyle) float64 {
	if labels == nil {
		return st.size * 2.2
	}
	return st.size * 1.15
}

// every returns the least of 1, 2, 5, 10, 20, 50, … such that that many cells, pitch pixels each,
// are at least need pixels.
func every(need, pitch float64) int {
	const most = 1_000_000 // more cells than any picture has: one label
	for k := 1; k < most; k *= 10 {
		for _, m := range []int{1, 2, 5} {
			if float64(m*k)*pitch >= need {
				return m * k
			}
		}
	}
	return most
}

// rowLabels lays out the labels of n rows pitch pixels high, right-aligned left of the matrix.
func rowLabels(s *scene, labels []string, n int, pitch float64) tokenAxis {
	a := tokenAxis{style: labelStyleFor(pitch)}
	a.style.anchor = anchorEnd
	for i := 0; i < n; i += every(labelPitch(labels, a.style), pitch) {
		t := labelText(s, labels, i, a.style)
		a.idx, a.text = append(a.idx, i), append(a.text, t)
		a.depth = max(a.depth, s.width(t, a.style))
	}
	a.depth += labelGap
	return a
}

// colLabels lays out the labels of n columns pitch pixels wide under the matrix: across when that
// shows as many labels as turning them to read upwards would, or when they are the indices;
// turned otherwise.
func colLabels(s *scene, labels []string, n int, pitch float64) tokenAxis {
	a := tokenAxis{style: labelStyleFor(pitch)}
	texts := make([]string, n)
	widest := 0.0
	for i := range texts {
		texts[i] = labelText(s, labels, i, a.style)
		widest = max(widest, s.width(texts[i], a.style))
	}
	across, up := every(widest+6, pitch), every(labelPitch(labels, a.style), pitch)
	k := across
	a.turned = labels != nil && up < across
	if a.turned {
		k = up
		a.style.anchor, a.style.angle = anchorEnd, -90
	} else {
		a.style.anchor = anchorMiddle
	}
	for i := 0; i < n; i += k {
		a.idx, a.text = append(a.idx, i), append(a.text, texts[i])
		if a.turned {
			a.depth = max(a.depth, s.width(texts[i], a.style))
		}
	}
	if !a.turned {
		a.depth = s.capHeight(a.style) + s.descent(a.style)
	}
	a.depth += labelGap
	return a
}

// drawRows draws row labels left of a matrix whose top-left corner is (x, y).
func (a tokenAxis) drawRows(s *scene, x, y, pitch float64) {
	capH := s.capHeight(a.style)
	for k, i := range a.idx {
		s.text(x-labelGap, y+(float64(i)+0.5)*pitch+capH/2, a.text[k], a.style)
	}
}

// drawCols draws column labels under a matrix whose bottom-left corner is (x, y).
func (a tokenAxis) drawCols(s *scene, x, y, pitch float64) {
	capH := s.capHeight(a.style)
	for k, i := range a.idx {
		cx := x + (float64(i)+0.5)*pitch
		if a.turned {
			s.text(cx+capH/2, y+labelGap, a.text[k], a.style)
		} else {
			s.text(cx, y+labelGap+capH, a.text[k], a.style)
		}
	}
}

// axisTitle is the title of an axis ("query", "key"), and the depth it takes.
type axisTitle struct {
	text  string
	depth float64
}

const axisGap = 8 // between an axis title and the tick labels

// newAxisTitle lays out text as an axis title at most maxW pixels long.
func newAxisTitle(s *scene, text string, maxW float64) axisTitle {
	if text == "" {
		return axisTitle{}
	}
	m := s.fonts.metrics(false)
	return axisTitle{
		text:  s.fonts.fit(clean(text), axisStyle.size, false, max(maxW, 60)),
		depth: (m.ascent+m.descent)*axisStyle.size + axisGap,
	}
}

// drawLeft draws the title reading upwards with its left edge at x, centred on y.
func (t axisTitle) drawLeft(s *scene, x, y float64) {
	s.text(x+s.fonts.metrics(false).ascent*axisStyle.size, y, t.text, upright(axisStyle))
}

// drawBelow draws the title centred on x, below y.
func (t axisTitle) drawBelow(s *scene, x, y float64) {
	st := axisStyle
	st.anchor = anchorMiddle
	s.text(x, y+axisGap+s.capHeight(st), t.text, st)
}
