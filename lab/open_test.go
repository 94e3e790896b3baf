package lab

import (
	"strconv"
	"strings"
	"testing"
)

// TestOpen checks the command-line opener on a shipped model and on Hugging Face folders:
// sequences, tokens in each of their forms, the metric's position, and the errors.
func TestOpen(t *testing.T) {
	m, err := Open("induction")
	if err != nil {
		t.Fatal(err)
	}
	syms := m.m.symbols
	ids, err := m.Encode(syms[3] + " " + syms[1] + "  " + syms[3])
	if err != nil || len(ids) != 3 || ids[0] != 3 || ids[1] != 1 || ids[2] != 3 {
		t.Errorf("Encode of symbols 3 1 3 = %v, %v", ids, err)
	}
	for tok, want := range map[string]int{syms[2]: 2, "#4": 4} {
		if id, err := m.Token(tok); err != nil || id != want {
			t.Errorf("Token(%q) = %d, %v; want %d", tok, id, err, want)
		}
	}
	if m.Piece(2) != syms[2] || m.Position(ids) != 2 || m.Net() == nil || m.Name() != "induction" {
		t.Errorf("Piece(2) %q, Position %d, Name %q", m.Piece(2), m.Position(ids), m.Name())
	}

	g, err := Open("../testdata/pretrained/gpt2")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = g.Encode("hello world")
	if err != nil || len(ids) == 0 {
		t.Fatalf("Encode: %v, %v", ids, err)
	}
	last := ids[len(ids)-1]
	for _, tok := range []string{g.Piece(last), "#" + strconv.Itoa(last)} {
		if id, err := g.Token(tok); err != nil || id != last {
			t.Errorf("Token(%q) = %d, %v; want %d", tok, id, err, last)
		}
	}
	if id, err := g.Token(strings.ReplaceAll(g.Piece(last), "Ġ", " ")); err != nil || id != last {
		t.Errorf("Token of the text of %q = %d, %v; want %d", g.Piece(last), id, err, last)
	}

	bert, err := Open("../testdata/pretrained/bert")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = bert.Encode("the [MASK] is here")
	if err != nil {
		t.Fatal(err)
	}
	if p := bert.Position(ids); bert.Piece(ids[p]) != "[MASK]" {
		t.Errorf("Position of %v is %d (%q), want the [MASK]", ids, p, bert.Piece(ids[p]))
	}

	for name, f := range map[string]func() error{
		"no model":      func() error { _, err := Open("no-such-model"); return err },
		"bad symbol":    func() error { _, err := m.Encode("zzz"); return err },
		"bad token":     func() error { _, err := m.Token("zzz"); return err },
		"bad id":        func() error { _, err := m.Token("#99999"); return err },
		"not an id":     func() error { _, err := g.Token("#x"); return err },
		"two tokens":    func() error { _, err := g.Token("hello world again"); return err },
		"empty text":    func() error { _, err := g.Encode(" "); return err },
		"only specials": func() error { _, err := bert.Encode("\x01"); return err },
		"unknown":       func() error { _, err := bert.Token("zebra"); return err }, // one token: [UNK]
	} {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
