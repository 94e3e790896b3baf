//go:build !linux

package safetensors

// release does nothing where there is no madvise(MADV_DONTNEED): the pages stay until Close.
func release([]byte) error { return nil }
