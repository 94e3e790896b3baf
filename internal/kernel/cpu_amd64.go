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
