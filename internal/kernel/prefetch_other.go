//go:build !amd64 || purego

package kernel

// prefetch does nothing without the assembly: Prefetch is only a hint.
func prefetch(*float32, int) {}
