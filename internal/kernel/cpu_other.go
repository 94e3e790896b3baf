//go:build !amd64 || purego

package kernel

func detect() isa { return generic }
