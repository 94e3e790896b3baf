package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pattern is a regular expression of a tokenizer.json (written for Oniguruma, which Hugging Face
// tokenizers uses) translated for Go's regexp.
//
// Go's regexp has no lookaround. A lookahead (?=X) or (?!X) is taken where it ends an alternative
// of the whole pattern (as in GPT-2's, Llama-3's and Qwen2's \s+(?!\S)) and X is one character
// class: the translation consumes the one character that the lookahead looks at (or the end of the
// text), the body of the alternative is a capture group, and the match is cut back to the end of
// that group. Go's regexp prefers among alternatives and repetitions as a backtracking engine
// does, so this finds the same matches as Oniguruma. Oniguruma's Unicode \s, \S, \d, \D, \w and
// \W are spelled out (Go's are ASCII-only), ^ and $ match at line ends as Oniguruma's do, and
// every capture group of the original pattern becomes non-capturing. One difference remains: each
// search after a match starts afresh where that match ended, so that \A, ^ and \b there see no
// text before it.
type pattern struct {
	re   *regexp.Regexp
	keep []int // capture groups whose end, when they take part, is the end of the match
}

// Oniguruma's \s: the Unicode White_Space property, as class contents.
const spaceClass = `\t\n\v\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`

// wordClass is Oniguruma's \w, as class contents: Unicode's Word (UTS #18), the Alphabetic
// property (letters, letter numbers such as Ⅻ, and Other_Alphabetic such as Ⓐ), marks, decimal
// digits, connector punctuation and the joiners. Built once, never written.
var wordClass = `\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}` + classOf(unicode.Other_Alphabetic)

// classOf spells a range table as class contents.
func classOf(t *unicode.RangeTable) string {
	var b strings.Builder
	add := func(lo, hi, stride uint32) {
		for r := lo; r <= hi; r += stride {
			if stride == 1 {
				fmt.Fprintf(&b, `\x{%X}-\x{%X}`, lo, hi)
				return
			}
			fmt.Fprintf(&b, `\x{%X}`, r)
		}
	}
	for _, r := range t.R16 {
		add(uint32(r.Lo), uint32(r.Hi), uint32(r.Stride))
	}
	for _, r := range t.R32 {
		add(r.Lo, r.Hi, r.Stride)
	}
	return b.String()
}

// compilePattern translates an Oniguruma pattern (see pattern).
func compilePattern(src string) (*pattern, error) {
	t := translator{src: []rune(src)}
	out, err := t.alternation(true)
	if err == nil && t.pos < len(t.src) {
		err = fmt.Errorf("unbalanced ')' at %d", t.pos)
	}
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", src, err)
	}
	re, err := regexp.Compile(out)
	if err != nil {
		return nil, fmt.Errorf("regex %q: Go's regexp cannot take its translation %q: %w", src, out, err)
	}
	if re.NumSubexp() != t.group {
		return nil, fmt.Errorf("regex %q: its translation %q has %d capture groups, want %d", src, out, re.NumSubexp(), t.group)
	}
	return &pattern{re: re, keep: t.keep}, nil
}

// findAll is every non-empty, non-overlapping match of p in s, left to right, as byte spans.
func (p *pattern) findAll(s string) [][2]int {
	var spans [][2]int
	for pos := 0; pos <= len(s); {
		m := p.re.FindStringSubmatchIndex(s[pos:])
		if m == nil {
			break
		}
		end := m[1]
		for _, g := range p.keep {
			if m[2*g] >= 0 {
				end = m[2*g+1]
			}
		}
		if end <= m[0] { // an empty match splits nothing: look again one character on
			_, w := utf8.DecodeRuneInString(s[pos+m[0]:])
			pos += m[0] + max(w, 1)
			continue
		}
		spans = append(spans, [2]int{pos + m[0], pos + end})
		pos += end
	}
	return spans
}

// translator walks an Oniguruma pattern and writes its Go translation.
type translator struct {
	src   []rune
	pos   int
	group int   // capture groups written so far
	keep  []int // see pattern.keep
}

// alternation translates alternatives up to a ')' or the end; top says it is the whole pattern,
// where a trailing lookahead may close an alternative.
func (t *translator) alternation(top bool) (string, error) {
	var out, alt strings.Builder
	for {
		if t.pos >= len(t.src) || t.src[t.pos] == ')' || t.src[t.pos] == '|' {
			out.WriteString(alt.String())
			alt.Reset()
			if t.pos < len(t.src) && t.src[t.pos] == '|' {
				out.WriteByte('|')
				t.pos++
				continue
			}
			return out.String(), nil
		}
		if t.lookahead() {
			if !top {
				return "", fmt.Errorf("a lookahead at %d inside a group: only one that ends a top-level alternative is supported", t.pos)
			}
			look, err := t.trailingLookahead()
			if err != nil {
				return "", err
			}
			t.group++
			t.keep = append(t.keep, t.group)
			out.WriteString("(" + alt.String() + ")" + look)
			alt.Reset()
			if t.pos < len(t.src) && t.src[t.pos] != '|' && t.src[t.pos] != ')' {
				return "", fmt.Errorf("a lookahead at %d is followed by more pattern: only one that ends a top-level alternative is supported", t.pos)
			}
			continue
		}
		s, err := t.item()
		if err != nil {
			return "", err
		}
		alt.WriteString(s)
	}
}

func (t *translator) lookahead() bool {
	return t.hasPrefix("(?=") || t.hasPrefix("(?!")
}

func (t *translator) hasPrefix(p string) bool {
	return strings.HasPrefix(string(t.src[t.pos:min(len(t.src), t.pos+len(p))]), p)
}

// trailingLookahead translates (?=X) or (?!X), X one class, into what consumes the character
// looked at: X itself, or for (?!X) X's complement or the end of the text.
func (t *translator) trailingLookahead() (string, error) {
	negative := t.src[t.pos+2] == '!'
	at := t.pos
	t.pos += 3
	class, negated, err := t.oneClass()
	if err != nil || t.pos >= len(t.src) || t.src[t.pos] != ')' {
		return "", fmt.Errorf("a lookahead at %d: only one of one character class, such as (?!\\S), is supported", at)
	}
	t.pos++
	if negative {
		negated = !negated
	}
	c := "[" + class + "]"
	if negated {
		c = "[^" + class + "]"
	}
	if negative {
		return `(?:` + c + `|\z)`, nil
	}
	return c, nil
}

// oneClass reads one single-character item, a bracket expression or an escape such as \S or
// \p{L}, as the contents of a Go class and whether that class is to be negated.
func (t *translator) oneClass() (class string, negated bool, err error) {
	if t.pos >= len(t.src) {
		return "", false, fmt.Errorf("pattern ends")
	}
	switch c := t.src[t.pos]; c {
	case '[':
		s, err := t.bracket()
		if err != nil {
			return "", false, err
		}
		if strings.HasPrefix(s, "[^") {
			return s[2 : len(s)-1], true, nil
		}
		return s[1 : len(s)-1], false, nil
	case '\\':
		if t.pos+1 >= len(t.src) {
			return "", false, fmt.Errorf("pattern ends in '\\'")
		}
		e := t.src[t.pos+1]
		switch e {
		case 's', 'd', 'w':
			t.pos += 2
			return classEscape(e), false, nil
		case 'S', 'D', 'W':
			t.pos += 2
			return classEscape(e + 'a' - 'A'), true, nil
		}
		s, err := t.escape(true)
		return s, false, err
	case '(', ')', '|', '*', '+', '?', '{':
		return "", false, fmt.Errorf("%q at %d is not a character", c, t.pos)
	default:
		t.pos++
		return regexp.QuoteMeta(string(c)), false, nil
	}
}

// classEscape is the class contents of \s, \d or \w.
func classEscape(e rune) string {
	switch e {
	case 's':
		return spaceClass
	case 'd':
		return `\p{Nd}`
	default:
		return wordClass
	}
}

// item translates one atom with its quantifier, if any.
func (t *translator) item() (string, error) {
	c := t.src[t.pos]
	var s string
	var err error
	switch {
	case c == '(':
		s, err = t.groupItem()
	case c == '[':
		s, err = t.bracket()
	case c == '\\':
		s, err = t.escape(false)
	case c == '^':
		t.pos++
		s = `(?m:^)`
	case c == '$':
		t.pos++
		s = `(?m:$)`
	case c == '*' || c == '+' || c == '?':
		// Oniguruma: "target of repeat operator is not specified". Written as it is, it could
		// also turn the group around an alternative into Go's (?:…) or (?flags).
		return "", fmt.Errorf("%q at %d repeats nothing", c, t.pos)
	default:
		t.pos++
		s = string(c)
	}
	if err != nil {
		return "", err
	}
	// Quantifiers pass through; Go's regexp refuses the possessive ones, which is an error.
	for t.pos < len(t.src) && strings.ContainsRune("*+?{", t.src[t.pos]) {
		if t.src[t.pos] == '{' {
			end := t.pos
			for end < len(t.src) && t.src[end] != '}' {
				end++
			}
			if end == len(t.src) {
				return "", fmt.Errorf("'{' at %d has no '}'", t.pos)
			}
			s += string(t.src[t.pos : end+1])
			t.pos = end + 1
			continue
		}
		s += string(t.src[t.pos])
		t.pos++
	}
	return s, nil
}

// groupItem translates a group: (...), (?:...), (?i:...) and the like; lookbehind and atomic
// groups are not supported.
func (t *translator) groupItem() (string, error) {
	at := t.pos
	t.pos++
	head := "(?:"
	if t.pos < len(t.src) && t.src[t.pos] == '?' {
		end := t.pos + 1
		for end < len(t.src) && strings.ContainsRune("imsx-", t.src[end]) {
			end++
		}
		if end >= len(t.src) || (t.src[end] != ':' && t.src[end] != ')') || end == t.pos+1 && t.src[end] != ':' {
			return "", fmt.Errorf("the group at %d (%q) is not supported: only (...), (?:...) and flag groups such as (?i:...) are", at, string(t.src[at:min(len(t.src), at+4)]))
		}
		flags := string(t.src[t.pos+1 : end])
		if t.src[end] == ')' { // (?i): flags for the rest of the enclosing group
			t.pos = end + 1
			return "(?" + flags + ")", nil
		}
		head = "(?" + flags + ":"
		if flags == "" {
			head = "(?:"
		}
		t.pos = end + 1
	}
	inner, err := t.alternation(false)
	if err != nil {
		return "", err
	}
	if t.pos >= len(t.src) || t.src[t.pos] != ')' {
		return "", fmt.Errorf("the group at %d has no ')'", at)
	}
	t.pos++
	return head + inner + ")", nil
}

// bracket translates a bracket expression [...] (with \s, \d, \w inside spelled out).
func (t *translator) bracket() (string, error) {
	at := t.pos
	var b strings.Builder
	b.WriteByte('[')
	t.pos++
	if t.pos < len(t.src) && t.src[t.pos] == '^' {
		b.WriteByte('^')
		t.pos++
	}
	first := true
	for {
		if t.pos >= len(t.src) {
			return "", fmt.Errorf("'[' at %d has no ']'", at)
		}
		c := t.src[t.pos]
		switch {
		case c == ']' && !first:
			t.pos++
			b.WriteByte(']')
			return b.String(), nil
		case c == '\\':
			if t.pos+1 < len(t.src) {
				switch e := t.src[t.pos+1]; e {
				case 's', 'd', 'w':
					b.WriteString(classEscape(e))
					t.pos += 2
					first = false
					continue
				case 'S', 'D', 'W':
					return "", fmt.Errorf("\\%c inside the class at %d is not supported", e, at)
				}
			}
			s, err := t.escape(true)
			if err != nil {
				return "", err
			}
			b.WriteString(s)
		case c == '[' && t.hasPrefix("[:"):
			end := t.pos + 2
			for end+1 < len(t.src) && !(t.src[end] == ':' && t.src[end+1] == ']') {
				end++
			}
			if end+1 >= len(t.src) {
				return "", fmt.Errorf("'[:' at %d has no ':]'", t.pos)
			}
			b.WriteString(string(t.src[t.pos : end+2]))
			t.pos = end + 2
		case c == '[' || c == '&' && t.hasPrefix("&&"):
			return "", fmt.Errorf("nested classes and class intersections (at %d) are not supported", t.pos)
		default:
			b.WriteRune(c)
			t.pos++
		}
		first = false
	}
}

// escape translates a backslash escape; \s, \S, \d, \D, \w and \W become Oniguruma's Unicode
// classes, the others pass through as Go spells them.
func (t *translator) escape(inClass bool) (string, error) {
	if t.pos+1 >= len(t.src) {
		return "", fmt.Errorf("pattern ends in '\\'")
	}
	e := t.src[t.pos+1]
	t.pos += 2
	switch e {
	case 's', 'd', 'w':
		return "[" + classEscape(e) + "]", nil
	case 'S', 'D', 'W':
		return "[^" + classEscape(e+'a'-'A') + "]", nil
	case 'p', 'P':
		if t.pos < len(t.src) && t.src[t.pos] == '{' {
			end := t.pos
			for end < len(t.src) && t.src[end] != '}' {
				end++
			}
			if end == len(t.src) {
				return "", fmt.Errorf("\\%c{ has no '}'", e)
			}
			name := string(t.src[t.pos+1 : end])
			t.pos = end + 1
			if strings.HasPrefix(name, "^") { // Oniguruma's \p{^L} is \P{L}
				name = name[1:]
				e ^= 'p' ^ 'P'
			}
			return `\` + string(e) + "{" + name + "}", nil
		}
		return `\` + string(e), nil
	case 'x':
		if t.pos < len(t.src) && t.src[t.pos] == '{' {
			end := t.pos
			for end < len(t.src) && t.src[end] != '}' {
				end++
			}
			s := `\x` + string(t.src[t.pos:min(len(t.src), end+1)])
			t.pos = min(len(t.src), end+1)
			return s, nil
		}
		s := `\x` + string(t.src[t.pos:min(len(t.src), t.pos+2)])
		t.pos = min(len(t.src), t.pos+2)
		return s, nil
	case 'A':
		return `\A`, nil
	case 'z':
		return `\z`, nil
	case 'Z':
		return `(?:\n?\z)`, nil
	case 'b', 'B':
		if inClass {
			return "", fmt.Errorf("\\%c inside a class is not supported", e)
		}
		return `\` + string(e), nil
	case 'n', 'r', 't', 'f', 'v', 'a':
		return `\` + string(e), nil
	case 'h', 'H', 'G', 'K', 'R', 'X', 'k', 'g':
		return "", fmt.Errorf("the escape \\%c is not supported", e)
	}
	if e >= '0' && e <= '9' {
		return "", fmt.Errorf("back-references and octal escapes (\\%c) are not supported", e)
	}
	return regexp.QuoteMeta(string(e)), nil
}
