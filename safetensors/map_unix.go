//go:build unix

package safetensors

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the size bytes of fd read-only and private, and returns them with the function
// that unmaps them; an empty file gives no mapping.
func mapFile(fd *os.File, size int64) ([]byte, func([]byte) error, error) {
	if size == 0 {
		return nil, nil, nil
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("file of %d bytes does not fit the address space", size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, syscall.Munmap, nil
}
