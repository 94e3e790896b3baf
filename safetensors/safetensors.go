// Package safetensors reads and writes the Hugging Face .safetensors format.
//
// A .safetensors file is an 8-byte little-endian uint64 N, then N bytes of UTF-8 JSON (the
// header), then the data buffer. The header is an object mapping each tensor's name to
//
//	{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//
// plus an optional "__metadata__" object of string to string. Offsets count bytes from the start
// of the data buffer, and tensor data is stored row-major in little-endian byte order. The
// header may be padded with trailing spaces.
//
// Parse is at least as strict as the reference implementation: every tensor's byte count must
// match its dtype and shape, and the tensors must tile the data buffer exactly, with no gaps and
// no overlap. It also rejects duplicate keys, unknown fields in a tensor entry, and empty tensor
// names.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mhalab/mha/tensor"
)

// MaxHeaderSize bounds the JSON header length a file may claim (100 MiB), so that a corrupt
// length cannot make Parse look at an absurd amount of text. Encode refuses to write a larger
// header.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header key under which the free-form metadata lives.
const metadataKey = "__metadata__"

// DType names the element type of a stored tensor, spelled as in the header ("F32", "BF16", ...).
type DType string

// The element types this package understands. Files holding any other dtype are rejected by
// Parse.
const (
	F32  DType = "F32"  // IEEE 754 binary32
	F64  DType = "F64"  // IEEE 754 binary64
	F16  DType = "F16"  // IEEE 754 binary16
	BF16 DType = "BF16" // bfloat16: the top 16 bits of a binary32
	Bool DType = "BOOL" // one byte per element, 0 or 1
	U8   DType = "U8"   // unsigned 8-bit integer
	I32  DType = "I32"  // signed 32-bit integer
	I64  DType = "I64"  // signed 64-bit integer
)

// Size returns the number of bytes one element of type d occupies, or 0 when d is not one of the
// dtypes this package knows.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case Bool, U8:
		return 1
	}
	return 0
}

// Tensor is one stored tensor in raw form: Data holds the elements row-major as little-endian
// bytes, and len(Data) equals DType.Size() times the product of Shape. An empty Shape is a scalar
// holding one element.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte
}

// File is a parsed .safetensors file. Metadata is the header's "__metadata__" object; it is nil
// when the file has none. Look tensors up with Names and Has; read them with Raw, Float32,
// Float64, Half and Bool, or into slices of your own with ReadFloat32 and ReadHalf.
type File struct {
	Metadata map[string]string

	tensors map[string]Tensor
	names   []string           // sorted
	data    []byte             // the whole file, which the tensors' Data alias
	offs    map[string]int     // where each tensor's Data starts in data
	unmap   func([]byte) error // releases a mapped data (Open); nil when data is the heap's
	closed  bool
}

// ReadFile reads the file at path and parses it with Parse. Errors name the path. A path that is
// not a regular file (a directory, a device such as /dev/zero, a named pipe) is an error, checked
// before the file is opened, so that reading can neither block nor run without end.
func ReadFile(path string) (*File, error) {
	if _, err := statRegular(path); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return f, nil
}

// statRegular returns the size of the file at path, or an error when it is not a regular file.
func statRegular(path string) (int64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("safetensors: %w", err)
	}
	if !info.Mode().IsRegular() {
		return 0, fmt.Errorf("safetensors: %s is not a regular file (mode %v)", path, info.Mode().Type())
	}
	return info.Size(), nil
}

// Parse decodes a complete .safetensors file held in data. The returned tensors' Data slices
// alias data (no tensor bytes are copied), so data must not be modified while the File is in use.
//
// Parse returns an error, and never panics, when data is not a well-formed file: data shorter
// than 8 bytes; a header length beyond the data or above MaxHeaderSize; a header that is not
// valid UTF-8, does not start with '{', is not one JSON object followed only by whitespace, or
// repeats a key; a tensor entry that is not an object, has an unknown field, or lacks dtype,
// shape or data_offsets; an empty tensor name; an unknown dtype; a shape that is not an array of
// non-negative integers or describes more than tensor.MaxElements elements; data_offsets that are
// not exactly two non-negative integers with begin ≤ end ≤ the buffer's length; a byte count
// end−begin different from the dtype's size times the number of elements; tensors that do not
// tile the data buffer exactly (a gap, an overlap, or bytes after the last tensor); a
// "__metadata__" value that is not an object of strings; and a JSON number that is not an integer
// or does not fit in an int64.
func Parse(data []byte) (*File, error) {
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

// entry is one tensor as the header describes it.
type entry struct {
	name       string
	begin, end int64
}

func parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file is %d bytes, want at least 8 (the header length)", len(data))
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the maximum %d (MaxHeaderSize)", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix", n, len(data)-8)
	}
	header := data[8 : 8+n]
	buf := data[8+n:]
	if len(header) == 0 {
		return nil, errors.New("header is empty, want a JSON object")
	}
	if !utf8.Valid(header) {
		return nil, errors.New("header is not valid UTF-8")
	}
	if header[0] != '{' {
		return nil, fmt.Errorf("header starts with %q, want '{'", header[0])
	}

	f := &File{tensors: make(map[string]Tensor), data: data, offs: make(map[string]int)}
	var entries []entry
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if _, err := token(dec); err != nil { // the opening '{', checked above
		return nil, err
	}
	seen := make(map[string]bool)
	for dec.More() {
		key, err := token(dec)
		if err != nil {
			return nil, err
		}
		name, ok := key.(string)
		if !ok { // json.Decoder reports non-string keys itself; be safe anyway
			return nil, fmt.Errorf("header key is %s, want a string", describe(key))
		}
		if seen[name] {
			return nil, fmt.Errorf("header has duplicate key %q", name)
		}
		seen[name] = true
		if name == metadataKey {
			if f.Metadata, err = parseMetadata(dec); err != nil {
				return nil, err
			}
			continue
		}
		if name == "" {
			return nil, errors.New("header has a tensor with an empty name")
		}
		t, begin, end, err := parseEntry(dec, name, int64(len(buf)))
		if err != nil {
			return nil, err
		}
		t.Data = buf[begin:end:end]
		f.tensors[name] = t
		f.offs[name] = 8 + int(n) + int(begin)
		entries = append(entries, entry{name, begin, end})
	}
	if _, err := token(dec); err != nil { // the closing '}'
		return nil, err
	}
	if rest := header[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, fmt.Errorf("header has %d bytes of trailing data after the JSON object, want only whitespace", len(rest))
	}
	if err := checkTiling(entries, int64(len(buf))); err != nil {
		return nil, err
	}
	f.names = make([]string, 0, len(entries))
	for _, e := range entries {
		f.names = append(f.names, e.name)
	}
	slices.Sort(f.names)
	return f, nil
}

// checkTiling reports whether the tensors cover [0, bufLen) exactly once, allowing zero-size
// tensors anywhere a tensor boundary lies.
func checkTiling(entries []entry, bufLen int64) error {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b entry) int {
		if a.begin != b.begin {
			return cmp.Compare(a.begin, b.begin)
		}
		if a.end != b.end {
			return cmp.Compare(a.end, b.end)
		}
		return strings.Compare(a.name, b.name)
	})
	var pos int64
	prev := ""
	for _, e := range sorted {
		switch {
		case e.begin > pos:
			if prev == "" {
				return fmt.Errorf("tensor %q begins at byte %d, want 0: gap of %d bytes at the start of the data buffer",
					e.name, e.begin, e.begin)
			}
			return fmt.Errorf("tensor %q begins at byte %d, want %d: gap of %d bytes after tensor %q",
				e.name, e.begin, pos, e.begin-pos, prev)
		case e.begin < pos:
			return fmt.Errorf("tensor %q begins at byte %d, want %d: overlap with tensor %q",
				e.name, e.begin, pos, prev)
		}
		pos = e.end
		prev = e.name
	}
	if pos != bufLen {
		return fmt.Errorf("data buffer is %d bytes but the tensors cover only %d: %d trailing bytes",
			bufLen, pos, bufLen-pos)
	}
	return nil
}

// syntaxError reports header text that is not JSON. Callers that add context to errors about
// a value's meaning pass it through unchanged.
type syntaxError struct{ msg string }

// Error implements error.
func (e *syntaxError) Error() string { return e.msg }

// token returns the next JSON token, turning a premature end into a clear error.
func token(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return nil, &syntaxError{"header is not valid JSON: unexpected end of header"}
	}
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
		return nil, &syntaxError{fmt.Sprintf("header is not valid JSON: %v (at byte %d of the header)", se, se.Offset)}
	}
	if err != nil {
		return nil, &syntaxError{fmt.Sprintf("header is not valid JSON: %v", err)}
	}
	return tok, nil
}

// describe names the kind of JSON value a token starts, for error messages.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", rune(v))
	case string:
		return fmt.Sprintf("the string %q", truncate(v, 40))
	case json.Number:
		return "the number " + truncate(string(v), 40)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// parseMetadata reads the value of "__metadata__": an object of strings, or null (treated as
// absent, as the reference implementation does).
func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := token(dec)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("%s is %s, want an object of strings", metadataKey, describe(tok))
	}
	md := make(map[string]string)
	for dec.More() {
		key, err := token(dec)
		if err != nil {
			return nil, err
		}
		k, _ := key.(string)
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("%s has duplicate key %q", metadataKey, k)
		}
		val, err := token(dec)
		if err != nil {
			return nil, err
		}
		v, ok := val.(string)
		if !ok {
			return nil, fmt.Errorf("%s[%q] is %s, want a string", metadataKey, k, describe(val))
		}
		md[k] = v
	}
	if _, err := token(dec); err != nil { // '}'
		return nil, err
	}
	return md, nil
}

// parseEntry reads one tensor's header entry and checks it against a data buffer of bufLen
// bytes. It returns the tensor without Data, and the byte range its data occupies.
func parseEntry(dec *json.Decoder, name string, bufLen int64) (t Tensor, begin, end int64, err error) {
	fail := func(format string, args ...any) (Tensor, int64, int64, error) {
		return Tensor{}, 0, 0, fmt.Errorf("tensor %q: "+format, append([]any{name}, args...)...)
	}
	// badField reports err from reading field, passing JSON syntax errors through unchanged.
	badField := func(field string, err error) (Tensor, int64, int64, error) {
		if _, ok := err.(*syntaxError); ok {
			return Tensor{}, 0, 0, err
		}
		return fail("%s %v", field, err)
	}
	tok, err := token(dec)
	if err != nil {
		return Tensor{}, 0, 0, err
	}
	if tok != json.Delim('{') {
		return fail("entry is %s, want an object with dtype, shape and data_offsets", describe(tok))
	}
	var (
		dtype                   string
		shape, offsets          []int64
		hasDType, hasShape, has bool
	)
	for dec.More() {
		key, err := token(dec)
		if err != nil {
			return Tensor{}, 0, 0, err
		}
		k, _ := key.(string)
		switch k {
		case "dtype":
			if hasDType {
				return fail("duplicate field %q", k)
			}
			hasDType = true
			val, err := token(dec)
			if err != nil {
				return Tensor{}, 0, 0, err
			}
			s, ok := val.(string)
			if !ok {
				return fail("dtype is %s, want a string", describe(val))
			}
			dtype = s
		case "shape":
			if hasShape {
				return fail("duplicate field %q", k)
			}
			hasShape = true
			if shape, err = parseInts(dec, -1); err != nil {
				return badField("shape", err)
			}
		case "data_offsets":
			if has {
				return fail("duplicate field %q", k)
			}
			has = true
			if offsets, err = parseInts(dec, 2); err != nil {
				return badField("data_offsets", err)
			}
		default:
			return fail("unknown field %q, want only dtype, shape and data_offsets", truncate(k, 40))
		}
	}
	if _, err := token(dec); err != nil { // '}'
		return Tensor{}, 0, 0, err
	}
	switch {
	case !hasDType:
		return fail("missing field dtype")
	case !hasShape:
		return fail("missing field shape")
	case !has:
		return fail("missing field data_offsets")
	}

	d := DType(dtype)
	if d.Size() == 0 {
		return fail("unknown dtype %q, want one of F32, F64, F16, BF16, BOOL, U8, I32, I64", truncate(dtype, 40))
	}
	dims := make([]int, len(shape))
	for i, v := range shape {
		if v < 0 {
			return fail("shape %v has negative dimension %d", shape, v)
		}
		dims[i] = int(v)
	}
	count, err := tensor.NumElements(dims)
	if err != nil {
		return fail("shape %v has more than %d elements (tensor.MaxElements)", shape, int64(tensor.MaxElements))
	}
	if len(offsets) != 2 {
		return fail("data_offsets has %d values, want 2 ([begin, end])", len(offsets))
	}
	begin, end = offsets[0], offsets[1]
	switch {
	case begin < 0 || end < 0:
		return fail("data_offsets [%d, %d] are negative, want non-negative byte offsets", begin, end)
	case begin > end:
		return fail("data_offsets [%d, %d] have begin > end", begin, end)
	case end > bufLen:
		return fail("data_offsets end %d is beyond the %d-byte data buffer", end, bufLen)
	}
	want := int64(count) * int64(d.Size())
	if end-begin != want {
		return fail("data is %d bytes, want %d (%s × %v)", end-begin, want, d, dims)
	}
	return Tensor{DType: d, Shape: dims}, begin, end, nil
}

// parseInts reads a JSON array of integers that fit in an int64. When limit ≥ 0 it stops with an
// error as soon as the array holds more than limit values.
func parseInts(dec *json.Decoder, limit int) ([]int64, error) {
	tok, err := token(dec)
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("is %s, want an array of integers", describe(tok))
	}
	var out []int64
	for dec.More() {
		tok, err := token(dec)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("element %d is %s, want an integer", len(out), describe(tok))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			if strings.ContainsAny(string(num), ".eE") {
				return nil, fmt.Errorf("element %d is %s, want an integer", len(out), truncate(string(num), 40))
			}
			return nil, fmt.Errorf("element %d is %s, which does not fit in int64", len(out), truncate(string(num), 40))
		}
		if limit >= 0 && len(out) == limit {
			return nil, fmt.Errorf("has more than %d values, want %d", limit, limit)
		}
		out = append(out, v)
	}
	if _, err := token(dec); err != nil { // ']'
		return nil, err
	}
	return out, nil
}

// Names returns the names of the file's tensors in sorted order. The caller may modify the
// returned slice.
func (f *File) Names() []string {
	return slices.Clone(f.names)
}

// Has reports whether the file holds a tensor called name.
func (f *File) Has(name string) bool {
	_, ok := f.tensors[name]
	return ok
}

// Raw returns the tensor called name as stored. Its Data aliases the slice given to Parse (or
// the file's mapping, which Close releases); its Shape is a fresh copy. Raw returns an error,
// listing the names the file does have, when there is no such tensor, and an error when the
// File is closed.
func (f *File) Raw(name string) (Tensor, error) {
	if f.closed {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q read after Close", name)
	}
	t, ok := f.tensors[name]
	if !ok {
		return Tensor{}, f.missing(name)
	}
	t.Shape = slices.Clone(t.Shape)
	if t.Shape == nil {
		t.Shape = []int{}
	}
	return t, nil
}

// maxListed bounds how many names a "no tensor" error lists.
const maxListed = 10

func (f *File) missing(name string) error {
	var have string
	switch {
	case len(f.names) == 0:
		have = "none"
	case len(f.names) <= maxListed:
		have = strings.Join(f.names, ", ")
	default:
		have = fmt.Sprintf("%s, … (%d more)", strings.Join(f.names[:maxListed], ", "), len(f.names)-maxListed)
	}
	return fmt.Errorf("safetensors: no tensor %q (have: %s)", name, have)
}
