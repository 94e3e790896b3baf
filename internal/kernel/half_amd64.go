//go:build !purego

package kernel

func decodeBF16(_ isa, dst []float32, src []uint16) { decodeBF16Generic(dst, src) }
func encodeBF16(_ isa, dst []uint16, src []float32) { encodeBF16Generic(dst, src) }
func decodeF16(_ isa, dst []float32, src []uint16)  { decodeF16Generic(dst, src) }
func encodeF16(_ isa, dst []uint16, src []float32)  { encodeF16Generic(dst, src) }
