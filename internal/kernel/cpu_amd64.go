//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

func detect() isa {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasF16C:
		return avx512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C:
		return avx2
	}
	return generic
}

// hasBF16 reports whether GemmBF16 can run its AVX512_BF16 kernels: AVX-512 as best uses it,
// and VDPBF16PS, VCVTNE2PS2BF16 and VCVTNEPS2BF16.
var hasBF16 = best == avx512 && cpu.X86.HasAVX512BF16
