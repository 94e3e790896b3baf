package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// Float32 returns the tensor called name converted to float32, with the stored shape. Every dtype
// converts: F32 exactly; F16 and BF16 exactly, subnormals, ±Inf and NaN included; F64, I32 and
// I64 rounded to the nearest float32 (F64 values beyond the float32 range become ±Inf); U8
// exactly; BOOL to 0 or 1. The result is a fresh copy. Float32 returns an error when there is no
// such tensor or a BOOL byte is neither 0 nor 1.
func (f *File) Float32(name string) (*tensor.Tensor, error) {
	t, err := f.Raw(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Data)/t.DType.Size())
	if err := decode(name, t, out); err != nil {
		return nil, err
	}
	return &tensor.Tensor{Shape: t.Shape, Data: out}, nil
}

// ReadFloat32 converts the tensor called name to float32 as Float32 does, into dst, which must
// hold exactly as many values as the tensor: a reader filling a slice it allocated once (one
// part of a larger parameter, say) need not hold a second copy. It returns an error when there is
// no such tensor, when len(dst) differs from the tensor's number of values (dst is then left
// unchanged), or when a BOOL byte is neither 0 nor 1.
func (f *File) ReadFloat32(name string, dst []float32) error {
	return f.ReadFloat32Rows(name, 0, -1, dst)
}

// ReadFloat32Rows is ReadFloat32 of rows r0 … r1 − 1 of the tensor's first dimension (r1 = −1:
// to its end; a scalar is one row), as a reader taking one part of a stored tensor needs (Phi-3's
// gate_up_proj holds two weights one above the other): dst must hold exactly those rows' values.
// It returns an error when there is no such tensor, the rows are not 0 ≤ r0 ≤ r1 ≤ the
// tensor's, len(dst) differs (dst is then left unchanged), or a BOOL byte is neither 0 nor 1.
func (f *File) ReadFloat32Rows(name string, r0, r1 int, dst []float32) error {
	t, err := f.rows(name, r0, r1)
	if err != nil {
		return err
	}
	if err := f.fits(name, r0, r1, t, len(dst)); err != nil {
		return err
	}
	return decode(name, t, dst)
}

// fits returns an error unless a slice of n values holds rows, the rows r0 … r1 − 1 (r1 = −1:
// to the end) of the tensor called name: naming the tensor's own shape, and the rows when they
// are not all of it.
func (f *File) fits(name string, r0, r1 int, rows Tensor, n int) error {
	have := len(rows.Data) / rows.DType.Size()
	if n == have {
		return nil
	}
	whole, _ := f.Raw(name) // rows came from it
	what := fmt.Sprintf("tensor %q %s %v has %d values", name, whole.DType, whole.Shape, have)
	if r1 != -1 && (r0 != 0 || len(whole.Shape) == 0 || r1 != whole.Shape[0]) {
		what = fmt.Sprintf("rows %d … %d of tensor %q %s %v hold %d values", r0, r1, name, whole.DType, whole.Shape, have)
	}
	return fmt.Errorf("safetensors: %s, read into a slice of %d", what, n)
}

// rows returns rows r0 … r1 − 1 (r1 = −1: to the end) of the tensor called name, as a tensor of
// their own shape and bytes.
func (f *File) rows(name string, r0, r1 int) (Tensor, error) {
	t, err := f.Raw(name)
	if err != nil {
		return Tensor{}, err
	}
	n := 1 // a scalar's one row
	if len(t.Shape) > 0 {
		n = t.Shape[0]
	}
	if r1 == -1 {
		r1 = n
	}
	if r0 < 0 || r1 < r0 || r1 > n {
		return Tensor{}, fmt.Errorf("safetensors: rows %d … %d of tensor %q %v, want 0 ≤ first ≤ end ≤ %d", r0, r1, name, t.Shape, n)
	}
	if n == 0 || (r0 == 0 && r1 == n) {
		return t, nil
	}
	row := len(t.Data) / n
	t.Data = t.Data[r0*row : r1*row]
	if len(t.Shape) > 0 {
		t.Shape = append([]int{r1 - r0}, t.Shape[1:]...)
	}
	return t, nil
}

// Float64 returns the values of the tensor called name converted to float64, and a copy of its
// shape, for use as a high-precision reference. All dtypes convert exactly except I64 values of
// magnitude above 2^53, which are rounded; BOOL becomes 0 or 1. Float64 returns an error when
// there is no such tensor or a BOOL byte is neither 0 nor 1.
func (f *File) Float64(name string) ([]float64, []int, error) {
	t, err := f.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]float64, len(t.Data)/t.DType.Size())
	if err := decode(name, t, out); err != nil {
		return nil, nil, err
	}
	return out, t.Shape, nil
}

// decode converts t's little-endian bytes to F into out, which holds one value per element of t,
// rounding each value once (integers convert straight to F, not through float64).
func decode[F float32 | float64](name string, t Tensor, out []F) error {
	b := t.Data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = F(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case F64:
		for i := range out {
			out[i] = F(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case F16:
		for i := range out {
			out[i] = F(kernel.F16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case BF16:
		for i := range out {
			out[i] = F(kernel.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case I32:
		for i := range out {
			out[i] = F(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case I64:
		for i := range out {
			out[i] = F(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case U8:
		for i, v := range b {
			out[i] = F(v)
		}
	case Bool:
		if err := checkBoolBytes(name, b); err != nil {
			return err
		}
		for i, v := range b {
			out[i] = F(v)
		}
	default: // unreachable: Parse rejects unknown dtypes
		return fmt.Errorf("safetensors: tensor %q has unknown dtype %q", name, t.DType)
	}
	return nil
}

// Bool returns the tensor called name as a mask, with the stored shape. It accepts dtype BOOL,
// whose bytes must be 0 or 1, and U8, where any nonzero byte is true. It returns an error when
// there is no such tensor, the dtype is another one, or a BOOL byte is neither 0 nor 1.
func (f *File) Bool(name string) (*tensor.Bool, error) {
	t, err := f.Raw(name)
	if err != nil {
		return nil, err
	}
	switch t.DType {
	case Bool:
		if err := checkBoolBytes(name, t.Data); err != nil {
			return nil, err
		}
	case U8:
	default:
		return nil, fmt.Errorf("safetensors: tensor %q has dtype %s, want BOOL or U8 for a mask", name, t.DType)
	}
	out := make([]bool, len(t.Data))
	for i, v := range t.Data {
		out[i] = v != 0
	}
	return &tensor.Bool{Shape: t.Shape, Data: out}, nil
}

// Half returns the tensor called name as it is stored, without conversion, when its dtype is BF16
// or F16: its 16-bit patterns (little-endian in the file) with format tensor.BFloat16 or
// tensor.Float16, and the stored shape. The result is a fresh copy, half the size of the
// tensor's Float32. Half returns an error when there is no such tensor or its dtype is another
// one.
func (f *File) Half(name string) (*tensor.Half, error) {
	t, err := f.Raw(name)
	if err != nil {
		return nil, err
	}
	format, err := halfFormat(name, t)
	if err != nil {
		return nil, err
	}
	out := make([]uint16, len(t.Data)/2)
	copyHalves(out, t.Data)
	return &tensor.Half{Shape: t.Shape, Data: out, Format: format}, nil
}

// ReadHalf copies the 16-bit patterns of the BF16 or F16 tensor called name into dst, as Half
// does, and returns their format. dst must hold exactly as many values as the tensor. It returns
// an error when there is no such tensor, when its dtype is neither BF16 nor F16, or when len(dst)
// differs from its number of values; dst is then left unchanged.
func (f *File) ReadHalf(name string, dst []uint16) (tensor.HalfFormat, error) {
	return f.ReadHalfRows(name, 0, -1, dst)
}

// ReadHalfRows is ReadHalf of rows r0 … r1 − 1 of the tensor's first dimension (r1 = −1: to its
// end), as ReadFloat32Rows is ReadFloat32's. It returns an error when there is no such tensor,
// the rows are not 0 ≤ r0 ≤ r1 ≤ the tensor's, its dtype is neither BF16 nor F16, or len(dst)
// differs; dst is then left unchanged.
func (f *File) ReadHalfRows(name string, r0, r1 int, dst []uint16) (tensor.HalfFormat, error) {
	t, err := f.rows(name, r0, r1)
	if err != nil {
		return 0, err
	}
	format, err := halfFormat(name, t)
	if err != nil {
		return 0, err
	}
	if err := f.fits(name, r0, r1, t, len(dst)); err != nil {
		return 0, err
	}
	copyHalves(dst, t.Data)
	return format, nil
}

// halfFormat returns the half-precision format of t's dtype, or an error naming the dtype when
// it is neither BF16 nor F16.
func halfFormat(name string, t Tensor) (tensor.HalfFormat, error) {
	switch t.DType {
	case BF16:
		return tensor.BFloat16, nil
	case F16:
		return tensor.Float16, nil
	}
	return 0, fmt.Errorf("safetensors: tensor %q has dtype %s, want BF16 or F16 for a half-precision tensor", name, t.DType)
}

// copyHalves sets out[i] to the little-endian 16-bit value at b[2i:].
func copyHalves(out []uint16, b []byte) {
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
}

func checkBoolBytes(name string, b []byte) error {
	for i, v := range b {
		if v > 1 {
			return fmt.Errorf("safetensors: tensor %q: BOOL element %d is byte %d, want 0 or 1", name, i, v)
		}
	}
	return nil
}

// FromFloat32 returns t as an F32 tensor: a copy of t's shape and its values as little-endian
// bytes. It does not check t; Encode rejects a tensor whose data does not match its shape.
func FromFloat32(t *tensor.Tensor) Tensor {
	b := make([]byte, 4*len(t.Data))
	for i, v := range t.Data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{DType: F32, Shape: cloneShape(t.Shape), Data: b}
}

// FromFloat64 returns data as an F64 tensor of the given shape (copied). It returns an error
// when the shape has a negative dimension or too many elements, or when len(data) differs from
// the product of shape.
func FromFloat64(data []float64, shape []int) (Tensor, error) {
	n, err := tensor.NumElements(shape)
	if err != nil {
		return Tensor{}, fmt.Errorf("safetensors: invalid shape %v: %w", shape, err)
	}
	if n != len(data) {
		return Tensor{}, fmt.Errorf("safetensors: %d values for shape %v, want %d", len(data), shape, n)
	}
	b := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return Tensor{DType: F64, Shape: cloneShape(shape), Data: b}, nil
}

// FromHalf returns h as a BF16 or F16 tensor, as h.Format says: a copy of h's shape and its bit
// patterns as little-endian bytes, unconverted. It does not check h's shape; Encode rejects a
// tensor whose data does not match its shape. A format that is neither tensor.BFloat16 nor
// tensor.Float16 gives a tensor of dtype "", which Encode rejects as unknown.
func FromHalf(h *tensor.Half) Tensor {
	var dt DType
	switch h.Format {
	case tensor.BFloat16:
		dt = BF16
	case tensor.Float16:
		dt = F16
	}
	b := make([]byte, 2*len(h.Data))
	for i, v := range h.Data {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return Tensor{DType: dt, Shape: cloneShape(h.Shape), Data: b}
}

// FromBool returns m as a BOOL tensor: a copy of m's shape and one byte, 0 or 1, per element. It
// does not check m; Encode rejects a tensor whose data does not match its shape.
func FromBool(m *tensor.Bool) Tensor {
	b := make([]byte, len(m.Data))
	for i, v := range m.Data {
		if v {
			b[i] = 1
		}
	}
	return Tensor{DType: Bool, Shape: cloneShape(m.Shape), Data: b}
}

// cloneShape copies s, returning an empty non-nil slice for a scalar.
func cloneShape(s []int) []int {
	if len(s) == 0 {
		return []int{}
	}
	return slices.Clone(s)
}
