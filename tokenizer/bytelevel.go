package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteChar is GPT-2's map from bytes to printable characters: the printable ASCII and Latin-1
// bytes stand for themselves, the others for U+0100 onwards in byte order (the space is 'Ġ').
// charByte is its inverse. Both are built once and never written.
var byteChar, charByte = byteLevelTables()

func byteLevelTables() ([256]string, map[rune]byte) {
	var bc [256]string
	cb := make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = next
			next++
		}
		bc[b] = string(r)
		cb[r] = byte(b)
	}
	return bc, cb
}

// byteLevelEncode spells every byte of n as its byteChar, each coming from where the byte came
// from.
func byteLevelEncode(n normString) normString {
	size := 0
	for i := range len(n.s) {
		size += len(byteChar[n.s[i]])
	}
	var b builder
	b.grow(size)
	for i := range len(n.s) {
		b.add(byteChar[n.s[i]], n.align[i])
	}
	return b.done()
}

// byteLevelDecode turns a token's byte-level spelling back into bytes. A token with a character
// outside the map (an added token such as "é日") stands for its own UTF-8 bytes, whole, as in
// Hugging Face's ByteLevel decoder.
func byteLevelDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := charByte[r]
		if !ok {
			return []byte(s)
		}
		out = append(out, b)
	}
	return out
}

// lossyUTF8 is b as text, each maximal ill-formed subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy and the WHATWG TextDecoder both do (Go's strings.ToValidUTF8 would
// replace a whole run of bad bytes by one U+FFFD).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, w := utf8.DecodeRune(b)
		if r != utf8.RuneError || w > 1 {
			sb.Write(b[:w])
			b = b[w:]
			continue
		}
		sb.WriteRune(utf8.RuneError)
		b = b[maximalSubpart(b):]
	}
	return sb.String()
}

// maximalSubpart is the length of the longest prefix of b (which does not start with a valid
// character) that starts a well-formed UTF-8 sequence, at least 1.
func maximalSubpart(b []byte) int {
	c := b[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c >= 0xE0 && c <= 0xEF:
		n = 3
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		n = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if i == 1 && (b[i] < lo || b[i] > hi) || i > 1 && (b[i] < 0x80 || b[i] > 0xBF) {
			break
		}
	}
	return i
}
