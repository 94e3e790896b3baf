package safetensors

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// build assembles a .safetensors file from a header text and a data buffer, the way a foreign
// writer would, without going through Encode.
func build(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func le32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func mustParse(t *testing.T, data []byte) *File {
	t.Helper()
	f, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

func TestDTypeSize(t *testing.T) {
	want := map[DType]int{F32: 4, F64: 8, F16: 2, BF16: 2, Bool: 1, U8: 1, I32: 4, I64: 8, "I8": 0, "": 0, "f32": 0}
	for d, n := range want {
		if got := d.Size(); got != n {
			t.Errorf("DType(%q).Size() = %d, want %d", d, got, n)
		}
	}
}

// TestRoundTrip encodes tensors of every dtype, including a scalar and zero-size tensors, and
// checks that Parse gives back the same names, dtypes, shapes, bytes and metadata.
func TestRoundTrip(t *testing.T) {
	in := map[string]Tensor{}
	for i, d := range []DType{F32, F64, F16, BF16, Bool, U8, I32, I64} {
		shapes := map[string][]int{"mat": {2, 3}, "scalar": {}, "empty": {0, 4}, "vec": {5}}
		for kind, shape := range shapes {
			n, _ := tensor.NumElements(shape)
			data := make([]byte, n*d.Size())
			for j := range data {
				data[j] = byte(7*i + 13*j + 1)
				if d == Bool {
					data[j] &= 1
				}
			}
			in[string(d)+"/"+kind] = Tensor{DType: d, Shape: shape, Data: data}
		}
	}
	in["zero-scalar-neighbour"] = Tensor{DType: F32, Shape: []int{0}, Data: []byte{}}
	md := map[string]string{"format": "pt", "note": `quotes " and <tags> & ünïcode`, "": "empty key"}

	enc, err := Encode(in, md)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	n := binary.LittleEndian.Uint64(enc)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	if h := enc[8 : 8+n]; h[0] != '{' || strings.TrimRight(string(h), " ")[len(strings.TrimRight(string(h), " "))-1] != '}' {
		t.Errorf("header %q is not a space-padded JSON object", h)
	}

	f := mustParse(t, enc)
	if !maps.Equal(f.Metadata, md) {
		t.Errorf("Metadata = %v, want %v", f.Metadata, md)
	}
	wantNames := slices.Sorted(maps.Keys(in))
	if got := f.Names(); !slices.Equal(got, wantNames) {
		t.Errorf("Names() = %v, want %v", got, wantNames)
	}
	// Data is laid out in sorted-name order, right after the header.
	var wantBuf []byte
	for _, name := range wantNames {
		wantBuf = append(wantBuf, in[name].Data...)
	}
	if !bytes.Equal(enc[8+n:], wantBuf) {
		t.Errorf("data buffer is not the tensors' bytes in sorted-name order")
	}
	for name, want := range in {
		if !f.Has(name) {
			t.Errorf("Has(%q) = false", name)
		}
		got, err := f.Raw(name)
		if err != nil {
			t.Fatalf("Raw(%q): %v", name, err)
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("Raw(%q) = %v %v %v, want %v %v %v", name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
		if got.Shape == nil {
			t.Errorf("Raw(%q).Shape is nil, want an empty slice for a scalar", name)
		}
		ft, err := f.Float32(name)
		if err != nil {
			t.Fatalf("Float32(%q): %v", name, err)
		}
		if n, _ := tensor.NumElements(want.Shape); len(ft.Data) != n || !slices.Equal(ft.Shape, want.Shape) {
			t.Errorf("Float32(%q) has %d values of shape %v, want %d of %v", name, len(ft.Data), ft.Shape, n, want.Shape)
		}
	}
	if f.Has("nope") {
		t.Error(`Has("nope") = true`)
	}

	// Without metadata the header has no "__metadata__" key and Parse reports nil.
	enc, err = Encode(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(enc, []byte(metadataKey)) {
		t.Error("Encode with nil metadata wrote a __metadata__ key")
	}
	if f := mustParse(t, enc); f.Metadata != nil {
		t.Errorf("Metadata = %v, want nil", f.Metadata)
	}

	// No tensors at all is a valid file too.
	enc, err = Encode(nil, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	f = mustParse(t, enc)
	if len(f.Names()) != 0 || f.Metadata["k"] != "v" {
		t.Errorf("empty file parsed as names %v metadata %v", f.Names(), f.Metadata)
	}
}

// TestConversions checks the values each dtype converts to in Float32, Float64 and Bool.
func TestConversions(t *testing.T) {
	i32 := binary.LittleEndian.AppendUint32(nil, uint32(0xffffff85)) // -123
	i32 = binary.LittleEndian.AppendUint32(i32, 1<<24+1)             // rounds in float32
	var i64 []byte
	for _, v := range []int64{-5, 1 << 53, math.MaxInt64} {
		i64 = binary.LittleEndian.AppendUint64(i64, uint64(v))
	}
	var f64 []byte
	for _, v := range []float64{0.1, -1e300, math.Inf(-1)} {
		f64 = binary.LittleEndian.AppendUint64(f64, math.Float64bits(v))
	}
	in := map[string]Tensor{
		"f32":  {F32, []int{3}, le32(1.5, -0, float32(math.Inf(1)))},
		"f64":  {F64, []int{3}, f64},
		"i32":  {I32, []int{2}, i32},
		"i64":  {I64, []int{3}, i64},
		"u8":   {U8, []int{2, 2}, []byte{0, 1, 200, 255}},
		"bool": {Bool, []int{2, 2}, []byte{0, 1, 1, 0}},
	}
	enc, err := Encode(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, enc)
	want32 := map[string][]float32{
		"f32":  {1.5, 0, float32(math.Inf(1))},
		"f64":  {0.1, float32(math.Inf(-1)), float32(math.Inf(-1))},
		"i32":  {-123, 1 << 24},
		"i64":  {-5, 1 << 53, 1 << 63},
		"u8":   {0, 1, 200, 255},
		"bool": {0, 1, 1, 0},
	}
	want64 := map[string][]float64{
		"f32":  {1.5, 0, math.Inf(1)},
		"f64":  {0.1, -1e300, math.Inf(-1)},
		"i32":  {-123, 1<<24 + 1},
		"i64":  {-5, 1 << 53, 1 << 63},
		"u8":   {0, 1, 200, 255},
		"bool": {0, 1, 1, 0},
	}
	for name, want := range want32 {
		got, err := f.Float32(name)
		if err != nil {
			t.Fatalf("Float32(%q): %v", name, err)
		}
		if !slices.Equal(got.Data, want) || !slices.Equal(got.Shape, in[name].Shape) {
			t.Errorf("Float32(%q) = %v %v, want %v %v", name, got.Data, got.Shape, want, in[name].Shape)
		}
		got64, shape, err := f.Float64(name)
		if err != nil {
			t.Fatalf("Float64(%q): %v", name, err)
		}
		if !slices.Equal(got64, want64[name]) || !slices.Equal(shape, in[name].Shape) {
			t.Errorf("Float64(%q) = %v %v, want %v %v", name, got64, shape, want64[name], in[name].Shape)
		}
	}

	m, err := f.Bool("u8")
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true, true}; !slices.Equal(m.Data, want) || !slices.Equal(m.Shape, []int{2, 2}) {
		t.Errorf("Bool(u8) = %v %v, want %v [2 2]", m.Data, m.Shape, want)
	}
	m, err = f.Bool("bool")
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true, false}; !slices.Equal(m.Data, want) {
		t.Errorf("Bool(bool) = %v, want %v", m.Data, want)
	}
	_, err = f.Bool("f32")
	if err == nil || !strings.Contains(err.Error(), "has dtype F32, want BOOL or U8") {
		t.Errorf("Bool(f32) error = %v, want one naming F32 and BOOL or U8", err)
	}
}

func TestBoolByteOutOfRange(t *testing.T) {
	f := mustParse(t, build(`{"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}`, []byte{0, 1, 2}))
	const phrase = `tensor "m": BOOL element 2 is byte 2, want 0 or 1`
	if _, err := f.Bool("m"); err == nil || !strings.Contains(err.Error(), phrase) {
		t.Errorf("Bool error = %v, want %q", err, phrase)
	}
	if _, err := f.Float32("m"); err == nil || !strings.Contains(err.Error(), phrase) {
		t.Errorf("Float32 error = %v, want %q", err, phrase)
	}
	if _, _, err := f.Float64("m"); err == nil || !strings.Contains(err.Error(), phrase) {
		t.Errorf("Float64 error = %v, want %q", err, phrase)
	}
	// Raw still works: the file itself is well-formed.
	if r, err := f.Raw("m"); err != nil || !bytes.Equal(r.Data, []byte{0, 1, 2}) {
		t.Errorf("Raw = %v, %v", r, err)
	}
}

// TestKnownHalfBytes decodes hand-written F16 and BF16 files to exact float32 values.
func TestKnownHalfBytes(t *testing.T) {
	type c struct {
		bits uint16
		want uint32 // float32 bits
	}
	f16 := []c{
		{0x3c00, math.Float32bits(1)},
		{0xc000, math.Float32bits(-2)},
		{0x3800, math.Float32bits(0.5)},
		{0x7bff, math.Float32bits(65504)},
		{0x0001, math.Float32bits(float32(math.Ldexp(1, -24)))},          // smallest subnormal
		{0x03ff, math.Float32bits(float32(math.Ldexp(1023, -24)))},       // largest subnormal
		{0x8001, math.Float32bits(-float32(math.Ldexp(1, -24)))},         // negative subnormal
		{0x0400, math.Float32bits(float32(math.Ldexp(1, -14)))},          // smallest normal
		{0x7c00, math.Float32bits(float32(math.Inf(1)))},                 // +Inf
		{0xfc00, math.Float32bits(float32(math.Inf(-1)))},                // -Inf
		{0x7e00, 0x7fc00000},                                             // quiet NaN
		{0x7c01, 0x7fc02000},                                             // signalling NaN: payload kept, made quiet (as VCVTPH2PS does)
		{0x8000, 0x80000000},                                             // -0
		{0x3555, math.Float32bits(float32(math.Ldexp(1024+0x155, -12)))}, // ≈ 1/3
	}
	bf16 := []c{
		{0x3f80, math.Float32bits(1)},
		{0xc000, math.Float32bits(-2)},
		{0x3f00, math.Float32bits(0.5)},
		{0x477f, math.Float32bits(65280)}, // 65504 is not a bfloat16; these are its neighbours
		{0x4780, math.Float32bits(65536)},
		{0x0001, math.Float32bits(float32(math.Ldexp(1, -133)))}, // smallest subnormal
		{0x7f80, math.Float32bits(float32(math.Inf(1)))},
		{0xff80, math.Float32bits(float32(math.Inf(-1)))},
		{0x7fc0, 0x7fc00000}, // NaN
		{0x8000, 0x80000000}, // -0
	}
	for _, tc := range []struct {
		dtype DType
		cases []c
	}{{F16, f16}, {BF16, bf16}} {
		var bits []uint16
		for _, c := range tc.cases {
			bits = append(bits, c.bits)
		}
		n := len(bits)
		header := `{"x":{"dtype":"` + string(tc.dtype) + `","shape":[` + strconv.Itoa(n) + `],"data_offsets":[0,` + strconv.Itoa(2*n) + `]}}`
		f := mustParse(t, build(header, le16(bits...)))
		got, err := f.Float32("x")
		if err != nil {
			t.Fatal(err)
		}
		got64, _, err := f.Float64("x")
		if err != nil {
			t.Fatal(err)
		}
		h, err := f.Half("x")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(h.Data, bits) || !slices.Equal(h.Shape, []int{n}) {
			t.Errorf("%s: Half = %#04x %v, want the stored %#04x [%d]", tc.dtype, h.Data, h.Shape, bits, n)
		}
		for i, c := range tc.cases {
			if g := math.Float32bits(got.Data[i]); g != c.want {
				t.Errorf("%s %#04x: Float32 = %#08x (%g), want %#08x (%g)",
					tc.dtype, c.bits, g, got.Data[i], c.want, math.Float32frombits(c.want))
			}
			w := float64(math.Float32frombits(c.want))
			if g := got64[i]; g != w && !(math.IsNaN(g) && math.IsNaN(w)) || math.Signbit(g) != math.Signbit(w) {
				t.Errorf("%s %#04x: Float64 = %g, want %g", tc.dtype, c.bits, g, w)
			}
		}
	}
}

// TestHalf checks that Half returns BF16 and F16 tensors as stored, that FromHalf writes them back
// unchanged, and that other dtypes and missing tensors are refused with errors naming them.
func TestHalf(t *testing.T) {
	special := []uint16{0, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3c00, 0x3f80, 0xffff}
	in := map[string]*tensor.Half{
		"bf16":   {Shape: []int{4, 4}, Data: special, Format: tensor.BFloat16},
		"f16":    {Shape: []int{2, 8}, Data: special, Format: tensor.Float16},
		"scalar": {Shape: []int{}, Data: []uint16{0x4049}, Format: tensor.BFloat16},
		"empty":  {Shape: []int{3, 0}, Data: []uint16{}, Format: tensor.Float16},
	}
	tensors := map[string]Tensor{"f32": FromFloat32(&tensor.Tensor{Shape: []int{1}, Data: []float32{1}})}
	for name, h := range in {
		tensors[name] = FromHalf(h)
	}
	if got := tensors["bf16"]; got.DType != BF16 || &got.Shape[0] == &in["bf16"].Shape[0] || !bytes.Equal(got.Data[:4], []byte{0, 0, 0, 0x80}) {
		t.Errorf("FromHalf(bf16) = %v %v %x: want BF16, a copied shape, little-endian bytes", got.DType, got.Shape, got.Data[:4])
	}
	if got := tensors["f16"]; got.DType != F16 {
		t.Errorf("FromHalf(f16) has dtype %v, want F16", got.DType)
	}
	enc, err := Encode(tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, enc)
	for name, want := range in {
		got, err := f.Half(name)
		if err != nil {
			t.Fatalf("Half(%q): %v", name, err)
		}
		if got.Format != want.Format || !slices.Equal(got.Shape, want.Shape) || !slices.Equal(got.Data, want.Data) || got.Shape == nil {
			t.Errorf("Half(%q) = %v %v %#04x, want %v %v %#04x", name, got.Format, got.Shape, got.Data, want.Format, want.Shape, want.Data)
		}
		// Half is the stored form of what Float32 converts.
		f32, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range got.Data {
			w := kernel.F16ToF32(h)
			if got.Format == tensor.BFloat16 {
				w = kernel.BF16ToF32(h)
			}
			if math.Float32bits(f32.Data[i]) != math.Float32bits(w) {
				t.Errorf("Half(%q)[%d] = %#04x, but Float32 gives %#08x", name, i, h, math.Float32bits(f32.Data[i]))
			}
		}
	}
	// A fresh copy: changing it does not change the file.
	h, _ := f.Half("bf16")
	h.Data[0], h.Shape[0] = 0xabcd, 99
	if again, _ := f.Half("bf16"); again.Data[0] != 0 || again.Shape[0] != 4 {
		t.Error("Half shares its data or shape with the File")
	}

	if _, err := f.Half("f32"); err == nil || err.Error() != `safetensors: tensor "f32" has dtype F32, want BF16 or F16 for a half-precision tensor` {
		t.Errorf("Half(f32) error = %v", err)
	}
	if _, err := f.Half("x"); err == nil || !strings.Contains(err.Error(), `no tensor "x" (have: bf16, empty, f16, f32, scalar)`) {
		t.Errorf("Half(x) error = %v", err)
	}
	bad := FromHalf(&tensor.Half{Shape: []int{1}, Data: []uint16{1}})
	if _, err := Encode(map[string]Tensor{"w": bad}, nil); err == nil || !strings.Contains(err.Error(), `tensor "w": unknown dtype ""`) {
		t.Errorf("Encode of FromHalf without a format: error %v", err)
	}
}

// TestReadInto checks that ReadFloat32 and ReadHalf fill a caller's slice with what Float32 and
// Half return, and that each refuses, leaving the slice unchanged, a slice of the wrong length, a
// tensor it cannot convert and a missing tensor.
func TestReadInto(t *testing.T) {
	tensors := map[string]Tensor{
		"f32":  {F32, []int{2, 2}, le32(1.5, -2, float32(math.Inf(1)), 0)},
		"bf16": FromHalf(&tensor.Half{Shape: []int{3}, Data: []uint16{0x3f80, 0xc000, 0x7fc0}, Format: tensor.BFloat16}),
		"f16":  FromHalf(&tensor.Half{Shape: []int{1, 2}, Data: []uint16{0x3c00, 0x0001}, Format: tensor.Float16}),
		"bool": {Bool, []int{2}, []byte{1, 2}},
	}
	enc, err := Encode(tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, enc)
	for _, name := range []string{"f32", "bf16", "f16"} {
		want, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(want.Data)+2) // read into the middle of a larger slice
		got[0], got[len(got)-1] = 7, 7
		if err := f.ReadFloat32(name, got[1:len(got)-1]); err != nil {
			t.Fatalf("ReadFloat32(%q): %v", name, err)
		}
		if got[0] != 7 || got[len(got)-1] != 7 || !slices.EqualFunc(got[1:len(got)-1], want.Data, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Errorf("ReadFloat32(%q) wrote %v, want 7 %v 7", name, got, want.Data)
		}
	}
	for _, name := range []string{"bf16", "f16"} {
		want, err := f.Half(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]uint16, len(want.Data))
		format, err := f.ReadHalf(name, got)
		if err != nil || format != want.Format || !slices.Equal(got, want.Data) {
			t.Errorf("ReadHalf(%q) = %v %#04x, %v; want %v %#04x", name, format, got, err, want.Format, want.Data)
		}
	}

	// Rows of the first dimension: the second row of f32, the last two values of bf16.
	row := make([]float32, 2)
	if err := f.ReadFloat32Rows("f32", 1, 2, row); err != nil || row[0] != float32(math.Inf(1)) || row[1] != 0 {
		t.Errorf("ReadFloat32Rows(f32, 1, 2) = %v, %v; want [+Inf 0]", row, err)
	}
	halfRows := make([]uint16, 2)
	if format, err := f.ReadHalfRows("bf16", 1, 3, halfRows); err != nil || format != tensor.BFloat16 || !slices.Equal(halfRows, []uint16{0xc000, 0x7fc0}) {
		t.Errorf("ReadHalfRows(bf16, 1, 3) = %#04x, %v, %v", halfRows, format, err)
	}
	for _, c := range []struct {
		r0, r1 int
		n      int
		phrase string
	}{
		{1, 3, 2, `rows 1 … 3 of tensor "f32" [2 2], want 0 ≤ first ≤ end ≤ 2`},
		{-1, 1, 2, `rows -1 … 1`},
		{2, 1, 0, `rows 2 … 1`},
		{0, 1, 4, `rows 0 … 1 of tensor "f32" F32 [2 2] hold 2 values, read into a slice of 4`},
	} {
		dst := make([]float32, c.n)
		if err := f.ReadFloat32Rows("f32", c.r0, c.r1, dst); err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("ReadFloat32Rows(f32, %d, %d, %d values) error = %v, want %q", c.r0, c.r1, c.n, err, c.phrase)
		}
	}
	for _, c := range []struct {
		name   string
		n      int
		phrase string
	}{
		{"f32", 3, `tensor "f32" F32 [2 2] has 4 values, read into a slice of 3`},
		{"f32", 5, `tensor "f32" F32 [2 2] has 4 values, read into a slice of 5`},
		{"bool", 2, `tensor "bool": BOOL element 1 is byte 2, want 0 or 1`},
		{"x", 2, `no tensor "x"`},
	} {
		dst := make([]float32, c.n)
		for i := range dst {
			dst[i] = 9
		}
		if err := f.ReadFloat32(c.name, dst); err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("ReadFloat32(%q, %d values) error = %v, want %q", c.name, c.n, err, c.phrase)
		}
		if slices.ContainsFunc(dst, func(v float32) bool { return v != 9 }) {
			t.Errorf("ReadFloat32(%q) changed the slice after an error: %v", c.name, dst)
		}
	}
	for _, c := range []struct {
		name   string
		n      int
		phrase string
	}{
		{"bf16", 2, `tensor "bf16" BF16 [3] has 3 values, read into a slice of 2`},
		{"f16", 0, `tensor "f16" F16 [1 2] has 2 values, read into a slice of 0`},
		{"f32", 4, `tensor "f32" has dtype F32, want BF16 or F16`},
		{"x", 2, `no tensor "x"`},
	} {
		dst := make([]uint16, c.n)
		for i := range dst {
			dst[i] = 9
		}
		if _, err := f.ReadHalf(c.name, dst); err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("ReadHalf(%q, %d values) error = %v, want %q", c.name, c.n, err, c.phrase)
		}
		if slices.ContainsFunc(dst, func(v uint16) bool { return v != 9 }) {
			t.Errorf("ReadHalf(%q) changed the slice after an error: %v", c.name, dst)
		}
	}
}

// TestPythonGolden parses a header exactly as Python's safetensors writes it.
func TestPythonGolden(t *testing.T) {
	const header = `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}`
	f := mustParse(t, build(header, le32(1.5, -3)))
	if want := map[string]string{"format": "pt"}; !maps.Equal(f.Metadata, want) {
		t.Errorf("Metadata = %v, want %v", f.Metadata, want)
	}
	if got := f.Names(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Names() = %v, want [a]", got)
	}
	a, err := f.Float32("a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Shape, []int{2}) || !slices.Equal(a.Data, []float32{1.5, -3}) {
		t.Errorf("a = %v %v, want [2] [1.5 -3]", a.Shape, a.Data)
	}
}

func TestFromHelpers(t *testing.T) {
	x := &tensor.Tensor{Shape: []int{2, 2}, Data: []float32{1, -2.5, float32(math.Inf(1)), 3e-40}}
	m := &tensor.Bool{Shape: []int{3}, Data: []bool{true, false, true}}
	y, err := FromFloat64([]float64{math.Pi, -1e-310}, []int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	tx := FromFloat32(x)
	if c := FromFloat32(x); &c.Shape[0] == &x.Shape[0] {
		t.Error("FromFloat32 shares the shape slice")
	}
	enc, err := Encode(map[string]Tensor{"x": tx, "m": FromBool(m), "y": y, "s": FromFloat32(&tensor.Tensor{Data: []float32{7}})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, enc)
	gx, err := f.Float32("x")
	if err != nil || !slices.Equal(gx.Data, x.Data) || !slices.Equal(gx.Shape, x.Shape) {
		t.Errorf("Float32(x) = %v, %v; want %v", gx, err, x)
	}
	gm, err := f.Bool("m")
	if err != nil || !slices.Equal(gm.Data, m.Data) || !slices.Equal(gm.Shape, m.Shape) {
		t.Errorf("Bool(m) = %v, %v; want %v", gm, err, m)
	}
	gy, shape, err := f.Float64("y")
	if err != nil || !slices.Equal(gy, []float64{math.Pi, -1e-310}) || !slices.Equal(shape, []int{2, 1}) {
		t.Errorf("Float64(y) = %v %v, %v", gy, shape, err)
	}
	gs, err := f.Float32("s")
	if err != nil || len(gs.Shape) != 0 || !slices.Equal(gs.Data, []float32{7}) {
		t.Errorf("Float32(s) = %v, %v; want scalar 7", gs, err)
	}

	if _, err := FromFloat64([]float64{1, 2, 3}, []int{2, 2}); err == nil || !strings.Contains(err.Error(), "3 values for shape [2 2], want 4") {
		t.Errorf("FromFloat64 length mismatch error = %v", err)
	}
	if _, err := FromFloat64(nil, []int{-1}); err == nil || !strings.Contains(err.Error(), "invalid shape [-1]") {
		t.Errorf("FromFloat64 negative shape error = %v", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	ok := Tensor{DType: F32, Shape: []int{1}, Data: make([]byte, 4)}
	for _, tc := range []struct {
		name    string
		tensors map[string]Tensor
		md      map[string]string
		phrase  string
	}{
		{"unknown dtype", map[string]Tensor{"w": {DType: "F8", Shape: []int{1}, Data: []byte{0}}}, nil, `tensor "w": unknown dtype "F8"`},
		{"short data", map[string]Tensor{"w": {DType: F32, Shape: []int{2, 2}, Data: make([]byte, 12)}}, nil, `safetensors: tensor "w": data is 12 bytes, want 16 (F32 × [2 2])`},
		{"negative dim", map[string]Tensor{"w": {DType: F32, Shape: []int{2, -1}}}, nil, `tensor "w": invalid shape [2 -1]`},
		{"huge shape", map[string]Tensor{"w": {DType: F32, Shape: []int{1 << 30, 1 << 30, 2}}}, nil, `tensor "w": invalid shape`},
		{"empty name", map[string]Tensor{"": ok}, nil, "tensor name is empty"},
		{"reserved name", map[string]Tensor{"__metadata__": ok}, nil, `tensor name "__metadata__" is reserved`},
		{"bad utf8 name", map[string]Tensor{"\xff": ok}, nil, "not valid UTF-8"},
		{"bad utf8 metadata", map[string]Tensor{"w": ok}, map[string]string{"k": "\xfe"}, `metadata "k": key or value is not valid UTF-8`},
	} {
		_, err := Encode(tc.tensors, tc.md)
		if err == nil || !strings.Contains(err.Error(), tc.phrase) || !strings.HasPrefix(err.Error(), "safetensors: ") {
			t.Errorf("%s: Encode error = %v, want one containing %q", tc.name, err, tc.phrase)
		}
	}
}

func TestRawMissing(t *testing.T) {
	f := mustParse(t, build(`{"b":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[],"data_offsets":[1,2]}}`, []byte{1, 2}))
	_, err := f.Raw("x")
	if want := `safetensors: no tensor "x" (have: a, b)`; err == nil || err.Error() != want {
		t.Errorf("Raw(x) error = %v, want %q", err, want)
	}
	for _, get := range []func() error{
		func() error { _, err := f.Float32("x"); return err },
		func() error { _, _, err := f.Float64("x"); return err },
		func() error { _, err := f.Bool("x"); return err },
	} {
		if err := get(); err == nil || !strings.Contains(err.Error(), `no tensor "x"`) {
			t.Errorf("missing-tensor error = %v", err)
		}
	}

	many := map[string]Tensor{}
	for i := range 25 {
		many["t"+strconv.Itoa(100+i)] = Tensor{DType: U8, Shape: []int{0}}
	}
	enc, err := Encode(many, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mustParse(t, enc).Raw("x")
	want := `safetensors: no tensor "x" (have: t100, t101, t102, t103, t104, t105, t106, t107, t108, t109, … (15 more))`
	if err == nil || err.Error() != want {
		t.Errorf("Raw(x) error = %v, want %q", err, want)
	}

	_, err = mustParse(t, build("{}", nil)).Raw("x")
	if want := `safetensors: no tensor "x" (have: none)`; err == nil || err.Error() != want {
		t.Errorf("Raw(x) on empty file error = %v, want %q", err, want)
	}
}

// TestAliasing checks the documented aliasing: Raw's Data shares the parsed bytes, but its
// capacity stops at the tensor's end, and its Shape is a copy.
func TestAliasing(t *testing.T) {
	data := build(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, []byte{1, 2, 3})
	f := mustParse(t, data)
	a, _ := f.Raw("a")
	data[len(data)-3] = 42
	if a.Data[0] != 42 {
		t.Error("Raw data does not alias the parsed slice")
	}
	_ = append(a.Data, 99)
	if b, _ := f.Raw("b"); b.Data[0] != 3 {
		t.Errorf("appending to a's data overwrote b: %v", b.Data)
	}
	a.Shape[0] = 7
	if a2, _ := f.Raw("a"); a2.Shape[0] != 2 {
		t.Error("modifying Raw's shape changed the file")
	}
	names := f.Names()
	names[0] = "zzz"
	if f.Names()[0] != "a" {
		t.Error("modifying Names' result changed the file")
	}
}

func TestWriteReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	in := map[string]Tensor{"w": FromFloat32(&tensor.Tensor{Shape: []int{2}, Data: []float32{1, 2}})}
	if err := WriteFile(path, in, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	// Overwriting an existing file works too.
	in["w"] = FromFloat32(&tensor.Tensor{Shape: []int{3}, Data: []float32{4, 5, 6}})
	if err := WriteFile(path, in, map[string]string{"k": "v2"}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.Float32("w")
	if err != nil || !slices.Equal(w.Data, []float32{4, 5, 6}) || f.Metadata["k"] != "v2" {
		t.Errorf("read back %v %v, %v", w, f.Metadata, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("file mode = %v, %v; want 0644", st.Mode(), err)
	}

	// A failed Encode writes nothing, and no temporary files are left behind.
	bad := filepath.Join(dir, "bad.safetensors")
	if err := WriteFile(bad, map[string]Tensor{"": {}}, nil); err == nil {
		t.Error("WriteFile with an empty name succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "m.safetensors" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only m.safetensors", names)
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir.safetensors"), in, nil); err == nil || !strings.Contains(err.Error(), "dir.safetensors") {
		t.Errorf("WriteFile into a missing directory: error = %v", err)
	}

	// ReadFile errors name the path.
	missing := filepath.Join(dir, "missing.safetensors")
	if _, err := ReadFile(missing); err == nil || !strings.Contains(err.Error(), missing) || !strings.HasPrefix(err.Error(), "safetensors: ") {
		t.Errorf("ReadFile(missing) error = %v", err)
	}
	corrupt := filepath.Join(dir, "corrupt.safetensors")
	if err := os.WriteFile(corrupt, []byte{1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(corrupt); err == nil || !strings.Contains(err.Error(), corrupt) || !strings.Contains(err.Error(), "want at least 8") {
		t.Errorf("ReadFile(corrupt) error = %v", err)
	}
}

// TestHeaderPaddingAccepted checks that headers padded with trailing whitespace, and a null
// "__metadata__", parse.
func TestHeaderPaddingAccepted(t *testing.T) {
	f := mustParse(t, build(`{"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},"__metadata__":null}`+"    \n\t ", le32(0)))
	if f.Metadata != nil || !f.Has("a") {
		t.Errorf("got metadata %v names %v", f.Metadata, f.Names())
	}
	// Key order inside an entry does not matter, nor does whitespace between tokens.
	f = mustParse(t, build(`{ "a" : { "data_offsets" : [ 0 , 4 ] , "shape" : [ ] , "dtype" : "F32" } }`, le32(2)))
	if a, err := f.Float32("a"); err != nil || a.Data[0] != 2 {
		t.Errorf("a = %v, %v", a, err)
	}
}
