package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// num is a value that JSON can carry even when it is −Inf (a masked score): non-finite values
// are written as the strings "-inf", "inf" and "nan".
type num float64

// MarshalJSON implements json.Marshaler.
func (n num) MarshalJSON() ([]byte, error) {
	v := float64(n)
	switch {
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// String formats n for text and markdown: four decimals, or scientific notation for values too
// large or too small to read that way.
func (n num) String() string {
	v := float64(n)
	switch {
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsInf(v, 1):
		return "inf"
	case v != 0 && (math.Abs(v) >= 1e5 || math.Abs(v) < 1e-4):
		return strconv.FormatFloat(v, 'e', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

var renderers = map[string]func(io.Writer, *explanation) error{
	"text":     renderText,
	"markdown": renderMarkdown,
	"json": func(w io.Writer, ex *explanation) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(ex)
	},
}

// String describes the configuration in one line.
func (c config) String() string {
	s := fmt.Sprintf("batch %d, n_q = %d, n_k = %d, d_model = %d, h = %d, d_k = d_v = %d, bias %v",
		c.Batch, c.Tq, c.Tk, c.EmbedDim, c.NumHeads, c.HeadDim, c.Bias)
	for _, o := range []struct {
		on   bool
		name string
	}{{c.AddBiasKV, "add_bias_kv"}, {c.AddZeroAttn, "add_zero_attn"}, {c.Causal, "causal"}} {
		if o.on {
			s += ", " + o.name
		}
	}
	if len(c.Patterns) > 0 {
		s += ", patterns " + strings.Join(c.Patterns, " ")
		if c.Block != "" {
			s += " in blocks " + c.Block
		}
	}
	if c.Normalizer != "" {
		s += ", normalizer " + c.Normalizer
	}
	return s
}

func verdict(c check) string {
	if c.Agrees {
		return "agrees"
	}
	return "DISAGREES"
}

func renderText(w io.Writer, ex *explanation) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "%s\n%s\n\n", ex.Title, ex.Config)
	for i, s := range ex.Steps {
		fmt.Fprintf(b, "== %d. %s ==\n   %s\n", i+1, s.Title, s.Formula)
		for _, n := range s.Notes {
			fmt.Fprintf(b, "   %s\n", n)
		}
		for _, m := range s.Matrices {
			fmt.Fprintf(b, "\n   %s  [%d×%d]\n", m.Name, m.Rows, m.Cols)
			for _, row := range m.Values {
				b.WriteString("   ")
				for _, v := range row {
					fmt.Fprintf(b, " %10s", v)
				}
				b.WriteByte('\n')
			}
		}
		b.WriteByte('\n')
	}
	if len(ex.Checks) > 0 {
		fmt.Fprintf(b, "== The chapter's printed numbers, checked ==\n")
		for _, c := range ex.Checks {
			fmt.Fprintf(b, "   %s: %s\n      chapter:  %s\n      computed: %s\n", c.What, verdict(c), c.Chapter, c.Computed)
		}
	}
	return b.Flush()
}

func renderMarkdown(w io.Writer, ex *explanation) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# %s\n\n%s\n\n", ex.Title, ex.Config)
	for i, s := range ex.Steps {
		fmt.Fprintf(b, "## %d. %s\n\n`%s`\n\n", i+1, s.Title, s.Formula)
		for _, n := range s.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
		if len(s.Notes) > 0 {
			b.WriteByte('\n')
		}
		for _, m := range s.Matrices {
			fmt.Fprintf(b, "**%s** [%d×%d]\n\n|", m.Name, m.Rows, m.Cols)
			for c := range m.Cols {
				fmt.Fprintf(b, " %d |", c)
			}
			b.WriteString("\n|" + strings.Repeat(" ---: |", m.Cols) + "\n")
			for _, row := range m.Values {
				b.WriteByte('|')
				for _, v := range row {
					fmt.Fprintf(b, " %s |", v)
				}
				b.WriteByte('\n')
			}
			b.WriteByte('\n')
		}
	}
	if len(ex.Checks) > 0 {
		b.WriteString("## The chapter's printed numbers, checked\n\n| claim | chapter | computed | verdict |\n| --- | --- | --- | --- |\n")
		for _, c := range ex.Checks {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", c.What, c.Chapter, c.Computed, verdict(c))
		}
	}
	return b.Flush()
}
