package safetensors

import "syscall"

// release drops the pages of b, page-aligned and part of a private read-only file mapping, from
// the process's resident memory; a later read faults them back in from the file.
func release(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }
