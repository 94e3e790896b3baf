//go:build !amd64 || purego

package kernel

func detect() isa { return generic }

// hasBF16 reports whether GemmBF16 can run its AVX512_BF16 kernels: never in this build.
const hasBF16 = false
