package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts converts (into a slice of
// the caller's too), is read back as stored by Half and ReadHalf where it is F16 or BF16, and
// survives a re-encode unchanged.
func FuzzParse(f *testing.F) {
	seeds := []map[string]Tensor{
		{"w": {F32, []int{2, 2}, le32(1, -2, 0.5, float32(math.Inf(1)))}},
		{"h": {F16, []int{3}, le16(0x3c00, 0x7e00, 0x0001)}, "b": {BF16, []int{}, le16(0x3f80)}},
		{"d": {F64, []int{1}, make([]byte, 8)}, "i": {I32, []int{2}, make([]byte, 8)}, "l": {I64, []int{0, 3}, nil}},
		{"m": {Bool, []int{2, 1}, []byte{1, 0}}, "u": {U8, []int{3}, []byte{0, 7, 255}}},
	}
	for i, s := range seeds {
		md := map[string]string{"format": "pt"}
		if i%2 == 1 {
			md = nil
		}
		enc, err := Encode(s, md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add(build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}`, le32(1.5, -3)))
	f.Add(build(`{"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}`, []byte{0, 2}))
	f.Add(build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(build(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, make([]byte, 6)))
	f.Add(build(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}`, nil))
	f.Add(build(`{"a":{"dtype":"F32","shape":[1e3],"data_offsets":[0,8]}}`, nil))
	f.Add(build(`{"__metadata__":{"k":1}}`, nil))
	f.Add(build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`, make([]byte, 8)))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<63))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		in := slices.Clone(data)
		file, err := Parse(data)
		if !bytes.Equal(in, data) {
			t.Fatal("Parse modified its input")
		}
		if err != nil {
			if file != nil {
				t.Fatal("Parse returned a File with an error")
			}
			return
		}
		names := file.Names()
		if !slices.IsSorted(names) {
			t.Fatalf("Names() = %q, not sorted", names)
		}
		raw := make(map[string]Tensor, len(names))
		for _, name := range names {
			r, err := file.Raw(name)
			if err != nil {
				t.Fatalf("Raw(%q): %v", name, err)
			}
			raw[name] = r
			n := 1
			for _, d := range r.Shape {
				n *= d
			}
			if len(r.Data) != n*r.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %s × %v", name, len(r.Data), r.DType, r.Shape)
			}
			badBool := r.DType == Bool && slices.ContainsFunc(r.Data, func(b byte) bool { return b > 1 })
			f32, err32 := file.Float32(name)
			f64, shape64, err64 := file.Float64(name)
			if badBool {
				if err32 == nil || err64 == nil {
					t.Fatalf("tensor %q: BOOL byte > 1 converted without error", name)
				}
			} else {
				if err32 != nil || err64 != nil {
					t.Fatalf("tensor %q (%s): Float32: %v, Float64: %v", name, r.DType, err32, err64)
				}
				if len(f32.Data) != n || len(f64) != n || !slices.Equal(f32.Shape, r.Shape) || !slices.Equal(shape64, r.Shape) {
					t.Fatalf("tensor %q: converted lengths %d, %d, want %d", name, len(f32.Data), len(f64), n)
				}
				into := make([]float32, n)
				if err := file.ReadFloat32(name, into); err != nil || !slices.EqualFunc(into, f32.Data, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
					t.Fatalf("tensor %q: ReadFloat32 (%v) differs from Float32", name, err)
				}
				// The second half of its rows, as ReadFloat32Rows reads them.
				if rows := rowCount(r.Shape); rows > 0 {
					r0, per := rows/2, n/rows
					part := make([]float32, (rows-r0)*per)
					if err := file.ReadFloat32Rows(name, r0, rows, part); err != nil || !slices.EqualFunc(part, f32.Data[r0*per:], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
						t.Fatalf("tensor %q: ReadFloat32Rows(%d, %d) (%v) differs from Float32's rows", name, r0, rows, err)
					}
				}
				if r.DType != I64 { // I64 → float64 → float32 may round twice
					for i := range n {
						a, b := f32.Data[i], float32(f64[i])
						if a != b && !(a != a && b != b) {
							t.Fatalf("tensor %q[%d]: Float32 %g, Float64 %g", name, i, a, f64[i])
						}
					}
				}
			}
			h, errHalf := file.Half(name)
			if isHalf := r.DType == F16 || r.DType == BF16; (errHalf == nil) != isHalf {
				t.Fatalf("tensor %q (%s): Half error %v", name, r.DType, errHalf)
			}
			if errHalf == nil {
				if len(h.Data) != n || !slices.Equal(h.Shape, r.Shape) {
					t.Fatalf("tensor %q: Half has %d values of shape %v, want %d of %v", name, len(h.Data), h.Shape, n, r.Shape)
				}
				if back := FromHalf(h); back.DType != r.DType || !bytes.Equal(back.Data, r.Data) {
					t.Fatalf("tensor %q: FromHalf(Half) gives %s %x, stored %s %x", name, back.DType, back.Data, r.DType, r.Data)
				}
				into := make([]uint16, n)
				if format, err := file.ReadHalf(name, into); err != nil || format != h.Format || !slices.Equal(into, h.Data) {
					t.Fatalf("tensor %q: ReadHalf (%v, %v) differs from Half", name, format, err)
				}
				if rows := rowCount(r.Shape); rows > 0 {
					per := n / rows
					part := make([]uint16, (rows/2)*per)
					if format, err := file.ReadHalfRows(name, 0, rows/2, part); err != nil || format != h.Format || !slices.Equal(part, h.Data[:len(part)]) {
						t.Fatalf("tensor %q: ReadHalfRows(0, %d) (%v, %v) differs from Half's rows", name, rows/2, format, err)
					}
				}
			}
			_, errBool := file.Bool(name)
			if wantOK := r.DType == U8 || r.DType == Bool && !badBool; (errBool == nil) != wantOK {
				t.Fatalf("tensor %q (%s): Bool error %v", name, r.DType, errBool)
			}
		}

		enc, err := Encode(raw, file.Metadata)
		if err != nil {
			t.Fatalf("Encode of parsed tensors: %v", err)
		}
		again, err := Parse(enc)
		if err != nil {
			t.Fatalf("Parse of re-encoded file: %v", err)
		}
		if got := again.Names(); !slices.Equal(got, names) {
			t.Fatalf("re-parsed names %q, want %q", got, names)
		}
		if len(again.Metadata) != len(file.Metadata) {
			t.Fatalf("re-parsed metadata %v, want %v", again.Metadata, file.Metadata)
		}
		for k, v := range file.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("re-parsed metadata %v, want %v", again.Metadata, file.Metadata)
			}
		}
		for _, name := range names {
			a, _ := again.Raw(name)
			r := raw[name]
			if a.DType != r.DType || !slices.Equal(a.Shape, r.Shape) || !bytes.Equal(a.Data, r.Data) {
				t.Fatalf("tensor %q changed in the round trip", name)
			}
		}
		// Encode's output is canonical: encoding the re-parsed file gives the same bytes.
		raw2 := make(map[string]Tensor, len(names))
		for _, name := range names {
			raw2[name], _ = again.Raw(name)
		}
		enc2, err := Encode(raw2, again.Metadata)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("second Encode differs (err %v)", err)
		}
	})
}

// rowCount returns the rows that ReadFloat32Rows counts in a tensor of the shape: its first
// dimension, or 1 for a scalar.
func rowCount(shape []int) int {
	if len(shape) == 0 {
		return 1
	}
	return shape[0]
}
